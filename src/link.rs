//! What the network path to the server is like — its round-trip time, each
//! connection's throughput and what all connections to it carry together —
//! measured from the responses, and the bandwidth-delay product that sizes
//! fetches.
//!
//! The product is the number of bytes that could arrive in the time one round
//! trip costs. Fetching that many more bytes costs about as much as one more
//! round trip, which is the balance the planner aims for: sequential streams
//! read ahead at least that far, parts of a split fetch are no smaller than
//! needed to keep a connection busy for a round trip, and runs closer than
//! that are fetched together when requests are scarce.
//!
//! A home or campus line is shared by every connection: eight connections
//! do not carry eight times what one does. What the bytes fetched ahead of
//! need (a metadata crawl's guesses, a tail fetched at open) may cost is
//! priced by the *line*: the process's connections to one server measure
//! it together ([`Line`]), whichever file they read, so that a file opened
//! after others on the same server starts out knowing its link. A user who
//! pays for every byte weighs bytes more ([`Builder::byte_weight`](crate::options::Builder::byte_weight)).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use url::Url;

use crate::sync::{MadeIn, Mutex, MutexGuard, ProcessLocal, start_afresh};

/// What remfile assumes about the link to the server, for sizing fetches; see
/// [`Builder::link`](crate::options::Builder::link).
///
/// ```
/// use std::time::Duration;
/// use remfile::{Link, RemoteFile};
///
/// // Sizes that never depend on timing (tests that count requests, say).
/// let fixed = RemoteFile::builder().link(Link::Ignored);
/// // A link known in advance: 80 ms away, 20 MB/s per connection.
/// let known = RemoteFile::builder().link(Link::known(Duration::from_millis(80), 20_000_000));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Link {
    /// Measured from the responses (the default): the round trip is the
    /// shortest recent wait for response headers, the throughput the fastest
    /// recent body of at least 256 KiB on one connection that took at least
    /// half a round trip (a faster one was buffered before it was read, and
    /// says nothing of the link). Until both are known, sizes are as with
    /// [`Ignored`](Link::Ignored).
    #[default]
    Measured,
    /// Known in advance; nothing is measured, so sizes are fixed.
    Known {
        /// The time from sending a request to its response's first byte.
        round_trip: Duration,
        /// What one connection carries, in bytes per second.
        bytes_per_second: u64,
    },
    /// Known in advance, and shared by every connection (a home or campus
    /// line): more connections carry no more. Nothing is measured.
    SharedLine {
        /// The time from sending a request to its response's first byte.
        round_trip: Duration,
        /// What all connections together carry, in bytes per second.
        bytes_per_second: u64,
    },
    /// Not considered: the sizes are exactly the builder's
    /// ([`split_size`](crate::options::Builder::split_size),
    /// [`coalesce_gap`](crate::options::Builder::coalesce_gap), the read-ahead window).
    Ignored,
}

impl Link {
    /// A link known in advance, each connection carrying `bytes_per_second`.
    pub fn known(round_trip: Duration, bytes_per_second: u64) -> Link {
        Link::Known {
            round_trip,
            bytes_per_second,
        }
    }

    /// A line known in advance that all connections share, carrying
    /// `bytes_per_second` together.
    ///
    /// ```
    /// use std::time::Duration;
    /// use remfile::{Link, RemoteFile};
    ///
    /// // A 100 Mbit/s home line, 30 ms from the server.
    /// let home = RemoteFile::builder()
    ///     .link(Link::shared_line(Duration::from_millis(30), 12_500_000));
    /// ```
    pub fn shared_line(round_trip: Duration, bytes_per_second: u64) -> Link {
        Link::SharedLine {
            round_trip,
            bytes_per_second,
        }
    }
}

/// What is known of the link at one moment; see
/// [`RemoteFile::link_estimate`](crate::file::RemoteFile::link_estimate).
///
/// ```no_run
/// let file = remfile::RemoteFile::open("https://example.com/data.bin")?;
/// if let Some(link) = file.link_estimate() {
///     // The bytes one more round trip costs as much time as.
///     println!("{} bytes in flight per round trip", link.bandwidth_delay_product());
///     // What eight connections carry in a round trip, as far as the line lets them.
///     println!("{} bytes per round on eight connections", link.bytes_per_round(8));
/// }
/// # Ok::<(), remfile::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct LinkEstimate {
    /// The time from sending a request to its response's first byte.
    pub round_trip: Duration,
    /// What one connection carries, in bytes per second.
    pub bytes_per_second: u64,
    /// What all of the process's connections to the server carried
    /// together at best, in bytes per second (at least `bytes_per_second`),
    /// where it was measured; `None` for a link given with [`Link::known`],
    /// whose connections are taken to add up.
    pub line_bytes_per_second: Option<u64>,
}

