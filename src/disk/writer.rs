//! Block files written off the fetch path: a fetch hands its blocks to a
//! queue and goes on; one thread per disk cache writes them. The queue is
//! bounded in bytes, and a block that does not fit is not written (a read
//! is never slowed for the sake of the cache). A block waiting in the queue
//! is read from there, and a fetch lock handed over after its blocks is
//! released once they are written, so that another process waiting for
//! them finds them on disk.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::lock::FetchLock;

/// The most bytes of block files waiting to be written.
pub(crate) const MAX_QUEUED: u64 = 256 << 20;

/// How long the writing thread waits for more work before it ends.
const LINGER: Duration = Duration::from_millis(500);

/// What the writing thread does next.
enum Job {
    /// Writes a block file's bytes at a path.
    Write(PathBuf),
    /// Releases fetch locks (their blocks, queued before, are written).
    Release(Vec<FetchLock>),
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
    thread_of: Option<u32>,
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
        if self.thread_of.is_some_and(|pid| pid != std::process::id()) {
            self.adopt_after_fork();
        }
        self
    }

    fn adopt_after_fork(&mut self) {
        for job in self.jobs.drain(..) {
            if let Job::Release(locks) = job {
                std::mem::forget(locks);
            }
        }
        self.waiting.clear();
        self.bytes = 0;
        self.done = self.queued;
        self.thread_of = None;
    }

    fn has_thread(&self) -> bool {
        self.thread_of == Some(std::process::id())
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
    /// Queues the block file `bytes` for `path`; false (and nothing queued)
    /// if the queue has no room for it.
    pub(crate) fn write(
        self: &Arc<Self>,
        path: PathBuf,
        bytes: Vec<u8>,
        to: impl FnOnce() -> Box<dyn WriteFile>,
    ) -> bool {
        let mut guard = self.queue.lock();
        let queue = guard.own();
        let len = bytes.len() as u64;
        if queue.bytes + len > MAX_QUEUED {
            return false;
        }
        queue.bytes += len;
        if let Some(old) = queue.waiting.insert(path.clone(), Arc::new(bytes)) {
            queue.bytes -= old.len() as u64;
        }
        queue.push(Job::Write(path));
        self.start(queue, to);
        true
    }

    /// Releases `locks` once the blocks queued so far are written (at once
    /// if none are).
    pub(crate) fn release_after_writes(
        self: &Arc<Self>,
        locks: Vec<FetchLock>,
        to: impl FnOnce() -> Box<dyn WriteFile>,
    ) {
        if locks.is_empty() {
            return;
        }
        let mut guard = self.queue.lock();
        let queue = guard.own();
        if queue.done == queue.queued {
            drop(guard);
            drop(locks);
            return;
        }
        queue.push(Job::Release(locks));
        self.start(queue, to);
    }

    /// The block file waiting to be written at `path`, if one is.
    pub(crate) fn waiting(&self, path: &Path) -> Option<Arc<Vec<u8>>> {
        self.queue.lock().waiting.get(path).cloned()
    }

    /// Waits until everything queued so far is written, or `deadline`;
    /// returns whether it is.
    pub(crate) fn flush(&self, deadline: Instant) -> bool {
        self.flush_to(self.mark(), deadline)
    }

    /// Where the queue stands: what [`flush_to`](Self::flush_to) waits for.
    fn mark(&self) -> Mark {
        let mut guard = self.queue.lock();
        let queue = guard.own();
        Mark {
            queued: queue.queued,
            dropped: queue.dropped,
        }
    }

    /// Waits until the jobs queued before `mark` are done, or `deadline`;
    /// returns whether they were written (none dropped).
    fn flush_to(&self, mark: Mark, deadline: Instant) -> bool {
        let mut queue = self.queue.lock();
        while queue.done < mark.queued {
            if self.idle.wait_until(&mut queue, deadline).timed_out() {
                break;
            }
        }
        queue.done >= mark.queued && queue.dropped == mark.dropped
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
            queue.thread_of = Some(std::process::id());
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
                if self.work.wait_for(&mut queue, LINGER).timed_out() && queue.jobs.is_empty() {
                    queue.thread_of = None;
                    return;
                }
                continue;
            };
            match job {
                Job::Write(path) => {
                    let bytes = queue.waiting.get(&path).cloned();
                    drop(queue);
                    if let Some(bytes) = &bytes {
                        target.write_file(&path, bytes);
                    }
                    queue = self.queue.lock();
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
                Job::Release(locks) => {
                    drop(queue);
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
    }

    impl WriteFile for Recorder {
        fn write_file(&self, path: &Path, bytes: &[u8]) {
            let _open = self.gate.lock();
            if path.starts_with("slow") {
                std::thread::sleep(Duration::from_millis(800));
            }
            self.written.lock().push((path.to_path_buf(), bytes.len()));
        }
    }

    #[test]
    fn a_forked_child_leaves_the_parents_jobs_and_locks_alone() {
        let dir = std::env::temp_dir().join(format!("remfile-writer-fork-{}", std::process::id()));
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
            queue.push(Job::Release(vec![lock]));
            queue.thread_of = Some(std::process::id().wrapping_add(1));
        }
        let rec = Recorder::default();
        let to = || Box::new(rec.clone()) as Box<dyn WriteFile>;
        assert!(writer.write("child".into(), vec![2; 3], to));
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
        assert!(writer.write("slow/a".into(), vec![1; 10], to));
        let mark = writer.mark();
        // Queued after the flush began: a busy cache.
        for i in 0..3 {
            assert!(writer.write(format!("slow/b{i}").into(), vec![2; 10], to));
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
    fn blocks_are_written_in_order_and_read_from_the_queue_meanwhile() {
        let writer = Arc::new(Writer::default());
        let rec = Recorder::default();
        let to = || Box::new(rec.clone()) as Box<dyn WriteFile>;
        let closed = rec.gate.lock();
        assert!(writer.write("a".into(), vec![1; 10], to));
        assert!(writer.write("b".into(), vec![2; 20], to));
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
    fn a_full_queue_skips_the_write() {
        let writer = Arc::new(Writer::default());
        let rec = Recorder::default();
        let to = || Box::new(rec.clone()) as Box<dyn WriteFile>;
        let closed = rec.gate.lock();
        let half = (MAX_QUEUED / 2) as usize;
        assert!(writer.write("a".into(), vec![0; half], to));
        assert!(writer.write("b".into(), vec![0; half], to));
        assert!(!writer.write("c".into(), vec![0; 1], to), "no room");
        assert_eq!(writer.waiting(Path::new("c")), None);
        drop(closed);
        assert!(writer.flush(Instant::now() + Duration::from_secs(5)));
        assert_eq!(rec.written.lock().len(), 2);
    }
}
