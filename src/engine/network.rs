//! The last tier: the network. It fetches the blocks a fetch owns in one
//! round of concurrent parts (gaps between them filled where a request
//! costs more than their bytes), and ranges straight into a caller's
//! buffer, through the file's [`RangeSource`].

use std::ops::Range;
use std::sync::Arc;

use super::ReadOptions;
use super::fanout::{Done, Next, fan_out};
use super::fetch::Fetch;
use super::link_sizes::{self, LinkSizes};
use super::plan;
use super::range_source::RangeSource;
use super::sink::Sink;
use super::tier::{Below, Tier};
use crate::cache::BlockCache;
use crate::error::{Error, ErrorKind, Result};
use crate::identity::Identity;
use crate::link::LinkMeter;
use crate::wait::Stop;

/// A fetched run of blocks, or why it failed.
type Fetched = (Range<u64>, Result<Vec<Vec<u8>>>);

/// The network, as the engine's last tier.
pub(crate) struct Network {
    source: Box<dyn RangeSource>,
    identity: Identity,
    options: ReadOptions,
    link: Arc<LinkMeter>,
    /// The memory cache, whose recycled buffers blocks are fetched into.
    cache: BlockCache,
}

impl Network {
    pub(crate) fn new(
        source: Box<dyn RangeSource>,
        identity: Identity,
        options: ReadOptions,
        link: Arc<LinkMeter>,
        cache: BlockCache,
    ) -> Network {
        Network {
            source,
            identity,
            options,
            link,
            cache,
        }
    }

    /// The file's URL as errors and logs show it.
    pub(crate) fn redacted_url(&self) -> &str {
        self.source.redacted_url()
    }

    /// The sizes the link measured so far asks for (see [`link_sizes::link_sizes`]).
    pub(crate) fn link_sizes(&self) -> LinkSizes {
        let o = &self.options;
        let bdp = self.link.estimate().map(|e| e.bandwidth_delay_product());
        link_sizes::link_sizes(bdp, o.block_size, o.split_size, o.coalesce_gap)
    }

    /// Fills `sink` with `range` of the file's version. Returns the
    /// requests made one after another.
    pub(crate) fn fetch_range(
        &self,
        range: Range<u64>,
        sink: &mut Sink<'_>,
        stop: &Stop,
    ) -> Result<u32> {
        self.source.fetch(range, sink, &self.identity, stop)
    }

    /// The length of block `index` (the file's last may be short).
    fn block_len(&self, index: u64) -> u64 {
        plan::block_len(index, self.options.block_size, self.identity.size)
    }

    /// Fetches the run of blocks `part` into buffers of their own (recycled
    /// from evicted blocks where possible), offering each to the tiers
    /// above once it came whole.
    fn fetch_blocks(&self, part: Range<u64>, stop: &Stop, above: Below<'_>) -> Done<Fetched> {
        let (bs, size) = (self.options.block_size, self.identity.size);
        let mut buffers: Vec<Vec<u8>> = part
            .clone()
            .map(|i| self.cache.buffers().take(self.block_len(i) as usize))
            .collect();
        let bytes = plan::byte_range(&part, bs, size);
        let mut sink = Sink::new(buffers.iter_mut().map(|b| &mut b[..]).collect());
        let result = self.fetch_range(bytes, &mut sink, stop);
        match &result {
            Ok(_) => {
                for (index, block) in part.clone().zip(&buffers) {
                    above.keep_above(index, block);
                }
            }
            // A server that proves the version gone (a `412`, another
            // validator or size) makes the tiers above forget it, so that
            // the next open reads the file's new version rather than fail
            // on every block they lack.
            Err(e) if e.kind() == ErrorKind::RemoteChanged => above.version_gone_above(),
            Err(_) => {}
        }
        Done {
            attempts: *result.as_ref().unwrap_or(&1),
            outcome: (part, result.map(|_| buffers)),
        }
    }
}

impl Tier for Network {
    /// Fetches the blocks `fetch` still owns, but those left to others, in
    /// one round of concurrent parts.
    fn fill(&self, fetch: &mut Fetch<'_>, below: Below<'_>) -> Option<Error> {
        let owned: Vec<u64> = fetch
            .claim
            .owned()
            .iter()
            .copied()
            .filter(|i| fetch.left_to_others.binary_search(i).is_err())
            .collect();
        if owned.is_empty() {
            return None;
        }
        let sizes = self.link_sizes();
        // A guess fills no gap: the bytes between guessed blocks are
        // wanted by nobody, and no reader waits for the requests it saves;
        // its runs go at once, as many as a guess may have in flight. So
        // does a read that took a guess from the queue. Nor does a fetch
        // around blocks another process is fetching fill gaps: they are
        // theirs.
        let guessed = !fetch.claim.fills_gaps();
        let max_gap = if guessed || !fetch.left_to_others.is_empty() {
            0
        } else {
            sizes.max_gap_blocks
        };
        let lanes = if guessed {
            self.options.guess_concurrency
        } else {
            self.options.max_concurrency
        };
        let parts = plan::parts(&owned, lanes, sizes.min_part_blocks, max_gap);
        let mut failure = None;
        let stop = fetch.stop.clone();
        let round_trips = fan_out(
            parts,
            lanes as usize,
            &stop,
            |part, stop| self.fetch_blocks(part, stop, below),
            |(part, result)| match fetch.settle_part(&owned, part, result) {
                Some(e) => {
                    failure.get_or_insert(e);
                    Next::Stop
                }
                None => Next::Continue,
            },
        );
        fetch.count_rounds(round_trips);
        failure
    }
}
