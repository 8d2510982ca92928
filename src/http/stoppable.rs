//! Socket waits that a stop ends: the connections of the crate's own agents
//! wait for input in slices of [`POLL`](crate::wait::POLL), asking between
//! them whether the read they work for was stopped.
//!
//! ureq's timeouts are per call and it has no cancellation of its own: a
//! read stopped from outside would otherwise keep its socket (and the claim
//! on its blocks) until the server answered or the read timeout passed.
//! The slices sit under TLS, on the plain connection, so that TLS sees one
//! wait that ends with bytes, a timeout or a stop. ureq carries no value of
//! ours down to its connections: the transport declares the read's
//! [`Stop`](crate::wait::Stop) around each attempt
//! ([`in_scope`](crate::wait::Stop::in_scope)), and the waits here ask it
//! ([`socket_should_stop`](crate::wait::socket_should_stop)).

use std::io;
use std::time::Instant;

use ureq::Error;
use ureq::unversioned::transport::time::Duration as UreqDuration;
use ureq::unversioned::transport::{Buffers, ConnectionDetails, Connector, NextTimeout, Transport};

use crate::wait;

/// The connector that wraps each new connection in [`Stoppable`].
#[derive(Debug, Default)]
pub(crate) struct StoppableConnector;

impl<In: Transport> Connector<In> for StoppableConnector {
    type Out = Stoppable<In>;

    fn connect(
        &self,
        _: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, Error> {
        Ok(chained.map(Stoppable))
    }
}

/// A connection whose waits for input end at a stop.
#[derive(Debug)]
pub(crate) struct Stoppable<T>(T);

/// The error a stopped wait gives ureq; the request's caller reports the
/// stop itself (see `with_retries`). Never of kind `Interrupted`: rustls's
/// and std's read loops retry that kind, and the stop would never end them.
pub(super) fn stopped() -> Error {
    Error::Io(io::Error::other("the read was stopped"))
}

impl<T: Transport> Transport for Stoppable<T> {
    fn buffers(&mut self) -> &mut dyn Buffers {
        self.0.buffers()
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), Error> {
        // A request's head is small: a socket that takes no bytes is rare,
        // and its write timeout bounds it.
        self.0.transmit_output(amount, timeout)
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, Error> {
        let timeout = timeout.for_read();
        let deadline = match timeout.after {
            UreqDuration::Exact(d) => Some(Instant::now() + d),
            UreqDuration::NotHappening => None,
        };
        loop {
            if wait::socket_should_stop() {
                return Err(stopped());
            }
            let now = Instant::now();
            let slice = match deadline {
                Some(deadline) if deadline <= now => return Err(Error::Timeout(timeout.reason)),
                Some(deadline) => (deadline - now).min(wait::POLL),
                None => wait::POLL,
            };
            let step = NextTimeout {
                after: UreqDuration::Exact(slice),
                reason: timeout.reason,
                per_read: None,
                per_write: timeout.per_write,
            };
            match self.0.await_input(step) {
                // A slice ended without bytes: the socket is as it was.
                Err(Error::Timeout(_)) => continue,
                other => return other,
            }
        }
    }

    fn is_open(&mut self) -> bool {
        self.0.is_open()
    }

    fn is_tls(&self) -> bool {
        self.0.is_tls()
    }
}
