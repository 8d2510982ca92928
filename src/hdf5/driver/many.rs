//! The metadata of many files, fetched at once ahead of their opens.
//!
//! A survey opens file after file, and HDF5 opens each one read by
//! dependent read: however few rounds one open costs, N files cost N times
//! that. The crawl's parsers need no HDF5, so a [`Batch`] opens the files
//! and crawls their metadata graphs side by side, [`FILES_AT_ONCE`] at a
//! time, into the process's shared block cache (and the disk cache, if one
//! is given). An open of one of them then takes its remote file, already
//! opened, with what its crawl found, and HDF5 reads its metadata from
//! memory.
//!
//! A batch runs ahead of the opens, never without bound: it starts no
//! further file while the files it crawled that are not opened yet, with
//! those in flight counted at the average so far, would hold more than
//! half of the cache (their blocks would push each other out before they
//! were read) or number [`FILES_AHEAD`]. Its threads end when there is no
//! room; each open gives room back and starts them again, so a survey of
//! 10,000 URLs keeps about that much ahead of its reader. Files never
//! opened hold their room until the batch is cancelled.
//!
//! A file that fails here fails only here: its open (if it comes) opens it
//! afresh and reports its own error.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use super::config::Config;
use super::crawl;
use super::prefetch::Prefetcher;
use super::reach::{FIRST_OPEN_WAIT, Reach, Waited};
use crate::error::Error;
use crate::file::RemoteFile;
use crate::link::{Line, LinkMeter, origin_of};
use crate::options::Builder;
use crate::process::workers::Closing;
use crate::sync::{Condvar, MadeIn, Mutex, ProcessLocal};
use crate::wait::Stop;

/// The most files a batch opens and crawls at once (a thread each).
pub const FILES_AT_ONCE: usize = 16;

/// The most files a batch keeps crawled ahead of their opens.
pub const FILES_AHEAD: usize = 64;

/// The files of a batch being opened and crawled: a thread each, which
/// sends its requests as background work.
pub(crate) type SharedPrefetch = Arc<Mutex<Prefetcher>>;

/// What one open of a batch's file takes: the remote file, opened, and the
/// prefetch its crawl filled (which the open's own crawl goes on with).
pub(crate) struct Prefetched {
    pub file: RemoteFile,
    pub prefetch: Option<SharedPrefetch>,
}

/// How far a batch has gone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Progress {
    /// The files it was given (a URL given twice counts once).
    pub files: usize,
    /// Files opened and crawled, waiting for their opens.
    pub crawled: usize,
    /// Files taken by their opens (crawled or not).
    pub opened: usize,
    /// Files that failed here (their opens try again).
    pub failed: usize,
    /// Files the batch let go of, cancelled: their opens open them afresh.
    pub dropped: usize,
    /// Files not started or under way.
    pub pending: usize,
    /// Whether the batch waits for opens before it starts another file:
    /// the files crawled ahead fill its bound.
    pub waiting_for_opens: bool,
    /// Bytes the batch fetched for the files not opened yet.
    pub bytes_ahead: u64,
}

impl Progress {
    /// Whether the batch has nothing left to do before more files are
    /// opened: every file crawled, failed or opened, or its bound reached.
    pub fn is_settled(&self) -> bool {
        self.pending == 0 || self.waiting_for_opens
    }
}

/// Many files' metadata being fetched. Cloning gives another handle on
/// the same batch; [`cancel`](Batch::cancel) stops it for all.
#[derive(Clone)]
pub struct Batch {
    shared: Arc<Shared>,
}

struct Shared {
    builder: Builder,
    /// The driver settings the files are opened with, for a driver open
    /// to find its file by (see [`register`]).
    settings: Option<Config>,
    metadata: bool,
    chunks: bool,
    /// Bytes fetched for files not opened yet past which no file starts.
    ahead_bytes: u64,
    closing: Closing,
    /// How deep the opens of the batch's files read, which its crawls
    /// follow where bytes are dear.
    reach: Arc<Reach>,
    state: Mutex<State>,
    changed: Condvar,
    made_in: MadeIn,
}

struct State {
    files: Vec<File>,
    by_url: HashMap<String, usize>,
    /// The next file to start.
    next: usize,
    /// Files opened or being opened here and not taken yet.
    files_ahead: usize,
    bytes_ahead: u64,
    /// Files being opened or crawled by the threads.
    in_flight: usize,
    /// What a file's crawl fetched, on average so far (a prior before the
    /// first): the bound counts the files in flight at that.
    per_file: Average,
    /// Threads working for the batch.
    threads: usize,
    /// The batch's first open to each server whose line is not known.
    pioneers: Pioneers,
}

