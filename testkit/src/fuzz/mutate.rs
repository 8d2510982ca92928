//! A mutator for the driver's fuzz target that knows where an HDF5 file
//! keeps its lengths: it overwrites a field near a structure's signature
//! (a B-tree node's entry count, a heap's size, a block's address) with a
//! value that breaks bounds — zero, all ones, 2^50 − 4096, the file's own
//! size, the structure's own address — or changes the size the server
//! claims. Random byte changes rarely hit those fields, or hit them with
//! values too tame to matter.

/// The signatures HDF5's structures open with (the superblock's first four
/// bytes among them): a copy of the list remfile's metadata parsers know
/// (`remfile::fuzzing::HDF5_SIGNATURES`, which needs remfile's `fuzzing`
/// feature), which `tests/fuzz_corpus.rs` checks is the same.
pub const SIGNATURES: [&[u8; 4]; 21] = [
    b"\x89HDF", b"TREE", b"SNOD", b"HEAP", b"GCOL", b"OHDR", b"OCHK", b"FRHP", b"FHDB", b"FHIB",
    b"FSHD", b"FSSE", b"BTHD", b"BTIN", b"BTLF", b"FAHD", b"FADB", b"EAHD", b"EAIB", b"EASB",
    b"EADB",
];

/// A small generator of choices from libFuzzer's seed (xorshift).
struct Choices(u64);

impl Choices {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// How far past a signature the fields a mutation aims at lie: the
/// prefixes of HDF5's structures (a fractal heap's header is the longest,
/// at about 150 bytes).
const FIELD_REACH: usize = 160;

/// Where the structures of `file` start: the offsets of every signature.
fn structures(file: &[u8]) -> Vec<usize> {
    file.windows(4)
        .enumerate()
        .filter(|(_, w)| SIGNATURES.iter().any(|s| *w == &s[..]))
        .map(|(i, _)| i)
        .collect()
}

/// Mutates `data` (an input of the `hdf5_driver` target: `header` bytes of
/// choices, then a file) in place, choosing from `seed`; its length stays.
pub fn mutate_metadata(data: &mut [u8], header: usize, seed: u32) {
    let mut choose = Choices(u64::from(seed) << 16 | 0x9e37);
    if data.len() <= header || choose.below(8) == 0 {
        // The claimed size, or the options.
        if let Some(b) = data.get_mut(choose.below(header)) {
            *b = choose.next() as u8;
        }
        return;
    }
    let file_len = (data.len() - header) as u64;
    let file = &mut data[header..];
    let starts = structures(file);
    let at = match starts.len() {
        // Version 1 object headers have no signature: anywhere, then.
        _ if choose.below(4) == 0 => choose.below(file.len()),
        0 => choose.below(file.len()),
        n => starts[choose.below(n)] + 4 + choose.below(FIELD_REACH),
    };
    let width = [1usize, 2, 4, 8][choose.below(4)];
    let structure = at as u64;
    let values = [
        0,
        1,
        u64::MAX,
        u64::MAX - 1,
        (1 << 50) - 4096,
        1 << 32,
        u64::from(u32::MAX),
        file_len,
        file_len.saturating_sub(structure),
        structure.saturating_sub(4),
        choose.next() % (file_len + 1),
        choose.next(),
    ];
    let value = values[choose.below(values.len())].to_le_bytes();
    let end = (at + width).min(file.len());
    if at < end {
        file[at..end].copy_from_slice(&value[..end - at]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_keep_the_length_and_change_something() {
        let mut file = vec![2u8, 0];
        file.extend_from_slice(b"....HEAP");
        file.extend_from_slice(&[0x55; 300]);
        let mut changed = 0;
        for seed in 0..200 {
            let mut data = file.clone();
            mutate_metadata(&mut data, 2, seed);
            assert_eq!(data.len(), file.len());
            changed += usize::from(data != file);
        }
        assert!(changed > 150, "{changed} of 200 changed");
    }

    #[test]
    fn structures_are_found_by_signature() {
        assert_eq!(structures(b"xxTREEyySNOD"), [2, 8]);
        assert!(structures(b"abc").is_empty());
    }

    #[test]
    fn short_inputs_are_safe() {
        for len in 0..4 {
            let mut data = vec![0u8; len];
            for seed in 0..50 {
                mutate_metadata(&mut data, 2, seed);
            }
        }
    }
}