impl LinkEstimate {
    /// The bytes one connection carries in one round trip.
    pub fn bandwidth_delay_product(&self) -> u64 {
        (self.round_trip.as_secs_f64() * self.bytes_per_second as f64) as u64
    }

    /// The bytes `connections` connections carry together in one round
    /// trip: each one's [`bandwidth_delay_product`](Self::bandwidth_delay_product),
    /// as far as the line carries them. On a line shared by every
    /// connection (a home link), more connections add nothing.
    pub fn bytes_per_round(&self, connections: u64) -> u64 {
        let all = (self.bytes_per_second as f64) * connections.max(1) as f64;
        let carried = self
            .line_bytes_per_second
            .map_or(all, |line| all.min(line as f64));
        (self.round_trip.as_secs_f64() * carried) as u64
    }

    /// Whether bytes are dear on this link: its line (all connections
    /// together, as weighed by the user's byte weight) carries less than
    /// [`CHEAP_LINE`]. A link whose connections add up (one given with
    /// [`Link::known`]) has no such line, and a server nearer than
    /// [`NEAR`] is never dear.
    pub(crate) fn bytes_are_dear(&self) -> bool {
        self.round_trip >= NEAR && self.line_bytes_per_second.is_some_and(|l| l < CHEAP_LINE)
    }

    /// The estimate with every rate divided by `weight`: a byte that weighs
    /// `weight` times its transfer time.
    fn weighed(mut self, weight: u32) -> LinkEstimate {
        let w = u64::from(weight.max(1));
        self.bytes_per_second = (self.bytes_per_second / w).max(1);
        self.line_bytes_per_second = self.line_bytes_per_second.map(|l| (l / w).max(1));
        self
    }
}

/// A line carrying this much (bytes per second, all connections together)
/// or more carries 16 MiB in a third of a second: its bytes are cheap next
/// to any round trip worth saving.
pub(crate) const CHEAP_LINE: u64 = 50_000_000;

/// A server answering sooner than this is on the same host or network: what
/// its connections seem to carry is the host's CPU at work, not a line's
/// price (a busy loopback measures tens of MB/s), and round trips to it cost
/// next to nothing either way.
pub(crate) const NEAR: Duration = Duration::from_millis(2);

/// The least tail an open fetches where bytes are dear (see
/// [`priced_tail`]).
const LEAST_TAIL: u64 = 64 << 10;

/// The rounds' worth of its line's share an open's tail may take where
/// bytes are dear: a tail is likely metadata (writers put much of it last),
/// and the first of the next reads may need it.
const TAIL_ROUNDS: u64 = 1;

/// The tail an open fetches, of the `asked` bytes, on `link` shared by
/// `sharing` files at work: where bytes are dear, at most [`TAIL_ROUNDS`]
/// round trips' worth of the file's share of the line (and at least
/// [`LEAST_TAIL`]); on a line not measured yet, the asked bytes shared by
/// the files opening on it (many files opened at once on an unknown line
/// are as likely a slow one's survey as a fast one's); else as asked.
pub(crate) fn priced_tail(asked: u64, link: Option<LinkEstimate>, sharing: u64) -> u64 {
    match link {
        Some(l) if l.bytes_are_dear() => {
            let share = l.bytes_per_round(1).saturating_mul(TAIL_ROUNDS) / sharing.max(1);
            asked.min(share.max(LEAST_TAIL))
        }
        None => asked.min((asked / sharing.max(1)).max(LEAST_TAIL)),
        Some(_) => asked,
    }
}

/// How many recent samples of each kind the estimate looks at.
const WINDOW: usize = 8;

/// Bodies shorter than this say more about latency than throughput.
pub(crate) const MIN_BODY_SAMPLE: u64 = 256 * 1024;

