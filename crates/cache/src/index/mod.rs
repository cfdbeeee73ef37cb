//! The index behind the memory store: a sharded hash table of weighted entries with its
//! admission and eviction policy. It knows nothing of HTTP; [`crate::store`] puts objects in it.
//!
//! # Policy: S3-FIFO with an adaptive small queue
//!
//! Each shard keeps two FIFO queues and a ghost history of evicted keys (hashes only):
//!
//! - a new key enters the **small** queue; a hit only sets a frequency counter (0–3, no lock
//!   upgrade, no list move);
//! - when the small queue is evicted, an entry that was hit while in it moves to the **main**
//!   queue; one that was not is dropped and its hash remembered in the ghost history;
//! - the main queue gives each entry one more pass per hit (CLOCK-style) and drops the others,
//!   remembering them too;
//! - a key found in the ghost history goes straight to the main queue: it was evicted too early.
//!
//! The small queue is evicted while it holds more than its *target* share of the shard; below
//! it, the main queue is. The small queue is never limited to its target: while the main queue
//! is small (traffic of mostly new keys), new entries get the whole shard, so a key re-requested
//! within the cache's capacity is kept as a plain LRU would keep it. The target adapts as in
//! ARC: a key coming back from the small queue's ghosts (evicted before its reuse) grows it; a
//! key coming back from the main queue's ghosts shrinks it. One-off keys and scans pass through
//! the small queue and never displace what the main queue protects.
//!
//! # Memory
//!
//! Every entry has a weight (its bytes, computed by the caller); a shard never holds more than
//! its share of the capacity, counting bytes *reserved* for bodies still being collected and
//! its share of the *pinned* gauge: bytes of values the index let go that are still alive
//! elsewhere (the caller keeps the gauge; see [`Index::pinned`] and [`Index::with_on_leave`]). The
//! index's own memory per entry (slot, table, queue and ghost) is a fixed cost the caller
//! includes in the weight ([`METADATA_PER_ENTRY`]). Slots live in fixed-size pages, so the
//! index never holds a doubled `Vec`'s spare capacity for long.
//!
//! # Concurrency
//!
//! One `RwLock` per shard. A lookup takes the read lock and bumps the entry's counter with a
//! relaxed atomic; inserts, removals and reservations take the write lock. No lock is held
//! beyond one call.

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

mod shard;
use shard::Shard;

/// How a borrowed form of a key is compared with stored keys (the borrowed form must hash the
/// same as the key it equals).
pub trait Equivalent<K> {
    fn equivalent(&self, key: &K) -> bool;
}

impl<K: Eq> Equivalent<K> for K {
    fn equivalent(&self, key: &K) -> bool {
        self == key
    }
}

/// Bytes of index memory per entry, for the caller's weights: the slot (key and value headers,
/// hash, weight, counter), its share of the hash table, of the queues and of the ghost history,
/// with the spare capacity those structures can hold after growing. Checked against the
/// allocator by the store's memory tests.
pub const METADATA_PER_ENTRY: u64 = 256;

/// What [`Index::insert`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inserted {
    /// Stored as a new entry.
    New,
    /// Replaced the value stored under the same key (keeping its place in the queues).
    Replaced,
    /// Heavier than the shard allows: not stored.
    TooHeavy,
}

/// The sharded index. `S` hashes keys (and their borrowed forms).
pub struct Index<K, V, S = foldhash::quality::RandomState> {
    shards: Box<[RwLock<Shard<K, V>>]>,
    hasher: S,
    shift: u32,
    capacity: u64,
    /// Bytes outside the index that count against its capacity (spread evenly over shards).
    pinned: Arc<AtomicU64>,
    /// Called once for every value that leaves the index (evicted, replaced, removed).
    on_leave: Box<dyn Fn(&V) + Send + Sync>,
}

/// Totals over all shards (read one shard at a time, so only approximately simultaneous).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexStats {
    pub entries: usize,
    pub weight: u64,
    pub reserved: u64,
    /// Bytes counted against the capacity outside the entries (see [`Index::pinned`]).
    pub pinned: u64,
    pub evictions: u64,
    pub small_weight: u64,
    pub main_weight: u64,
}

fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    // invariant: no code path panics while holding a shard lock; if one did, the shard's data
    // is still consistent at every await-free step, so the poison flag is ignored.
    l.read().unwrap_or_else(|p| p.into_inner())
}

fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

impl<K: Hash + Eq, V: Clone> Index<K, V> {
    /// An index of `capacity` bytes in `shards` shards (rounded up to a power of two).
    pub fn new(capacity: u64, shards: usize) -> Self {
        Self::with_hasher(capacity, shards, foldhash::quality::RandomState::default())
    }
}

impl<K: Hash + Eq, V: Clone, S: BuildHasher> Index<K, V, S> {
    pub fn with_hasher(capacity: u64, shards: usize, hasher: S) -> Self {
        let n = shards.max(1).next_power_of_two();
        let capacity = capacity.max(n as u64);
        let per = capacity / n as u64;
        let pinned = Arc::new(AtomicU64::new(0));
        Index {
            shards: (0..n)
                .map(|_| RwLock::new(Shard::new(per, pinned.clone(), n as u64)))
                .collect(),
            hasher,
            shift: 64 - n.trailing_zeros(),
            capacity: per * n as u64,
            pinned,
            on_leave: Box::new(|_| {}),
        }
    }

    /// Calls `f` once for every value that leaves the index: evicted, replaced by an insert,
    /// removed, purged. (A value handed to an insert that refuses it never entered.)
    pub fn with_on_leave(mut self, f: impl Fn(&V) + Send + Sync + 'static) -> Self {
        self.on_leave = Box::new(f);
        self
    }

    /// The gauge of bytes outside the index that count against its capacity: the caller adds
    /// what values the index let go still hold, and takes it back when they are freed. Each
    /// shard counts an equal share, so the total of entries, reservations and pinned bytes
    /// stays within the capacity.
    pub fn pinned(&self) -> &Arc<AtomicU64> {
        &self.pinned
    }

    fn left(&self, entries: &[shard::Entry<K, V>], replaced: &Option<V>) {
        entries.iter().for_each(|e| (self.on_leave)(&e.value));
        replaced.iter().for_each(|v| (self.on_leave)(v));
    }

    fn hash<Q: Hash + ?Sized>(&self, q: &Q) -> u64 {
        self.hasher.hash_one(q)
    }

    fn shard_of(&self, hash: u64) -> &RwLock<Shard<K, V>> {
        // The table uses the hash's low and top bits; shards take the bits just below the top.
        let i = if self.shift >= 64 {
            0
        } else {
            ((hash << 7) >> self.shift) as usize
        };
        &self.shards[i]
    }

    /// The capacity in bytes (all shards).
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// One shard's capacity: the largest weight an entry can have.
    pub fn shard_capacity(&self) -> u64 {
        self.capacity / self.shards.len() as u64
    }

    /// The value stored under `q`, counting the access for the eviction policy.
    pub fn get<Q: Hash + Equivalent<K> + ?Sized>(&self, q: &Q) -> Option<V> {
        let hash = self.hash(q);
        let shard = read(self.shard_of(hash));
        let idx = shard.find(hash, q)?;
        shard.touch(idx).cloned()
    }

    /// The value stored under `q`, without counting an access.
    pub fn peek<Q: Hash + Equivalent<K> + ?Sized>(&self, q: &Q) -> Option<V> {
        let hash = self.hash(q);
        let shard = read(self.shard_of(hash));
        let idx = shard.find(hash, q)?;
        shard.entry(idx).map(|e| e.value.clone())
    }

    /// Stores `value` under `key` with `weight` bytes, evicting as needed. An entry heavier
    /// than 90% of a shard is refused.
    pub fn insert(&self, key: K, value: V, weight: u64) -> Inserted {
        let hash = self.hash(&key);
        let mut evicted = Vec::new();
        let mut replaced = None;
        let outcome = {
            let mut shard = write(self.shard_of(hash));
            shard.insert(hash, key, value, weight, &mut evicted, &mut replaced)
        };
        self.left(&evicted, &replaced);
        // Values are dropped here, after the lock: freeing a large body takes time.
        drop((evicted, replaced));
        outcome
    }

