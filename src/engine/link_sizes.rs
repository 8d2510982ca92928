//! What the link measured so far asks of fetches, a pure decision: the
//! least part a fetch is split into, the gap worth fetching to save a
//! request, and the least a sequential miss reads ahead.

/// The sizes that follow from the link, each in the unit its name says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkSizes {
    /// The smallest part a fetch is split into.
    pub min_part_blocks: u64,
    /// The longest gap between runs fetched together when requests are scarce.
    pub max_gap_blocks: u64,
    /// The least a sequential miss reads ahead.
    pub ahead_floor_bytes: u64,
}

/// Sizes for a link whose bandwidth-delay product is `bdp` bytes (if known).
///
/// Without an estimate the builder's sizes hold. With one, a part is no
/// smaller than a product (shorter parts spend most of their time waiting),
/// but no larger than `split_size` either, so a slow link — whose product is
/// small — spreads a fetch over more connections; gaps up to a product are
/// worth refetching (unless `coalesce_gap` was set); and a sequential stream
/// reads ahead at least a product.
pub fn link_sizes(
    bdp: Option<u64>,
    block_size: u64,
    split_size: u64,
    coalesce_gap: Option<u64>,
) -> LinkSizes {
    let blocks = |bytes: u64| bytes.div_ceil(block_size).max(1);
    match bdp {
        None => LinkSizes {
            min_part_blocks: blocks(split_size),
            max_gap_blocks: coalesce_gap.unwrap_or(DEFAULT_COALESCE_GAP) / block_size,
            ahead_floor_bytes: 0,
        },
        Some(bdp) => LinkSizes {
            min_part_blocks: blocks(bdp.min(split_size)),
            max_gap_blocks: coalesce_gap.unwrap_or(bdp) / block_size,
            ahead_floor_bytes: bdp,
        },
    }
}

/// The gap refetched to save a request when the link is not known.
pub const DEFAULT_COALESCE_GAP: u64 = 2 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn link_sizes_follow_the_bandwidth_delay_product() {
        let unknown = link_sizes(None, MIB, 4 * MIB, None);
        assert_eq!(
            unknown,
            LinkSizes {
                min_part_blocks: 4,
                max_gap_blocks: 2,
                ahead_floor_bytes: 0
            }
        );
        // 30 ms at 500 MB/s: 15 MB. Parts stay at most split_size.
        let fast = link_sizes(Some(15_000_000), MIB, 4 * MIB, None);
        assert_eq!(
            fast,
            LinkSizes {
                min_part_blocks: 4,
                max_gap_blocks: 14,
                ahead_floor_bytes: 15_000_000
            }
        );
        // 30 ms at 25 MB/s: 750 kB. Parts of one block spread a fetch wider.
        let slow = link_sizes(Some(750_000), MIB, 4 * MIB, None);
        assert_eq!(
            slow,
            LinkSizes {
                min_part_blocks: 1,
                max_gap_blocks: 0,
                ahead_floor_bytes: 750_000
            }
        );
        // A gap set by the caller stays.
        assert_eq!(
            link_sizes(Some(15_000_000), MIB, 4 * MIB, Some(0)).max_gap_blocks,
            0
        );
    }
}
