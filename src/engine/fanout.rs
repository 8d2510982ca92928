//! Concurrent fetches: one scoped pool of workers, used by every read that
//! fetches several parts at once, and the one definition of how many round
//! trips such a fetch took.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc;
use std::thread::{Scope, ScopedJoinHandle};

use crate::sync::Mutex;
use crate::wait::Stop;

/// What the caller wants after a part's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    Continue,
    /// Start no further parts (those in flight still finish).
    Stop,
}

/// The outcome of one part, and how many requests it made one after the
/// other (retries included).
pub(crate) struct Done<R> {
    pub outcome: R,
    pub attempts: u32,
}

/// Starts `f` on a new thread of scope `s`, handing it the stop of a
/// thread helping the work `stop` stops (it stops with that work, and
/// waits in its lane); or returns `None` if the process has as many fetch
/// threads as it allows ([`crate::process::FETCH_THREADS`]) or the system
/// refuses a thread (a process at its limit of threads or memory): the
/// caller then does the work itself, later, rather than panic.
pub(crate) fn try_spawn<'scope, T: Send + 'scope>(
    s: &'scope Scope<'scope, '_>,
    stop: &Stop,
    f: impl FnOnce(&Stop) -> T + Send + 'scope,
) -> Option<ScopedJoinHandle<'scope, T>> {
    #[cfg(test)]
    if tests::REFUSE_THREADS.with(|refuse| refuse.get()) {
        return None;
    }
    // The process's bound on fetch threads: past it, the caller works alone.
    let place = crate::process::workers::fetch_thread(stop.lane().0)?;
    let helper = stop.for_helper();
    let f = move || {
        let _place = place;
        f(&helper)
    };
    match std::thread::Builder::new().spawn_scoped(s, f) {
        Ok(handle) => Some(handle),
        Err(e) => {
            tracing::debug!(error = %e, "no thread could be started; the work goes on this one");
            None
        }
    }
}

/// Runs `fetch` on every part, at most `workers` at once, each part on the
/// next free worker; hands each outcome to `on_done` on this thread as it
/// arrives (so that waiting readers get their blocks early). A single part
/// runs on this thread, and so do all if no worker thread can be started.
/// A panic in `fetch` is resumed here, once every worker has stopped.
///
/// Returns the round trips the fetch took: one per `workers` parts (as
/// planned, not as the workers happened to take them, which depends on
/// timing), plus the retries of the part that needed the most.
pub(crate) fn fan_out<P: Send, R: Send>(
    parts: Vec<P>,
    workers: usize,
    stop: &Stop,
    fetch: impl Fn(P, &Stop) -> Done<R> + Sync,
    mut on_done: impl FnMut(R) -> Next,
) -> u32 {
    let count = parts.len();
    let workers = workers.clamp(1, count.max(1));
    if count <= 1 {
        return one_by_one(parts.into_iter(), stop, &fetch, &mut on_done);
    }
    let queue = Mutex::new(parts.into_iter());
    let halt = AtomicBool::new(false);
    let (sender, outcomes) = mpsc::channel();
    let (most_attempts, workers) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map_while(|_| {
                let sender = sender.clone();
                let (queue, halt, fetch) = (&queue, &halt, &fetch);
                try_spawn(s, stop, move |helper| {
                    work(queue, halt, helper, fetch, sender)
                })
            })
            .collect();
        if handles.is_empty() {
            // One after the other, as the only worker.
            let most = one_by_one(queue.lock().by_ref(), stop, &fetch, &mut on_done);
            return (most, 1);
        }
        let workers = handles.len();
        drop(sender);
        hand_on(&outcomes, &queue, &halt, stop, &mut on_done);
        (most_attempts_of(handles), workers)
    });
    (count.div_ceil(workers) - 1) as u32 + most_attempts.max(1)
}

/// Fetches `parts` on this thread, in order, until `on_done` says stop;
/// the most attempts a part took.
fn one_by_one<P, R>(
    parts: impl Iterator<Item = P>,
    stop: &Stop,
    fetch: &impl Fn(P, &Stop) -> Done<R>,
    on_done: &mut impl FnMut(R) -> Next,
) -> u32 {
    let mut most = 0;
    for part in parts {
        let done = fetch(part, stop);
        most = most.max(done.attempts);
        if on_done(done.outcome) == Next::Stop {
            break;
        }
    }
    most
}

/// Hands the workers' outcomes to `on_done` as they arrive, until every
/// worker has stopped; a stop it asks for reaches the workers before they
/// take another part.
fn hand_on<P, R>(
    outcomes: &mpsc::Receiver<R>,
    queue: &Mutex<std::vec::IntoIter<P>>,
    halt: &AtomicBool,
    stop: &Stop,
    on_done: &mut impl FnMut(R) -> Next,
) {
    loop {
        let outcome = match outcomes.recv_timeout(crate::wait::POLL) {
            Ok(outcome) => outcome,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                // The workers watch the read's cancel; asking here (the
                // read's own thread) is what sets it when the host asks
                // for a stop. Their parts then end within a poll, and
                // the parts not started yet fail at once when they
                // start: every part's outcome reaches the caller (one
                // never run would read as one that brought nothing).
                let _ = stop.should_stop();
                continue;
            }
        };
        // Under the queue's lock, so that no worker takes a part between
        // the verdict and the stop.
        let _queue = queue.lock();
        if on_done(outcome) == Next::Stop {
            halt.store(true, Relaxed);
        }
    }
}

