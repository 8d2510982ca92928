//! The process's threads for background work, and the bound on the threads
//! concurrent fetches start.
//!
//! Background work (a guess's read-ahead, a file's crawl wave) is a job on a
//! queue that [`BACKGROUND_WORKERS`] threads take from, read-ahead first:
//! no file owns a thread, and a thousand open files cost no more threads
//! than one. A fetch that sends several requests at once starts a thread
//! per extra request (each a blocking request on its own connection), at
//! most [`FETCH_THREADS`] in the process; past that a fetch sends on
//! fewer (on its own thread alone, at worst) rather than fail.
//!
//! Every job waits by a background [`Stop`] (its lane
//! [`Lane::Background`](crate::wait::Lane::Background)), and so do the
//! threads its fetches start: their requests wait behind the reads users
//! wait for ([`super::budget`]).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Instant;

use crate::sync::{Condvar, MadeIn, ProcessLocal, start_afresh};
use crate::wait::{Lane, Stop};

use super::{
    BACKGROUND_CONNECTIONS_PER_ORIGIN, BACKGROUND_WORKERS, FETCH_THREADS, IDLE_WORKER_END,
};

/// A file's part in background work: once the file is closed, its
/// background work sends no further request; once cancelled, each of its
/// waits (a socket, a permit, a backoff) ends within a poll too (see
/// [`crate::wait`]).
#[derive(Clone, Debug, Default)]
///
/// What only a wing does with it (close it, cancel it, run work in it) is
/// the extension seam's (`src/extension.rs`).
pub(crate) struct Closing {
    pub(crate) closed: Arc<AtomicBool>,
    pub(crate) cancel: crate::wait::Cancel,
}

impl Closing {
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Relaxed)
    }

    /// The stop of the file's background work.
    pub(crate) fn stop(&self) -> Stop {
        Stop::background(Arc::clone(&self.closed), self.cancel.clone())
    }
}

/// Which background jobs go first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Priority {
    /// Read-ahead of a stream a reader is in: it will be read soon.
    ReadAhead,
    /// A crawl wave: what the metadata may need (queued through the
    /// extension seam).
    Crawl,
}

/// A job for a background worker.
pub(crate) type Job = Box<dyn FnOnce() + Send + 'static>;

#[derive(Default)]
struct Pool {
    read_ahead: VecDeque<Job>,
    crawl: VecDeque<Job>,
    workers: usize,
    idle: usize,
}

static POOL: ProcessLocal<Pool> = ProcessLocal::new(
    Pool {
        read_ahead: VecDeque::new(),
        crawl: VecDeque::new(),
        workers: 0,
        idle: 0,
    },
    Pool::adopt,
);
static JOB_QUEUED: Condvar = Condvar::new();

impl Pool {
    /// Forgets what the process this one was forked from queued and
    /// counted: its workers are not here. Its jobs are leaked, not dropped:
    /// dropping one would touch its file's locks, which that process's
    /// threads may hold for good here.
    fn adopt(&mut self) {
        std::mem::forget(std::mem::take(self));
    }

    fn next(&mut self) -> Option<Job> {
        self.read_ahead
            .pop_front()
            .or_else(|| self.crawl.pop_front())
    }
}

/// Queues `job` for a background worker (starting one if the idle ones are
/// fewer than the jobs queued and fewer than [`BACKGROUND_WORKERS`] run). Gives the job back if it cannot
/// be queued: no worker runs and none can be started.
pub(crate) fn submit(priority: Priority, job: impl FnOnce() + Send + 'static) -> Result<(), Job> {
    let job: Job = Box::new(job);
    let Some(mut pool) = POOL.lock() else {
        return Err(job);
    };
    match priority {
        Priority::ReadAhead => pool.read_ahead.push_back(job),
        Priority::Crawl => pool.crawl.push_back(job),
    }
    let queued = pool.read_ahead.len() + pool.crawl.len();
    if pool.idle < queued && pool.workers < BACKGROUND_WORKERS {
        let started = std::thread::Builder::new()
            .name("remfile-background".into())
            .spawn(work);
        match started {
            Ok(_) => pool.workers += 1,
            Err(e) if pool.workers == 0 => {
                tracing::debug!(error = %e, "no thread for background work");
                let job = match priority {
                    Priority::ReadAhead => pool.read_ahead.pop_back(),
                    Priority::Crawl => pool.crawl.pop_back(),
                };
                return Err(job.expect("queued just now"));
            }
            // The workers that run take it.
            Err(_) => {}
        }
    }
    drop(pool);
    JOB_QUEUED.notify_one();
    Ok(())
}