/// A batch's first open to a server whose line's price is not known yet
/// takes a tail of its own ([`LEAD_TAIL`]), a body long enough to measure
/// the line by; the
/// others open beside it, sharing one tail ([`priced_tail`]), and their
/// crawls wait for it to end, so that they plan with the line known. On a
/// fast line it ends as theirs do; on a slow one the bytes a crawl planned
/// blind would buy cost more than the wait.
///
/// [`priced_tail`]: crate::link::priced_tail
#[derive(Debug, Default)]
struct Pioneers {
    /// Each server's first open: true once it has ended.
    by_server: HashMap<String, bool>,
}

/// When an open of the batch starts.
#[derive(Debug, PartialEq, Eq)]
enum Turn {
    /// As its server's first open: a tail of its own.
    Lead(String),
    /// Among the batch's files, its crawl once its server's first open has
    /// ended.
    Follow(String),
    /// Among the batch's files.
    Free,
}

impl Pioneers {
    /// The turn of an open to `server`, if its line is not known yet
    /// (`None`: known, or no server to know).
    fn turn(&mut self, server: Option<String>) -> Turn {
        let Some(server) = server else {
            return Turn::Free;
        };
        match self.by_server.get(&server) {
            None => {
                self.by_server.insert(server.clone(), false);
                Turn::Lead(server)
            }
            Some(false) => Turn::Follow(server),
            Some(true) => Turn::Free,
        }
    }

    fn ended(&mut self, server: &str) {
        if let Some(ended) = self.by_server.get_mut(server) {
            *ended = true;
        }
    }

    fn is_opening(&self, server: &str) -> bool {
        self.by_server.get(server) == Some(&false)
    }
}

/// The most a batch's first open to a line not known fetches as its tail:
/// twice the body that measures a line ([`MIN_BODY_SAMPLE`]), which slow
/// start may slow.
///
/// [`MIN_BODY_SAMPLE`]: crate::link::MIN_BODY_SAMPLE
const LEAD_TAIL: u64 = 2 * crate::link::MIN_BODY_SAMPLE;

/// `url` parsed, if it names a host (a server with a line to it).
fn with_host(url: &str) -> Option<url::Url> {
    url::Url::parse(url).ok().filter(|u| u.host_str().is_some())
}

/// The server of `url`, as its line is known by, if the line's price is
/// not known yet (an `s3://` URL's is its bucket's, which no line is known
/// by: a batch's first file in each bucket goes ahead).
fn unknown_line(builder: &Builder, url: &str) -> Option<String> {
    let url = with_host(url)?;
    let meter = LinkMeter::on(builder.link, builder.byte_weight, Line::to(&url));
    (!meter.knows_line()).then(|| origin_of(&url))
}

struct File {
    url: String,
    stage: Stage,
    /// Bytes it counts in [`State::bytes_ahead`].
    counted: u64,
}

enum Stage {
    Queued,
    Opening,
    Open {
        file: RemoteFile,
        prefetch: Option<SharedPrefetch>,
        crawled: bool,
        /// The batch's crawl of it, stopped when an open takes it.
        handover: Arc<Handover>,
        /// When the server last confirmed its version.
        opened_at: Instant,
    },
    Failed(Error),
    Taken,
    /// Let go of by the batch (cancelled): left to its open.
    Dropped,
}

/// How long an open waits for a batch's open of its file under way
/// beyond the file's own timeouts, at most.
const OPENING_WAIT: Duration = Duration::from_secs(60);

/// A file's crawl handed from the batch's thread to the file's open: the
/// open takes it, then waits for the batch's wave under way to end, so
/// that the targets that wave found, or took and did not fetch, are on
/// the frontier when the open's own crawl starts (else no crawl would
/// fetch them, and HDF5 would wait a round trip for each).
#[derive(Debug, Default)]
struct Handover {
    taken: AtomicBool,
    released: Mutex<bool>,
    ended: Condvar,
}

/// Releases a handover when dropped.
struct Releasing<'a>(&'a Handover);

impl Drop for Releasing<'_> {
    fn drop(&mut self) {
        self.0.release();
    }
}

impl Handover {
    fn is_taken(&self) -> bool {
        self.taken.load(Relaxed)
    }

    /// Said by the batch's thread once its crawl of the file has ended.
    fn release(&self) {
        *self.released.lock() = true;
        self.ended.notify_all();
    }

    /// Says the crawl is taken: the batch's crawl sends no further request.
    fn mark_taken(&self) {
        self.taken.store(true, Relaxed);
    }

    /// Takes the crawl; waits until the batch's crawl has let go of it, or
    /// the deadline of `stop` (in slices that look for a stop).
    fn take(&self, stop: &Stop) -> crate::error::Result<()> {
        let deadline = stop.deadline();
        self.mark_taken();
        loop {
            {
                let released = self.released.lock();
                if *released {
                    return Ok(());
                }
                let _ = self
                    .ended
                    .wait_until(released, crate::wait::slice_end(deadline));
            }
            stop.check()?;
            if Instant::now() >= deadline {
                return Ok(());
            }
        }
    }
}