/// The most a body that came too fast to time is counted as showing, in
/// bytes per second (1 Gbit/s): loopback measures 1 GB/s and more, which
/// would size guesses beyond what a host's CPU keeps up with.
pub(crate) const MOST_RATE: f64 = 125_000_000.0;

/// The bodies a line remembers for measuring what its connections carry
/// together.
const LINE_BODIES: usize = 64;

/// The most servers whose lines a process remembers; a line forgotten is
/// measured again.
const MOST_LINES: usize = 256;

/// The live estimate of one file's link, fed by its transport, as the
/// file's [`Link`] mode and byte weight say: what its own responses showed
/// sizes its reads ([`estimate`](LinkMeter::estimate)), and the [`Line`] to
/// its server, which every file reading from there feeds, prices its
/// guesses ([`guess_estimate`](LinkMeter::guess_estimate)).
#[derive(Debug)]
pub(crate) struct LinkMeter {
    mode: Link,
    weight: u32,
    own: Line,
    line: Arc<Line>,
}

/// What is measured of the path to one server, shared by every file of the
/// process that reads from it: round trips, each connection's throughput,
/// and what all connections carry at once.
#[derive(Debug)]
pub(crate) struct Line {
    samples: Mutex<Samples>,
    /// How many files are fetching guesses on the line now (opening, or
    /// crawling their metadata): they share what it carries.
    at_work: AtomicU64,
    /// How many files are opening on the line now: they share the tails
    /// their opens fetch.
    opening: AtomicU64,
    /// A forked child's copy of its parent's line may find its lock held
    /// for good by a thread that is not there: it only tries it.
    made_in: MadeIn,
}

impl Default for Line {
    fn default() -> Line {
        Line {
            samples: Mutex::default(),
            at_work: AtomicU64::new(0),
            opening: AtomicU64::new(0),
            made_in: MadeIn::here(),
        }
    }
}

#[derive(Debug, Default)]
struct Samples {
    waits: Window<Duration>,
    rates: Window<f64>,
    /// Lower bounds of the rate, from bodies that came too fast to time.
    floors: Window<f64>,
    /// Recent bodies on any connection: when each began and ended, and
    /// its bytes.
    bodies: VecDeque<Body>,
    /// What the connections carried together, one sample per recent
    /// stretch of bodies arriving together.
    line_rates: Window<f64>,
    /// The body whose arrival made the last of `line_rates`.
    line_sampled: Option<Body>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Body {
    began: Instant,
    ended: Instant,
    bytes: u64,
}

/// The last [`WINDOW`] values pushed.
#[derive(Debug)]
struct Window<T> {
    values: [Option<T>; WINDOW],
    next: usize,
}

impl<T: Copy> Default for Window<T> {
    fn default() -> Self {
        Window {
            values: [None; WINDOW],
            next: 0,
        }
    }
}

impl Samples {
    /// The shortest recent wait, which handshakes and queues inflate least,
    /// with the fastest of `rates`, which slow start slows least, and the
    /// middle of what the connections carried together (never less than one
    /// did).
    fn estimate(&self, rates: impl Iterator<Item = f64>) -> Option<LinkEstimate> {
        let round_trip = self.waits.values().min()?;
        let rate = rates.reduce(f64::max)?;
        // The middle of the recent samples of the line: one body read late
        // from a socket's buffer makes a sample of the line seem faster
        // than it is.
        let line = middle(self.line_rates.values()).map_or(rate, |l| l.max(rate));
        Some(LinkEstimate {
            round_trip,
            bytes_per_second: rate as u64,
            line_bytes_per_second: Some(line as u64),
        })
    }

