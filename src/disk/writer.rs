//! Block files written off the fetch path: a fetch hands its blocks to a
//! queue and goes on; one thread per disk cache writes them, at once, in
//! the order queued. A block waiting in the queue is read from there, and a
//! fetch lock handed over after its blocks is released once they are
//! written (after a last step, if one goes with it: noting the file's
//! version), so that another process waiting for them finds them on disk.
//!
//! The queue is bounded in bytes ([`MAX_QUEUED`]) and in time: the writes
//! are timed, and a block is queued only if everything queued, it
//! included, can be written within [`MAX_WAIT`] at the pace measured. A
//! block that does not fit is written at once by the thread that fetched
//! it: a disk slower than the network slows fetches to its pace rather than
//! lose blocks (a block not written would be fetched again, by this process
//! or by another waiting for it). So a block is on disk about [`MAX_WAIT`]
//! after its fetch at the latest, and a process killed (or ended by
//! `_exit`) loses only the blocks of its last moments. A process that ends
//! by `exit` writes its queue first (see `at_exit`).

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sync::{Condvar, MadeIn, Mutex, MutexGuard};

use super::lock::FetchLock;

/// The most bytes of block files waiting to be written.
pub(crate) const MAX_QUEUED: u64 = 256 << 20;

/// The longest a block waits in the queue, as the disk's measured pace
/// foretells it: a block that would wait longer is written by its fetcher.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(1);

/// How much writing time the measured pace covers (older writes count for
/// less, so that the pace follows the disk without jumping at one slow
/// write).
const PACE_WINDOW: Duration = Duration::from_secs(2);

/// The queue's lock is held for bookkeeping only, never during a write: a
/// flush that cannot have it within this finds it held by a thread that
/// does not exist (in a child forked while a thread of its parent held it).
const LOCK_WAIT: Duration = Duration::from_millis(500);

/// How long the writing thread waits for more work before it ends.
const LINGER: Duration = Duration::from_millis(500);

/// How fast the disk took the block files written lately.
#[derive(Debug, Default, Clone, Copy)]
struct Pace {
    bytes: f64,
    secs: f64,
}

impl Pace {
    fn record(&mut self, bytes: u64, took: Duration) {
        self.bytes += bytes as f64;
        self.secs += took.as_secs_f64();
        if self.secs > PACE_WINDOW.as_secs_f64() {
            self.bytes /= 2.0;
            self.secs /= 2.0;
        }
    }

    /// How long writing `bytes` takes at this pace; `None` before any
    /// write was measured.
    fn time_for(&self, bytes: u64) -> Option<Duration> {
        (self.bytes > 0.0)
            .then(|| Duration::try_from_secs_f64(self.secs * bytes as f64 / self.bytes).ok())
            .flatten()
    }
}

/// Whether a block file of `len` bytes may join a queue of `queued` bytes
/// that the disk takes at `pace`: it fits in [`MAX_QUEUED`], and it would
/// be written within [`MAX_WAIT`] (a block alone in the queue always is
/// queued: it waits for nothing).
fn has_room(queued: u64, len: u64, pace: &Pace) -> bool {
    let after = queued.saturating_add(len);
    after <= MAX_QUEUED && (queued == 0 || pace.time_for(after).is_none_or(|t| t <= MAX_WAIT))
}

/// A last step before locks are released, on the writing thread.
pub(crate) type Then = Box<dyn FnOnce() + Send>;

/// What the writing thread does next.
enum Job {
    /// Writes a block file's bytes at a path.
    Write(PathBuf),
    /// Takes its step, if any, then releases fetch locks (their blocks,
    /// queued before, are written). A job dropped undone releases its
    /// locks without the step.
    Release(Vec<FetchLock>, Option<Then>),
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// The bytes of the block files waiting, by path (the latest wins).
    waiting: HashMap<PathBuf, Arc<Vec<u8>>>,
    bytes: u64,
    /// Jobs queued, and jobs done, since the start: jobs are done in the
    /// order queued, so a flush waits for `done` to reach `queued` as it
    /// was, not for an empty queue (which a busy cache may never have).
    queued: u64,
    done: u64,
    /// Jobs dropped unwritten (a thread that could not start or panicked):
    /// a flush across them did not write everything.
    dropped: u64,
    /// The process whose thread writes: a child forked from it has none.
    thread_of: Option<MadeIn>,
    /// How fast the thread wrote lately.
    pace: Pace,
}

impl Queue {
    fn push(&mut self, job: Job) {
        self.jobs.push_back(job);
        self.queued += 1;
    }