/// How long a file opened here is handed to its open as it is; an older one
/// is opened afresh, which asks the server whether it changed (its blocks
/// stay cached for that version), unless the file is immutable or trusted
/// longer (`revalidate_after`).
pub const HELD_TRUSTED: Duration = Duration::from_secs(600);

impl Batch {
    /// Starts fetching the metadata of `urls`, opened with `builder` (whose
    /// cache the files share: give it one, or each file gets its own) and,
    /// through the driver, `settings`; `metadata`: crawl each file's
    /// metadata graph (else the files are only opened); `chunks`: the
    /// chunk read-ahead of their opens.
    pub(crate) fn start(
        urls: impl IntoIterator<Item = String>,
        builder: Builder,
        settings: Option<Config>,
        (metadata, chunks): (bool, bool),
    ) -> Batch {
        let mut files = Vec::new();
        let mut by_url = HashMap::new();
        for url in urls {
            if by_url.contains_key(&url) {
                continue;
            }
            by_url.insert(url.clone(), files.len());
            files.push(File {
                url,
                stage: Stage::Queued,
                counted: 0,
            });
        }
        let capacity = builder
            .cache
            .as_ref()
            .map_or(builder.cache_capacity, |c| c.capacity());
        // An open fetches the first block and the tail, the crawl some
        // blocks more: a guess on the high side, as the files that start
        // before the first one ends are counted at it.
        let prior = builder
            .open_tail
            .saturating_add(16u64.saturating_mul(builder.block_size));
        let shared = Arc::new(Shared {
            builder,
            settings,
            metadata,
            chunks,
            ahead_bytes: capacity / 2,
            closing: Closing::default(),
            reach: Arc::default(),
            state: Mutex::new(State {
                files,
                by_url,
                next: 0,
                files_ahead: 0,
                bytes_ahead: 0,
                in_flight: 0,
                per_file: Average::with_prior(prior),
                threads: 0,
                pioneers: Pioneers::default(),
            }),
            changed: Condvar::new(),
            made_in: MadeIn::here(),
        });
        shared.spawn_workers();
        Batch { shared }
    }

    /// How far the batch has gone.
    pub fn progress(&self) -> Progress {
        if self.shared.inherited() {
            return Progress::default();
        }
        self.shared.state.lock().progress()
    }

    /// Waits until the batch is settled ([`Progress::is_settled`]), or
    /// `timeout` (if any) has passed, or the wait is stopped (a
    /// [`Cancel`](crate::wait::Cancel) this thread runs under, the host's
    /// interrupt: then `Interrupted`). Returns the progress then.
    pub fn wait(&self, timeout: Option<Duration>) -> crate::error::Result<Progress> {
        // As any wait: stoppable by the host (Ctrl-C), its lock let go of.
        crate::wait::blocking(|stop| self.wait_here(timeout, stop))
    }

    fn wait_here(&self, timeout: Option<Duration>, stop: &Stop) -> crate::error::Result<Progress> {
        let deadline = timeout.map(crate::wait::deadline::after);
        if self.shared.inherited() {
            // Forked: the threads are the parent's, and its lock may be
            // held for good by one of them.
            return Ok(Progress::default());
        }
        let mut state = self.shared.state.lock();
        loop {
            let progress = state.progress();
            if progress.is_settled() || state.threads == 0 {
                return Ok(progress);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(progress);
            }
            drop(state);
            stop.check()?;
            state = self.shared.state.lock();
            let slice = deadline.map_or_else(
                || Instant::now() + crate::wait::POLL,
                crate::wait::slice_end,
            );
            state = self.shared.changed.wait_until(state, slice).0;
        }
    }

    /// The files that failed here, with why (their opens try again).
    pub fn errors(&self) -> Vec<(String, Error)> {
        if self.shared.inherited() {
            return Vec::new();
        }
        let state = self.shared.state.lock();
        state
            .files
            .iter()
            .filter_map(|f| match &f.stage {
                Stage::Failed(e) => Some((f.url.clone(), e.clone())),
                _ => None,
            })
            .collect()
    }

    /// Stops the batch: no further file starts, the requests under way
    /// end at once, and the files crawled and not opened yet are let go
    /// of (their blocks stay in the cache until evicted).
    pub fn cancel(&self) {
        self.shared.cancel();
        unregister(&self.shared);
    }

    /// Takes the file at `url`, if the batch has it: opened (and crawled,
    /// or being crawled) here. A file not started yet is left to its open
    /// (the batch will not start it); one being opened is waited for. A
    /// wait stopped meanwhile (the host's interrupt) is the open's error.
    pub(crate) fn take(&self, url: &str) -> crate::error::Result<Option<Prefetched>> {
        self.shared.take(url)
    }

    /// Whether the batch holds nothing more for any open: every file
    /// taken or failed.
    fn is_spent(&self) -> bool {
        let state = self.shared.state.lock();
        state
            .files
            .iter()
            .all(|f| matches!(f.stage, Stage::Taken | Stage::Failed(_) | Stage::Dropped))
    }