    /// Takes in a body and, if the bodies that came while it did say it,
    /// what the line carried then: their bytes over the time any of them
    /// was arriving, so that connections at work together count once.
    fn add_body(&mut self, body: Body) {
        if self.bodies.len() == LINE_BODIES {
            self.bodies.pop_front();
        }
        self.bodies.push_back(body);
        // The bodies that came while this one did.
        let recent: Vec<Body> = self
            .bodies
            .iter()
            .filter(|b| b.began <= body.ended && b.ended >= body.began)
            .copied()
            .collect();
        let (bytes, busy) = line_sample(&recent);
        // As for one body: too little, or too soon after the headers to be
        // the link's doing rather than buffers', says nothing.
        let least = self.waits.values().min().map_or(Duration::ZERO, |w| w / 2);
        if bytes >= MIN_BODY_SAMPLE && busy > least && !busy.is_zero() {
            // Bodies arriving together make one sample, the last (with
            // most of them): a stretch of them is one moment of the line.
            let same_stretch = self.line_sampled.is_some_and(|b| recent.contains(&b));
            if same_stretch {
                self.line_rates
                    .replace_last(bytes as f64 / busy.as_secs_f64());
            } else {
                self.line_rates.push(bytes as f64 / busy.as_secs_f64());
            }
            self.line_sampled = Some(body);
        }
    }
}

/// The upper middle of `values`, if any.
fn middle(values: impl Iterator<Item = f64>) -> Option<f64> {
    let mut values: Vec<f64> = values.collect();
    values.sort_unstable_by(f64::total_cmp);
    values.get(values.len() / 2).copied()
}

/// The bytes of `bodies` and the time at least one of them was arriving.
fn line_sample(bodies: &[Body]) -> (u64, Duration) {
    let mut spans: Vec<(Instant, Instant)> = bodies.iter().map(|b| (b.began, b.ended)).collect();
    spans.sort_unstable();
    let mut busy = Duration::ZERO;
    let mut current: Option<(Instant, Instant)> = None;
    for (began, ended) in spans {
        current = match current {
            Some((b, e)) if began <= e => Some((b, e.max(ended))),
            Some((b, e)) => {
                busy += e - b;
                Some((began, ended))
            }
            None => Some((began, ended)),
        };
    }
    if let Some((b, e)) = current {
        busy += e - b;
    }
    (bodies.iter().map(|b| b.bytes).sum(), busy)
}

impl<T: Copy> Window<T> {
    fn push(&mut self, value: T) {
        self.values[self.next] = Some(value);
        self.next = (self.next + 1) % WINDOW;
    }

    /// Replaces the value pushed last (pushes, if none was).
    fn replace_last(&mut self, value: T) {
        let last = (self.next + WINDOW - 1) % WINDOW;
        if self.values[last].is_some() {
            self.values[last] = Some(value);
        } else {
            self.push(value);
        }
    }

    fn values(&self) -> impl Iterator<Item = T> + '_ {
        self.values.iter().flatten().copied()
    }
}

/// A file counted among those at work on a line; see [`LinkMeter::at_work`].
pub(crate) struct AtWork(Arc<Line>);

impl Drop for AtWork {
    fn drop(&mut self) {
        self.0.at_work.fetch_sub(1, Relaxed);
    }
}

/// A file counted among those opening on a line; see
/// [`LinkMeter::opening`].
#[derive(Debug)]
pub(crate) struct Opening(Arc<Line>);

impl Drop for Opening {
    fn drop(&mut self) {
        self.0.opening.fetch_sub(1, Relaxed);
    }
}

/// The scheme, host and port of `url`: the files one server holds share its
/// line.
pub(crate) fn origin_of(url: &Url) -> String {
    format!(
        "{}://{}:{}",
        url.scheme(),
        url.host_str().unwrap_or(""),
        url.port_or_known_default().unwrap_or(0)
    )
}

impl Line {
    /// The line to the server of `url` (its scheme, host and port), shared
    /// by every file of this process that reads from there.
    pub fn to(url: &Url) -> Arc<Line> {
        // A forked child measures its own lines.
        static LINES: ProcessLocal<Option<HashMap<String, Arc<Line>>>> =
            ProcessLocal::new(None, start_afresh);
        let origin = origin_of(url);
        let Some(mut lines) = LINES.lock() else {
            return Arc::default();
        };
        let lines = lines.get_or_insert_with(HashMap::new);
        if lines.len() >= MOST_LINES && !lines.contains_key(&origin) {
            // A process that reads from hundreds of servers measures again.
            lines.clear();
        }
        Arc::clone(lines.entry(origin).or_default())
    }

    /// The samples, locked; `None` in a forked child whose parent left the
    /// lock held (the sample is skipped, the estimate unknown).
    fn samples(&self) -> Option<MutexGuard<'_, Samples>> {
        if self.made_in.inherited() {
            return self
                .samples
                .try_lock_until(Instant::now() + Duration::from_millis(10));
        }
        Some(self.samples.lock())
    }
}

