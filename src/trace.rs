//! What a file's requests were, one by one, when it was opened with
//! [`Builder::trace_requests`](crate::options::Builder::trace_requests): the bytes
//! each asked for, its answer, when it was sent and answered; and which of
//! them went in the same round trip ([`rounds`]).

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use crate::sync::Mutex;

/// The most requests a trace keeps: past them it counts only.
pub const MOST_TRACED: usize = 100_000;

/// The bytes a request asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requested {
    /// These bytes.
    Bytes(Range<u64>),
    /// The file's last this many bytes (a suffix range: the size was not
    /// known yet).
    Last(u64),
}

impl Requested {
    /// The bytes asked for in a file of `size` bytes.
    pub fn within(&self, size: u64) -> Range<u64> {
        match self {
            Requested::Bytes(r) => r.start.min(size)..r.end.min(size),
            Requested::Last(n) => size.saturating_sub(*n)..size,
        }
    }
}

impl std::fmt::Display for Requested {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Requested::Bytes(r) => write!(f, "{}-{}", r.start, r.end.saturating_sub(1)),
            Requested::Last(n) => write!(f, "-{n}"),
        }
    }
}

/// One request a file sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracedRequest {
    /// The bytes it asked for.
    pub requested: Requested,
    /// The answer's status, or `None` if none came (a refused connection,
    /// a timeout).
    pub status: Option<u16>,
    /// The answer's body length as its headers gave it, if they did.
    pub body_len: Option<u64>,
    /// When it was sent, from the start of the trace (the file's open).
    pub sent: Duration,
    /// When its answer's headers came, or it failed, from the same start.
    pub answered: Duration,
}

/// A file's trace: off unless the builder asked for it.
#[derive(Debug)]
pub(crate) struct RequestTrace {
    on: AtomicBool,
    start: Instant,
    requests: Mutex<Traced>,
}

#[derive(Debug, Default)]
struct Traced {
    kept: Vec<TracedRequest>,
    past_the_bound: u64,
}

impl Default for RequestTrace {
    fn default() -> RequestTrace {
        RequestTrace {
            on: AtomicBool::new(false),
            start: Instant::now(),
            requests: Mutex::default(),
        }
    }
}

impl RequestTrace {
    /// Starts keeping the requests sent from now on.
    pub fn turn_on(&self) {
        self.on.store(true, Relaxed);
    }

    /// The time since the trace started (the file's open).
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// Whether requests are kept.
    pub fn is_on(&self) -> bool {
        self.on.load(Relaxed)
    }

    /// Keeps a request sent at `sent` and answered (or failed) now.
    pub fn record(
        &self,
        requested: Requested,
        status: Option<u16>,
        body_len: Option<u64>,
        sent: Instant,
    ) {
        if !self.is_on() {
            return;
        }
        let request = TracedRequest {
            requested,
            status,
            body_len,
            sent: sent.saturating_duration_since(self.start),
            answered: self.start.elapsed(),
        };
        let mut traced = self.requests.lock();
        if traced.kept.len() < MOST_TRACED {
            traced.kept.push(request);
        } else {
            traced.past_the_bound += 1;
        }
    }

    /// The requests kept, in the order they were answered, and how many
    /// more were sent past [`MOST_TRACED`].
    pub fn requests(&self) -> (Vec<TracedRequest>, u64) {
        let traced = self.requests.lock();
        (traced.kept.clone(), traced.past_the_bound)
    }
}

/// The round trip each of `requests` went in, counted from 0: a request
/// sent before any answer of the current round came back belongs to it,
/// one sent after starts the next (the rule a server's log is read by,
/// here with the client's times: a request's `sent` includes opening its
/// connection). Requests are taken in the order they were sent.
pub fn rounds(requests: &[TracedRequest]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..requests.len()).collect();
    order.sort_by_key(|&i| requests[i].sent);
    let mut round_of = vec![0; requests.len()];
    let mut current: Option<(usize, Duration)> = None;
    for i in order {
        let r = &requests[i];
        current = match current {
            Some((round, first_answer)) if r.sent < first_answer => {
                Some((round, first_answer.min(r.answered)))
            }
            Some((round, _)) => Some((round + 1, r.answered)),
            None => Some((0, r.answered)),
        };
        round_of[i] = current.map_or(0, |(round, _)| round);
    }
    round_of
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(sent_ms: u64, answered_ms: u64) -> TracedRequest {
        TracedRequest {
            requested: Requested::Bytes(0..1),
            status: Some(206),
            body_len: Some(1),
            sent: Duration::from_millis(sent_ms),
            answered: Duration::from_millis(answered_ms),
        }
    }

    #[test]
    fn requests_sent_before_an_answer_share_its_round() {
        // Two at once, one sent as the first answer came (the next round),
        // then one sent while that round's was still out.
        let requests = [at(0, 30), at(1, 32), at(30, 60), at(45, 75), at(80, 110)];
        assert_eq!(rounds(&requests), [0, 0, 1, 1, 2]);
        // Listed in the order answered, counted in the order sent.
        let shuffled = [at(30, 60), at(0, 30), at(80, 110), at(1, 32)];
        assert_eq!(rounds(&shuffled), [1, 0, 2, 0]);
        assert!(rounds(&[]).is_empty());
    }

    #[test]
    fn a_suffix_is_placed_once_the_size_is_known() {
        assert_eq!(Requested::Last(100).within(1000), 900..1000);
        assert_eq!(Requested::Last(5000).within(1000), 0..1000);
        assert_eq!(Requested::Bytes(990..2000).within(1000), 990..1000);
        assert_eq!(Requested::Last(8).to_string(), "-8");
        assert_eq!(Requested::Bytes(0..8).to_string(), "0-7");
    }

    #[test]
    fn a_trace_keeps_nothing_unless_on_and_at_most_its_bound() {
        let trace = RequestTrace::default();
        trace.record(Requested::Last(1), Some(206), None, Instant::now());
        assert!(trace.requests().0.is_empty());
        trace.turn_on();
        let sent = Instant::now();
        trace.record(Requested::Bytes(0..10), Some(206), Some(10), sent);
        trace.record(Requested::Bytes(10..20), None, None, sent);
        let (kept, past) = trace.requests();
        assert_eq!(kept.len(), 2);
        assert_eq!(past, 0);
        assert!(kept[0].answered >= kept[0].sent);
        assert_eq!(kept[1].status, None);
    }
}
