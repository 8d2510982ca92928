//! Lengths a file or a server names are bounded before they cost memory: a
//! server that calls a small file 2^50 bytes long, and ranges of any length
//! asked of it, cost at most the cache's budget.

use std::sync::atomic::Ordering;

use remfile_testkit::{SPARSE_SIZE, builder, sparse_server};

#[test]
fn ranges_of_any_length_cost_at_most_the_cache() {
    let (server, sent) = sparse_server(b"sparse".to_vec());
    let capacity = 4 << 20;
    let file = builder()
        .block_size(4096)
        .cache_capacity(capacity)
        .open_tail(0)
        .open(server.url("/huge.bin"))
        .unwrap();
    assert_eq!(file.len(), SPARSE_SIZE);
    // 2^38 blocks each: listing them would take 2 TiB.
    let started = file.prefetch_in_background([0..SPARSE_SIZE, 0..u64::MAX], u64::MAX);
    assert!(started <= capacity, "{started}");
    file.prefetch(std::iter::once(0..SPARSE_SIZE)).unwrap();
    let mut end = [1u8; 16];
    file.read_exact_at(SPARSE_SIZE - 16, &mut end).unwrap();
    assert_eq!(end, [0; 16]);
    let mut head = [0u8; 6];
    file.read_exact_at(0, &mut head).unwrap();
    assert_eq!(&head, b"sparse");
    // The open, the guess, the prefetch and the read of the end: within
    // three cache budgets.
    let bytes = sent.load(Ordering::SeqCst);
    assert!(bytes <= 3 * capacity, "{bytes} bytes fetched");
}