impl LinkMeter {
    /// A meter of a line of its own (files over an in-memory source).
    #[cfg(test)]
    pub fn new(mode: Link) -> LinkMeter {
        LinkMeter::on(mode, 1, Arc::default())
    }

    /// A meter that measures `line` (if `mode` measures), its rates
    /// weighed by `weight`.
    pub fn on(mode: Link, weight: u32, line: Arc<Line>) -> LinkMeter {
        LinkMeter {
            mode,
            weight,
            own: Line::default(),
            line,
        }
    }

    /// The file's own line and the shared one.
    fn lines(&self) -> [&Line; 2] {
        [&self.own, &self.line]
    }

    /// A response's headers arrived `waited` after its request was sent.
    pub fn record_wait(&self, waited: Duration) {
        if self.mode != Link::Measured {
            return;
        }
        for line in self.lines() {
            if let Some(mut samples) = line.samples() {
                samples.waits.push(waited);
            }
        }
    }

    /// A body of `bytes` ended `took` after its headers arrived, which took
    /// `waited`.
    ///
    /// A body that ends much sooner after its headers than they took to come
    /// came mostly with them: how soon says more of buffers than of the link,
    /// so it is not a sample of the rate. It still bounds the rate from below
    /// (it cannot have arrived before its headers), which
    /// [`guess_estimate`](LinkMeter::guess_estimate) uses, counted as at most
    /// [`MOST_RATE`].
    pub fn record_body(&self, bytes: u64, took: Duration, waited: Option<Duration>) {
        self.record_body_ended(bytes, took, waited, Instant::now());
    }

    /// As [`record_body`](Self::record_body), for a body that ended at
    /// `ended`.
    pub fn record_body_ended(
        &self,
        bytes: u64,
        took: Duration,
        waited: Option<Duration>,
        ended: Instant,
    ) {
        if self.mode != Link::Measured {
            return;
        }
        let began = ended.checked_sub(took).unwrap_or(ended);
        for line in self.lines() {
            let Some(mut samples) = line.samples() else {
                continue;
            };
            samples.add_body(Body {
                began,
                ended,
                bytes,
            });
            if bytes < MIN_BODY_SAMPLE {
                continue;
            }
            let rate = bytes as f64 / took.as_secs_f64();
            match waited {
                Some(w) if took >= w / 2 => samples.rates.push(rate),
                _ => samples.floors.push(rate.min(MOST_RATE)),
            }
        }
    }

    /// Counts this file among those fetching guesses on its line until the
    /// guard returned is dropped: each prices its guesses at its share of
    /// the line ([`sharing`](Self::sharing)).
    pub fn at_work(&self) -> AtWork {
        self.line.at_work.fetch_add(1, Relaxed);
        AtWork(Arc::clone(&self.line))
    }

    /// Whether the server is known to be near ([`NEAR`]): its line's
    /// shortest recent wait for response headers was shorter. Bytes there
    /// are never dear, whatever else is not measured yet.
    pub fn is_near(&self) -> bool {
        let Some(samples) = self.line.samples() else {
            return false;
        };
        samples.waits.values().min().is_some_and(|w| w < NEAR)
    }

    /// Counts this file among those opening on its line until the guard
    /// returned is dropped (see [`opening_now`](Self::opening_now)).
    pub fn opening(&self) -> Opening {
        self.line.opening.fetch_add(1, Relaxed);
        Opening(Arc::clone(&self.line))
    }

    /// How many files are opening on this file's line now (at least 1):
    /// the crawls of files opened before, still at work or winding down,
    /// do not count.
    pub fn opening_now(&self) -> u64 {
        self.line.opening.load(Relaxed).max(1)
    }

    /// How many files fetch guesses on this file's line now (at least 1).
    #[cfg_attr(not(feature = "hdf5"), allow(dead_code))]
    pub fn sharing(&self) -> u64 {
        self.line.at_work.load(Relaxed).max(1)
    }

    /// The estimate for pricing guesses (the HDF5 driver's metadata budget,
    /// the tail fetched at open): from the line every file of the process
    /// reading from the server feeds, so that a file opened after others
    /// knows it at once; the shortest recent wait with the fastest recent
    /// rate, measured or bounded from below (both are at most the link's
    /// speed). A fast link, whose bodies all come with their headers, has no
    /// ordinary estimate, but it carries a guess at least that fast; the
    /// sizes of reads stay as for an unknown link. What small bodies arriving
    /// together carried alone says nothing: new connections' slow start
    /// delays them on a fast line as a slow line does, and a burst a shaper
    /// lets through brings them faster than the line carries.
    pub fn guess_estimate(&self) -> Option<LinkEstimate> {
        if self.mode != Link::Measured {
            return self.estimate();
        }
        let samples = self.line.samples()?;
        samples
            .estimate(samples.rates.values().chain(samples.floors.values()))
            .map(|e| e.weighed(self.weight))
    }

