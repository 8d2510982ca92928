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
//! Every job runs in the [`Lane::Background`], and so do the threads its
//! fetches start: their requests wait behind the reads users wait for
//! ([`super::budget`]).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Instant;

use crate::sync::{Condvar, MadeIn, ProcessLocal, start_afresh};

use super::{
    BACKGROUND_CONNECTIONS_PER_ORIGIN, BACKGROUND_WORKERS, FETCH_THREADS, IDLE_WORKER_END,
};

/// Whom a request works for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lane {
    /// A read, an open or a close someone waits for.
    Read,
    /// Work no one waits for yet: read-ahead, guesses, the crawl.
    Background,
}

/// What the work a thread does now is for: its lane, and, for background
/// work of one file, the flag that says the file was closed.
#[derive(Clone, Debug)]
pub(crate) struct Context {
    lane: Lane,
    closed: Option<Arc<AtomicBool>>,
    /// For a background fetch: set once a reader waits for one of its
    /// blocks, from when its requests wait for connections as a read's.
    wanted: Option<Arc<AtomicBool>>,
}

thread_local! {
    static CONTEXT: RefCell<Context> = const {
        RefCell::new(Context {
            lane: Lane::Read,
            closed: None,
            wanted: None,
        })
    };
}

/// The flag that turns this thread's background work into a read's (see
/// [`wanted_by_readers`]), if it has one.
pub(crate) fn wanted() -> Option<Arc<AtomicBool>> {
    CONTEXT
        .try_with(|c| c.borrow().wanted.clone())
        .ok()
        .flatten()
}

/// Runs `f`, a background fetch, whose requests wait for connections as a
/// read's once `wanted` is set: a reader waits for its blocks then, and a
/// fetch held back for reads would hold that reader back too.
pub(crate) fn wanted_by_readers<T>(wanted: Option<Arc<AtomicBool>>, f: impl FnOnce() -> T) -> T {
    let mut context = context();
    context.wanted = wanted;
    run_in_context(context, f)
}

/// The lane of the work this thread does now.
pub(crate) fn lane() -> Lane {
    CONTEXT.try_with(|c| c.borrow().lane).unwrap_or(Lane::Read)
}

/// The context of this thread's work, for a thread that works for it.
pub(crate) fn context() -> Context {
    CONTEXT.try_with(|c| c.borrow().clone()).unwrap_or(Context {
        lane: Lane::Read,
        closed: None,
        wanted: None,
    })
}

/// Runs `f` in `context` (this thread's own restored after, even if `f`
/// panics).
pub(crate) fn run_in_context<T>(context: Context, f: impl FnOnce() -> T) -> T {
    struct Restore(Option<Context>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(previous) = self.0.take() {
                let _ = CONTEXT.try_with(|c| *c.borrow_mut() = previous);
            }
        }
    }
    // After this thread's locals are gone (C's `exit`), work in no context.
    let Ok(previous) = CONTEXT.try_with(|c| std::mem::replace(&mut *c.borrow_mut(), context))
    else {
        return f();
    };
    let _restore = Restore(Some(previous));
    f()
}

/// What the work on a thread is for, as a thread carries it: its
/// [`Context`] (its [`Lane`], the closing of the file whose background
/// work it is, the flag that makes a background fetch a read's) and what
/// stops it (a [`Watch`](crate::wait::Watch) of a cancel and a deadline).
/// Every request and every wait reads these off its thread; a thread that
/// works for another takes its errand ([`Errand::for_helper`]) and runs in
/// it ([`Errand::run`]), so that the helper stops with the work it helps
/// and waits in its lane.
#[derive(Clone)]
pub(crate) struct Errand {
    context: Context,
    watch: Option<crate::wait::Watch>,
}

impl Errand {
    /// This thread's errand, for a thread that works for the same work
    /// (which never asks an interpreter for a stop: this thread does).
    pub(crate) fn for_helper() -> Errand {
        Errand {
            context: context(),
            watch: crate::wait::Watch::for_helper(),
        }
    }

    /// Runs `f` in this errand (the thread's own restored after, even if
    /// `f` panics).
    pub(crate) fn run<T>(self, f: impl FnOnce() -> T) -> T {
        let watch = self.watch;
        run_in_context(self.context, || crate::wait::Watch::run_watching(watch, f))
    }
}

