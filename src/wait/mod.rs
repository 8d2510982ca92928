//! Waits that can be stopped: every wait of a read or an open — on a
//! socket, for a name lookup or a TCP connect, for a connection permit, for
//! another reader's fetch of the same block, for a piece, for another
//! process's block or first open of the file, for S3 keys being loaded,
//! between retries — lasts at most [`POLL`] past a stop, and a stopped read
//! lets go of everything it held (its claims on blocks, its connection, its
//! buffers) as it returns.
//!
//! A read is stopped by a [`Cancel`] (a handle the program holds: a user's
//! "stop" button, a deadline per call), by a host runtime's request (the
//! Python package's Ctrl-C), by closing its file
//! ([`RemoteFile::close`](crate::file::RemoteFile::close)), or by
//! [`stop_everything`] (the process is ending). It then fails with
//! [`ErrorKind::Interrupted`] (or [`ErrorKind::Timeout`] for a
//! [`Cancel`]'s own deadline, [`ErrorKind::Closed`] for a close); unless
//! closed, the file stays usable, and the next read of the same bytes
//! fetches them itself at once.
//!
//! ```no_run
//! use std::time::Duration;
//! use remfile::{ErrorKind, RemoteFile, wait::Cancel};
//!
//! let file = RemoteFile::open("https://example.com/data.nwb")?;
//! // Every read through `patient` stops when `stop` is cancelled.
//! let stop = Cancel::new();
//! let patient = file.with_cancel(stop.clone());
//! let waiter = std::thread::spawn(move || {
//!     let mut buf = vec![0u8; 64 << 20];
//!     patient.read_exact_at(0, &mut buf)
//! });
//! stop.cancel(); // the user changed their mind
//! let outcome = waiter.join().unwrap();
//! assert!(outcome.is_ok() || outcome.unwrap_err().kind() == ErrorKind::Interrupted);
//!
//! // Or a deadline for whatever runs inside, the `hdf5` adapter's calls too.
//! let mut head = [0u8; 512];
//! Cancel::after(Duration::from_secs(2)).run(|| file.read_exact_at(0, &mut head))?;
//! # Ok::<(), remfile::Error>(())
//! ```
//!
//! # Hosts
//!
//! A program that embeds the crate in an interpreter installs a [`Host`]:
//! a read that must wait for the network runs on the calling thread inside
//! [`Host::outside`] (the interpreter lets go of its lock there), and asks
//! [`Host::stop_requested`] every [`POLL`] from inside that wait, on the
//! same thread. Nothing changes for a program that installs none.
//!
//! ```
//! use remfile::wait::{self, Host};
//!
//! struct Quiet;
//! impl Host for Quiet {}
//!
//! static HOST: Quiet = Quiet;
//! // One host per process: the first one set stays.
//! let _ = wait::set_host(&HOST);
//! ```

pub(crate) mod deadline;
mod stop;

pub(crate) use stop::{Lane, Stop, socket_should_stop};

/// The crate's locks and its mark of the process a value was made in, for
/// a host's own state (the Python package's, feature `vfd`): sound in a
/// child `fork` makes, as the crate's own are. Not a stable API.
#[cfg(feature = "vfd")]
#[doc(hidden)]
pub mod sync {
    pub use crate::sync::{MadeIn, Mutex, MutexGuard};
}

use std::cell::Cell;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};
use crate::sync::{MadeIn, ProcessFlag, ProcessLocal, start_afresh};

/// The longest a wait goes on after a stop: waits are made in slices of
/// this, looking for a stop between them.
pub const POLL: Duration = Duration::from_millis(50);

/// A host runtime's part in the network waits of reads, opens and closes.
///
/// Every method has a default that does nothing special, so a host
/// implements only what it needs.
pub trait Host: Send + Sync + 'static {
    /// Runs `wait`, which is a whole read (or open, or close) that may wait
    /// for the network, on this thread. An interpreter lets go of its lock
    /// around it, if this thread holds it.
    fn outside(&self, wait: &mut dyn FnMut()) {
        wait()
    }

    /// Whether the read should stop (the user pressed Ctrl-C, say). Asked
    /// from inside [`outside`](Host::outside)'s `wait`, on its thread, at
    /// most every [`POLL`] while the read waits: the interpreter's lock is
    /// *not* held here, unless `outside` kept it.
    fn stop_requested(&self) -> bool {
        false
    }

    /// Called when a read the host asked to stop ended well all the same
    /// (its bytes came before the stop took effect), on its thread, after
    /// [`outside`](Host::outside): an interpreter delivers the stop later
    /// (Python raises the Ctrl-C at its next chance). Also called at the
    /// end of each call a library makes into the HDF5 driver, for a stop
    /// asked for during it that no failure reported: a host that keeps a
    /// stop until then delivers it there, not in a later call.
    fn stop_not_needed(&self) {}

    /// Called when a read or an open made for a library that takes only a
    /// failure status (the HDF5 driver's callbacks) fails with a remote
    /// error, on the thread the library called on, before the status goes
    /// back: the error itself would be lost there. An interpreter can raise
    /// an exception of its own from it.
    fn failed_under_a_library(&self, error: &Error) {
        let _ = error;
    }

    /// Called after a file's blocks have been let go (the last clone of a
    /// [`RemoteFile`](crate::file::RemoteFile) dropped, or the HDF5 driver closed
    /// a file), e.g. to give memory back to the system.
    fn released(&self) {}
}

