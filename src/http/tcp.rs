//! Name lookups and TCP connects that a stop ends.
//!
//! Neither can be sliced the way a socket read is (see [`stoppable`]): the
//! system's `getaddrinfo` and a blocking `connect` wait as long as they
//! wait — a listener whose accept queue is full drops the SYNs, and the
//! connect waits for its whole timeout. So each runs on a thread of its
//! own, and the request's thread waits for its answer in slices of
//! [`POLL`](crate::wait::POLL), asking between them whether the read it
//! works for was stopped. A stopped wait returns at once; the thread it
//! leaves behind ends at the connect (or lookup) timeout and drops what it
//! got.
//!
//! [`stoppable`]: super::stoppable

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ureq::Error;
use ureq::config::Config;
use ureq::http::Uri;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout, Transport,
};

use super::stoppable::stopped;
use crate::sync::{ProcessLocal, start_afresh};
use crate::wait;

/// The most lookups and connects on threads of their own at once, in the
/// process (those a stop left behind included, each until its timeout):
/// past it, a lookup or connect runs on the caller's thread, bounded by its
/// timeout but not by a stop, so that a program retrying against a host
/// that never answers cannot pile threads up.
const MAX_THREADS: usize = 64;

/// The lookups and connects on threads of their own now (a child forked
/// from the process has none of them).
static ON_THREADS: ProcessLocal<usize> = ProcessLocal::new(0, start_afresh);

/// One of [`ON_THREADS`], for as long as it lives.
struct OnAThread;

impl OnAThread {
    fn take() -> Option<OnAThread> {
        ON_THREADS
            .with(|n| (*n < MAX_THREADS).then(|| *n += 1))
            .flatten()
            .map(|()| OnAThread)
    }
}

impl Drop for OnAThread {
    fn drop(&mut self) {
        ON_THREADS.with(|n| *n = n.saturating_sub(1));
    }
}

/// Waits for what `work`, run on a thread of its own, gives, in slices of
/// [`POLL`](wait::POLL): an error at a stop of the work on this thread.
/// Past [`MAX_THREADS`], `work` runs here.
fn on_a_thread_of_its_own<T: Send + 'static>(
    what: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Error> {
    let Some(place) = OnAThread::take() else {
        return Ok(work());
    };
    let (tx, rx) = mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name(format!("remfile-{what}"))
        .spawn(move || {
            let _place = place;
            let _ = tx.send(work());
        })
        .map_err(Error::Io)?;
    loop {
        if wait::socket_should_stop() {
            return Err(stopped());
        }
        match rx.recv_timeout(wait::POLL) {
            Ok(answer) => return Ok(answer),
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(Error::Io(io::Error::other(format!("the {what} failed"))));
            }
        }
    }
}

/// ureq's resolver, with the lookup of a host name (not an address)
/// waited for in slices.
#[derive(Debug, Default)]
pub(crate) struct StoppableResolver;

