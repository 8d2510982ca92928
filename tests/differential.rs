//! Any sequence of reads and seeks on a `RemoteFile` (and its clones) gives
//! the same results as on `std::io::Cursor` over the same bytes, whatever the
//! block size and however small the cache, with guesses fetched in the
//! background among them.

use std::io::{Cursor, Read, Seek, SeekFrom};
use std::sync::OnceLock;

use proptest::prelude::*;
use remfile::RemoteFile;
use remfile_testkit::{RangeServer, builder, test_data};

const SIZE: usize = 150_001;

fn server() -> &'static (RangeServer, Vec<u8>) {
    static SERVER: OnceLock<(RangeServer, Vec<u8>)> = OnceLock::new();
    SERVER.get_or_init(|| {
        let data = test_data(SIZE, 42);
        (RangeServer::new(data.clone()), data)
    })
}

#[derive(Debug, Clone)]
enum Op {
    Read {
        handle: usize,
        len: usize,
    },
    Seek {
        handle: usize,
        to: SeekFrom,
    },
    ReadAt {
        pos: u64,
        len: usize,
    },
    ReadExactAt {
        pos: u64,
        len: usize,
    },
    /// Several ranges at once, with `read_vectored_at`.
    ReadVectoredAt {
        reads: Vec<(u64, usize)>,
    },
    /// Replaces the other handle with a clone of this one.
    Clone {
        handle: usize,
    },
    /// A guess: blocks fetched in the background while the reads go on.
    PrefetchInBackground {
        ranges: Vec<(u64, usize)>,
        max_bytes: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let pos = prop_oneof![0..SIZE as u64 + 100, Just(SIZE as u64), Just(u64::MAX - 3)];
    let len = prop_oneof![0usize..100, 0usize..40_000];
    let to = prop_oneof![
        (0..SIZE as u64 + 1000).prop_map(SeekFrom::Start),
        (-(SIZE as i64) - 10..1000i64).prop_map(SeekFrom::End),
        (-50_000i64..50_000).prop_map(SeekFrom::Current),
        Just(SeekFrom::Current(i64::MIN)),
    ];
    prop_oneof![
        (0..2usize, len.clone()).prop_map(|(handle, len)| Op::Read { handle, len }),
        (0..2usize, to).prop_map(|(handle, to)| Op::Seek { handle, to }),
        (pos.clone(), len.clone()).prop_map(|(pos, len)| Op::ReadAt { pos, len }),
        (pos.clone(), len.clone()).prop_map(|(pos, len)| Op::ReadExactAt { pos, len }),
        proptest::collection::vec((pos.clone(), len.clone()), 0..6)
            .prop_map(|reads| Op::ReadVectoredAt { reads }),
        (0..2usize).prop_map(|handle| Op::Clone { handle }),
        (
            proptest::collection::vec((pos.clone(), len.clone()), 0..4),
            0u64..100_000
        )
            .prop_map(|(ranges, max_bytes)| Op::PrefetchInBackground { ranges, max_bytes }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn remote_reads_equal_local_reads(
        block_size in prop_oneof![Just(remfile::MIN_BLOCK_SIZE), 4096u64..9000, Just(65_536u64), Just(200_000u64)],
        cache_blocks in 1u64..8,
        ops in proptest::collection::vec(op(), 1..40),
    ) {
        let (server, data) = server();
        let file = builder()
            .block_size(block_size)
            .cache_capacity(block_size * cache_blocks)
            .read_ahead_max(block_size * 4)
            .split_size(block_size * 2)
            .open(server.url("/f"))
            .unwrap();
        let mut remote: [RemoteFile; 2] = [file.clone(), file];
        let mut local = [Cursor::new(data.as_slice()), Cursor::new(data.as_slice())];
        for op in ops {
            match op {
                Op::Read { handle, len } => {
                    let (mut a, mut b) = (vec![0; len], vec![0; len]);
                    let got = remote[handle].read(&mut a).unwrap();
                    let want = local[handle].read(&mut b).unwrap();
                    prop_assert_eq!(got, want);
                    prop_assert!(a[..got] == b[..want]);
                }
                Op::Seek { handle, to } => {
                    let got = remote[handle].seek(to).map_err(|e| e.kind());
                    let want = local[handle].seek(to).map_err(|e| e.kind());
                    prop_assert_eq!(got, want);
                }
                Op::ReadAt { pos, len } => {
                    let mut a = vec![0; len];
                    let got = remote[0].read_at(pos, &mut a).unwrap();
                    let start = (pos as usize).min(SIZE);
                    let want = &data[start..(start + len).min(SIZE)];
                    prop_assert_eq!(got, want.len());
                    prop_assert!(&a[..got] == want);
                }
                Op::ReadExactAt { pos, len } => {
                    let mut a = vec![0; len];
                    let got = remote[1].read_exact_at(pos, &mut a);
                    if pos.checked_add(len as u64).is_some_and(|end| end <= SIZE as u64) {
                        prop_assert!(got.is_ok());
                        prop_assert!(a[..] == data[pos as usize..][..len]);
                    } else {
                        prop_assert_eq!(got.unwrap_err().kind(), remfile::ErrorKind::UnexpectedEof);
                    }
                }
                Op::ReadVectoredAt { reads } => {
                    let mut bufs: Vec<Vec<u8>> = reads.iter().map(|&(_, len)| vec![0; len]).collect();
                    let mut args: Vec<(u64, &mut [u8])> = reads
                        .iter()
                        .zip(bufs.iter_mut())
                        .map(|(&(pos, _), b)| (pos, &mut b[..]))
                        .collect();
                    let got = remote[0].read_vectored_at(&mut args);
                    let inside = reads.iter().all(|&(pos, len)| {
                        pos.checked_add(len as u64).is_some_and(|end| end <= SIZE as u64)
                    });
                    if inside {
                        prop_assert!(got.is_ok());
                        for (&(pos, len), b) in reads.iter().zip(&bufs) {
                            prop_assert!(b[..] == data[pos as usize..][..len]);
                        }
                    } else {
                        prop_assert_eq!(got.unwrap_err().kind(), remfile::ErrorKind::UnexpectedEof);
                    }
                }
                Op::Clone { handle } => {
                    remote[1 - handle] = remote[handle].clone();
                    local[1 - handle] = local[handle].clone();
                }
                Op::PrefetchInBackground { ranges, max_bytes } => {
                    let spans = ranges.iter().map(|&(pos, len)| pos..pos.saturating_add(len as u64));
                    let started = remote[0].prefetch_in_background(spans, max_bytes);
                    prop_assert!(started <= max_bytes);
                    // Reading the guesses joins their fetches, or fetches
                    // the blocks of those not started yet.
                    for &(pos, len) in &ranges {
                        let mut a = vec![0; len];
                        let got = remote[1].read_at(pos, &mut a).unwrap();
                        let start = (pos as usize).min(SIZE);
                        prop_assert!(a[..got] == data[start..(start + len).min(SIZE)]);
                    }
                    // None is left running when the cache's size is checked.
                    prop_assert!(remote[0].wait_for_background_fetches(std::time::Duration::from_secs(30)));
                }
            }
            for h in 0..2 {
                prop_assert_eq!(remote[h].stream_position().unwrap(), local[h].position());
            }
        }
        remote[0].cache().run_pending_tasks();
        prop_assert!(remote[0].cache().weighted_size() <= block_size * cache_blocks);
    }
}