static HOST: OnceLock<&'static dyn Host> = OnceLock::new();

/// Installs `host` for the whole process. The first call wins: a later one
/// returns `false` and changes nothing.
pub fn set_host(host: &'static dyn Host) -> bool {
    HOST.set(host).is_ok()
}

/// The host, if one is installed.
pub(crate) fn host() -> Option<&'static dyn Host> {
    HOST.get().copied()
}

/// A stop for reads: cancel it, or let its deadline pass, and every read
/// that watches it ends within [`POLL`] with [`ErrorKind::Interrupted`]
/// (with [`ErrorKind::Timeout`] once its deadline passed), letting go of
/// what it held.
///
/// A read watches the cancels of the [`RemoteFile`](crate::file::RemoteFile)
/// handle it goes through ([`with_cancel`](crate::file::RemoteFile::with_cancel))
/// and of every [`run`](Cancel::run) it is inside. Clones share one state:
/// cancel any, and all are cancelled. A cancel cannot be undone; make a new
/// one for the next reads.
#[derive(Clone, Debug, Default)]
pub struct Cancel(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    cancelled: AtomicBool,
    /// Whether cancelling it means its file was closed (its reads then
    /// fail with [`ErrorKind::Closed`]).
    closes: bool,
    deadline: Option<Instant>,
    /// The cancels this one was made under: any of them stops it too.
    parents: Vec<Cancel>,
}

impl Cancel {
    /// A cancel that stops its reads when [`cancel`](Cancel::cancel) is
    /// called.
    pub fn new() -> Cancel {
        Cancel::default()
    }

    /// The cancel of a file's [`close`](crate::file::RemoteFile::close): its
    /// reads stop with [`ErrorKind::Closed`].
    pub(crate) fn closing() -> Cancel {
        Cancel(Arc::new(Inner {
            closes: true,
            ..Inner::default()
        }))
    }

    /// A cancel that stops its reads at `deadline`, or when cancelled
    /// before.
    pub fn with_deadline(deadline: Instant) -> Cancel {
        Cancel(Arc::new(Inner {
            deadline: Some(deadline),
            ..Inner::default()
        }))
    }

    /// A cancel that stops its reads `timeout` from now, or when cancelled
    /// before.
    pub fn after(timeout: Duration) -> Cancel {
        Cancel::with_deadline(crate::wait::deadline::after(timeout))
    }

    /// Stops every read that watches this cancel (or a clone of it).
    pub fn cancel(&self) {
        self.0.cancelled.store(true, Relaxed);
    }

    /// Whether the reads watching it are to stop: it was cancelled, or its
    /// deadline passed.
    pub fn is_cancelled(&self) -> bool {
        self.why_stopped().is_some()
    }

    /// Runs `f` with every read it makes on this thread (through any file,
    /// the `hdf5` adapter's too) watching this cancel, beside what they
    /// watch already.
    ///
    /// ```no_run
    /// # let file = remfile::RemoteFile::open("https://example.com/data.h5")?;
    /// use remfile::wait::Cancel;
    /// let mut buf = vec![0u8; 1 << 20];
    /// Cancel::after(std::time::Duration::from_secs(5)).run(|| file.read_exact_at(0, &mut buf))?;
    /// # Ok::<(), remfile::Error>(())
    /// ```
    pub fn run<T>(&self, f: impl FnOnce() -> T) -> T {
        Stop::here().watching(self).in_scope(f)
    }

    /// A new cancel, stopped by itself or by any of `parents`.
    pub(crate) fn of_either(parents: impl IntoIterator<Item = Cancel>) -> Cancel {
        Cancel(Arc::new(Inner {
            parents: parents.into_iter().collect(),
            ..Inner::default()
        }))
    }

