//! Network waits as a host runtime needs them: a program that embeds the
//! crate in an interpreter (the Python package does) lets go of the
//! interpreter's lock while a read waits, and stops the wait when the user
//! asks (Ctrl-C).
//!
//! Nothing changes for a program that installs no [`Host`]: its reads wait
//! on the calling thread, as they always did. With a host installed, a read
//! that must wait for the network (or for the disk cache) runs on a thread
//! of its own while the calling thread waits in steps of [`POLL`], asking
//! the host between steps whether to stop. A read stopped that way returns
//! [`ErrorKind::Interrupted`]; the fetch it leaves behind stops too (before
//! its next request, and between the chunks of a body), and its blocks are
//! fetched again by whoever needs them next, so the file stays usable.
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

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, OnceLock, mpsc};
use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};

/// How often a waiting thread asks its host whether to stop.
pub const POLL: Duration = Duration::from_millis(50);

/// A host runtime's part in the network waits of reads, opens and closes.
///
/// Every method has a default that does nothing special, so a host
/// implements only what it needs.
pub trait Host: Send + Sync + 'static {
    /// Runs `wait`, which blocks this thread until a read (or an open, or a
    /// close) is done with the network. An interpreter lets go of its lock
    /// around it, if this thread holds it.
    fn outside(&self, wait: &mut dyn FnMut()) {
        wait()
    }

    /// Whether the waiting thread should stop waiting (the user pressed
    /// Ctrl-C, say). Asked every [`POLL`] from inside
    /// [`outside`](Host::outside), on the waiting thread.
    fn stop_requested(&self) -> bool {
        false
    }

    /// Called when a read or an open through the HDF5 driver fails with a
    /// remote error, on the thread HDF5 called the driver on, before the
    /// driver returns the failure to HDF5. An interpreter can raise an
    /// exception of its own from it.
    fn driver_failed(&self, error: &Error) {
        let _ = error;
    }

    /// Called after a file's blocks have been let go (the last clone of a
    /// [`RemoteFile`](crate::RemoteFile) dropped, or the HDF5 driver closed
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

/// The stop flag of the read the current thread works for (set on the
/// threads a host-run read starts, and passed on to the threads they start).
#[derive(Clone, Debug, Default)]
pub(crate) struct Token(Arc<AtomicBool>);

thread_local! {
    static CURRENT: RefCell<Option<Token>> = const { RefCell::new(None) };
}

impl Token {
    /// The token of the read this thread works for, if any.
    pub(crate) fn current() -> Option<Token> {
        CURRENT.with(|c| c.borrow().clone())
    }

    /// Runs `f` with `token` (if any) as this thread's token.
    pub(crate) fn adopt<T>(token: Option<Token>, f: impl FnOnce() -> T) -> T {
        let previous = CURRENT.with(|c| std::mem::replace(&mut *c.borrow_mut(), token));
        struct Restore(Option<Token>);
        impl Drop for Restore {
            fn drop(&mut self) {
                let previous = self.0.take();
                CURRENT.with(|c| *c.borrow_mut() = previous);
            }
        }
        let _restore = Restore(previous);
        f()
    }

    fn stop(&self) {
        self.0.store(true, Relaxed);
    }

    fn is_stopped(&self) -> bool {
        self.0.load(Relaxed)
    }
}

/// An error if the read this thread works for was stopped: checked before
/// each request and between the chunks of a body.
pub(crate) fn check_stopped() -> Result<()> {
    match Token::current() {
        Some(t) if t.is_stopped() => Err(interrupted()),
        _ => Ok(()),
    }
}

/// The error of a wait the host stopped.
pub(crate) fn interrupted() -> Error {
    Error::new(ErrorKind::Interrupted, "interrupted while waiting")
}

/// Runs `work` as the host wants a network wait run (see the module's
/// documentation); without a host, runs it here.
pub(crate) fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    let Some(host) = host() else {
        return work();
    };
    let mut work = Some(work);
    let mut outcome = None;
    host.outside(&mut || {
        if let Some(work) = work.take() {
            outcome = Some(wait_for(host, work));
        }
    });
    outcome.unwrap_or_else(|| Err(interrupted()))
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

/// Runs `work` on a thread of its own and waits for it in steps, asking the
/// host between them. If no thread can be started, runs it here (a wait
/// that cannot be stopped, rather than none).
fn wait_for<T: Send + 'static>(
    host: &'static dyn Host,
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    let token = Token::default();
    let (send, receive) = mpsc::sync_channel(1);
    let theirs = token.clone();
    let slot = Arc::new(parking_lot::Mutex::new(Some(work)));
    let for_thread = Arc::clone(&slot);
    let spawned = std::thread::Builder::new()
        .name("remfile-read".into())
        .spawn(move || {
            if let Some(work) = for_thread.lock().take() {
                let _ = send.send(Token::adopt(Some(theirs), work));
            }
        });
    if let Err(e) = spawned {
        tracing::debug!(error = %e, "no thread for a read; it waits on the caller's");
        let work = slot.lock().take().expect("the thread never started");
        return work();
    }
    loop {
        match receive.recv_timeout(POLL) {
            Ok(outcome) => return outcome,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // The thread panicked: its panic was its own to report.
                return Err(Error::new(
                    ErrorKind::Network,
                    "the read's thread ended without an answer",
                ));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if host.stop_requested() {
                    token.stop();
                    return Err(interrupted());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_token_stops_only_the_threads_that_adopt_it() {
        let token = Token::default();
        assert!(check_stopped().is_ok());
        Token::adopt(Some(token.clone()), || {
            assert!(check_stopped().is_ok());
            token.stop();
            let e = check_stopped().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Interrupted);
            let inherited = Token::current();
            std::thread::spawn(move || {
                Token::adopt(inherited, || assert!(check_stopped().is_err()));
                assert!(check_stopped().is_ok(), "restored after");
            })
            .join()
            .unwrap();
        });
        assert!(check_stopped().is_ok(), "restored after adopt");
    }

    #[test]
    fn without_a_host_work_runs_on_this_thread() {
        let here = std::thread::current().id();
        let ran_on = blocking(move || Ok(std::thread::current().id())).unwrap();
        assert_eq!(ran_on, here);
        assert_eq!(outside(|| 7), 7);
    }
}