    /// Replaces the value stored under `key` with `value` (of `weight` bytes) if there is one
    /// and `current` accepts it, under one lock (nothing can remove or change the entry between
    /// the check and the write). False when nothing was stored.
    pub fn replace_if(
        &self,
        key: K,
        value: V,
        weight: u64,
        current: impl FnOnce(&V) -> bool,
    ) -> bool {
        let hash = self.hash(&key);
        let mut evicted = Vec::new();
        let mut replaced = None;
        let stored = {
            let mut shard = write(self.shard_of(hash));
            let accepted = shard
                .find(hash, &key)
                .and_then(|idx| shard.entry(idx))
                .is_some_and(|e| current(&e.value));
            accepted
                && shard.insert(hash, key, value, weight, &mut evicted, &mut replaced)
                    != Inserted::TooHeavy
        };
        self.left(&evicted, &replaced);
        drop((evicted, replaced));
        stored
    }

    /// Removes the entry stored under `q`.
    pub fn remove<Q: Hash + Equivalent<K> + ?Sized>(&self, q: &Q) -> Option<V> {
        let hash = self.hash(q);
        let entry = {
            let mut shard = write(self.shard_of(hash));
            let idx = shard.find(hash, q)?;
            let e = shard.unlink(idx);
            shard.compact_queues();
            e
        };
        (self.on_leave)(&entry.value);
        Some(entry.value)
    }

    /// Holds `bytes` of the shard `q` falls in for a body being collected, evicting to make
    /// room. Returns false (nothing held) if they cannot fit.
    pub fn reserve<Q: Hash + ?Sized>(&self, q: &Q, bytes: u64) -> bool {
        let hash = self.hash(q);
        let mut evicted = Vec::new();
        let ok = {
            let mut shard = write(self.shard_of(hash));
            if bytes > shard.capacity / 10 * 9 || !shard.make_room(bytes, &mut evicted) {
                false
            } else {
                shard.reserved += bytes;
                true
            }
        };
        self.left(&evicted, &None);
        drop(evicted);
        ok
    }

    /// Gives back bytes held by [`Index::reserve`] for the same `q`.
    pub fn release<Q: Hash + ?Sized>(&self, q: &Q, bytes: u64) {
        let hash = self.hash(q);
        let mut shard = write(self.shard_of(hash));
        shard.reserved = shard.reserved.saturating_sub(bytes);
    }

    /// Calls `f` with every key and value (one shard at a time, under its read lock).
    pub fn for_each(&self, mut f: impl FnMut(&K, &V)) {
        for s in self.shards.iter() {
            let shard = read(s);
            for page in &shard.pages {
                for slot in page.iter() {
                    if let Some(e) = &slot.entry {
                        f(&e.key, &e.value);
                    }
                }
            }
        }
    }

    /// [`Index::for_each`] holding each shard's lock for one page of slots at a time, so a
    /// long walk never keeps a request waiting for more than a page's worth.
    pub fn for_each_paged(&self, mut f: impl FnMut(&K, &V)) {
        for s in self.shards.iter() {
            for page in 0.. {
                let shard = read(s);
                let Some(p) = shard.pages.get(page) else {
                    break;
                };
                for slot in p.iter() {
                    if let Some(e) = &slot.entry {
                        f(&e.key, &e.value);
                    }
                }
            }
        }
    }

    /// Removes every entry for which `f` returns true, holding each shard's lock for one page
    /// of slots at a time (see [`Index::for_each_paged`]); returns how many went. What goes is
    /// dropped outside the locks.
    pub fn remove_if_paged(&self, f: impl FnMut(&K, &V) -> bool) -> usize {
        self.remove_if_paced(f, || {})
    }

    /// [`Index::remove_if_paged`] calling `between` after each page, outside the locks (a
    /// background walk paces itself there).
    pub fn remove_if_paced(
        &self,
        mut f: impl FnMut(&K, &V) -> bool,
        mut between: impl FnMut(),
    ) -> usize {
        let mut n = 0;
        for s in self.shards.iter() {
            for page in 0.. {
                let mut gone = Vec::new();
                {
                    let mut shard = write(s);
                    let Some(p) = shard.pages.get(page) else {
                        break;
                    };
                    let doomed: Vec<u32> = p
                        .iter()
                        .enumerate()
                        .filter(|(_, slot)| {
                            slot.entry.as_ref().is_some_and(|e| f(&e.key, &e.value))
                        })
                        .map(|(i, _)| (page * shard::PAGE + i) as u32)
                        .collect();
                    for idx in doomed {
                        let value = shard.unlink(idx).value;
                        (self.on_leave)(&value);
                        gone.push(value);
                    }
                    if page + 1 == shard.pages.len() {
                        shard.compact_queues();
                    }
                }
                n += gone.len();
                drop(gone);
                between();
            }
        }
        n
    }

