//! The chunks a hyperslab touches: which ones, as pure arithmetic
//! ([`ChunkSpan`]), and where they are stored, asked of HDF5's chunk index
//! ([`stored_chunks`]).

use std::fmt;
use std::ops::Range;

use super::hdf5_metno::{self, Dataset};

/// The most chunks one span may hold (one look-up in the chunk index each).
pub(crate) const MAX_CHUNKS: u64 = 1 << 20;

/// Why a hyperslab's chunks cannot be listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SpanError {
    /// As many ranges as the first number for a dataset of the second's rank.
    Rank(usize, usize),
    /// A range is empty or runs past the dataset's extent.
    Outside,
    /// More than [`MAX_CHUNKS`] chunks.
    TooMany,
}

impl fmt::Display for SpanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpanError::Rank(given, rank) => {
                write!(f, "{given} ranges given for a dataset of rank {rank}")
            }
            SpanError::Outside => f.write_str("a range is empty or outside the dataset"),
            SpanError::TooMany => f.write_str("the hyperslab spans too many chunks to prefetch"),
        }
    }
}

/// Checks that `ranges` (one per dimension) select a non-empty hyperslab of
/// a dataset of `shape`.
pub(crate) fn check_hyperslab(ranges: &[Range<u64>], shape: &[u64]) -> Result<(), SpanError> {
    if ranges.len() != shape.len() {
        return Err(SpanError::Rank(ranges.len(), shape.len()));
    }
    let outside = |(r, &n): (&Range<u64>, &u64)| r.start >= r.end || r.end > n;
    if ranges.iter().zip(shape).any(outside) {
        return Err(SpanError::Outside);
    }
    Ok(())
}

/// The chunks that a hyperslab of a chunked dataset touches: a box of chunk
/// coordinates, from `first` to `last` inclusive in every dimension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChunkSpan {
    chunk: Vec<u64>,
    first: Vec<u64>,
    last: Vec<u64>,
}

impl ChunkSpan {
    /// The chunks of a dataset of `shape`, chunked by `chunk`, that the
    /// hyperslab `ranges` (element indices, one range per dimension) touches.
    pub fn new(ranges: &[Range<u64>], shape: &[u64], chunk: &[u64]) -> Result<Self, SpanError> {
        check_hyperslab(ranges, shape)?;
        if chunk.len() != shape.len() || chunk.contains(&0) {
            return Err(SpanError::Outside);
        }
        let first: Vec<u64> = ranges.iter().zip(chunk).map(|(r, c)| r.start / c).collect();
        let last: Vec<u64> = ranges
            .iter()
            .zip(chunk)
            .map(|(r, c)| (r.end - 1) / c)
            .collect();
        let span = ChunkSpan {
            chunk: chunk.to_vec(),
            first,
            last,
        };
        match span.count() {
            Some(n) if n <= MAX_CHUNKS => Ok(span),
            _ => Err(SpanError::TooMany),
        }
    }

    /// How many chunks the span holds, if that fits in a `u64`.
    pub fn count(&self) -> Option<u64> {
        self.first
            .iter()
            .zip(&self.last)
            .try_fold(1u64, |n, (a, b)| n.checked_mul(b - a + 1))
    }

    /// The element offset of every chunk's origin, last dimension fastest
    /// (the order of the dataset's elements).
    pub fn offsets(&self) -> impl Iterator<Item = Vec<u64>> + '_ {
        let mut next = Some(self.first.clone());
        std::iter::from_fn(move || {
            let coord = next.take()?;
            next = self.after(&coord);
            Some(coord.iter().zip(&self.chunk).map(|(i, c)| i * c).collect())
        })
    }

    /// The chunk coordinate after `coord`, last dimension fastest.
    fn after(&self, coord: &[u64]) -> Option<Vec<u64>> {
        let mut next = coord.to_vec();
        for d in (0..next.len()).rev() {
            if next[d] < self.last[d] {
                next[d] += 1;
                return Some(next);
            }
            next[d] = self.first[d];
        }
        None
    }
}

/// The stored byte range of every chunk at `offsets` that has storage (a
/// chunk never written has none), from HDF5's chunk index. Call with the
/// HDF5 lock held.
pub(crate) fn stored_chunks(
    dataset: &Dataset,
    offsets: impl Iterator<Item = Vec<u64>>,
) -> hdf5_metno::Result<Vec<Range<u64>>> {
    let mut stored = Vec::new();
    for offset in offsets {
        let (mut mask, mut addr, mut size) = (0, 0, 0);
        // SAFETY: a valid dataset id, an offset of its rank (a `ChunkSpan`
        // of the dataset's shape), and out-parameters.
        let status = unsafe {
            hdf5_sys::h5d::H5Dget_chunk_info_by_coord(
                dataset.id(),
                offset.as_ptr(),
                &mut mask,
                &mut addr,
                &mut size,
            )
        };
        if status < 0 {
            return Err(hdf5_metno::Error::query()?);
        }
        if addr != hdf5_sys::h5::HADDR_UNDEF && size > 0 {
            stored.push(addr..addr + size);
        }
    }
    Ok(stored)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_lists_the_chunks_a_hyperslab_touches_in_order() {
        let span = ChunkSpan::new(&[5..25, 3..4], &[100, 8], &[10, 4]).unwrap();
        assert_eq!(span.count(), Some(3));
        let offsets: Vec<Vec<u64>> = span.offsets().collect();
        assert_eq!(offsets, [vec![0, 0], vec![10, 0], vec![20, 0]]);
        let span = ChunkSpan::new(&[0..20, 0..8], &[100, 8], &[10, 4]).unwrap();
        let offsets: Vec<Vec<u64>> = span.offsets().collect();
        assert_eq!(
            offsets,
            [vec![0, 0], vec![0, 4], vec![10, 0], vec![10, 4]],
            "last dimension fastest"
        );
    }

    #[test]
    fn bad_hyperslabs_are_refused() {
        let shape = [100, 8];
        let chunk = [10, 4];
        let err = |ranges: &[Range<u64>]| ChunkSpan::new(ranges, &shape, &chunk).unwrap_err();
        let one_range = [Range { start: 0, end: 10 }];
        assert_eq!(err(&one_range), SpanError::Rank(1, 2));
        assert_eq!(err(&[0..10, 4..4]), SpanError::Outside);
        assert_eq!(err(&[0..101, 0..8]), SpanError::Outside);
        let huge = [u64::MAX / 2, u64::MAX / 2];
        let e = ChunkSpan::new(&[0..huge[0], 0..huge[1]], &huge, &[1, 1]).unwrap_err();
        assert_eq!(e, SpanError::TooMany);
        assert!(e.to_string().contains("too many chunks"));
    }

    #[test]
    fn a_one_dimensional_span_counts_every_chunk() {
        let all = [Range {
            start: 0,
            end: 1_000_000,
        }];
        let span = ChunkSpan::new(&all, &[1_000_000], &[1000]).unwrap();
        assert_eq!(span.count(), Some(1000));
        assert_eq!(span.offsets().count(), 1000);
        assert_eq!(span.offsets().last(), Some(vec![999_000]));
    }
}