/// Runs `f` in `lane`, for no file in particular.
pub(crate) fn in_lane<T>(lane: Lane, f: impl FnOnce() -> T) -> T {
    run_in_context(
        Context {
            lane,
            closed: None,
            wanted: None,
        },
        f,
    )
}

/// A file's part in background work: once the file is closed, its
/// background work sends no further request; once cancelled, each of its
/// waits (a socket, a permit, a backoff) ends within a poll too (see
/// [`crate::wait`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct Closing {
    closed: Arc<AtomicBool>,
    cancel: crate::wait::Cancel,
}

impl Closing {
    /// No further request: the requests in flight end with their bodies
    /// (what they bring may be wanted on disk, for the next run).
    #[cfg_attr(not(feature = "extension"), allow(dead_code))]
    pub(crate) fn close(&self) {
        self.closed.store(true, Relaxed);
    }

    /// Closes, and ends every wait of the background work at once, the
    /// requests in flight too.
    #[cfg_attr(not(feature = "extension"), allow(dead_code))]
    pub(crate) fn cancel(&self) {
        self.close();
        self.cancel.cancel();
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Relaxed)
    }

    /// Runs `f` as background work of the file.
    pub(crate) fn run<T>(&self, f: impl FnOnce() -> T) -> T {
        let context = Context {
            lane: Lane::Background,
            closed: Some(Arc::clone(&self.closed)),
            wanted: None,
        };
        let watch = crate::wait::Watch::of(self.cancel.clone());
        Errand {
            context,
            watch: Some(watch),
        }
        .run(f)
    }
}

/// An error if this thread does background work of a file that was closed:
/// checked before each request.
pub(crate) fn check_file_open() -> crate::error::Result<()> {
    let closed = CONTEXT
        .try_with(|c| c.borrow().closed.as_ref().is_some_and(|f| f.load(Relaxed)))
        .unwrap_or(false);
    if closed {
        return Err(crate::error::Error::new(
            crate::error::ErrorKind::Interrupted,
            "the file was closed",
        ));
    }
    Ok(())
}

/// Which background jobs go first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Priority {
    /// Read-ahead of a stream a reader is in: it will be read soon.
    ReadAhead,
    /// A crawl wave: what the metadata may need.
    #[cfg_attr(not(feature = "extension"), allow(dead_code))]
    Crawl,
}

type Job = Box<dyn FnOnce() + Send + 'static>;

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
                in_lane(Lane::Background, job)
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

/// A place for one more fetch thread in the current lane, if the bound
/// allows it ([`FETCH_THREADS`] in all, [`BACKGROUND_CONNECTIONS_PER_ORIGIN`]
/// for background work).
pub(crate) fn fetch_thread() -> Option<FetchThread> {
    let lane = lane();
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
                assert_eq!(lane(), Lane::Background);
                let n = running.fetch_add(1, SeqCst) + 1;
                peak.fetch_max(n, SeqCst);
                std::thread::sleep(Duration::from_millis(2));
                running.fetch_sub(1, SeqCst);
                done.fetch_add(1, SeqCst);
            })
            .map_err(|_| ())
            .unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while done.load(SeqCst) < 40 {
            assert!(Instant::now() < deadline, "the jobs did not all run");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            peak.load(SeqCst) <= BACKGROUND_WORKERS,
            "{}",
            peak.load(SeqCst)
        );
        assert_eq!(lane(), Lane::Read, "the caller's lane is its own");
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
        let held: Vec<_> = in_lane(Lane::Background, || {
            std::iter::from_fn(fetch_thread)
                .take(FETCH_THREADS + 1)
                .collect()
        });
        assert!(held.len() <= BACKGROUND_CONNECTIONS_PER_ORIGIN);
        // Reads still find room beside them.
        let read = fetch_thread();
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
        assert!(closing.run(check_file_open).is_ok());
        closing.close();
        let e = closing.run(check_file_open).unwrap_err();
        assert_eq!(e.kind(), crate::error::ErrorKind::Interrupted);
        assert_eq!(closing.run(lane), Lane::Background);
        // This thread's own work is for no file, in the read lane.
        assert!(check_file_open().is_ok());
        assert_eq!(lane(), Lane::Read);
        // A thread started for the work carries its context.
        let context = closing.run(context);
        let carried = std::thread::spawn(move || run_in_context(context, check_file_open));
        assert!(carried.join().unwrap().is_err());
    }
}
