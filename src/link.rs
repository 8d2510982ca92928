//! What the network path to the server is like — its round-trip time and
//! each connection's throughput — measured from the responses, and the
//! bandwidth-delay product that sizes fetches.
//!
//! The product is the number of bytes that could arrive in the time one round
//! trip costs. Fetching that many more bytes costs about as much as one more
//! round trip, which is the balance the planner aims for: sequential streams
//! read ahead at least that far, parts of a split fetch are no smaller than
//! needed to keep a connection busy for a round trip, and runs closer than
//! that are fetched together when requests are scarce.

use std::time::Duration;

use crate::sync::Mutex;

/// What remfile assumes about the link to the server, for sizing fetches; see
/// [`Builder::link`](crate::Builder::link).
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
    /// Not considered: the sizes are exactly the builder's
    /// ([`split_size`](crate::Builder::split_size),
    /// [`coalesce_gap`](crate::Builder::coalesce_gap), the read-ahead window).
    Ignored,
}

impl Link {
    /// A link known in advance.
    pub fn known(round_trip: Duration, bytes_per_second: u64) -> Link {
        Link::Known {
            round_trip,
            bytes_per_second,
        }
    }
}

/// What is known of the link at one moment; see
/// [`RemoteFile::link_estimate`](crate::RemoteFile::link_estimate).
///
/// ```no_run
/// let file = remfile::RemoteFile::open("https://example.com/data.bin")?;
/// if let Some(link) = file.link_estimate() {
///     // The bytes one more round trip costs as much time as.
///     println!("{} bytes in flight per round trip", link.bandwidth_delay_product());
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
}

impl LinkEstimate {
    /// The bytes one connection carries in one round trip.
    pub fn bandwidth_delay_product(&self) -> u64 {
        (self.round_trip.as_secs_f64() * self.bytes_per_second as f64) as u64
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

/// The live estimate of one file's link, fed by its transport.
#[derive(Debug)]
pub(crate) struct LinkMeter {
    mode: Link,
    samples: Mutex<Samples>,
}

#[derive(Debug, Default)]
struct Samples {
    waits: Window<Duration>,
    rates: Window<f64>,
    /// Lower bounds of the rate, from bodies that came too fast to time.
    floors: Window<f64>,
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
    /// with the fastest of `rates`, which slow start slows least.
    fn estimate(&self, rates: impl Iterator<Item = f64>) -> Option<LinkEstimate> {
        let round_trip = self.waits.values().min()?;
        let rate = rates.reduce(f64::max)?;
        Some(LinkEstimate {
            round_trip,
            bytes_per_second: rate as u64,
        })
    }
}

impl<T: Copy> Window<T> {
    fn push(&mut self, value: T) {
        self.values[self.next] = Some(value);
        self.next = (self.next + 1) % WINDOW;
    }

    fn values(&self) -> impl Iterator<Item = T> + '_ {
        self.values.iter().flatten().copied()
    }
}

impl LinkMeter {
    pub fn new(mode: Link) -> LinkMeter {
        LinkMeter {
            mode,
            samples: Mutex::new(Samples::default()),
        }
    }

    /// A response's headers arrived `waited` after its request was sent.
    pub fn record_wait(&self, waited: Duration) {
        if self.mode == Link::Measured {
            self.samples.lock().waits.push(waited);
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
        if self.mode != Link::Measured || bytes < MIN_BODY_SAMPLE {
            return;
        }
        let rate = bytes as f64 / took.as_secs_f64();
        let mut samples = self.samples.lock();
        match waited {
            Some(w) if took >= w / 2 => samples.rates.push(rate),
            _ => samples.floors.push(rate.min(MOST_RATE)),
        }
    }

    /// The estimate for sizing guesses (the HDF5 driver's metadata budget):
    /// the shortest recent wait with the fastest recent rate, measured or
    /// bounded from below (both are at most the link's speed). A fast link,
    /// whose bodies all come with their headers, has no ordinary estimate,
    /// but it carries a guess at least that fast; the sizes of reads stay as
    /// for an unknown link.
    #[cfg_attr(not(feature = "extension"), allow(dead_code))]
    pub fn guess_estimate(&self) -> Option<LinkEstimate> {
        if self.mode != Link::Measured {
            return self.estimate();
        }
        let samples = self.samples.lock();
        samples.estimate(samples.rates.values().chain(samples.floors.values()))
    }

    /// The estimate, once there is one.
    pub fn estimate(&self) -> Option<LinkEstimate> {
        match self.mode {
            Link::Ignored => None,
            Link::Known {
                round_trip,
                bytes_per_second,
            } => Some(LinkEstimate {
                round_trip,
                bytes_per_second,
            }),
            Link::Measured => {
                let samples = self.samples.lock();
                samples.estimate(samples.rates.values())
            }
        }
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
}
