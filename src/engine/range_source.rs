//! The seam between the engine and a transport: what the engine asks for is
//! the bytes of a range of one version of the file, into a sink, in the
//! engine's own types. The HTTP transport implements it (in `http/`, which
//! the engine never names); unit tests put an in-memory one in its place
//! (`memory_source.rs`), so that single-flight, background work and the
//! disk cache's locks are tested without a socket.

use std::ops::Range;

use super::sink::Sink;
use crate::error::Result;
use crate::identity::Identity;
use crate::wait::Stop;

/// Where the engine gets a file's bytes from.
pub(crate) trait RangeSource: Send + Sync + 'static {
    /// Fills `sink` with exactly `range` of the file's version `identity`
    /// within what `stop` allows (its deadline, its cancels, its lane),
    /// retrying as its policy allows. Returns the requests made one after
    /// another (a round trip each). It counts its requests and bytes in the
    /// file's counters.
    fn fetch(
        &self,
        range: Range<u64>,
        sink: &mut Sink<'_>,
        identity: &Identity,
        stop: &Stop,
    ) -> Result<u32>;

    /// The file's URL as errors and logs show it (no query string).
    fn redacted_url(&self) -> &str;
}