    /// Why the reads watching it are to stop, if they are.
    fn why_stopped(&self) -> Option<Stopped> {
        if self.0.cancelled.load(Relaxed) {
            return Some(match self.0.closes {
                true => Stopped::Closed,
                false => Stopped::Cancelled,
            });
        }
        if self.0.deadline.is_some_and(|d| Instant::now() >= d) {
            return Some(Stopped::DeadlinePassed);
        }
        self.0.parents.iter().find_map(Cancel::why_stopped)
    }
}

/// Why a read stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stopped {
    Cancelled,
    DeadlinePassed,
    ProcessEnding,
    Closed,
}

impl Stopped {
    fn error(self) -> Error {
        match self {
            Stopped::Cancelled => interrupted(),
            Stopped::DeadlinePassed => {
                Error::new(ErrorKind::Timeout, "the deadline the read was given passed")
            }
            Stopped::ProcessEnding => {
                Error::new(ErrorKind::Interrupted, "interrupted: the process is ending")
            }
            Stopped::Closed => closed(),
        }
    }
}

thread_local! {
    /// Whether [`stop_everything_but_this_thread`] was called on this
    /// thread, and in which process (a child forked from it is not spared).
    static SPARED: Cell<Option<MadeIn>> = const { Cell::new(None) };
}

/// Raised by [`stop_everything`]: a child forked from a process that was
/// ending finds it lowered.
static EVERYTHING_STOPPED: ProcessFlag = ProcessFlag::new();

/// Stops every read, open and background fetch of the process, now and
/// from now on: each wait ends within [`POLL`] with
/// [`ErrorKind::Interrupted`]. For a process that is ending (the Python
/// package calls [`stop_everything_but_this_thread`] from an `atexit` hook,
/// so that threads reading in the background let go of what they hold
/// before the interpreter finalizes). A child forked afterwards reads
/// normally.
pub fn stop_everything() {
    if EVERYTHING_STOPPED.raise() {
        EXIT_BOUND.with(|bound| *bound = Some(Instant::now() + EXIT_WAIT));
    }
}

/// As [`stop_everything`], sparing the reads, opens and closes the calling
/// thread makes from now on (and the threads that help them): for a
/// process whose exit still runs code of its own on this thread (Python's
/// `atexit` handlers, on its main thread), while every other thread's
/// waits stop. Background fetches stop, whichever thread started them.
pub fn stop_everything_but_this_thread() {
    let _ = SPARED.try_with(|spared| spared.set(Some(MadeIn::here())));
    stop_everything();
}

/// Whether [`stop_everything_but_this_thread`] spared this thread.
fn spared_thread() -> bool {
    let spared = SPARED.try_with(Cell::get).ok().flatten();
    spared.is_some_and(|made_in| !made_in.inherited())
}

/// Whether [`stop_everything`] was called in this process (and not in a
/// parent it was forked from): the process is ending.
pub fn everything_stopped() -> bool {
    EVERYTHING_STOPPED.is_raised()
}

/// Whether work on this thread (`spared` if it helps work of a thread
/// that was) is to stop because the process is ending: everything was
/// stopped, and it was not spared.
fn process_ending(spared: bool) -> bool {
    everything_stopped() && !spared_thread() && !spared
}

/// The longest that closing files may wait, all together, once
/// [`stop_everything`] was called: for their blocks to reach a disk cache.
pub const EXIT_WAIT: Duration = Duration::from_secs(5);

static EXIT_BOUND: ProcessLocal<Option<Instant>> = ProcessLocal::new(None, start_afresh);

/// `deadline`, or the process's exit bound if that comes first: every
/// close after [`stop_everything`] shares one bound, however many files.
pub(crate) fn within_exit_bound(deadline: Instant) -> Instant {
    match EXIT_BOUND.with(|bound| *bound).flatten() {
        Some(bound) => deadline.min(bound),
        None => deadline,
    }
}

/// The error of a read of a file that was closed (before it, or while it
/// waited).
pub(crate) fn closed() -> Error {
    Error::new(ErrorKind::Closed, "the file was closed")
}

/// The error of a wait the host (or a [`Cancel`]) stopped.
pub(crate) fn interrupted() -> Error {
    Error::new(ErrorKind::Interrupted, "interrupted while waiting")
}

/// The end of the next slice of a wait that lasts until `deadline`.
pub(crate) fn slice_end(deadline: Instant) -> Instant {
    deadline.min(Instant::now() + POLL)
}

