//! What a read may wait for, as one value: a [`Stop`]. It is made where
//! work begins — a [`RemoteFile`](crate::file::RemoteFile) call, an open, a
//! background errand, a thread helping another's read — and passed down the
//! read path to the transport: every wait of the read asks it whether to go
//! on, and its requests wait for connections in its [`Lane`].

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use super::{Cancel, POLL, Stopped, host, process_ending, spared_thread};
use crate::clock::Clock;
use crate::error::{Error, ErrorKind, Result};

/// Whom a request works for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lane {
    /// A read, an open or a close someone waits for.
    Read,
    /// Work no one waits for yet: read-ahead, guesses, the crawl.
    Background,
}

/// What a read may wait for, and whom it works for: its deadline, the
/// cancels it watches (its handle's, its file's close, a caller's
/// [`Cancel::run`]), whether it asks the host runtime to stop, its lane,
/// and, for background work of one file, that file's closing.
#[derive(Clone, Debug)]
pub(crate) struct Stop {
    cancel: Cancel,
    deadline: Instant,
    /// If it asks the host (the stop of the thread the host ran the work
    /// on; the threads helping that work only look at the cancel): the
    /// cancel of the host's wait, which a stop the host asks for cancels.
    host_wait: Option<Cancel>,
    /// Whether it is work of the thread
    /// [`stop_everything_but_this_thread`](super::stop_everything_but_this_thread)
    /// spared (run there, or by a thread helping such work).
    spared: bool,
    lane: Lane,
    /// For background work of one file: set once the file is closed.
    closed: Option<Arc<AtomicBool>>,
    /// For a background fetch: set once a reader waits for one of its
    /// blocks; its requests then wait for connections as a read's.
    wanted: Option<Arc<AtomicBool>>,
    /// The time its pauses are measured by: the system's, or a test's.
    clock: Arc<dyn Clock>,
}

