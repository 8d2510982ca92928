//! A block file: the block's bytes with what they belong to, so that a file
//! that is not exactly what was written — another version's, cut short,
//! overwritten, half-written — is never served. Pure: bytes in, bytes out.
//!
//! Layout: a signature, the owner's identity (a SHA-256 digest of the
//! file's version, see [`super::record::version`]: nothing of its URL), the
//! block size and index, the payload's length and CRC-32C, then the payload.
//!
//! The signature carries the layout's version: a file of another layout
//! (layout 1 carried the identity as text, the file's URL in clear) is
//! [`Corrupt::Foreign`], refused and deleted as any file that is not the
//! block asked for.
//!
//! A file's pieces (exact ranges a side store holds: the HDF5 driver's
//! crawl fetched them) are kept as one more such file, of block size
//! 0 (no block has that size): its payload is each piece's first byte and
//! length, then its bytes, in the order of the file.

use super::digest::Digest;

/// The first bytes of every block file (the version of the layout is in it).
const SIGNATURE: &[u8; 8] = b"RMFBLK2\0";

/// What every version of the layout begins with.
const FAMILY: &[u8; 6] = b"RMFBLK";

/// The header's length after the signature: the identity, the block size,
/// the index, the payload's length and its CRC-32C.
const HEADER_AFTER_SIGNATURE: usize = 32 + 8 + 8 + 8 + 4;

/// Why a block file's bytes are not the block asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Corrupt {
    /// Shorter than its header says, or not a block file.
    Truncated,
    /// A block file of another layout (an earlier or later version of the
    /// crate's).
    Foreign,
    /// A block of another file, version, block size or index.
    Stranger,
    /// The payload does not match its checksum.
    Checksum,
}

/// What a block file must belong to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Owner<'a> {
    /// The digest of the file's version (see [`super::record::version`]).
    pub identity: &'a Digest,
    pub block_size: u64,
    pub index: u64,
}

/// The length of a block file holding `payload_len` bytes: no block file
/// of a block of at most that length is longer.
pub(crate) fn encoded_len(payload_len: u64) -> u64 {
    (SIGNATURE.len() + HEADER_AFTER_SIGNATURE) as u64 + payload_len
}

/// The bytes of a block file holding `payload`.
pub(crate) fn encode(owner: Owner<'_>, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(encoded_len(payload.len() as u64) as usize);
    out.extend_from_slice(SIGNATURE);
    out.extend_from_slice(owner.identity);
    out.extend_from_slice(&owner.block_size.to_le_bytes());
    out.extend_from_slice(&owner.index.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// The payload of a block file, if it is `owner`'s block and intact.
pub(crate) fn decode<'b>(owner: Owner<'_>, bytes: &'b [u8]) -> Result<&'b [u8], Corrupt> {
    let mut rest = bytes;
    let mut take = |n: usize| -> Result<&'b [u8], Corrupt> {
        if rest.len() < n {
            return Err(Corrupt::Truncated);
        }
        let (head, tail) = rest.split_at(n);
        rest = tail;
        Ok(head)
    };
    match take(SIGNATURE.len())? {
        s if s == SIGNATURE => {}
        s if s.starts_with(FAMILY) => return Err(Corrupt::Foreign),
        _ => return Err(Corrupt::Truncated),
    }
    let id = take(owner.identity.len())?;
    let block_size = u64::from_le_bytes(take(8)?.try_into().expect("8 bytes"));
    let index = u64::from_le_bytes(take(8)?.try_into().expect("8 bytes"));
    if id != owner.identity || block_size != owner.block_size || index != owner.index {
        return Err(Corrupt::Stranger);
    }
    let len = u64::from_le_bytes(take(8)?.try_into().expect("8 bytes"));
    let crc = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes"));
    let payload = take(usize::try_from(len).map_err(|_| Corrupt::Truncated)?)?;
    if !rest.is_empty() {
        return Err(Corrupt::Truncated);
    }
    if crc32c::crc32c(payload) != crc {
        return Err(Corrupt::Checksum);
    }
    Ok(payload)
}

/// The most bytes of pieces a pieces file holds, and the most pieces.
pub(crate) const MAX_PIECE_BYTES: u64 = 64 << 20;
pub(crate) const MAX_PIECES: usize = 1 << 16;

/// Each piece's header in a pieces file: its first byte and its length.
const PIECE_HEADER: usize = 16;

/// The owner of the pieces file of the file `identity`.
pub(crate) fn pieces_owner(identity: &Digest) -> Owner<'_> {
    Owner {
        identity,
        block_size: 0,
        index: 0,
    }
}