    /// What the batch opens its files with.
    #[cfg_attr(not(feature = "hdf5"), allow(dead_code))]
    pub(crate) fn builder(&self) -> &Builder {
        &self.shared.builder
    }

    /// Whether the batch opens `url` with `settings`.
    fn serves(&self, url: &str, settings: &Config) -> bool {
        let shared = &self.shared;
        !shared.inherited()
            && shared
                .settings
                .as_ref()
                .is_some_and(|s| s.same_effect(settings))
            && shared.state.lock().by_url.contains_key(url)
    }
}

impl State {
    fn progress(&self) -> Progress {
        let mut p = Progress {
            files: self.files.len(),
            bytes_ahead: self.bytes_ahead,
            ..Progress::default()
        };
        for file in &self.files {
            match &file.stage {
                Stage::Queued | Stage::Opening | Stage::Open { crawled: false, .. } => {
                    p.pending += 1
                }
                Stage::Open { crawled: true, .. } => p.crawled += 1,
                Stage::Failed(_) => p.failed += 1,
                Stage::Taken => p.opened += 1,
                Stage::Dropped => p.dropped += 1,
            }
        }
        // No thread, files queued: none had room to start.
        p.waiting_for_opens = self.threads == 0
            && self.files[self.next.min(self.files.len())..]
                .iter()
                .any(|f| matches!(f.stage, Stage::Queued));
        p
    }

    /// Moves the file at `index` to `next`, and gives back what it counted
    /// ahead if it was being opened or held; its stage before.
    fn let_go(&mut self, index: usize, next: Stage) -> Stage {
        let file = &mut self.files[index];
        let before = std::mem::replace(&mut file.stage, next);
        if matches!(before, Stage::Opening | Stage::Open { .. }) {
            self.bytes_ahead -= std::mem::take(&mut file.counted);
            self.files_ahead -= 1;
        }
        before
    }

    /// Whether one more file may start with `limit` bytes ahead at most:
    /// the files crawled and not opened, with those in flight and this one
    /// counted at the average so far. One file at a time always may.
    fn has_room(&self, limit: u64) -> bool {
        if self.files_ahead == 0 && self.in_flight == 0 {
            return true;
        }
        let coming = (self.in_flight as u64 + 1).saturating_mul(self.per_file.mean());
        self.files_ahead < FILES_AHEAD && self.bytes_ahead.saturating_add(coming) <= limit
    }
}

impl Shared {
    /// Whether this process only inherited the batch (a fork of the one
    /// that started it): its threads and the holders of its lock are the
    /// parent's.
    fn inherited(&self) -> bool {
        self.made_in.inherited()
    }

    /// Starts threads for the files queued, as many as may start now (one
    /// at least while nothing is ahead), up to [`FILES_AT_ONCE`] in all.
    fn spawn_workers(self: &Arc<Self>) {
        let wanted = {
            let mut state = self.state.lock();
            if self.closing.is_closed() || !state.has_room(self.ahead_bytes) {
                return;
            }
            let queued = state.files[state.next..]
                .iter()
                .filter(|f| matches!(f.stage, Stage::Queued))
                .count();
            let wanted = queued.min(FILES_AT_ONCE).saturating_sub(state.threads);
            state.threads += wanted;
            wanted
        };
        for _ in 0..wanted {
            let worker = Arc::clone(self);
            let spawned = std::thread::Builder::new()
                .name("remfile-files".into())
                .spawn(move || worker.work());
            if spawned.is_err() {
                // Fewer threads: the files wait for the others, or for
                // their opens.
                self.state.lock().threads -= 1;
                tracing::debug!("no thread for the prefetch of many files");
            }
        }
        self.changed.notify_all();
    }