    /// Whether there is nothing left to learn of the line's price before
    /// guessing on it: a mode that does not measure, a near server, or a
    /// guess estimate.
    #[cfg_attr(not(feature = "hdf5"), allow(dead_code))]
    pub fn knows_line(&self) -> bool {
        self.mode != Link::Measured || self.is_near() || self.guess_estimate().is_some()
    }

    /// The estimate that sizes the file's reads, from its own responses,
    /// once there is one.
    pub fn estimate(&self) -> Option<LinkEstimate> {
        let estimate = match self.mode {
            Link::Ignored => None,
            Link::Known {
                round_trip,
                bytes_per_second,
            } => Some(LinkEstimate {
                round_trip,
                bytes_per_second,
                line_bytes_per_second: None,
            }),
            Link::SharedLine {
                round_trip,
                bytes_per_second,
            } => Some(LinkEstimate {
                round_trip,
                bytes_per_second,
                line_bytes_per_second: Some(bytes_per_second),
            }),
            Link::Measured => {
                let samples = self.own.samples()?;
                samples.estimate(samples.rates.values())
            }
        };
        estimate.map(|e| e.weighed(self.weight))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn nothing_is_known_before_both_kinds_of_sample() {
        let meter = LinkMeter::new(Link::Measured);
        assert_eq!(meter.estimate(), None);
        meter.record_wait(30 * MS);
        assert_eq!(meter.estimate(), None);
        meter.record_body(1000, 20 * MS, Some(30 * MS));
        assert_eq!(meter.estimate(), None, "too short a body to count");
        meter.record_body(1 << 20, MS, Some(30 * MS));
        assert_eq!(meter.estimate(), None, "buffered while the headers came");
        let floor = meter.guess_estimate().unwrap();
        assert_eq!(
            floor.bytes_per_second, 125_000_000,
            "at least, counted as a gigabit"
        );
        meter.record_body(1 << 20, 20 * MS, Some(30 * MS));
        let e = meter.estimate().unwrap();
        assert_eq!(e.round_trip, 30 * MS);
        assert_eq!(e.bytes_per_second, 52_428_800);
        assert_eq!(e.bandwidth_delay_product(), 1_572_864);
    }

    #[test]
    fn one_stretch_read_late_from_a_buffer_does_not_speed_the_line() {
        let meter = LinkMeter::new(Link::Measured);
        meter.record_wait(30 * MS);
        let t0 = Instant::now();
        // Three stretches of four 1 MB bodies carried at 12.5 MB/s
        // together, then one whose bodies seem to come four times as fast.
        let mut end = t0;
        for took in [320, 320, 320, 80] {
            end += 1000 * MS;
            for _ in 0..4 {
                meter.record_body_ended(1_000_000, took * MS, Some(30 * MS), end);
            }
        }
        let guess = meter.guess_estimate().unwrap();
        assert_eq!(guess.line_bytes_per_second, Some(12_500_000));
        assert!(guess.bytes_are_dear());
    }

    #[test]
    fn small_bodies_arriving_together_say_nothing_of_the_line_alone() {
        // Sixteen files' 64 KiB tails together over 84 ms: a line of
        // 12.5 MB/s, or slow start on new connections over a fast one.
        let end = Instant::now() + 1000 * MS;
        for took in [84, 20] {
            let meter = LinkMeter::new(Link::Measured);
            meter.record_wait(30 * MS);
            for _ in 0..16 {
                meter.record_body_ended(64 << 10, took * MS, Some(30 * MS), end);
            }
            assert_eq!(meter.guess_estimate(), None, "{took} ms");
            assert!(!meter.knows_line());
        }
        // Bodies that came with their headers say nothing either.
        let fast = LinkMeter::new(Link::Measured);
        fast.record_wait(30 * MS);
        for _ in 0..16 {
            fast.record_body_ended(64 << 10, MS / 10, Some(30 * MS), end);
        }
        assert_eq!(fast.guess_estimate(), None);
        // One body long enough to time does.
        fast.record_body_ended(1 << 20, 100 * MS, Some(30 * MS), end);
        assert!(fast.knows_line());
    }

    #[test]
    fn the_shortest_wait_and_fastest_body_of_the_recent_ones_count() {
        let meter = LinkMeter::new(Link::Measured);
        // A first request that paid for a handshake, then ordinary ones.
        for wait in [90, 31, 30, 33] {
            meter.record_wait(wait * MS);
        }
        // A body slowed by slow start, then full-speed ones.
        for ms in [40, 20, 21] {
            meter.record_body(1 << 20, ms * MS, Some(30 * MS));
        }
        let e = meter.estimate().unwrap();
        assert_eq!(e.round_trip, 30 * MS);
        assert_eq!(e.bytes_per_second, 52_428_800);
        // Old samples leave the window: the link got slower.
        for _ in 0..WINDOW {
            meter.record_wait(60 * MS);
            meter.record_body(1 << 20, 40 * MS, Some(60 * MS));
        }
        let e = meter.estimate().unwrap();
        assert_eq!(e.round_trip, 60 * MS);
        assert_eq!(e.bytes_per_second, 26_214_400);
    }

    #[test]
    fn a_known_link_ignores_samples_and_an_ignored_one_has_no_estimate() {
        let known = LinkMeter::new(Link::known(80 * MS, 20_000_000));
        known.record_wait(MS);
        known.record_body(1 << 20, MS, None);
        let e = known.estimate().unwrap();
        assert_eq!((e.round_trip, e.bytes_per_second), (80 * MS, 20_000_000));
        assert_eq!(e.bandwidth_delay_product(), 1_600_000);
        let ignored = LinkMeter::new(Link::Ignored);
        ignored.record_wait(MS);
        ignored.record_body(1 << 20, MS, None);
        assert_eq!(ignored.estimate(), None);
        assert_eq!(ignored.guess_estimate(), None);
        assert_eq!(known.guess_estimate(), known.estimate());
    }

    #[test]
    fn connections_at_work_together_measure_the_line_they_share() {
        let line = Arc::new(Line::default());
        let (a, b) = (
            LinkMeter::on(Link::Measured, 1, Arc::clone(&line)),
            LinkMeter::on(Link::Measured, 1, Arc::clone(&line)),
        );
        a.record_wait(30 * MS);
        let t0 = Instant::now();
        // Alone, a connection carries 10 MB/s ...
        a.record_body_ended(1_000_000, 100 * MS, Some(30 * MS), t0 + 100 * MS);
        assert_eq!(
            b.estimate(),
            None,
            "its own reads are sized by its own samples"
        );
        let alone = b
            .guess_estimate()
            .expect("the other file's sample, on one line");
        assert_eq!(alone.bytes_per_second, 10_000_000);
        assert_eq!(alone.line_bytes_per_second, Some(10_000_000));
        // ... and four at once 5 MB/s each: the line carries 20 MB/s.
        for _ in 0..4 {
            b.record_body_ended(1_000_000, 200 * MS, Some(30 * MS), t0 + 400 * MS);
        }
        let together = a.guess_estimate().unwrap();
        assert_eq!(together.bytes_per_second, 10_000_000, "the fastest body");
        assert_eq!(together.line_bytes_per_second, Some(20_000_000));
        assert_eq!(together.bytes_per_round(1), 300_000);
        assert_eq!(
            together.bytes_per_round(64),
            600_000,
            "as far as the line goes"
        );
    }

    #[test]
    fn one_connection_after_another_measures_no_more_than_one() {
        let meter = LinkMeter::new(Link::Measured);
        meter.record_wait(30 * MS);
        let t0 = Instant::now();
        for i in 1..=4 {
            meter.record_body_ended(1_000_000, 100 * MS, Some(30 * MS), t0 + i * 100 * MS);
        }
        let e = meter.estimate().unwrap();
        assert_eq!(e.line_bytes_per_second, Some(10_000_000));
        // Small bodies buffered with their headers add bytes, no time of
        // their own: too few to say anything.
        let fresh = LinkMeter::new(Link::Measured);
        fresh.record_wait(30 * MS);
        for _ in 0..10 {
            fresh.record_body_ended(4096, Duration::ZERO, Some(30 * MS), t0);
        }
        assert_eq!(fresh.guess_estimate(), None);
    }

    #[test]
    fn files_on_one_server_share_a_line_and_others_do_not() {
        let url = |u: &str| Url::parse(u).unwrap();
        let a = Line::to(&url("http://127.0.0.1:9/a.nwb?x=1"));
        let b = Line::to(&url("http://127.0.0.1:9/b.nwb"));
        let other = Line::to(&url("http://127.0.0.1:10/a.nwb"));
        let tls = Line::to(&url("https://127.0.0.1:9/a.nwb"));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &other));
        assert!(!Arc::ptr_eq(&a, &tls));
    }

    #[test]
    fn a_byte_weighed_more_makes_the_link_look_slower_by_as_much() {
        let line = Arc::new(Line::default());
        let heavy = LinkMeter::on(Link::Measured, 10, Arc::clone(&line));
        let plain = LinkMeter::on(Link::Measured, 1, line);
        plain.record_wait(30 * MS);
        plain.record_body(1 << 20, 20 * MS, Some(30 * MS));
        let (p, h) = (plain.estimate().unwrap(), heavy.guess_estimate().unwrap());
        assert_eq!(h.round_trip, p.round_trip);
        assert_eq!(h.bytes_per_second, p.bytes_per_second / 10);
        assert_eq!(
            h.bandwidth_delay_product(),
            p.bandwidth_delay_product() / 10
        );
        let known = LinkMeter::on(Link::known(80 * MS, 20_000_000), 4, Arc::default());
        assert_eq!(known.estimate().unwrap().bytes_per_second, 5_000_000);
    }

    #[test]
    fn a_tail_is_priced_by_the_line_where_bytes_are_dear() {
        let home = LinkMeter::new(Link::shared_line(30 * MS, 12_500_000)).estimate();
        assert_eq!(home.unwrap().bytes_per_round(64), 375_000);
        assert_eq!(priced_tail(1 << 20, home, 1), 375_000, "a round of it");
        assert_eq!(priced_tail(1 << 20, home, 2), 187_500, "half each");
        assert_eq!(priced_tail(1 << 20, home, 100), LEAST_TAIL);
        assert_eq!(priced_tail(4096, home, 1), 4096, "never more than asked");
        let fast = LinkMeter::new(Link::shared_line(30 * MS, 125_000_000)).estimate();
        assert_eq!(priced_tail(1 << 20, fast, 16), 1 << 20);
        assert_eq!(priced_tail(1 << 20, None, 1), 1 << 20, "one file: as asked");
        assert_eq!(priced_tail(1 << 20, None, 4), 1 << 18, "unknown: shared");
        assert_eq!(priced_tail(1 << 20, None, 64), LEAST_TAIL);
        assert_eq!(priced_tail(4096, None, 64), 4096, "never more than asked");
    }

    #[test]
    fn the_files_opening_on_a_line_are_counted_while_they_open() {
        let line = Arc::new(Line::default());
        let (a, b) = (
            LinkMeter::on(Link::Measured, 1, Arc::clone(&line)),
            LinkMeter::on(Link::Measured, 1, line),
        );
        assert_eq!(a.opening_now(), 1, "at least one");
        let first = a.opening();
        let second = b.opening();
        let _crawling = a.at_work();
        assert_eq!(a.opening_now(), 2, "crawls do not count");
        drop((first, second));
        assert_eq!(b.opening_now(), 1);
    }

    #[test]
    fn a_line_whose_waits_were_short_is_near() {
        let meter = LinkMeter::new(Link::Measured);
        assert!(!meter.is_near(), "nothing measured");
        meter.record_wait(30 * MS);
        assert!(!meter.is_near());
        meter.record_wait(MS / 2);
        assert!(meter.is_near());
    }

    #[test]
    fn a_near_server_is_never_dear() {
        let near = LinkMeter::new(Link::shared_line(MS / 2, 10_000_000)).estimate();
        assert!(!near.unwrap().bytes_are_dear());
        assert_eq!(priced_tail(1 << 20, near, 1), 1 << 20);
        let far = LinkMeter::new(Link::shared_line(NEAR, 10_000_000)).estimate();
        assert!(far.unwrap().bytes_are_dear());
    }
}
