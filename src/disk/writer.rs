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
        self.done = self.queued;
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
        let mut queue = self.queue.lock();
        let len = bytes.len() as u64;
        if queue.bytes + len > MAX_QUEUED {
            return false;
        }
        queue.bytes += len;
        if let Some(old) = queue.waiting.insert(path.clone(), Arc::new(bytes)) {
            queue.bytes -= old.len() as u64;
        }
        queue.push(Job::Write(path));
        self.start(&mut queue, to);
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
        let mut queue = self.queue.lock();
        if queue.done == queue.queued {
            drop(queue);
            drop(locks);
            return;
        }
        queue.push(Job::Release(locks));
        self.start(&mut queue, to);
    }

    /// The block file waiting to be written at `path`, if one is.
    pub(crate) fn waiting(&self, path: &Path) -> Option<Arc<Vec<u8>>> {
        self.queue.lock().waiting.get(path).cloned()
    }

    /// Waits until everything queued so far is written, or `deadline`;
    /// returns whether it is.
    pub(crate) fn flush(&self, deadline: Instant) -> bool {
        let mut queue = self.queue.lock();
        let target = queue.queued;
        while queue.done < target {
            if self.idle.wait_until(&mut queue, deadline).timed_out() {
                return queue.done >= target;
            }
        }
        true
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
    fn a_flush_waits_for_what_was_queued_before_it_only() {
        let writer = Arc::new(Writer::default());
        let rec = Recorder::default();
        let to = || Box::new(rec.clone()) as Box<dyn WriteFile>;
        assert!(writer.write("slow/a".into(), vec![1; 10], to));
        let more = {
            let (writer, rec) = (Arc::clone(&writer), rec.clone());
            std::thread::spawn(move || {
                // Queued after the flush began: a busy cache.
                std::thread::sleep(Duration::from_millis(100));
                for i in 0..3 {
                    let to = || Box::new(rec.clone()) as Box<dyn WriteFile>;
                    assert!(writer.write(format!("slow/b{i}").into(), vec![2; 10], to));
                }
            })
        };
        assert!(writer.flush(Instant::now() + Duration::from_secs(10)));
        let written = rec.written.lock().clone();
        assert_eq!(written[0].0, Path::new("slow/a"));
        // Three more writes of 800 ms each were queued meanwhile.
        assert!(written.len() < 4, "waited for later writes: {written:?}");
        more.join().unwrap();
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