    /// One thread's part: files one after the other while there is room
    /// for them, until none is left or the batch is cancelled. A thread
    /// that finds no room ends: an open that gives room back starts one.
    fn work(self: Arc<Self>) {
        struct Leaving<'a>(&'a Shared);
        impl Drop for Leaving<'_> {
            fn drop(&mut self) {
                self.0.state.lock().threads -= 1;
                self.0.changed.notify_all();
            }
        }
        let _leaving = Leaving(&self);
        while let Some((index, turn)) = self.next_file() {
            let led = match &turn {
                Turn::Lead(server) => Some(server.clone()),
                Turn::Follow(_) | Turn::Free => None,
            };
            let step = std::panic::AssertUnwindSafe(|| self.open_and_crawl(index, turn));
            if std::panic::catch_unwind(step).is_err() {
                // A bug, not the file's fault: its open opens it afresh.
                self.give_up(index, led.as_deref());
            }
            // What this file cost may make room for more at once.
            self.spawn_workers();
        }
    }

    /// Leaves the file at `index` to its open, whatever stage this thread
    /// left it in (and, if it led the opens to a server, ends its lead).
    fn give_up(&self, index: usize, led: Option<&str>) {
        let mut state = self.state.lock();
        // A first open that panicked holds the others back no longer.
        if let Some(server) = led {
            state.pioneers.ended(server);
        }
        if matches!(
            state.files[index].stage,
            Stage::Opening | Stage::Open { .. }
        ) {
            state.let_go(index, Stage::Dropped);
        }
        state.in_flight = state.in_flight.saturating_sub(1);
        drop(state);
        self.changed.notify_all();
    }

    /// The next file to start, if there is room for it; `None` when there
    /// is none or no room, or the batch was cancelled.
    fn next_file(&self) -> Option<(usize, Turn)> {
        let mut state = self.state.lock();
        if self.closing.is_closed() || Stop::here().is_stopped() {
            return None;
        }
        // Files taken before they started are left to their opens.
        while state
            .files
            .get(state.next)
            .is_some_and(|f| !matches!(f.stage, Stage::Queued))
        {
            state.next += 1;
        }
        if state.next >= state.files.len() || !state.has_room(self.ahead_bytes) {
            return None;
        }
        let index = state.next;
        // Decided with the file's place: the batch's first file to a
        // server leads to it (the one a survey opens first).
        let server = unknown_line(&self.builder, &state.files[index].url);
        let turn = state.pioneers.turn(server);
        state.next += 1;
        state.files[index].stage = Stage::Opening;
        state.files_ahead += 1;
        state.in_flight += 1;
        Some((index, turn))
    }

    fn open_and_crawl(&self, index: usize, turn: Turn) {
        let url = self.state.lock().files[index].url.clone();
        // The first to a line not known prices its tail alone, a body long
        // enough to measure the line by and no longer (on a slow line the
        // others' crawls wait for it); the others share one.
        let lead_builder;
        let (builder, together) = match &turn {
            Turn::Lead(_) => {
                let tail = self.builder.open_tail.min(LEAD_TAIL);
                lead_builder = self.builder.clone().open_tail(tail);
                (&lead_builder, 1)
            }
            Turn::Follow(_) | Turn::Free => (&self.builder, self.at_work()),
        };
        // Not `Builder::open`: the batch's threads have no host to wait
        // for them.
        let opened = self
            .closing
            .run(|| crate::open::open_among(builder, &url, together, &Stop::here()));
        let mut state = self.state.lock();
        if let Turn::Lead(server) = &turn {
            state.pioneers.ended(server);
            self.changed.notify_all();
        }
        state.in_flight -= 1;
        let still_ours = matches!(state.files[index].stage, Stage::Opening);
        let file = match opened {
            Ok(file) if still_ours && !self.closing.is_closed() => file,
            outcome => {
                if still_ours {
                    // Failed, or opened once the batch was cancelled: left
                    // to its open (a failure with why).
                    let next = match outcome {
                        Err(e) => {
                            tracing::debug!(error = %e, "a file of a batch did not open");
                            Stage::Failed(e)
                        }
                        Ok(_) => Stage::Dropped,
                    };
                    state.let_go(index, next);
                }
                drop(state);
                self.changed.notify_all();
                return;
            }
        };
        state.in_flight += 1;
        let prefetch = super::setup::new_prefetch(&file, self.metadata, self.chunks);
        if let Some(prefetch) = &prefetch {
            prefetch.lock().join_batch(Arc::clone(&self.reach));
        }
        let handover = Arc::new(Handover::default());
        state.files[index].stage = Stage::Open {
            file: file.clone(),
            prefetch: prefetch.clone(),
            crawled: false,
            handover: Arc::clone(&handover),
            opened_at: Instant::now(),
        };
        drop(state);
        self.changed.notify_all();
        if let Some(prefetch) = prefetch.as_ref().filter(|_| self.metadata) {
            let _work = file.extension().background_work();
            // Released however the crawl ends, a panic included.
            let releasing = Releasing(&handover);
            if prefetch.lock().start() {
                // A file taken by its open is crawled by the open's own
                // crawl from here (which stops when the file closes).
                let stopped = || self.closing.is_closed() || handover.is_taken();
                if let Turn::Follow(server) = &turn {
                    self.wait_for_pioneer(server, stopped);
                }
                let deadline = Instant::now() + FIRST_OPEN_WAIT;
                loop {
                    while !stopped() && self.closing.run(|| crawl::wave(prefetch, &file, stopped)) {
                    }
                    // Levels no open has read yet wait for one to: until the
                    // batch's first open has closed, the reach may rise.
                    let reach = prefetch.lock().reach();
                    if stopped() || !prefetch.lock().holds_deeper() {
                        break;
                    }
                    if self.reach.wait_above(reach, deadline, stopped) == Waited::Done {
                        break;
                    }
                }
            }
            drop(releasing);
            crate::hdf5::pieces::keep_while_open(file.extension());
        }
        handover.release();
        let fetched = file.stats().bytes_fetched;
        let mut state = self.state.lock();
        state.in_flight -= 1;
        if let Stage::Open { crawled, .. } = &mut state.files[index].stage {
            *crawled = true;
            // Only a file no open has read yet says what a crawl costs.
            state.per_file.add(fetched);
            state.files[index].counted = fetched;
            state.bytes_ahead += fetched;
        }
        drop(state);
        self.changed.notify_all();
    }

    /// The batch's files being opened or crawled now, which share the line
    /// with an open starting (the threads all start at once: the line
    /// counts the opens only as each sends its first request).
    fn at_work(&self) -> u64 {
        self.state.lock().in_flight.max(1) as u64
    }

    /// Waits until the batch's first open to `server` has ended (or
    /// [`FIRST_OPEN_WAIT`] has passed, or `stopped`).
    fn wait_for_pioneer(&self, server: &str, stopped: impl Fn() -> bool) {
        let deadline = Instant::now() + FIRST_OPEN_WAIT;
        let mut state = self.state.lock();
        while state.pioneers.is_opening(server) && !stopped() && Instant::now() < deadline {
            state = self.changed.wait_until(state, deadline).0;
        }
    }

    fn take(self: &Arc<Self>, url: &str) -> crate::error::Result<Option<Prefetched>> {
        if self.inherited() {
            return Ok(None);
        }
        let Some(&index) = self.state.lock().by_url.get(url) else {
            return Ok(None);
        };
        let opening = matches!(self.state.lock().files[index].stage, Stage::Opening);
        if opening {
            // As any wait of an open: stoppable, the interpreter's lock let
            // go of meanwhile (a driver open runs inside HDF5). Stopped, the
            // open fails: the file stays the batch's.
            let deadline = Instant::now() + self.builder.read_timeout.min(OPENING_WAIT);
            crate::wait::blocking(|stop| self.wait_opened(index, &stop.until(deadline)))?;
        }
        let builder = &self.builder;
        let mut state = self.state.lock();
        let next = match &state.files[index].stage {
            // Held too long to hand over unasked: opened afresh.
            Stage::Open { opened_at, .. }
                if !handed_over(
                    opened_at.elapsed(),
                    builder.immutable,
                    builder.revalidate_after,
                ) =>
            {
                Stage::Dropped
            }
            // Held, or being opened still (the wait gave up), or not
            // started: taken by this open (which opens the last two afresh).
            Stage::Open { .. } | Stage::Opening | Stage::Queued => Stage::Taken,
            Stage::Failed(_) | Stage::Taken | Stage::Dropped => return Ok(None),
        };
        let handing_over = matches!(next, Stage::Taken);
        let before = state.let_go(index, next);
        drop(state);
        let Stage::Open {
            file,
            prefetch,
            handover,
            ..
        } = before
        else {
            return Ok(None);
        };
        // Its crawl is its open's from here, or no one's. Stopped, the open
        // fails (the file is let go of: a next open opens it afresh).
        let deadline = Instant::now() + self.builder.read_timeout.min(OPENING_WAIT);
        handover.mark_taken();
        // A crawl waiting for the reach to rise, or for its line's first
        // open, sees it is taken (the lock taken between: a crawl that
        // looked before the mark is waiting by now).
        self.reach.wake();
        drop(self.state.lock());
        self.changed.notify_all();
        let handed = crate::wait::blocking(|stop| handover.take(&stop.until(deadline)));
        self.changed.notify_all();
        // The room given back.
        self.spawn_workers();
        handed?;
        Ok(handing_over.then_some(Prefetched { file, prefetch }))
    }

    /// Waits until the file at `index` is no longer being opened, or the
    /// deadline of `stop`; the lock is never held while a stop is looked
    /// for (the host may take the interpreter's lock to look).
    fn wait_opened(&self, index: usize, stop: &Stop) -> crate::error::Result<()> {
        let deadline = stop.deadline();
        loop {
            {
                let state = self.state.lock();
                if !matches!(state.files[index].stage, Stage::Opening) {
                    return Ok(());
                }
                let slice = crate::wait::slice_end(deadline);
                let _ = self.changed.wait_until(state, slice);
            }
            stop.check()?;
            if Instant::now() >= deadline {
                return Ok(());
            }
        }
    }

    fn cancel(&self) {
        self.closing.cancel();
        self.reach.wake();
        if self.inherited() {
            return;
        }
        let mut state = self.state.lock();
        for index in 0..state.files.len() {
            // Left to their opens.
            if matches!(state.files[index].stage, Stage::Open { .. } | Stage::Queued) {
                state.let_go(index, Stage::Dropped);
            }
        }
        drop(state);
        self.changed.notify_all();
    }
}

