//! An in-memory [`RangeSource`] for unit tests: a file's bytes, the ranges
//! asked for, scripted failures, a gate that holds fetches until it is
//! opened, so that a test can make readers meet a fetch in flight without a
//! socket or a timing, and a clock of its own: a link it plays (the time
//! each response's headers and body take, told to the file's link meter as
//! the HTTP transport tells it) and stalls past a read's deadline, none of
//! which is waited for.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::engine::range_source::RangeSource;
use crate::engine::sink::Sink;
use crate::error::{Error, ErrorKind, Result};
use crate::identity::Identity;
use crate::link::LinkMeter;
use crate::stats::Counters;
use crate::wait::Stop;

/// A file in memory, served range by range.
pub(crate) struct MemorySource {
    data: Vec<u8>,
    counters: Arc<Counters>,
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    asked: Vec<Range<u64>>,
    /// The kinds of error the next fetches fail with, in order.
    faults: VecDeque<ErrorKind>,
    /// Fetches of ranges starting at these offsets fail so, each time.
    failing_at: Vec<(u64, ErrorKind)>,
    /// Fetches wait while it is shut.
    shut: bool,
    waiting: usize,
    /// The link it plays, if any: (round trip, bytes per second).
    link: Option<(Duration, u64)>,
    /// What the link's responses are told to, as the transport tells them.
    meter: Option<Arc<LinkMeter>>,
    /// How much longer than the link says the next fetches' headers take.
    stalls: VecDeque<Duration>,
    /// The time its fetches took, one after another.
    clock: Duration,
}

impl MemorySource {
    pub(crate) fn new(data: Vec<u8>) -> Arc<MemorySource> {
        Arc::new(MemorySource {
            data,
            counters: Arc::default(),
            state: Mutex::default(),
            changed: Condvar::new(),
        })
    }

    /// The version it serves: its size, and an ETag.
    pub(crate) fn identity(&self) -> Identity {
        Identity {
            size: self.data.len() as u64,
            etag: Some("\"memory\"".into()),
            last_modified: None,
        }
    }

    /// The counters a file over it counts in (its requests and bytes).
    pub(crate) fn counters(&self) -> Arc<Counters> {
        Arc::clone(&self.counters)
    }

    /// The ranges asked for so far, in order.
    pub(crate) fn asked(&self) -> Vec<Range<u64>> {
        self.lock().asked.clone()
    }

    /// Makes the next fetch fail with an error of `kind`.
    pub(crate) fn fail_next(&self, kind: ErrorKind) {
        self.lock().faults.push_back(kind);
    }

    /// Makes every fetch of a range starting at `start` fail with an error
    /// of `kind` (until [`heal`](Self::heal)).
    pub(crate) fn fail_at(&self, start: u64, kind: ErrorKind) {
        self.lock().failing_at.push((start, kind));
    }

    /// Ends every [`fail_at`](Self::fail_at).
    pub(crate) fn heal(&self) {
        self.lock().failing_at.clear();
    }

    /// Holds every fetch from now on until [`open`](Self::open).
    pub(crate) fn shut(&self) {
        self.lock().shut = true;
    }

    /// Lets the held fetches, and all later ones, go.
    pub(crate) fn open(&self) {
        self.lock().shut = false;
        self.changed.notify_all();
    }

