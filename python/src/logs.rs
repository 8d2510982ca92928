//! The crate's `tracing` events as records of Python's `logging`, under
//! `remfile.*` loggers (`remfile::http::retry` becomes `remfile.http.retry`).
//!
//! Events come on any thread, inside HDF5 calls too, where no Python code
//! may run: they are only queued here (bounded; what does not fit is
//! counted, and said in a record of its own). A daemon thread of the
//! package takes them and hands them to `logging`. Nothing is formatted or
//! queued below the level the package's loggers are enabled for, which
//! Python sets ([`_log_level`]) as it opens files and as the thread goes
//! round.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicPtr, AtomicU8, Ordering};
use std::sync::{Condvar, Mutex, TryLockError};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};

/// The most records waiting for Python.
const MOST_WAITING: usize = 10_000;

/// Records dropped without the queue's lock (it was held too long).
static DROPPED_UNLOCKED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Set by [`_log_stop`]: takes return at once.
static STOPPED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The most verbose level wanted, as [`level_rank`] ranks it (0: none).
static WANTED: AtomicU8 = AtomicU8::new(0);

/// 1 for errors up to 5 for traces.
fn level_rank(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 1,
        Level::WARN => 2,
        Level::INFO => 3,
        Level::DEBUG => 4,
        Level::TRACE => 5,
    }
}

/// Python's number for a level.
fn python_level(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 40,
        Level::WARN => 30,
        Level::INFO => 20,
        Level::DEBUG => 10,
        Level::TRACE => 5,
    }
}

/// The rank of the most verbose level a Python level lets through.
fn rank_for_python(level: i64) -> u8 {
    match level {
        ..=5 => 5,
        6..=10 => 4,
        11..=20 => 3,
        21..=30 => 2,
        31..=40 => 1,
        _ => 0,
    }
}

/// A record for `logging`: level, logger name, message.
type Entry = (u8, String, String);

#[derive(Default)]
struct Queue {
    entries: VecDeque<Entry>,
    dropped: u64,
    stopped: bool,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    arrived: Condvar,
}

/// The queue of this process: a forked child starts a new one (a thread
/// of the parent may have held the old one's lock at the fork).
static SHARED: AtomicPtr<Shared> = AtomicPtr::new(std::ptr::null_mut());

fn shared() -> &'static Shared {
    let current = SHARED.load(Ordering::Acquire);
    if !current.is_null() {
        // SAFETY: set only from `Box::leak`, never freed.
        return unsafe { &*current };
    }
    let fresh = Box::into_raw(Box::default());
    match SHARED.compare_exchange(
        std::ptr::null_mut(),
        fresh,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        // SAFETY: leaked on purpose: the queue lives as long as the process.
        Ok(_) => unsafe { &*fresh },
        Err(other) => {
            // SAFETY: `fresh` was never shared.
            drop(unsafe { Box::from_raw(fresh) });
            // SAFETY: as above.
            unsafe { &*other }
        }
    }
}

/// The subscriber that queues the crate's events for Python.
struct ToPython;