/// Whether a file opened `age` ago is handed to its open as it is (else it
/// is opened afresh, asking the server): always if `immutable`, otherwise
/// within [`HELD_TRUSTED`] or the `revalidate_after` the user trusts longer.
fn handed_over(age: Duration, immutable: bool, revalidate_after: Duration) -> bool {
    immutable || age <= revalidate_after.max(HELD_TRUSTED)
}

/// A mean of byte counts, with a prior that counts until the first.
#[derive(Debug, Clone, Copy)]
struct Average {
    sum: u64,
    count: u64,
    prior: u64,
}

impl Average {
    fn with_prior(prior: u64) -> Average {
        Average {
            sum: 0,
            count: 0,
            prior,
        }
    }

    fn add(&mut self, bytes: u64) {
        self.sum = self.sum.saturating_add(bytes);
        self.count += 1;
    }

    fn mean(&self) -> u64 {
        self.sum.checked_div(self.count).unwrap_or(self.prior)
    }
}

/// The batches the driver's opens look in (the Python package's). A forked
/// child forgets its parent's (dropping one could free what the parent's
/// threads hold) and opens those files afresh.
static REGISTERED: ProcessLocal<Vec<Batch>> = ProcessLocal::new(Vec::new(), forget_all);

fn forget_all(batches: &mut Vec<Batch>) {
    std::mem::forget(std::mem::take(batches));
}