/// Runs `work` — a read, an open: anything that may wait for the network —
/// with the [`Stop`] it waits by, made here from what the code around it
/// declared; as the host wants such waits run: on this thread, inside
/// [`Host::outside`], asking the host between the slices of its waits.
/// Without a host, runs it here as it is.
pub(crate) fn blocking<T>(work: impl FnOnce(&Stop) -> Result<T>) -> Result<T> {
    let stop = Stop::here();
    let Some(host) = host() else {
        return work(&stop);
    };
    let stop = stop.asking_host();
    let mut work = Some(work);
    let mut outcome = None;
    host.outside(&mut || {
        if let Some(work) = work.take() {
            outcome = Some(stop.in_scope(|| work(&stop)));
        }
    });
    let outcome = outcome.unwrap_or_else(|| Err(interrupted()));
    if outcome.is_ok() && stop.cancel().is_cancelled() {
        host.stop_not_needed();
    }
    outcome
}

/// Runs `f` as the host wants a wait that cannot be stopped run (a close
/// that waits for its writes): outside the interpreter's lock.
pub(crate) fn outside<T>(f: impl FnOnce() -> T) -> T {
    let Some(host) = host() else {
        return f();
    };
    let mut f = Some(f);
    let mut outcome = None;
    host.outside(&mut || {
        if let Some(f) = f.take() {
            outcome = Some(f());
        }
    });
    // The host ran the closure: `outside` must call it (once).
    outcome.expect("the host's `outside` runs the wait it is given")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_here() -> Result<()> {
        Stop::here().check()
    }

    #[test]
    fn a_cancel_stops_only_the_work_that_watches_it_and_its_helpers() {
        let cancel = Cancel::new();
        assert!(check_here().is_ok());
        cancel.run(|| {
            assert!(check_here().is_ok());
            cancel.cancel();
            let e = check_here().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Interrupted);
            let helper = Stop::here().for_helper();
            std::thread::spawn(move || {
                assert!(helper.check().is_err());
                assert!(
                    check_here().is_ok(),
                    "nothing declared on the helper's thread"
                );
            })
            .join()
            .unwrap();
        });
        assert!(check_here().is_ok(), "restored after run");
    }

    #[test]
    fn nested_cancels_stop_on_either_and_a_deadline_is_a_timeout() {
        let outer = Cancel::new();
        let inner = Cancel::with_deadline(Instant::now());
        outer.run(|| {
            let e = inner.run(check_here).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
            assert!(
                check_here().is_ok(),
                "the inner deadline is not the outer's"
            );
            let later = Cancel::new();
            later.run(|| {
                outer.cancel();
                assert_eq!(check_here().unwrap_err().kind(), ErrorKind::Interrupted);
            });
        });
        assert!(!Cancel::new().is_cancelled());
        let shared = Cancel::new();
        shared.clone().cancel();
        assert!(shared.is_cancelled(), "clones share one state");
    }

    #[test]
    fn a_stop_passed_down_carries_its_deadline_lane_and_closing() {
        let soon = Instant::now() + Duration::from_secs(1);
        let stop = Stop::here().until(soon);
        assert_eq!(stop.deadline(), soon);
        assert_eq!(
            stop.until(soon + Duration::from_secs(9)).deadline(),
            soon,
            "the earlier"
        );
        assert_eq!(stop.lane().0, Lane::Read);
        let closed = Arc::new(AtomicBool::new(false));
        let background = Stop::background(Arc::clone(&closed), Cancel::new());
        assert_eq!(background.lane().0, Lane::Background);
        assert!(background.check_file_open().is_ok());
        closed.store(true, Relaxed);
        assert!(background.check_file_open().is_err());
        assert!(
            background.check().is_ok(),
            "a closed file's requests in flight end"
        );
        let cancel = Cancel::new();
        let watching = stop.watching(&cancel);
        cancel.cancel();
        assert!(watching.is_stopped() && !stop.is_stopped());
    }

    #[test]
    fn a_sleep_ends_at_a_stop() {
        let cancel = Cancel::new();
        cancel.cancel();
        let far = Instant::now() + Duration::from_secs(3600);
        let e = Stop::here().watching(&cancel).sleep_until(far).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Interrupted);
        assert!(Stop::here().sleep_until(Instant::now()).is_ok());
    }

    #[test]
    fn a_socket_wait_sees_the_stop_declared_around_it() {
        let cancel = Cancel::new();
        let stop = Stop::here().watching(&cancel);
        assert!(!stop.in_scope(socket_should_stop));
        cancel.cancel();
        assert!(stop.in_scope(socket_should_stop));
        assert!(!socket_should_stop(), "nothing declared outside");
    }

    #[test]
    fn without_a_host_work_runs_on_this_thread() {
        let here = std::thread::current().id();
        let ran_on = blocking(move |_| Ok(std::thread::current().id())).unwrap();
        assert_eq!(ran_on, here);
        assert_eq!(outside(|| 7), 7);
    }
}