/// A worker: takes jobs until none came for [`IDLE_WORKER_END`]. Each job
/// is background work (of a file, if the job says so itself).
fn work() {
    let mut pool = POOL.lock_here();
    loop {
        if let Some(job) = pool.next() {
            drop(pool);
            // A job that panics ends its own work, not the worker.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                Stop::in_lane(Lane::Background).in_scope(job)
            }));
            pool = POOL.lock_here();
            continue;
        }
        pool.idle += 1;
        let (waited, timed_out) = JOB_QUEUED.wait_until(pool, Instant::now() + IDLE_WORKER_END);
        pool = waited;
        pool.idle -= 1;
        if timed_out && pool.read_ahead.is_empty() && pool.crawl.is_empty() {
            pool.workers -= 1;
            return;
        }
    }
}

/// Threads started by fetches now: in all, and for background work.
static FETCH_THREADS_RUNNING: ProcessLocal<(usize, usize)> =
    ProcessLocal::new((0, 0), start_afresh);

/// A fetch thread's place in the process's bound; given back on drop.
#[derive(Debug)]
pub(crate) struct FetchThread {
    made_in: MadeIn,
    lane: Lane,
}

/// A place for one more fetch thread of work in `lane`, if the bound
/// allows it ([`FETCH_THREADS`] in all, [`BACKGROUND_CONNECTIONS_PER_ORIGIN`]
/// for background work).
pub(crate) fn fetch_thread(lane: Lane) -> Option<FetchThread> {
    let mut running = FETCH_THREADS_RUNNING.lock()?;
    let (all, background) = &mut **running;
    let room = *all < FETCH_THREADS
        && (lane == Lane::Read || *background < BACKGROUND_CONNECTIONS_PER_ORIGIN);
    if !room {
        return None;
    }
    *all += 1;
    if lane == Lane::Background {
        *background += 1;
    }
    Some(FetchThread {
        made_in: MadeIn::here(),
        lane,
    })
}

impl Drop for FetchThread {
    fn drop(&mut self) {
        if self.made_in.inherited() {
            return;
        }
        let mut running = FETCH_THREADS_RUNNING.lock_here();
        running.0 -= 1;
        if self.lane == Lane::Background {
            running.1 -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::time::Duration;

    #[test]
    fn jobs_run_on_at_most_the_workers_in_the_background_lane() {
        let (running, peak, done) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
        );
        for i in 0..40 {
            let (running, peak, done) = (running.clone(), peak.clone(), done.clone());
            let priority = if i % 2 == 0 {
                Priority::Crawl
            } else {
                Priority::ReadAhead
            };
            submit(priority, move || {
                assert_eq!(Stop::here().lane().0, Lane::Background);
                let n = running.fetch_add(1, SeqCst) + 1;
                peak.fetch_max(n, SeqCst);
                // A job that takes a while, so that jobs overlap.
                remfile_testkit::time::late(Duration::from_millis(2));
                running.fetch_sub(1, SeqCst);
                done.fetch_add(1, SeqCst);
            })
            .map_err(|_| ())
            .unwrap();
        }
        remfile_testkit::time::eventually("the jobs all ran", Duration::from_secs(30), || {
            done.load(SeqCst) == 40
        });
        assert!(
            peak.load(SeqCst) <= BACKGROUND_WORKERS,
            "{}",
            peak.load(SeqCst)
        );
        assert_eq!(
            Stop::here().lane().0,
            Lane::Read,
            "the caller's lane is its own"
        );
    }

    #[test]
    fn a_job_that_panics_leaves_the_workers_working() {
        submit(Priority::Crawl, || panic!("a job's own failure"))
            .map_err(|_| ())
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        submit(Priority::Crawl, move || tx.send(()).unwrap())
            .map_err(|_| ())
            .unwrap();
        rx.recv_timeout(Duration::from_secs(30)).unwrap();
    }

    #[test]
    fn background_fetch_threads_are_bounded_below_all() {
        let held: Vec<_> = std::iter::from_fn(|| fetch_thread(Lane::Background))
            .take(FETCH_THREADS + 1)
            .collect();
        assert!(held.len() <= BACKGROUND_CONNECTIONS_PER_ORIGIN);
        // Reads still find room beside them.
        let read = fetch_thread(Lane::Read);
        assert!(read.is_some());
        drop(held);
        drop(read);
    }
}

#[cfg(test)]
mod context_tests {
    use super::*;

    #[test]
    fn a_closed_files_background_work_stops_and_others_go_on() {
        let closing = Closing::default();
        assert!(closing.stop().check_file_open().is_ok());
        closing.close();
        let e = closing.stop().check_file_open().unwrap_err();
        assert_eq!(e.kind(), crate::error::ErrorKind::Interrupted);
        assert_eq!(closing.run(|| Stop::here().lane().0), Lane::Background);
        // This thread's own work is for no file, in the read lane.
        assert!(Stop::here().check_file_open().is_ok());
        assert_eq!(Stop::here().lane().0, Lane::Read);
        // A thread helping the work carries its stop.
        let helper = closing.stop().for_helper();
        let carried = std::thread::spawn(move || helper.check_file_open());
        assert!(carried.join().unwrap().is_err());
    }
}