impl Resolver for StoppableResolver {
    fn resolve(
        &self,
        uri: &Uri,
        config: &Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, Error> {
        let literal = uri
            .host()
            .map(|h| h.trim_start_matches('[').trim_end_matches(']'))
            .is_some_and(|h| h.parse::<IpAddr>().is_ok());
        if literal {
            return DefaultResolver::default().resolve(uri, config, timeout);
        }
        let (uri, config) = (uri.clone(), config.clone());
        on_a_thread_of_its_own("lookup", move || {
            DefaultResolver::default().resolve(&uri, &config, timeout)
        })?
    }
}

/// Connects plain TCP sockets (the first connector of the chain), with the
/// connect waited for in slices.
#[derive(Debug, Default)]
pub(crate) struct StoppableTcpConnector;

impl<In: Transport> Connector<In> for StoppableTcpConnector {
    type Out = Either<In, PlainTcp>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, Error> {
        if chained.is_some() {
            return Ok(chained.map(Either::A));
        }
        let addrs: Vec<SocketAddr> = details.addrs.iter().copied().collect();
        let budget = details.timeout.not_zero().map(|d| *d);
        let stream = on_a_thread_of_its_own("connect", move || connect_any(&addrs, budget))?
            .map_err(|e| io_error(e, &details.timeout))?;
        let config = details.config;
        if config.no_delay() {
            stream.set_nodelay(true)?;
        }
        let buffers = LazyBuffers::new(config.input_buffer_size(), config.output_buffer_size());
        Ok(Some(Either::B(PlainTcp {
            stream,
            buffers,
            read_timeout: None,
            write_timeout: None,
        })))
    }
}

/// Connects to the first of `addrs` that answers, within `budget` for
/// them all (each tried with what is left, the first with half of it when
/// there are more: a host whose first address is dead still gets its
/// others tried).
fn connect_any(addrs: &[SocketAddr], budget: Option<Duration>) -> io::Result<TcpStream> {
    let deadline = budget.map(|b| Instant::now() + b);
    let mut last = None;
    for (n, addr) in addrs.iter().enumerate() {
        let attempt = match deadline {
            None => TcpStream::connect(addr),
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                let share = match addrs.len() - n {
                    1 => left,
                    _ => left / 2,
                };
                if share.is_zero() {
                    break;
                }
                TcpStream::connect_timeout(addr, share.max(Duration::from_millis(10)))
            }
        };
        match attempt {
            Ok(stream) => return Ok(stream),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::from(io::ErrorKind::TimedOut)))
}

/// A plain TCP connection: blocking reads and writes with the timeouts
/// ureq gives (the waits for input are sliced above it, see
/// [`stoppable`](super::stoppable)).
#[derive(Debug)]
pub(crate) struct PlainTcp {
    stream: TcpStream,
    buffers: LazyBuffers,
    /// The socket's timeouts as set last (setting one is a system call).
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
}

/// Sets a socket timeout, unless it is the one set last.
fn set_timeout(
    last: &mut Option<Duration>,
    wanted: Option<Duration>,
    set: impl FnOnce(Option<Duration>) -> io::Result<()>,
) -> io::Result<()> {
    if *last != wanted {
        set(wanted)?;
        *last = wanted;
    }
    Ok(())
}

/// `timeout`, unless no time is left of it: then ureq's timeout error (a
/// socket timeout of zero would mean none at all).
fn time_left(timeout: NextTimeout) -> Result<NextTimeout, Error> {
    match timeout.after.is_zero() {
        true => Err(Error::Timeout(timeout.reason)),
        false => Ok(timeout),
    }
}

/// ureq's error for a socket error: its timeout for one that timed out.
fn io_error(e: io::Error, timeout: &NextTimeout) -> Error {
    match e.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => Error::Timeout(timeout.reason),
        _ => Error::Io(e),
    }
}

impl Transport for PlainTcp {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), Error> {
        let timeout = time_left(timeout.for_write())?;
        let wanted = timeout.not_zero().map(|d| *d);
        let stream = &self.stream;
        set_timeout(&mut self.write_timeout, wanted, |t| {
            stream.set_write_timeout(t)
        })?;
        let output = &self.buffers.output()[..amount];
        (&self.stream)
            .write_all(output)
            .map_err(|e| io_error(e, &timeout))
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, Error> {
        let timeout = time_left(timeout.for_read())?;
        let wanted = timeout.not_zero().map(|d| *d);
        let stream = &self.stream;
        set_timeout(&mut self.read_timeout, wanted, |t| {
            stream.set_read_timeout(t)
        })?;
        let input = self.buffers.input_append_buf();
        let amount = loop {
            match (&self.stream).read(input) {
                // A signal (EINTR): the slice above bounds the wait anyway.
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => break other.map_err(|e| io_error(e, &timeout))?,
            }
        };
        self.buffers.input_appended(amount);
        Ok(amount > 0)
    }

    fn is_open(&mut self) -> bool {
        // Idle and open: nothing to read, and reading would wait.
        let mut probe = [0u8; 1];
        if self.stream.set_nonblocking(true).is_err() {
            return false;
        }
        let idle = matches!(
            (&self.stream).read(&mut probe),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock
        );
        idle && self.stream.set_nonblocking(false).is_ok()
    }
}