/// The longest pieces file.
pub(crate) fn max_pieces_file_len() -> u64 {
    encoded_len(MAX_PIECE_BYTES + (MAX_PIECES * PIECE_HEADER) as u64)
}

/// The payload of a pieces file holding `pieces` (by first byte, in order,
/// none overlapping): as many as the limits and `max_bytes` of them allow,
/// the first ones first.
pub(crate) fn encode_pieces<'p>(
    pieces: impl IntoIterator<Item = (u64, &'p [u8])>,
    max_bytes: u64,
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut bytes = 0u64;
    for (start, piece) in pieces.into_iter().take(MAX_PIECES) {
        bytes += piece.len() as u64;
        if bytes > MAX_PIECE_BYTES.min(max_bytes) {
            break;
        }
        out.extend_from_slice(&start.to_le_bytes());
        out.extend_from_slice(&(piece.len() as u64).to_le_bytes());
        out.extend_from_slice(piece);
    }
    out
}

/// The pieces in a pieces file's `payload`, if each lies inside a file of
/// `file_len` bytes, after the one before, and the limits hold; a payload
/// that says anything else was not written by [`encode_pieces`].
pub(crate) fn decode_pieces(payload: &[u8], file_len: u64) -> Result<Vec<(u64, &[u8])>, Corrupt> {
    let mut pieces = Vec::new();
    let (mut rest, mut reached, mut bytes) = (payload, 0u64, 0u64);
    while !rest.is_empty() {
        if rest.len() < PIECE_HEADER || pieces.len() == MAX_PIECES {
            return Err(Corrupt::Truncated);
        }
        let start = u64::from_le_bytes(rest[..8].try_into().expect("8 bytes"));
        let len = u64::from_le_bytes(rest[8..16].try_into().expect("8 bytes"));
        rest = &rest[PIECE_HEADER..];
        let end = start.checked_add(len).ok_or(Corrupt::Truncated)?;
        bytes = bytes.saturating_add(len);
        // Pieces kept are apart (touching ones are one): touching ones here
        // would cost a copy of all before them each when put back.
        let apart = pieces.is_empty() || start > reached;
        if len == 0 || !apart || end > file_len || bytes > MAX_PIECE_BYTES {
            return Err(Corrupt::Stranger);
        }
        let len = usize::try_from(len).map_err(|_| Corrupt::Truncated)?;
        if rest.len() < len {
            return Err(Corrupt::Truncated);
        }
        let (piece, tail) = rest.split_at(len);
        pieces.push((start, piece));
        (rest, reached) = (tail, end);
    }
    Ok(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_read_back_as_written_and_nothing_else_is_taken() {
        let a: Vec<u8> = (0..100).collect();
        let b = [7u8; 10];
        let payload = encode_pieces([(1000, &a[..]), (5000, &b[..])], u64::MAX);
        let pieces = decode_pieces(&payload, 6000).unwrap();
        assert_eq!(pieces, [(1000, &a[..]), (5000, &b[..])]);
        assert_eq!(decode_pieces(&[], 10), Ok(vec![]));
        // Past the file's end, or overlapping, or of no bytes.
        assert_eq!(decode_pieces(&payload, 5009), Err(Corrupt::Stranger));
        let overlapping = encode_pieces([(1000, &a[..]), (1099, &b[..])], u64::MAX);
        assert_eq!(decode_pieces(&overlapping, 6000), Err(Corrupt::Stranger));
        let touching = encode_pieces([(1000, &a[..]), (1100, &b[..])], u64::MAX);
        assert_eq!(decode_pieces(&touching, 6000), Err(Corrupt::Stranger));
        let empty = encode_pieces([(10, &[][..])], u64::MAX);
        assert_eq!(decode_pieces(&empty, 6000), Err(Corrupt::Stranger));
        // Cut anywhere but between pieces.
        for cut in [1, 15, 16, 115, 117, payload.len() - 1] {
            assert!(decode_pieces(&payload[..cut], 6000).is_err(), "{cut}");
        }
        assert_eq!(decode_pieces(&payload[..116], 6000).unwrap().len(), 1);
        // A length that would run past the end of the address space, or
        // past what the payload holds.
        let mut huge = payload.clone();
        huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode_pieces(&huge, u64::MAX).is_err());
        let mut long = payload.clone();
        long[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(decode_pieces(&long, u64::MAX).is_err());
    }

    #[test]
    fn a_pieces_file_keeps_within_its_limits() {
        let big = vec![1u8; (MAX_PIECE_BYTES / 2 + 1) as usize];
        let payload = encode_pieces(
            [(0, &big[..]), (1 << 30, &big[..]), (1 << 31, &[1u8][..])],
            u64::MAX,
        );
        assert_eq!(
            decode_pieces(&payload, 1 << 32).unwrap().len(),
            1,
            "the first"
        );
        let hundred = [2u8; 100];
        let three = [(0, &hundred[..]), (200, &hundred[..]), (400, &hundred[..])];
        let payload = encode_pieces(three, 250);
        assert_eq!(
            decode_pieces(&payload, 1000).unwrap().len(),
            2,
            "the bytes asked"
        );
        let one = [1u8];
        let many: Vec<(u64, &[u8])> = (0..MAX_PIECES as u64 + 5)
            .map(|i| (i * 2, &one[..]))
            .collect();
        let payload = encode_pieces(many, u64::MAX);
        assert_eq!(decode_pieces(&payload, 1 << 32).unwrap().len(), MAX_PIECES);
        assert!(encoded_len(payload.len() as u64) <= max_pieces_file_len());
    }

    const OWNER: Owner<'static> = Owner {
        identity: &[7; 32],
        block_size: 4096,
        index: 7,
    };

    #[test]
    fn a_block_reads_back_only_as_itself() {
        let payload: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        let bytes = encode(OWNER, &payload);
        assert_eq!(bytes.len() as u64, encoded_len(4096));
        assert_eq!(decode(OWNER, &bytes), Ok(&payload[..]));
        let other = |f: fn(&mut Owner<'static>)| {
            let mut o = OWNER;
            f(&mut o);
            decode(o, &bytes)
        };
        assert_eq!(other(|o| o.index = 8), Err(Corrupt::Stranger));
        assert_eq!(other(|o| o.block_size = 8192), Err(Corrupt::Stranger));
        assert_eq!(other(|o| o.identity = &[8; 32]), Err(Corrupt::Stranger));
    }

    #[test]
    fn a_block_file_of_the_first_layout_is_foreign_never_read() {
        // Layout 1: the identity as text, its URL in clear.
        let id = b"url https://h/f?access_token=SECRET\netag \"e\"\nsize 9";
        let mut old = b"RMFBLK1\0".to_vec();
        old.extend_from_slice(&(id.len() as u32).to_le_bytes());
        old.extend_from_slice(id);
        old.extend_from_slice(&[0; 28]);
        assert_eq!(decode(OWNER, &old), Err(Corrupt::Foreign));
        assert_eq!(decode(OWNER, b"RMFBLK9\0"), Err(Corrupt::Foreign));
    }

    #[test]
    fn damaged_block_files_are_refused() {
        let payload = vec![42u8; 1000];
        let bytes = encode(OWNER, &payload);
        for cut in [0, 5, 20, bytes.len() - 1] {
            assert_eq!(
                decode(OWNER, &bytes[..cut]),
                Err(Corrupt::Truncated),
                "{cut}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(decode(OWNER, &longer), Err(Corrupt::Truncated));
        let mut flipped = bytes.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert_eq!(decode(OWNER, &flipped), Err(Corrupt::Checksum));
        let garbage = vec![0x5a; bytes.len()];
        assert_eq!(decode(OWNER, &garbage), Err(Corrupt::Truncated));
    }
}
