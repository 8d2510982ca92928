//! Budgets of memory that many holders share, and what a table weighs in
//! one.
//!
//! A [`MemoryBudget`] counts the bytes its holders took: the side stores
//! of the files of one block cache (the HDF5 driver's pieces), the tables the HDF5
//! driver's metadata crawl keeps for every open file (one budget for the
//! process, [`crate::process::CRAWL_MEMORY`]). A holder that cannot take
//! what it wants goes without: pieces are not fetched (their readers read
//! blocks), a table stops growing (the crawl predicts less). Either is
//! only ever a shortcut, so a budget bounds memory without touching
//! correctness.
//!
//! A table is weighed by what it allocates, as std lays its collections
//! out: a hash table by its capacity ([`hash_table_bytes`]), a vector by
//! its capacity, a B-tree by its entries at the fewest a node may hold
//! ([`btree_bytes`]). The weights are pure functions of sizes, so that a
//! table takes its bytes before it allocates them, and the bound holds
//! however many tables share the budget.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Bytes that holders take from and give back to, never more than its
/// capacity in all.
#[derive(Debug)]
pub(crate) struct MemoryBudget {
    capacity: u64,
    used: AtomicU64,
}

impl MemoryBudget {
    pub(crate) const fn new(capacity: u64) -> MemoryBudget {
        MemoryBudget {
            capacity,
            used: AtomicU64::new(0),
        }
    }

    /// Takes `len` bytes of the budget, if it has them.
    pub(crate) fn take(&self, len: u64) -> bool {
        self.take_leaving(len, 0)
    }

    /// Takes `len` bytes of the budget if at least `keep_free` bytes stay
    /// free after: room kept for holders that need it more.
    pub(crate) fn take_leaving(&self, len: u64, keep_free: u64) -> bool {
        let most = self.capacity.saturating_sub(keep_free);
        self.used
            .fetch_update(Relaxed, Relaxed, |used| {
                used.checked_add(len).filter(|&after| after <= most)
            })
            .is_ok()
    }

    pub(crate) fn give(&self, len: u64) {
        let _ = self
            .used
            .fetch_update(Relaxed, Relaxed, |used| Some(used.saturating_sub(len)));
    }

    /// Whether `len` more bytes fit now (another holder may take them
    /// first).
    pub(crate) fn has_room(&self, len: u64) -> bool {
        self.used.load(Relaxed).saturating_add(len) <= self.capacity
    }

    /// The bytes taken.
    pub(crate) fn used(&self) -> u64 {
        self.used.load(Relaxed)
    }

    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }
}

/// The bytes one table holds of a budget, given back when it is dropped.
#[derive(Debug)]
pub(crate) struct Charge {
    budget: &'static MemoryBudget,
    bytes: u64,
}

impl Charge {
    /// A charge of nothing yet on `budget`.
    pub(crate) fn new(budget: &'static MemoryBudget) -> Charge {
        Charge { budget, bytes: 0 }
    }

    /// The bytes held.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Makes the charge `bytes`: less always succeeds; more only if the
    /// budget has the difference with `keep_free` bytes left (else the
    /// charge is unchanged).
    pub(crate) fn set(&mut self, bytes: u64, keep_free: u64) -> bool {
        if bytes <= self.bytes {
            self.budget.give(self.bytes - bytes);
        } else if !self.budget.take_leaving(bytes - self.bytes, keep_free) {
            return false;
        }
        self.bytes = bytes;
        true
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.give(self.bytes);
    }
}

/// The bytes a control byte group adds to a hash table (SSE2's width).
const HASH_GROUP: usize = 16;

/// The bytes std's hash table (hashbrown) allocates for `capacity` entries
/// of `entry` bytes each (a key and its value): buckets, a power of two
/// with an eighth left empty (4 or 8 for the smallest tables), each an
/// entry and a control byte, and a group of control bytes more. The
/// capacity a table reports maps to its own bucket count, so that this
/// weighs a table as it is as well as one about to be reserved.
pub(crate) const fn hash_table_bytes(capacity: usize, entry: usize) -> u64 {
    if capacity == 0 {
        return 0;
    }
    let buckets = if capacity < 4 {
        4
    } else if capacity < 8 {
        8
    } else {
        (capacity.saturating_mul(8) / 7).next_power_of_two()
    };
    let data = buckets.saturating_mul(entry).next_multiple_of(HASH_GROUP);
    data.saturating_add(buckets + HASH_GROUP) as u64
}

/// The entries of one node of std's B-tree, at most.
const BTREE_CAPACITY: usize = 11;