    /// Drops every job (releasing their locks: their blocks will not be
    /// written), as done.
    fn abandon(&mut self) {
        self.jobs.clear();
        self.waiting.clear();
        self.bytes = 0;
        self.dropped += self.queued - self.done;
        self.done = self.queued;
    }

    /// The queue as this process's: in a child forked while the parent had
    /// work queued, the parent's jobs are the parent's to do (their locks
    /// are the parent's: forgotten here, never released).
    fn own(&mut self) -> &mut Queue {
        if self.thread_of.is_some_and(MadeIn::inherited) {
            self.adopt_after_fork();
        }
        self
    }

    fn adopt_after_fork(&mut self) {
        for job in self.jobs.drain(..) {
            if let Job::Release(locks, _) = job {
                std::mem::forget(locks);
            }
        }
        self.waiting.clear();
        self.bytes = 0;
        self.done = self.queued;
        self.thread_of = None;
    }

    fn has_thread(&self) -> bool {
        self.thread_of.is_some_and(|t| !t.inherited())
    }
}

/// The queue of one disk cache, and its thread.
#[derive(Default)]
pub(crate) struct Writer {
    queue: Mutex<Queue>,
    work: Condvar,
    idle: Condvar,
}

/// What actually writes a block file (the disk cache), for the thread.
pub(crate) trait WriteFile: Send + 'static {
    fn write_file(&self, path: &Path, bytes: &[u8]);
}

impl Writer {
    /// Queues the block file `bytes` for `path`, or writes it here and now
    /// (with `to`) if the queue has no room for it (see [`has_room`]).
    pub(crate) fn write(
        self: &Arc<Self>,
        path: PathBuf,
        bytes: Vec<u8>,
        to: impl FnOnce() -> Box<dyn WriteFile>,
    ) {
        let mut guard = self.queue.lock();
        let queue = guard.own();
        let len = bytes.len() as u64;
        // A file already waiting (the pieces file, kept anew) takes the new
        // bytes in its place: written now, the older ones would follow it.
        // Queued once more, in case the older ones are being written now
        // (a job that finds nothing waiting writes nothing).
        if let Some(old) = queue.waiting.get_mut(&path) {
            queue.bytes = queue.bytes - old.len() as u64 + len;
            *old = Arc::new(bytes);
            queue.push(Job::Write(path));
            self.start(queue, to);
            return;
        }
        if !has_room(queue.bytes, len, &queue.pace) {
            drop(guard);
            let started = Instant::now();
            to().write_file(&path, &bytes);
            self.queue.lock().pace.record(len, started.elapsed());
            return;
        }
        queue.bytes += len;
        if let Some(old) = queue.waiting.insert(path.clone(), Arc::new(bytes)) {
            queue.bytes -= old.len() as u64;
        }
        queue.push(Job::Write(path));
        self.start(queue, to);
    }

    /// Once the blocks queued so far are written (at once if none are),
    /// takes the step `then`, if any, and releases `locks`.
    pub(crate) fn release_after_writes(
        self: &Arc<Self>,
        locks: Vec<FetchLock>,
        then: Option<Then>,
        to: impl FnOnce() -> Box<dyn WriteFile>,
    ) {
        if locks.is_empty() && then.is_none() {
            return;
        }
        let mut guard = self.queue.lock();
        let queue = guard.own();
        if queue.done == queue.queued {
            drop(guard);
            if let Some(then) = then {
                then();
            }
            drop(locks);
            return;
        }
        queue.push(Job::Release(locks, then));
        self.start(queue, to);
    }

    /// The block file waiting to be written at `path`, if one is.
    pub(crate) fn waiting(&self, path: &Path) -> Option<Arc<Vec<u8>>> {
        self.queue.lock().waiting.get(path).cloned()
    }

    /// Waits until everything queued so far is written, or `deadline`;
    /// returns whether it is. It waits for nothing past `deadline`, not
    /// even for the queue's lock (which a thread that does not exist in a
    /// forked child may hold).
    pub(crate) fn flush(&self, deadline: Instant) -> bool {
        self.mark(deadline)
            .is_some_and(|mark| self.flush_to(mark, deadline))
    }

    /// Where the queue stands: what [`flush_to`](Self::flush_to) waits for
    /// (`None` if its lock could not be had by `deadline`).
    fn mark(&self, deadline: Instant) -> Option<Mark> {
        let mut guard = self.lock_by(deadline)?;
        let queue = guard.own();
        Some(Mark {
            queued: queue.queued,
            dropped: queue.dropped,
        })
    }