    /// Waits until `n` fetches are held; panics after 20 s (a test that
    /// fetches less fails, never hangs).
    pub(crate) fn wait_until_holding(&self, n: usize) {
        let deadline = Instant::now() + std::time::Duration::from_secs(20);
        let mut state = self.lock();
        while state.waiting < n {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "{} fetches held, not {n}", state.waiting);
            state = self
                .changed
                .wait_timeout(state, left)
                .map_or_else(|e| e.into_inner().0, |(s, _)| s);
        }
    }

    /// Plays a link `round_trip` away that carries `bytes_per_second` on
    /// each connection: every response's headers take a round trip and its
    /// body its length at that rate, on the source's clock.
    pub(crate) fn play_link(&self, round_trip: Duration, bytes_per_second: u64) {
        self.lock().link = Some((round_trip, bytes_per_second.max(1)));
    }

    /// Makes the next fetch's headers take `extra` longer. A fetch that
    /// would end past its deadline fails as timed out, as the transport's
    /// does once the deadline passes (its shorter idle limit, which it
    /// retries, is not played); no real time passes.
    pub(crate) fn stall_next(&self, extra: Duration) {
        self.lock().stalls.push_back(extra);
    }

    /// The time its fetches took, one after another, on its clock (one
    /// that timed out until its deadline).
    pub(crate) fn clock(&self) -> Duration {
        self.lock().clock
    }

    /// Tells `meter` the times of its responses from now on (the file over
    /// it measures its link through it).
    pub(crate) fn measure_with(&self, meter: Arc<LinkMeter>) {
        self.lock().meter = Some(meter);
    }

    /// How long the headers and the body of a response of `len` bytes
    /// take, and whether a link is played (without one, there is nothing
    /// to measure: times of zero would read as an infinitely fast link).
    fn times(state: &mut State, len: u64) -> (Duration, Duration, bool) {
        let stall = state.stalls.pop_front().unwrap_or_default();
        let Some((round_trip, rate)) = state.link else {
            return (stall, Duration::ZERO, false);
        };
        let body = Duration::from_secs_f64(len as f64 / rate as f64);
        (round_trip + stall, body, true)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl RangeSource for Arc<MemorySource> {
    fn fetch(
        &self,
        range: Range<u64>,
        sink: &mut Sink<'_>,
        _identity: &Identity,
        stop: &Stop,
    ) -> Result<u32> {
        let mut state = self.lock();
        state.asked.push(range.clone());
        Counters::add(&self.counters.requests, 1);
        state.waiting += 1;
        self.changed.notify_all();
        // Held as a socket wait is: in slices, ended by a stop.
        while state.shut {
            if let Err(stopped) = stop.check() {
                state.waiting -= 1;
                self.changed.notify_all();
                return Err(stopped);
            }
            state = self
                .changed
                .wait_timeout(state, crate::wait::POLL)
                .map_or_else(|e| e.into_inner().0, |(s, _)| s);
        }
        state.waiting -= 1;
        let at = state
            .failing_at
            .iter()
            .find(|(start, _)| *start == range.start);
        if let Some(kind) = at
            .map(|(_, kind)| *kind)
            .or_else(|| state.faults.pop_front())
        {
            return Err(Error::new(kind, "a scripted failure"));
        }
        let len = range.end - range.start;
        let (headers, body, played) = MemorySource::times(&mut state, len);
        let left = stop.deadline().saturating_duration_since(Instant::now());
        state.clock += (headers + body).min(left);
        // As the transport tells it: the headers' wait once they came, the
        // body's time once it ended.
        let meter = state.meter.as_ref().filter(|_| played);
        if let Some(meter) = meter.filter(|_| headers <= left) {
            meter.record_wait(headers);
        }
        if headers + body > left {
            return Err(Error::new(
                ErrorKind::Timeout,
                "timed out waiting for the server's answer",
            ));
        }
        if let Some(meter) = meter {
            // On the source's clock, where fetches take turns.
            static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
            let ended = *EPOCH.get_or_init(Instant::now) + state.clock;
            meter.record_body_ended(len, body, Some(headers), ended);
        }
        drop(state);
        let mut bytes = &self.data[range.start as usize..range.end as usize];
        while !sink.is_full() {
            let spare = sink.spare();
            let n = spare.len().min(bytes.len());
            spare[..n].copy_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            sink.advance(n);
        }
        Counters::add(&self.counters.bytes_fetched, range.end - range.start);
        Ok(1)
    }

    fn redacted_url(&self) -> &str {
        "memory://file"
    }
}