fn registered() -> Option<crate::sync::MutexGuard<'static, crate::sync::Slot<Vec<Batch>>>> {
    REGISTERED.lock()
}

/// Lets the driver's opens of the batch's files (with its settings) take
/// them, until it is cancelled.
pub fn register(batch: &Batch) {
    let Some(mut registered) = registered() else {
        return;
    };
    registered.retain(|b| !b.shared.closing.is_closed() && !b.is_spent());
    registered.push(batch.clone());
}

fn unregister(shared: &Arc<Shared>) {
    if let Some(mut registered) = registered() {
        if let Some(at) = registered
            .iter()
            .position(|b| Arc::ptr_eq(&b.shared, shared))
        {
            registered.swap_remove(at);
        }
    }
}

/// The file at `url` a registered batch opened with `settings`, if any;
/// an error if the wait for it was stopped (the open fails with it).
pub(crate) fn take_registered(
    url: &str,
    settings: &Config,
) -> crate::error::Result<Option<Prefetched>> {
    let batch = registered()
        .and_then(|registered| registered.iter().find(|b| b.serves(url, settings)).cloned());
    let Some(batch) = batch else {
        return Ok(None);
    };
    let taken = batch.take(url);
    if batch.is_spent() {
        unregister(&batch.shared);
    }
    taken
}

impl Drop for Shared {
    fn drop(&mut self) {
        if self.inherited() {
            // Inherited by a fork: the files' engines may wait on, or free,
            // what the parent's threads hold.
            std::mem::forget(std::mem::take(&mut self.state.get_mut().files));
        }
    }
}