    /// Waits until the jobs queued before `mark` are done, or `deadline`;
    /// returns whether they were written (none dropped).
    fn flush_to(&self, mark: Mark, deadline: Instant) -> bool {
        let Some(mut queue) = self.lock_by(deadline) else {
            return false;
        };
        while queue.done < mark.queued {
            let (waited, timed_out) = self.idle.wait_until(queue, deadline);
            queue = waited;
            if timed_out {
                break;
            }
        }
        queue.done >= mark.queued && queue.dropped == mark.dropped
    }

    /// The queue's lock, if it can be had by `deadline` (see [`LOCK_WAIT`]).
    fn lock_by(&self, deadline: Instant) -> Option<MutexGuard<'_, Queue>> {
        self.queue
            .try_lock_until(deadline.min(Instant::now() + LOCK_WAIT))
    }

    fn start(self: &Arc<Self>, queue: &mut Queue, to: impl FnOnce() -> Box<dyn WriteFile>) {
        if queue.has_thread() {
            self.work.notify_one();
            return;
        }
        let writer = Arc::clone(self);
        let target = to();
        let spawned = std::thread::Builder::new()
            .name("remfile-disk-writer".into())
            .spawn(move || writer.run(&*target));
        if spawned.is_ok() {
            queue.thread_of = Some(MadeIn::here());
        } else {
            // No thread: the queue is dropped, its locks released; the
            // blocks are fetched again when next needed.
            tracing::debug!("no thread to write the disk cache");
            queue.abandon();
            self.idle.notify_all();
        }
    }

    fn run(&self, target: &dyn WriteFile) {
        // A panic in a write ends the thread: the queue is abandoned (its
        // locks released), and the next job starts a new one.
        let _guard = Abandon(self);
        let mut queue = self.queue.lock();
        loop {
            let Some(job) = queue.jobs.pop_front() else {
                self.idle.notify_all();
                let (waited, timed_out) = self.work.wait_until(queue, Instant::now() + LINGER);
                queue = waited;
                if timed_out && queue.jobs.is_empty() {
                    queue.thread_of = None;
                    return;
                }
                continue;
            };
            match job {
                Job::Write(path) => {
                    let bytes = queue.waiting.get(&path).cloned();
                    drop(queue);
                    let started = Instant::now();
                    if let Some(bytes) = &bytes {
                        target.write_file(&path, bytes);
                    }
                    let took = started.elapsed();
                    queue = self.queue.lock();
                    if let Some(bytes) = &bytes {
                        queue.pace.record(bytes.len() as u64, took);
                    }
                    // Gone from the waiting only now: until it is on disk,
                    // a read finds it here.
                    if let Some(bytes) = bytes {
                        if queue
                            .waiting
                            .get(&path)
                            .is_some_and(|b| Arc::ptr_eq(b, &bytes))
                        {
                            queue.waiting.remove(&path);
                            queue.bytes -= bytes.len() as u64;
                        }
                    }
                }
                Job::Release(locks, then) => {
                    drop(queue);
                    if let Some(then) = then {
                        then();
                    }
                    drop(locks);
                    queue = self.queue.lock();
                }
            }
            queue.done += 1;
            self.idle.notify_all();
        }
    }
}

/// A point in the queue (see [`Writer::mark`]).
#[derive(Debug, Clone, Copy)]
struct Mark {
    queued: u64,
    dropped: u64,
}