/// The entries of a node other than the root, at least.
const BTREE_LEAST: usize = 5;

/// The bytes std's `BTreeMap` allocates for `entries` entries of `key` and
/// `value` bytes, at most: a node holds up to 11 and, but for the root, at
/// least 5 (a parent pointer and two counts besides); an internal node
/// also 12 child pointers, and it has at least 6 children, so at most one
/// node in six is internal. So each entry weighs a fifth of a leaf with a
/// sixth of an internal node's pointers, and the root a whole internal
/// node.
pub(crate) const fn btree_bytes(entries: usize, key: usize, value: usize) -> u64 {
    if entries == 0 {
        return 0;
    }
    let leaf = (8 + BTREE_CAPACITY * (key + value) + 4).next_multiple_of(8);
    let internal = leaf + (BTREE_CAPACITY + 1) * 8;
    let per_node = leaf + ((BTREE_CAPACITY + 1) * 8).div_ceil(6);
    let per_entry = per_node.div_ceil(BTREE_LEAST);
    (internal as u64).saturating_add((entries as u64).saturating_mul(per_entry as u64))
}

/// A collection whose allocation grows with its capacity.
pub(crate) trait Table {
    fn entries(&self) -> usize;
    fn room(&self) -> usize;
    /// The bytes the collection allocates at a capacity of `room`.
    fn weigh(room: usize) -> u64;
    /// Grows the capacity to at least `room` entries.
    fn grow_to(&mut self, room: usize);
}

/// The bytes a vector allocates for `capacity` entries of `entry` bytes.
pub(crate) const fn vector_bytes(capacity: usize, entry: usize) -> u64 {
    (capacity as u64).saturating_mul(entry as u64)
}

/// Implements [`Table`] for collections of `len`, `capacity` and a way to
/// reserve, each weighed by a function of its capacity and entry size.
macro_rules! tables {
    ($([$($generic:tt)*] $collection:ty, $entry:ty, $weigh:ident, $reserve:ident;)*) => {$(
        impl<$($generic)*> Table for $collection {
            fn entries(&self) -> usize {
                self.len()
            }
            fn room(&self) -> usize {
                self.capacity()
            }
            fn weigh(room: usize) -> u64 {
                $weigh(room, size_of::<$entry>())
            }
            fn grow_to(&mut self, room: usize) {
                self.$reserve(room.saturating_sub(self.len()));
            }
        }
    )*};
}

tables! {
    [K: Eq + Hash, V] HashMap<K, V>, (K, V), hash_table_bytes, reserve;
    [T] Vec<T>, T, vector_bytes, reserve_exact;
    [T] VecDeque<T>, T, vector_bytes, reserve_exact;
}

/// Makes room in `table` for `more` entries, if its budget has the bytes:
/// the table grows as it would itself (to twice its capacity), or to just
/// what it needs when the budget has no more, its bytes taken by `charge`
/// (the table's own) before it allocates them, with `keep_free` bytes of
/// the budget left. Returns whether there is room; if not, the table is
/// as it was, and the caller goes without.
pub(crate) fn room_for<T: Table>(
    table: &mut T,
    more: usize,
    charge: &mut Charge,
    keep_free: u64,
) -> bool {
    let needed = table.entries().saturating_add(more);
    if needed <= table.room() {
        return true;
    }
    let doubled = needed.max(table.room().saturating_mul(2)).max(4);
    let room = if charge.set(T::weigh(doubled), keep_free) {
        doubled
    } else if charge.set(T::weigh(needed), keep_free) {
        needed
    } else {
        return false;
    };
    table.grow_to(room);
    // What the collection gave, which its weight foresaw (it rounds the
    // same way); were it more, taken whatever the budget says, as it is
    // allocated.
    let given = T::weigh(table.room());
    if !charge.set(given, 0) {
        charge.budget.used.fetch_add(given - charge.bytes, Relaxed);
        charge.bytes = given;
    }
    true
}

