//! A block file: the block's bytes with what they belong to, so that a file
//! that is not exactly what was written — another version's, cut short,
//! overwritten, half-written — is never served. Pure: bytes in, bytes out.
//!
//! Layout: a signature, the owner's identity (length and text), the block
//! size and index, the payload's length and CRC-32C, then the payload.

/// The first bytes of every block file (the version of the layout is in it).
const SIGNATURE: &[u8; 8] = b"RMFBLK1\0";

/// Why a block file's bytes are not the block asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Corrupt {
    /// Shorter than its header says, or not a block file.
    Truncated,
    /// A block of another file, version, block size or index.
    Stranger,
    /// The payload does not match its checksum.
    Checksum,
}

/// What a block file must belong to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Owner<'a> {
    /// The file's identity: URL (or cache key), validator and size.
    pub identity: &'a str,
    pub block_size: u64,
    pub index: u64,
}

/// The length of the block file of `owner` holding `payload_len` bytes:
/// no block file of a block of at most that length is longer.
pub(crate) fn encoded_len(owner: Owner<'_>, payload_len: u64) -> u64 {
    (SIGNATURE.len() + 4 + owner.identity.len() + 28) as u64 + payload_len
}

/// The bytes of a block file holding `payload`.
pub(crate) fn encode(owner: Owner<'_>, payload: &[u8]) -> Vec<u8> {
    let id = owner.identity.as_bytes();
    let mut out = Vec::with_capacity(SIGNATURE.len() + 4 + id.len() + 28 + payload.len());
    out.extend_from_slice(SIGNATURE);
    out.extend_from_slice(&(id.len() as u32).to_le_bytes());
    out.extend_from_slice(id);
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
    if take(SIGNATURE.len())? != SIGNATURE {
        return Err(Corrupt::Truncated);
    }
    let id_len = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
    let id = take(id_len)?;
    let block_size = u64::from_le_bytes(take(8)?.try_into().expect("8 bytes"));
    let index = u64::from_le_bytes(take(8)?.try_into().expect("8 bytes"));
    if id != owner.identity.as_bytes() || block_size != owner.block_size || index != owner.index {
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

#[cfg(test)]
mod tests {
    use super::*;

    const OWNER: Owner<'static> = Owner {
        identity: "https://example.com/f.nwb\n\"etag\"\n1000",
        block_size: 4096,
        index: 7,
    };

    #[test]
    fn a_block_reads_back_only_as_itself() {
        let payload: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        let bytes = encode(OWNER, &payload);
        assert_eq!(bytes.len() as u64, encoded_len(OWNER, 4096));
        assert_eq!(decode(OWNER, &bytes), Ok(&payload[..]));
        let other = |f: fn(&mut Owner<'static>)| {
            let mut o = OWNER;
            f(&mut o);
            decode(o, &bytes)
        };
        assert_eq!(other(|o| o.index = 8), Err(Corrupt::Stranger));
        assert_eq!(other(|o| o.block_size = 8192), Err(Corrupt::Stranger));
        assert_eq!(
            other(|o| o.identity = "https://example.com/f.nwb\n\"other\"\n1000"),
            Err(Corrupt::Stranger)
        );
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