thread_local! {
    /// What the code running on this thread declared for the work it runs:
    /// a caller's [`Cancel::run`], a background errand, a host's wait. Read
    /// where work begins ([`Stop::here`]), and by the socket waits of a
    /// request (a library's code between them carries no value of ours).
    static SCOPE: RefCell<Option<Stop>> = const { RefCell::new(None) };
    /// When a stop asked the host on this thread last: asking may take the
    /// interpreter's lock, so not at every read's first wait nor at every
    /// chunk of a body.
    static LAST_ASKED: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// A year: the deadline of work that has none of its own yet.
const FAR: Duration = Duration::from_secs(365 * 86_400);

impl Stop {
    /// A stop for work of no one in particular: no deadline but a year,
    /// stopped by nothing but the process's end.
    fn fresh(lane: Lane) -> Stop {
        Stop {
            cancel: Cancel::new(),
            deadline: super::deadline::after(FAR),
            host_wait: None,
            spared: spared_thread(),
            lane,
            closed: None,
            wanted: None,
            clock: crate::clock::system(),
        }
    }

    /// This stop, its pauses measured by `clock` (a test's).
    #[cfg(test)]
    pub(crate) fn with_clock(&self, clock: Arc<dyn Clock>) -> Stop {
        Stop {
            clock,
            ..self.clone()
        }
    }

    /// The time now, by the stop's clock.
    pub(crate) fn now(&self) -> Instant {
        self.clock.now()
    }

    /// The stop of work beginning on this thread: what the code around it
    /// declared ([`Cancel::run`], a background errand, a host's wait), else
    /// a read's stopped by nothing but the process's end. Its deadline is
    /// not the declared work's: work that begins gets its own.
    pub(crate) fn here() -> Stop {
        let scope = SCOPE.try_with(|s| s.borrow().clone()).ok().flatten();
        match scope {
            Some(stop) => Stop {
                spared: stop.spared || spared_thread(),
                deadline: super::deadline::after(FAR),
                ..stop
            },
            None => Stop::fresh(Lane::Read),
        }
    }

    /// The stop of background work of a file: stopped by `cancel`, and
    /// making no request once `closed` is set.
    pub(crate) fn background(closed: Arc<AtomicBool>, cancel: Cancel) -> Stop {
        Stop {
            cancel,
            closed: Some(closed),
            spared: false,
            ..Stop::fresh(Lane::Background)
        }
    }

    /// The stop of work in `lane` for no file in particular.
    pub(crate) fn in_lane(lane: Lane) -> Stop {
        Stop {
            spared: false,
            ..Stop::fresh(lane)
        }
    }

    /// This stop, held to `deadline` too.
    pub(crate) fn until(&self, deadline: Instant) -> Stop {
        Stop {
            deadline: self.deadline.min(deadline),
            ..self.clone()
        }
    }

    /// This stop with `deadline` in place of its own (a wait bounded on its
    /// own terms, such as a load of keys other reads share).
    #[cfg_attr(not(feature = "s3"), allow(dead_code))]
    pub(crate) fn with_deadline(&self, deadline: Instant) -> Stop {
        Stop {
            deadline,
            ..self.clone()
        }
    }

    /// This stop, stopped by `cancel` too.
    pub(crate) fn watching(&self, cancel: &Cancel) -> Stop {
        Stop {
            cancel: Cancel::of_either([cancel.clone(), self.cancel.clone()]),
            ..self.clone()
        }
    }

    /// This stop for a host's wait: a cancel of its own (a stop the host
    /// asks for stops this work, not the work around it), which asks the
    /// host.
    pub(super) fn asking_host(&self) -> Stop {
        let own = Cancel::of_either([self.cancel.clone()]);
        Stop {
            cancel: own.clone(),
            host_wait: Some(own),
            ..self.clone()
        }
    }

    /// The stop of a thread that helps this work: it stops with it, and
    /// never asks the host (this work's own thread does).
    pub(crate) fn for_helper(&self) -> Stop {
        Stop {
            host_wait: None,
            ..self.clone()
        }
    }

    /// This stop for a background fetch whose requests wait for
    /// connections as a read's once `wanted` is set (a reader waits for
    /// what it brings then).
    pub(crate) fn wanted_by(&self, wanted: Option<Arc<AtomicBool>>) -> Stop {
        Stop {
            wanted,
            ..self.clone()
        }
    }

    /// The deadline every wait of the work is held to.
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The lane its requests wait for connections in, and the flag that
    /// moves them to [`Lane::Read`].
    pub(crate) fn lane(&self) -> (Lane, Option<&AtomicBool>) {
        (self.lane, self.wanted.as_deref())
    }

    /// Whether the cancel was cancelled (by the host too).
    pub(super) fn cancel(&self) -> &Cancel {
        &self.cancel
    }

    /// Why the work should stop, if it should; asks the host (at most
    /// every [`POLL`] / 2) if `ask_host` and this stop asks it.
    fn why(&self, ask_host: bool) -> Option<Stopped> {
        if process_ending(self.spared) {
            return Some(Stopped::ProcessEnding);
        }
        if let Some(why) = self.cancel.why_stopped() {
            return Some(why);
        }
        if let Some(host_wait) = self.host_wait.as_ref().filter(|_| ask_host) {
            if let Some(host) = host().filter(|_| self.time_to_ask()) {
                if host.stop_requested() {
                    host_wait.cancel();
                    return Some(Stopped::Cancelled);
                }
            }
        }
        None
    }

    /// Whether the host was not asked on this thread for a while (asking
    /// may take the interpreter's lock: not at every chunk of a body).
    fn time_to_ask(&self) -> bool {
        let now = Instant::now();
        LAST_ASKED
            .try_with(|last| {
                let due = last.get().is_none_or(|t| now.duration_since(t) >= POLL / 2);
                if due {
                    last.set(Some(now));
                }
                due
            })
            .unwrap_or(false)
    }

    /// An error if the work should stop: checked before each request,
    /// between the chunks of a body and between the slices of every wait.
    pub(crate) fn check(&self) -> Result<()> {
        match self.why(true) {
            Some(why) => Err(why.error()),
            None => Ok(()),
        }
    }

    /// Whether the work should stop now.
    pub(crate) fn should_stop(&self) -> bool {
        self.why(true).is_some()
    }

    /// Whether the work was stopped already, without asking the host (for
    /// code that holds a lock, or decides what others are told).
    pub(crate) fn is_stopped(&self) -> bool {
        self.why(false).is_some()
    }

    /// An error if this is background work of a file that was closed:
    /// checked before each request.
    pub(crate) fn check_file_open(&self) -> Result<()> {
        if self.closed.as_ref().is_some_and(|c| c.load(Relaxed)) {
            return Err(Error::new(ErrorKind::Interrupted, "the file was closed"));
        }
        Ok(())
    }

    /// Pauses until `until` by the stop's clock, or until the work should
    /// stop (then an error), looking for a stop every [`POLL`].
    pub(crate) fn sleep_until(&self, until: Instant) -> Result<()> {
        loop {
            self.check()?;
            let now = self.clock.now();
            if now >= until {
                return Ok(());
            }
            self.clock.sleep_until(until.min(now + POLL));
        }
    }

    /// Runs `f` with this stop declared for the code it runs on this
    /// thread: where work begins inside it (through a library's code: an
    /// HDF5 call, a request's socket waits), it is this stop's.
    pub(crate) fn in_scope<T>(&self, f: impl FnOnce() -> T) -> T {
        // After this thread's locals are gone (C's `exit` closing HDF5
        // files), nothing is declared.
        let Ok(previous) = SCOPE.try_with(|s| s.borrow_mut().replace(self.clone())) else {
            return f();
        };
        struct Restore(Option<Stop>);
        impl Drop for Restore {
            fn drop(&mut self) {
                let previous = self.0.take();
                let _ = SCOPE.try_with(|s| *s.borrow_mut() = previous);
            }
        }
        let _restore = Restore(previous);
        f()
    }
}

/// Whether a socket wait on this thread should end: the request's work
/// (declared with [`Stop::in_scope`] around it) should stop, or, if none
/// was declared, the process is ending.
pub(crate) fn socket_should_stop() -> bool {
    match SCOPE.try_with(|s| s.borrow().clone()).ok().flatten() {
        Some(stop) => stop.should_stop(),
        None => process_ending(false),
    }
}