/// Joins the workers: the most attempts one of their parts took. A
/// worker's panic goes on here, on the caller's thread.
fn most_attempts_of(handles: Vec<ScopedJoinHandle<'_, u32>>) -> u32 {
    let mut most = 0;
    for handle in handles {
        match handle.join() {
            Ok(attempts) => most = most.max(attempts),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
    most
}

/// One worker: takes parts until none are left or the caller stops, and
/// returns the most attempts one of its parts took (a worker that takes
/// several parts does not make more rounds).
fn work<P, R>(
    queue: &Mutex<std::vec::IntoIter<P>>,
    halt: &AtomicBool,
    stop: &Stop,
    fetch: &impl Fn(P, &Stop) -> Done<R>,
    sender: mpsc::Sender<R>,
) -> u32 {
    let mut most_attempts = 0;
    loop {
        let Some(part) = queue.lock().next().filter(|_| !halt.load(Relaxed)) else {
            break;
        };
        let done = fetch(part, stop);
        most_attempts = most_attempts.max(done.attempts);
        if sender.send(done.outcome).is_err() {
            break;
        }
    }
    most_attempts
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::cell::Cell;
    use std::sync::atomic::AtomicUsize;

    thread_local! {
        /// Makes [`try_spawn`] on this thread behave as if the system refused
        /// every thread.
        pub(crate) static REFUSE_THREADS: Cell<bool> = const { Cell::new(false) };
    }

    #[test]
    fn without_threads_every_part_is_fetched_on_this_one_in_order() {
        REFUSE_THREADS.with(|r| r.set(true));
        let me = std::thread::current().id();
        let mut got = Vec::new();
        let rounds = fan_out(
            (0..10).collect(),
            4,
            &Stop::here(),
            |n, _| {
                assert_eq!(std::thread::current().id(), me);
                once(n)
            },
            |n| {
                got.push(n);
                if n == 6 { Next::Stop } else { Next::Continue }
            },
        );
        REFUSE_THREADS.with(|r| r.set(false));
        assert_eq!(got, (0..=6).collect::<Vec<_>>());
        assert_eq!(rounds, 10, "one part a round");
    }

    fn once(n: u32) -> Done<u32> {
        Done {
            outcome: n,
            attempts: 1,
        }
    }

    #[test]
    fn every_part_is_fetched_once_and_delivered() {
        let fetched = AtomicUsize::new(0);
        let mut got = Vec::new();
        let rounds = fan_out(
            (0..10).collect(),
            4,
            &Stop::here(),
            |n, _| {
                fetched.fetch_add(1, Relaxed);
                once(n)
            },
            |n| {
                got.push(n);
                Next::Continue
            },
        );
        got.sort_unstable();
        assert_eq!(got, (0..10).collect::<Vec<_>>());
        assert_eq!(fetched.load(Relaxed), 10);
        assert_eq!(rounds, 3, "10 parts on 4 workers: 3 rounds");
    }

    #[test]
    fn rounds_add_the_retries_of_the_slowest_part() {
        let fetch = |n: u32, _: &Stop| Done {
            outcome: n,
            attempts: if n == 2 { 3 } else { 1 },
        };
        assert_eq!(
            fan_out(vec![1, 2, 3], 4, &Stop::here(), fetch, |_| Next::Continue),
            3
        );
        assert_eq!(
            fan_out(vec![2], 4, &Stop::here(), fetch, |_| Next::Continue),
            3
        );
        assert_eq!(
            fan_out(Vec::<u32>::new(), 4, &Stop::here(), fetch, |_| {
                Next::Continue
            }),
            0
        );
    }

    #[test]
    fn stopping_starts_no_further_parts() {
        let fetched = AtomicUsize::new(0);
        let stopped = (Mutex::new(false), crate::sync::Condvar::new());
        fan_out(
            (0..100).collect(),
            2,
            &Stop::here(),
            |n, _| {
                fetched.fetch_add(1, Relaxed);
                // Every part but the first waits for the caller's verdict on
                // the first, so the queue cannot drain before it.
                let mut seen = stopped.0.lock();
                while n > 0 && !*seen {
                    let watchdog = std::time::Instant::now() + std::time::Duration::from_secs(60);
                    seen = stopped.1.wait_until(seen, watchdog).0;
                }
                once(n)
            },
            |_| {
                *stopped.0.lock() = true;
                stopped.1.notify_all();
                Next::Stop
            },
        );
        // The first part, and at most one more per worker taken before the
        // caller had the first outcome (a worker that had not started by the
        // verdict takes none): never more.
        let fetched = fetched.load(Relaxed);
        assert!((1..=3).contains(&fetched), "{fetched}");
    }

    #[test]
    #[should_panic(expected = "part 3 is broken")]
    fn a_panic_in_a_worker_reaches_the_caller() {
        fan_out(
            (0..6).collect(),
            3,
            &Stop::here(),
            |n, _| {
                assert!(n != 3, "part 3 is broken");
                once(n)
            },
            |_| Next::Continue,
        );
    }
}