impl Subscriber for ToPython {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        // Asked each time (the level Python wants changes); never for
        // other crates' events.
        if metadata.target().starts_with("remfile") {
            Interest::sometimes()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        level_rank(metadata.level()) <= WANTED.load(Ordering::Relaxed)
            && metadata.target().starts_with("remfile")
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::TRACE)
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        // Spans are not shown: only events become records.
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let metadata = event.metadata();
        let mut text = Text::default();
        event.record(&mut text);
        let logger = metadata.target().replace("::", ".");
        let entry = (python_level(metadata.level()), logger, text.finish());
        let shared = shared();
        // Never waits on a lock a thread of a parent process held at fork:
        // a record that finds it taken for long is dropped (and counted).
        let mut queue = match shared.queue.try_lock() {
            Ok(q) => q,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => match lock_within(shared, Duration::from_millis(5)) {
                Some(q) => q,
                None => {
                    DROPPED_UNLOCKED.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            },
        };
        if queue.entries.len() >= MOST_WAITING {
            queue.dropped += 1;
            return;
        }
        queue.entries.push_back(entry);
        drop(queue);
        shared.arrived.notify_one();
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

/// The queue's lock, if it comes within `patience`.
fn lock_within(shared: &Shared, patience: Duration) -> Option<std::sync::MutexGuard<'_, Queue>> {
    let until = Instant::now() + patience;
    loop {
        match shared.queue.try_lock() {
            Ok(q) => return Some(q),
            Err(TryLockError::Poisoned(p)) => return Some(p.into_inner()),
            Err(TryLockError::WouldBlock) if Instant::now() < until => std::thread::yield_now(),
            Err(TryLockError::WouldBlock) => return None,
        }
    }
}

/// An event's message, then its other fields as `name=value`.
#[derive(Default)]
struct Text {
    message: String,
    fields: String,
}

impl Text {
    fn finish(self) -> String {
        if self.fields.is_empty() {
            self.message
        } else if self.message.is_empty() {
            self.fields.trim_start().to_owned()
        } else {
            format!("{}:{}", self.message, self.fields)
        }
    }
}

impl Visit for Text {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.fields, " {}={}", field.name(), value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={:?}", field.name(), value);
        }
    }
}

/// Makes [`ToPython`] the process's subscriber, unless the program that
/// loaded Python set one first.
pub(crate) fn install() {
    let _ = tracing::subscriber::set_global_default(ToPython);
}

/// In a forked child: a queue of its own.
pub(crate) fn forked() {
    let fresh = Box::into_raw(Box::<Shared>::default());
    SHARED.store(fresh, Ordering::Release);
}

/// Sets the most verbose Python level wanted (the package's loggers'
/// effective level); above `ERROR`, nothing is queued.
#[pyfunction]
pub(crate) fn _log_level(level: i64) {
    WANTED.store(rank_for_python(level), Ordering::Relaxed);
}

/// The records waiting, once some have come or `timeout` seconds have
/// passed (waiting without the GIL); `None` once [`_log_stop`] was called
/// and the last were taken.
#[pyfunction]
pub(crate) fn _log_take(py: Python<'_>, timeout: f64) -> Option<Vec<Entry>> {
    let timeout = Duration::from_secs_f64(timeout.clamp(0.0, 60.0));
    // Once stopped, no wait (and no letting go of the GIL, which a thread
    // would have to take back as the interpreter ends).
    let wait = if STOPPED.load(Ordering::SeqCst) {
        Duration::ZERO
    } else {
        timeout
    };
    let take = || {
        let shared = shared();
        let queue = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
        let (mut queue, _) = shared
            .arrived
            .wait_timeout_while(queue, wait, |q| q.entries.is_empty() && !q.stopped)
            .unwrap_or_else(|p| p.into_inner());
        if queue.stopped && queue.entries.is_empty() {
            return None;
        }
        let mut entries: Vec<Entry> = queue.entries.drain(..).collect();
        let dropped =
            std::mem::take(&mut queue.dropped) + DROPPED_UNLOCKED.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            entries.push((
                30,
                "remfile".to_owned(),
                format!(
                    "{dropped} log records were dropped: they came faster than logging took them"
                ),
            ));
        }
        Some(entries)
    };
    if wait.is_zero() {
        take()
    } else {
        py.detach(take)
    }
}

/// Ends the waits of [`_log_take`], now and from now on (the process is
/// ending).
#[pyfunction]
pub(crate) fn _log_stop() {
    STOPPED.store(true, Ordering::SeqCst);
    let shared = shared();
    shared
        .queue
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .stopped = true;
    shared.arrived.notify_all();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_levels_map_to_the_crates() {
        assert_eq!(rank_for_python(10), level_rank(&Level::DEBUG));
        assert_eq!(rank_for_python(30), level_rank(&Level::WARN));
        assert_eq!(rank_for_python(50), 0, "CRITICAL: nothing");
        assert_eq!(rank_for_python(0), 5, "NOTSET: everything");
    }
}