/// A budget of its own for a test, which lives as long as the process.
#[cfg(test)]
pub(crate) fn leaked(capacity: u64) -> &'static MemoryBudget {
    Box::leak(Box::new(MemoryBudget::new(capacity)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_keeps_room_for_those_who_need_it_more() {
        let budget = MemoryBudget::new(100);
        assert!(budget.take_leaving(70, 30));
        assert!(!budget.take_leaving(1, 30), "would leave less than 30");
        assert!(budget.take(30));
        assert!(!budget.take(1) && !budget.has_room(1));
        budget.give(50);
        assert_eq!(budget.used(), 50);
        assert!(!budget.take_leaving(1, 200), "keeps more than it has");
    }

    #[test]
    fn a_charge_takes_the_difference_and_gives_all_back_when_dropped() {
        let budget = leaked(1000);
        let mut a = Charge::new(budget);
        let mut b = Charge::new(budget);
        assert!(a.set(600, 0));
        assert!(!b.set(500, 0), "400 left");
        assert_eq!(b.bytes(), 0, "unchanged");
        assert!(b.set(300, 0) && !b.set(500, 0));
        assert!(a.set(500, 0));
        assert!(b.set(500, 0));
        assert_eq!(budget.used(), 1000);
        assert!(a.set(10, 0), "less always fits");
        drop((a, b));
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn hash_tables_weigh_their_buckets() {
        // Buckets of a capacity as std reports it after growing: 3 of 4,
        // 7 of 8, 14 of 16, then seven eighths of a power of two.
        assert_eq!(hash_table_bytes(0, 32), 0);
        assert_eq!(hash_table_bytes(3, 32), 4 * 32 + 4 + 16);
        assert_eq!(hash_table_bytes(7, 32), 8 * 32 + 8 + 16);
        assert_eq!(hash_table_bytes(14, 32), 16 * 32 + 16 + 16);
        assert_eq!(hash_table_bytes(28, 32), 32 * 32 + 32 + 16);
        // A table of 2^18 addresses: some 8.7 MB.
        assert_eq!(hash_table_bytes(1 << 18, 32), (1 << 19) * 33 + 16);
        // Capacities std gives map to their own buckets, not the next.
        let mut m: HashMap<u64, u64> = HashMap::new();
        for i in 0..1000 {
            let before = (m.capacity(), hash_table_bytes(m.capacity(), 16));
            m.insert(i, i);
            if m.capacity() > before.0 && before.0 > 0 {
                let after = hash_table_bytes(m.capacity(), 16);
                assert!(after <= 2 * before.1, "{before:?} -> {after}");
            }
        }
        let reserved = HashMap::<u64, u64>::with_capacity(100);
        assert_eq!(
            hash_table_bytes(reserved.capacity(), 16),
            hash_table_bytes(100, 16)
        );
    }

    #[test]
    fn btree_entries_weigh_a_fifth_of_a_node_each() {
        assert_eq!(btree_bytes(0, 8, 8), 0);
        // Nodes of 8-byte keys and values: 192 bytes a leaf, 288 internal.
        let one = btree_bytes(1, 8, 8);
        assert_eq!(one, 288 + 208u64.div_ceil(5));
        let per_entry = btree_bytes(2, 8, 8) - one;
        assert_eq!(per_entry, 42);
        assert_eq!(btree_bytes(1_000_000, 8, 8), 288 + 42_000_000);
        // Every node at its fewest entries, one in six internal, weighs no
        // more.
        let (leaves, internal) = (200_000u64, 40_000);
        let at_fewest = (leaves + internal) * 5;
        assert!(btree_bytes(at_fewest as usize, 8, 8) >= leaves * 192 + internal * 288);
    }

    #[test]
    fn a_table_grows_only_within_its_budget() {
        let budget = leaked(hash_table_bytes(56, 16) + 100);
        let mut charge = Charge::new(budget);
        let mut m: HashMap<u64, u64> = HashMap::new();
        let mut inserted = 0;
        for i in 0..1000 {
            if !room_for(&mut m, 1, &mut charge, 0) {
                break;
            }
            m.insert(i, i);
            inserted += 1;
            assert_eq!(charge.bytes(), hash_table_bytes(m.capacity(), 16));
            assert!(budget.used() <= budget.capacity());
        }
        assert_eq!(inserted, 56, "a table of 64 buckets fits, 128 do not");
        // Near the end of the budget a vector grows to just what it needs.
        let budget = leaked(100);
        let mut charge = Charge::new(budget);
        let mut v: Vec<u8> = Vec::new();
        assert!(room_for(&mut v, 60, &mut charge, 0));
        assert_eq!((v.capacity(), charge.bytes()), (60, 60));
        v.resize(60, 0);
        assert!(room_for(&mut v, 40, &mut charge, 0), "120 would not fit");
        assert_eq!(v.capacity(), 100);
        v.resize(100, 0);
        assert!(!room_for(&mut v, 1, &mut charge, 0));
        assert!(room_for(&mut v, 0, &mut charge, 0));
        drop(charge);
        assert_eq!(budget.used(), 0);
    }
}