/// Abandons the queue if its thread ends by a panic.
struct Abandon<'a>(&'a Writer);

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let mut queue = self.0.queue.lock();
            queue.abandon();
            queue.thread_of = None;
            drop(queue);
            self.0.idle.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes into a shared list, slowly when told to.
    #[derive(Clone, Default)]
    struct Recorder {
        written: Arc<Mutex<Vec<(PathBuf, usize)>>>,
        gate: Arc<Mutex<()>>,
        /// The writes waiting at the gate now.
        at_gate: Arc<std::sync::atomic::AtomicUsize>,
        /// The blocks the writing thread wrote (not their fetchers).
        by_thread: Arc<Mutex<usize>>,
    }

    impl WriteFile for Recorder {
        fn write_file(&self, path: &Path, bytes: &[u8]) {
            let _open = {
                let _waiting = crate::sync::Waiting::new(&self.at_gate);
                self.gate.lock()
            };
            if std::thread::current().name() == Some("remfile-disk-writer") {
                *self.by_thread.lock() += 1;
            }
            if path.starts_with("slow") {
                remfile_testkit::time::late(Duration::from_millis(800));
            }
            if path.starts_with("paced") {
                remfile_testkit::time::late(Duration::from_millis(100));
            }
            self.written.lock().push((path.to_path_buf(), bytes.len()));
        }
    }

    #[test]
    fn a_forked_child_leaves_the_parents_jobs_and_locks_alone() {
        let dir_own = tempfile::tempdir().unwrap();
        let dir = dir_own.path().join("dir");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let lock = FetchLock::take(&dir.join("0.lock")).unwrap().unwrap();
        let writer = Arc::new(Writer::default());
        {
            // As a child finds the queue: the parent's jobs, its thread's
            // process not this one.
            let mut queue = writer.queue.lock();
            queue.waiting.insert("parent".into(), Arc::new(vec![1]));
            queue.push(Job::Write("parent".into()));
            queue.push(Job::Release(vec![lock], None));
            queue.thread_of = Some(MadeIn::elsewhere());
        }
        let rec = Recorder::default();
        let to = || Box::new(rec.clone()) as Box<dyn WriteFile>;
        writer.write("child".into(), vec![2; 3], to);
        assert!(writer.flush(Instant::now() + Duration::from_secs(10)));
        assert_eq!(*rec.written.lock(), [(PathBuf::from("child"), 3)]);
        assert!(
            dir.join("0.lock").exists(),
            "the parent's lock is the parent's"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_flush_waits_for_what_was_queued_before_it_only() {
        let writer = Arc::new(Writer::default());
        let rec = Recorder::default();
        let to = || Box::new(rec.clone()) as Box<dyn WriteFile>;
        writer.write("slow/a".into(), vec![1; 10], to);
        let mark = writer.mark(Instant::now()).unwrap();
        // Queued after the flush began: a busy cache.
        for i in 0..3 {
            writer.write(format!("slow/b{i}").into(), vec![2; 10], to);
        }
        assert!(writer.flush_to(mark, Instant::now() + Duration::from_secs(10)));
        let written = rec.written.lock().clone();
        assert_eq!(written[0].0, Path::new("slow/a"));
        // Three more writes of 800 ms each were queued meanwhile.
        assert!(written.len() < 4, "waited for later writes: {written:?}");
        assert!(writer.flush(Instant::now() + Duration::from_secs(10)));
        assert_eq!(rec.written.lock().len(), 4);
    }

    #[test]
    fn a_step_before_a_release_comes_after_the_writes_and_before_the_locks_go() {
        let dir_own = tempfile::tempdir().unwrap();
        let dir = dir_own.path().join("dir");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let lock_path = dir.join("0.lock");
        let lock = FetchLock::take(&lock_path).unwrap().unwrap();
        let writer = Arc::new(Writer::default());
        let rec = Recorder::default();
        let to = || Box::new(rec.clone()) as Box<dyn WriteFile>;
        let closed = rec.gate.lock();
        writer.write("block".into(), vec![1; 10], to);
        let (written, held) = (Arc::clone(&rec.written), lock_path.clone());
        let step = move || {
            // As the first open notes a file's version: its blocks are on
            // disk, and the processes waiting for its lock still wait.
            assert_eq!(written.lock().len(), 1, "after the block");
            assert!(held.exists(), "before the lock goes");
            written.lock().push(("step".into(), 0));
        };
        writer.release_after_writes(vec![lock], Some(Box::new(step)), to);
        assert!(lock_path.exists(), "held while the block waits");
        drop(closed);
        assert!(writer.flush(Instant::now() + Duration::from_secs(5)));
        let names: Vec<PathBuf> = rec.written.lock().iter().map(|w| w.0.clone()).collect();
        assert_eq!(names, [PathBuf::from("block"), PathBuf::from("step")]);
        assert!(!lock_path.exists(), "released");
        // With nothing queued, the step is taken at once, then the lock goes.
        let lock = FetchLock::take(&lock_path).unwrap().unwrap();
        let taken = Arc::new(Mutex::new(false));
        let flag = Arc::clone(&taken);
        let step = move || *flag.lock() = true;
        writer.release_after_writes(vec![lock], Some(Box::new(step)), to);
        assert!(*taken.lock() && !lock_path.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn blocks_are_written_in_order_and_read_from_the_queue_meanwhile() {
        let writer = Arc::new(Writer::default());
        let rec = Recorder::default();
        let to = || Box::new(rec.clone()) as Box<dyn WriteFile>;
        let closed = rec.gate.lock();
        writer.write("a".into(), vec![1; 10], to);
        writer.write("b".into(), vec![2; 20], to);
        assert_eq!(
            writer.waiting(Path::new("b")).as_deref(),
            Some(&vec![2; 20])
        );
        assert!(
            !writer.flush(Instant::now() + Duration::from_millis(50)),
            "held up"
        );
        drop(closed);
        assert!(writer.flush(Instant::now() + Duration::from_secs(5)));
        assert_eq!(
            *rec.written.lock(),
            [(PathBuf::from("a"), 10), (PathBuf::from("b"), 20)]
        );
        assert_eq!(writer.waiting(Path::new("b")), None, "on disk now");
    }

    #[test]
    fn no_more_is_queued_than_the_disk_writes_within_the_bound() {
        let writer = Arc::new(Writer::default());
        let rec = Recorder::default();
        let to = || Box::new(rec.clone()) as Box<dyn WriteFile>;
        // A disk that takes 100 ms a block, measured on a first block.
        writer.write("paced/first".into(), vec![0; 1000], to);
        assert!(writer.flush(Instant::now() + Duration::from_secs(10)));
        let mut most = 0;
        for i in 0..25 {
            writer.write(format!("paced/{i}").into(), vec![0; 1000], to);
            most = most.max(writer.queue.lock().bytes);
        }
        assert!(writer.flush(Instant::now() + Duration::from_secs(20)));
        assert_eq!(rec.written.lock().len(), 26, "every block written");
        // A second's worth queued at most, ten blocks (or fewer, on a
        // slower machine); the others written by their fetcher.
        assert!(most <= 10_000, "{most} bytes queued");
        assert!(*rec.by_thread.lock() < 26, "some by their fetcher");
    }

    #[test]
    fn a_flush_gives_up_at_its_deadline_on_a_queue_locked_for_good() {
        // As in a child forked while a thread of its parent held the lock.
        let writer = Arc::new(Writer::default());
        let _held = writer.queue.lock();
        assert!(!writer.flush(Instant::now() + Duration::from_millis(50)));
        // However far its deadline: the lock is never held that long.
        let started = Instant::now();
        assert!(!writer.flush(Instant::now() + Duration::from_secs(3600)));
        assert!(started.elapsed() < Duration::from_secs(60));
    }

    #[test]
    fn room_in_the_queue() {
        let unmeasured = Pace::default();
        assert!(has_room(0, MAX_QUEUED, &unmeasured));
        assert!(!has_room(0, MAX_QUEUED + 1, &unmeasured));
        assert!(has_room(MAX_QUEUED - 10, 10, &unmeasured));
        assert!(!has_room(MAX_QUEUED - 10, 11, &unmeasured));
        // 1 MB a second: a second's worth and no more, but a lone block.
        let mut pace = Pace::default();
        pace.record(1_000_000, Duration::from_secs(1));
        assert_eq!(pace.time_for(500_000), Some(Duration::from_millis(500)));
        assert!(has_room(900_000, 100_000, &pace));
        assert!(!has_room(900_000, 100_001, &pace));
        assert!(has_room(0, 5_000_000, &pace));
        // Older writes count for less once the window is full.
        for _ in 0..10 {
            pace.record(10_000_000, Duration::from_secs(1));
        }
        assert!(pace.time_for(10_000_000).unwrap() < Duration::from_millis(1100));
    }

    #[test]
    fn a_block_the_full_queue_has_no_room_for_is_written_by_its_fetcher() {
        let writer = Arc::new(Writer::default());
        let rec = Recorder::default();
        let to = || Box::new(rec.clone()) as Box<dyn WriteFile>;
        let closed = rec.gate.lock();
        let half = (MAX_QUEUED / 2) as usize;
        writer.write("a".into(), vec![0; half], to);
        writer.write("b".into(), vec![0; half], to);
        let fetcher = {
            let (writer, rec) = (Arc::clone(&writer), rec.clone());
            std::thread::spawn(move || {
                writer.write("c".into(), vec![0; 1], || {
                    Box::new(rec) as Box<dyn WriteFile>
                })
            })
        };
        // It waits to write c itself (the gate is closed to everyone), as
        // the writing thread waits to write a.
        let at_gate = || rec.at_gate.load(std::sync::atomic::Ordering::Relaxed);
        remfile_testkit::time::eventually("both wait at the gate", Duration::from_secs(30), || {
            at_gate() == 2
        });
        assert_eq!(writer.waiting(Path::new("c")), None, "not queued");
        drop(closed);
        fetcher.join().unwrap();
        assert!(writer.flush(Instant::now() + Duration::from_secs(5)));
        assert_eq!(rec.written.lock().len(), 3);
        assert_eq!(*rec.by_thread.lock(), 2, "c by its fetcher");
    }
}