/// Starts fetching the metadata of `urls` for the driver's opens with the
/// configuration string `config` (as `HDF5_DRIVER_CONFIG` takes it): a
/// driver open of one of them with the same settings, in any order, takes
/// it from the batch. A bad key or value is an error naming it.
pub fn prefetch_files(
    urls: impl IntoIterator<Item = String>,
    config: &str,
) -> Result<Batch, super::config::ConfigError> {
    let config = super::config::parse(config)?;
    super::setup::check(&config)?;
    let builder = super::setup::builder(&config)?;
    let switches = (config.metadata_prefetch(), config.chunk_read_ahead());
    let batch = Batch::start(urls, builder, Some(config), switches);
    register(&batch);
    Ok(batch)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(files_ahead: usize, bytes_ahead: u64, in_flight: usize, per_file: u64) -> State {
        State {
            files: Vec::new(),
            by_url: HashMap::new(),
            next: 0,
            files_ahead,
            bytes_ahead,
            in_flight,
            per_file: Average::with_prior(per_file),
            threads: 1,
            pioneers: Pioneers::default(),
        }
    }

    /// The server of `url`, as its line is known by.
    fn server_of(url: &str) -> Option<String> {
        with_host(url).map(|u| origin_of(&u))
    }

    #[test]
    fn the_first_open_to_each_server_goes_ahead_of_the_others_to_it() {
        let here = server_of("https://data.example.org/a.nwb?X-Amz-Signature=s");
        assert_eq!(here.as_deref(), Some("https://data.example.org:443"));
        assert_eq!(
            server_of("http://data.example.org:8080/b.nwb").as_deref(),
            Some("http://data.example.org:8080")
        );
        assert_eq!(server_of("not a url"), None);
        assert_eq!(server_of("file:///tmp/a.nwb"), None, "no host");
        let elsewhere = server_of("https://other.example.org/c.nwb");
        let mut pioneers = Pioneers::default();
        assert_eq!(
            pioneers.turn(here.clone()),
            Turn::Lead(here.clone().unwrap())
        );
        assert_eq!(
            pioneers.turn(here.clone()),
            Turn::Follow(here.clone().unwrap())
        );
        assert_eq!(
            pioneers.turn(elsewhere.clone()),
            Turn::Lead(elsewhere.clone().unwrap()),
            "another server's line has its own first"
        );
        assert_eq!(
            pioneers.turn(None),
            Turn::Free,
            "a line known, or no server"
        );
        assert!(pioneers.is_opening(here.as_deref().unwrap()));
        pioneers.ended(here.as_deref().unwrap());
        assert!(!pioneers.is_opening(here.as_deref().unwrap()));
        assert_eq!(pioneers.turn(here.clone()), Turn::Free);
        assert_eq!(
            pioneers.turn(elsewhere.clone()),
            Turn::Follow(elsewhere.unwrap())
        );
    }

    #[test]
    fn a_line_known_sends_no_open_ahead() {
        let builder = crate::file::RemoteFile::builder().link(crate::link::Link::Ignored);
        assert_eq!(
            unknown_line(&builder, "https://data.example.org/a.nwb"),
            None
        );
        let measured = crate::file::RemoteFile::builder();
        assert_eq!(
            unknown_line(&measured, "https://never-measured.example.org/a.nwb").as_deref(),
            Some("https://never-measured.example.org:443")
        );
    }

    #[test]
    fn the_files_in_flight_count_at_the_average_against_the_bound() {
        // Nothing ahead: one file always starts, whatever the bound.
        assert!(state(0, 0, 0, 100).has_room(10));
        // Two in flight at 30 each, a third fits in 100; a fourth does not.
        assert!(state(2, 0, 2, 30).has_room(100));
        assert!(!state(3, 0, 3, 30).has_room(100));
        // Bytes crawled ahead count as they are.
        assert!(!state(2, 80, 1, 30).has_room(100));
        assert!(state(2, 40, 1, 30).has_room(100));
        // However small the files, at most FILES_AHEAD.
        assert!(!state(FILES_AHEAD, 0, 0, 0).has_room(u64::MAX));
        // Hostile numbers saturate rather than wrap.
        assert!(!state(1, u64::MAX, usize::MAX - 1, u64::MAX).has_room(u64::MAX - 1));
    }

    #[test]
    fn a_file_held_long_is_opened_afresh_unless_it_cannot_change() {
        let minute = Duration::from_secs(60);
        assert!(handed_over(minute, false, Duration::ZERO));
        assert!(!handed_over(HELD_TRUSTED + minute, false, Duration::ZERO));
        assert!(handed_over(HELD_TRUSTED + minute, true, Duration::ZERO));
        assert!(handed_over(HELD_TRUSTED + minute, false, 2 * HELD_TRUSTED));
        assert!(!handed_over(Duration::MAX, false, 2 * HELD_TRUSTED));
    }

    #[test]
    fn the_average_starts_from_its_prior() {
        let mut a = Average::with_prior(7);
        assert_eq!(a.mean(), 7);
        a.add(10);
        a.add(20);
        assert_eq!(a.mean(), 15);
        a.add(u64::MAX);
        assert_eq!(a.mean(), u64::MAX / 3);
    }

    #[test]
    fn settings_are_the_same_when_the_same_take_effect() {
        let parse = |text: &str| super::super::config::parse(text).unwrap();
        let a = parse("cache=1GiB;block_size=64KiB");
        assert!(a.same_effect(&parse("block_size=64KiB;cache_capacity=1GiB")));
        assert!(!a.same_effect(&parse("cache=1GiB")));
        assert!(!a.same_effect(&parse("cache=2GiB;block_size=64KiB")));
        // The last of a key wins: the same settings in another order are not
        // the same configuration.
        let (on_off, off_on) = (parse("stats=on;stats=off"), parse("stats=off;stats=on"));
        assert!(!on_off.same_effect(&off_on));
        assert!(on_off.same_effect(&parse("stats=off")));
        // Secrets are compared too (never shown, still told apart).
        let keys = |secret| parse(&format!("s3_access_key_id=A;s3_secret_access_key={secret}"));
        assert!(!keys("one").same_effect(&keys("two")));
        // Every header counts.
        let headers = parse("header=A: 1;header=B: 2");
        assert!(headers.same_effect(&parse("header=B: 2;header=A: 1")));
        assert!(!headers.same_effect(&parse("header=B: 2")));
    }

    #[test]
    fn progress_counts_each_stage() {
        let mut s = state(1, 5, 0, 0);
        let stages = [Stage::Queued, Stage::Opening, Stage::Taken];
        for (i, stage) in stages.into_iter().enumerate() {
            s.files.push(File {
                url: i.to_string(),
                stage,
                counted: 0,
            });
        }
        s.files.push(File {
            url: "failed".into(),
            stage: Stage::Failed(Error::new(crate::error::ErrorKind::Network, "refused")),
            counted: 0,
        });
        let p = s.progress();
        assert_eq!((p.files, p.pending, p.opened, p.failed), (4, 2, 1, 1));
        assert!(!p.is_settled() && !p.waiting_for_opens);
        // No thread left and a file queued: it waits for an open's room.
        s.threads = 0;
        assert!(s.progress().waiting_for_opens && s.progress().is_settled());
    }
}