    /// Removes every entry for which `f` returns true; returns the removed values (dropped by
    /// the caller, outside the locks).
    pub fn remove_if(&self, mut f: impl FnMut(&K, &V) -> bool) -> Vec<V> {
        let mut out = Vec::new();
        for s in self.shards.iter() {
            let mut shard = write(s);
            let doomed: Vec<u32> = shard
                .pages
                .iter()
                .flat_map(|p| p.iter())
                .enumerate()
                .filter(|(_, slot)| slot.entry.as_ref().is_some_and(|e| f(&e.key, &e.value)))
                .map(|(i, _)| i as u32)
                .collect();
            for idx in doomed {
                let value = shard.unlink(idx).value;
                (self.on_leave)(&value);
                out.push(value);
            }
            if shard.len() == 0 {
                // Emptied: give the queues' and history's memory back too.
                shard.small = VecDeque::new();
                shard.main = VecDeque::new();
                shard.ghost.clear();
            } else {
                shard.compact_queues();
            }
        }
        out
    }

    pub fn stats(&self) -> IndexStats {
        let mut t = IndexStats {
            pinned: self.pinned.load(Ordering::Relaxed),
            ..IndexStats::default()
        };
        for s in self.shards.iter() {
            let s = read(s);
            t.entries += s.len();
            t.weight += s.small_weight + s.main_weight;
            t.reserved += s.reserved;
            t.evictions += s.evictions;
            t.small_weight += s.small_weight;
            t.main_weight += s.main_weight;
        }
        t
    }

    /// Bytes charged now (entries, not reservations).
    pub fn weight(&self) -> u64 {
        self.stats().weight
    }

    pub fn len(&self) -> usize {
        self.stats().entries
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_shard(capacity: u64) -> Index<u32, u32> {
        Index::new(capacity, 1)
    }

    #[test]
    fn weights_reservations_and_replacement_are_accounted() {
        let idx = one_shard(1000);
        assert_eq!(idx.insert(1, 10, 100), Inserted::New);
        assert_eq!(idx.insert(1, 11, 300), Inserted::Replaced);
        assert_eq!((idx.get(&1), idx.weight(), idx.len()), (Some(11), 300, 1));
        assert!(idx.reserve(&2, 600));
        // 300 stored + 600 reserved: a 200-byte entry evicts the stored one.
        assert_eq!(idx.insert(3, 30, 200), Inserted::New);
        assert_eq!((idx.peek(&1), idx.stats().reserved), (None, 600));
        idx.release(&2, 600);
        assert_eq!(idx.stats().reserved, 0);
        assert_eq!(
            idx.insert(4, 40, 901),
            Inserted::TooHeavy,
            "over 90% of a shard"
        );
        assert_eq!(idx.remove(&3), Some(30));
        assert!(idx.is_empty() && idx.weight() == 0);
    }

    #[test]
    fn a_hit_new_entry_survives_one_offs_and_a_returning_key_goes_to_main() {
        let idx = one_shard(100 * 10);
        idx.insert(0, 0, 10);
        assert_eq!(idx.get(&0), Some(0));
        // 150 one-offs through a 100-entry shard: the hit key is promoted, not evicted.
        for k in 1..=150 {
            idx.insert(k, k, 10);
        }
        assert_eq!(idx.peek(&0), Some(0));
        // Key 1 was evicted unused; it comes back from the ghost history into the main queue.
        assert_eq!(idx.peek(&1), None);
        idx.insert(1, 1, 10);
        assert!(idx.stats().main_weight >= 20, "{:?}", idx.stats());
    }

    #[test]
    fn remove_if_empties_and_the_index_refills() {
        let idx = one_shard(10_000);
        for k in 0..500 {
            idx.insert(k, k, 10);
        }
        assert_eq!(idx.remove_if(|k, _| k % 2 == 0).len(), 250);
        assert_eq!(idx.len(), 250);
        assert_eq!(idx.remove_if(|_, _| true).len(), 250);
        assert!(idx.is_empty());
        for k in 0..500 {
            idx.insert(k, k, 10);
        }
        assert_eq!((idx.len(), idx.weight()), (500, 5000));
        let mut seen = 0;
        idx.for_each(|_, _| seen += 1);
        assert_eq!(seen, 500);
    }
}
