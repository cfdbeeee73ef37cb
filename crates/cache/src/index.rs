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
//! its share of the capacity, counting bytes *reserved* for bodies still being collected. The
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
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use hashbrown::HashTable;

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

const MAX_FREQ: u8 = 3;
/// An entry of the main queue unused while this many times the shard's capacity was inserted is
/// evicted first (see `Shard::sweep_main`).
const IDLE_CAPACITIES: u64 = 2;
/// Slots per page of the slab.
const PAGE: usize = 128;

struct Entry<K, V> {
    key: K,
    value: V,
    hash: u64,
    weight: u64,
    freq: AtomicU8,
    /// The shard's insert clock at the entry's last use (insert or hit).
    last_used: AtomicU64,
    in_main: bool,
}

struct Slot<K, V> {
    /// Bumped each time the slot is freed, so queue items that name an old occupant are
    /// recognised and skipped.
    stamp: u32,
    entry: Option<Entry<K, V>>,
}

#[derive(Clone, Copy)]
struct QueueItem {
    idx: u32,
    stamp: u32,
}

/// Hashes of recently evicted keys, oldest first, with where each was evicted from.
struct Ghost {
    table: HashTable<(u64, u32, bool)>,
    order: VecDeque<(u64, u32)>,
    seq: u32,
    from_small: usize,
    from_main: usize,
}

impl Ghost {
    fn new() -> Self {
        Ghost {
            table: HashTable::new(),
            order: VecDeque::new(),
            seq: 0,
            from_small: 0,
            from_main: 0,
        }
    }

    fn len(&self) -> usize {
        self.from_small + self.from_main
    }

    fn count(&mut self, from_main: bool, up: bool) {
        let c = if from_main {
            &mut self.from_main
        } else {
            &mut self.from_small
        };
        if up {
            *c += 1;
        } else {
            *c = c.saturating_sub(1);
        }
    }

    fn push(&mut self, hash: u64, from_main: bool, cap: usize) {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        match self.table.find_mut(hash, |e| e.0 == hash) {
            Some(e) => {
                let was = e.2;
                *e = (hash, seq, from_main);
                self.count(was, false);
            }
            None => {
                self.table
                    .insert_unique(hash, (hash, seq, from_main), |e| e.0);
            }
        }
        self.count(from_main, true);
        self.order.push_back((hash, seq));
        while self.len() > cap || self.order.len() > 2 * cap.max(16) {
            let Some((h, s)) = self.order.pop_front() else {
                break;
            };
            if let Ok(e) = self.table.find_entry(h, |e| e.0 == h && e.1 == s) {
                let ((_, _, from_main), _) = e.remove();
                self.count(from_main, false);
            }
        }
    }

    /// Takes `hash` out of the history: `Some(from_main)` if it was there.
    fn take(&mut self, hash: u64) -> Option<bool> {
        let e = self.table.find_entry(hash, |e| e.0 == hash).ok()?;
        let ((_, _, from_main), _) = e.remove();
        self.count(from_main, false);
        Some(from_main)
    }

    fn clear(&mut self) {
        self.table = HashTable::new();
        self.order = VecDeque::new();
        self.from_small = 0;
        self.from_main = 0;
    }
}

struct Shard<K, V> {
    table: HashTable<u32>,
    pages: Vec<Box<[Slot<K, V>]>>,
    free: Vec<u32>,
    small: VecDeque<QueueItem>,
    main: VecDeque<QueueItem>,
    small_weight: u64,
    main_weight: u64,
    small_len: usize,
    main_len: usize,
    reserved: u64,
    capacity: u64,
    target_small: u64,
    ghost: Ghost,
    evictions: u64,
    /// Bytes inserted so far: the clock entries' last use is read on.
    clock: u64,
}

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

impl<K, V> Shard<K, V> {
    fn new(capacity: u64) -> Self {
        Shard {
            table: HashTable::new(),
            pages: Vec::new(),
            free: Vec::new(),
            small: VecDeque::new(),
            main: VecDeque::new(),
            small_weight: 0,
            main_weight: 0,
            small_len: 0,
            main_len: 0,
            reserved: 0,
            capacity,
            target_small: capacity / 10,
            ghost: Ghost::new(),
            evictions: 0,
            clock: 0,
        }
    }

    fn len(&self) -> usize {
        self.small_len + self.main_len
    }

    fn used(&self) -> u64 {
        self.small_weight + self.main_weight + self.reserved
    }

    fn slot(&self, idx: u32) -> &Slot<K, V> {
        let i = idx as usize;
        &self.pages[i / PAGE][i % PAGE]
    }

    fn slot_mut(&mut self, idx: u32) -> &mut Slot<K, V> {
        let i = idx as usize;
        &mut self.pages[i / PAGE][i % PAGE]
    }

    fn entry(&self, idx: u32) -> Option<&Entry<K, V>> {
        self.slot(idx).entry.as_ref()
    }

    fn find<Q: Equivalent<K> + ?Sized>(&self, hash: u64, q: &Q) -> Option<u32> {
        self.table
            .find(hash, |&i| {
                self.entry(i)
                    .is_some_and(|e| e.hash == hash && q.equivalent(&e.key))
            })
            .copied()
    }

    fn alloc(&mut self, entry: Entry<K, V>) -> u32 {
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                let n = self.pages.len() * PAGE;
                let page: Box<[Slot<K, V>]> = (0..PAGE)
                    .map(|_| Slot {
                        stamp: 0,
                        entry: None,
                    })
                    .collect();
                self.pages.push(page);
                // Hand out the new page's slots lowest first.
                self.free.extend((n as u32 + 1..(n + PAGE) as u32).rev());
                n as u32
            }
        };
        self.slot_mut(idx).entry = Some(entry);
        idx
    }

    /// Removes the entry in `idx` from the table and the slab; its queue item goes stale.
    fn unlink(&mut self, idx: u32) -> Entry<K, V> {
        let slot = self.slot_mut(idx);
        slot.stamp = slot.stamp.wrapping_add(1);
        // invariant: only called for occupied slots (found through the table or a live queue item).
        let entry = slot.entry.take().expect("invariant: occupied slot");
        if let Ok(t) = self.table.find_entry(entry.hash, |&i| i == idx) {
            t.remove();
        }
        if entry.in_main {
            self.main_weight -= entry.weight;
            self.main_len -= 1;
        } else {
            self.small_weight -= entry.weight;
            self.small_len -= 1;
        }
        self.free.push(idx);
        entry
    }

    /// Pops the oldest live item of a queue.
    fn pop_live(&mut self, main: bool) -> Option<u32> {
        loop {
            let item = if main {
                self.main.pop_front()?
            } else {
                self.small.pop_front()?
            };
            let slot = self.slot(item.idx);
            if slot.stamp == item.stamp && slot.entry.is_some() {
                return Some(item.idx);
            }
        }
    }

    /// Evicts one entry (moving hit entries along the way). Returns it, or `None` when the
    /// shard holds nothing.
    fn evict_one(&mut self) -> Option<Entry<K, V>> {
        if let Some(e) = self.sweep_main() {
            return Some(e);
        }
        loop {
            let from_small =
                self.small_len > 0 && (self.small_weight > self.target_small || self.main_len == 0);
            if !from_small && self.main_len == 0 {
                return None;
            }
            let idx = self.pop_live(!from_small)?;
            let stamp = self.slot(idx).stamp;
            let entry = match self.slot_mut(idx).entry.as_mut() {
                Some(e) => e,
                None => continue,
            };
            let freq = entry.freq.load(Ordering::Relaxed);
            if from_small {
                if freq > 0 {
                    // Reused while new: promote.
                    entry.freq.store(0, Ordering::Relaxed);
                    entry.in_main = true;
                    let w = entry.weight;
                    self.small_weight -= w;
                    self.small_len -= 1;
                    self.main_weight += w;
                    self.main_len += 1;
                    self.main.push_back(QueueItem { idx, stamp });
                    continue;
                }
            } else if freq > 0 {
                entry.freq.store(freq - 1, Ordering::Relaxed);
                self.main.push_back(QueueItem { idx, stamp });
                continue;
            }
            let entry = self.unlink(idx);
            let cap = self.len().max(64);
            self.ghost.push(entry.hash, !from_small, cap);
            self.evictions += 1;
            return Some(entry);
        }
    }

    /// Evicts the main queue's oldest entry if a plain LRU would have evicted it long ago: more
    /// than twice the shard's capacity has been inserted since its last use. Such an entry was
    /// reused once but no longer is (a page that was popular for a while); without this it
    /// would sit in the main queue until the small queue shrank to its target, shortening the
    /// life of every new entry meanwhile. Only the queue's front is looked at: the sweep never
    /// moves the main queue's hand, so it costs its policy nothing.
    fn sweep_main(&mut self) -> Option<Entry<K, V>> {
        let idx = self.pop_live(true)?;
        let stamp = self.slot(idx).stamp;
        let idle = self.entry(idx).map_or(0, |e| {
            self.clock
                .saturating_sub(e.last_used.load(Ordering::Relaxed))
        });
        if idle <= IDLE_CAPACITIES * self.capacity {
            // Still in use, or not idle for long enough: back to the front, for the main
            // queue's own turn.
            self.main.push_front(QueueItem { idx, stamp });
            return None;
        }
        let entry = self.unlink(idx);
        let cap = self.len().max(64);
        self.ghost.push(entry.hash, true, cap);
        self.evictions += 1;
        Some(entry)
    }

    /// Evicts until `extra` more bytes fit; returns the evicted entries (dropped by the caller
    /// after the lock is released) or `Err` with them if `extra` can never fit.
    fn make_room(&mut self, extra: u64, evicted: &mut Vec<Entry<K, V>>) -> bool {
        while self.used() + extra > self.capacity {
            match self.evict_one() {
                Some(e) => evicted.push(e),
                None => return false,
            }
        }
        true
    }

    /// ARC's adaptation: a key evicted from the small queue came back (the small queue was too
    /// small for it), or one evicted from the main queue did (the main queue was).
    fn adapt(&mut self, from_main: bool, weight: u64) {
        let (gs, gm) = (
            self.ghost.from_small.max(1) as u64,
            self.ghost.from_main.max(1) as u64,
        );
        let floor = (self.capacity / 100).max(1);
        let ceiling = self.capacity - floor;
        if from_main {
            let delta = weight.saturating_mul((gs / gm).clamp(1, 8));
            self.target_small = self.target_small.saturating_sub(delta).max(floor);
        } else {
            let delta = weight.saturating_mul((gm / gs).clamp(1, 8));
            self.target_small = (self.target_small + delta).min(ceiling);
        }
    }

    /// Drops stale queue items once they outnumber the live ones (after removals and purges).
    fn compact_queues(&mut self) {
        let live = self.len();
        if self.small.len() + self.main.len() <= 2 * live + 1024 {
            return;
        }
        let pages = &self.pages;
        let keep = |item: &QueueItem| {
            let s = &pages[item.idx as usize / PAGE][item.idx as usize % PAGE];
            s.stamp == item.stamp && s.entry.is_some()
        };
        self.small.retain(keep);
        self.main.retain(keep);
        self.small.shrink_to_fit();
        self.main.shrink_to_fit();
    }
}

/// The sharded index. `S` hashes keys (and their borrowed forms).
pub struct Index<K, V, S = foldhash::quality::RandomState> {
    shards: Box<[RwLock<Shard<K, V>>]>,
    hasher: S,
    shift: u32,
    capacity: u64,
}

/// Totals over all shards (read one shard at a time, so only approximately simultaneous).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexStats {
    pub entries: usize,
    pub weight: u64,
    pub reserved: u64,
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
        Index {
            shards: (0..n).map(|_| RwLock::new(Shard::new(per))).collect(),
            hasher,
            shift: 64 - n.trailing_zeros(),
            capacity: per * n as u64,
        }
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
        let e = shard.entry(idx)?;
        let f = e.freq.load(Ordering::Relaxed);
        if f < MAX_FREQ {
            e.freq.store(f + 1, Ordering::Relaxed);
        }
        if e.last_used.load(Ordering::Relaxed) != shard.clock {
            e.last_used.store(shard.clock, Ordering::Relaxed);
        }
        Some(e.value.clone())
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
            if weight > shard.capacity / 10 * 9 {
                return Inserted::TooHeavy;
            }
            if let Some(idx) = shard.find(hash, &key) {
                let (old, in_main) = {
                    // invariant: `find` returned an occupied slot.
                    let e = shard.slot_mut(idx).entry.as_mut().expect("invariant");
                    let old = std::mem::replace(&mut e.weight, weight);
                    replaced = Some(std::mem::replace(&mut e.value, value));
                    (old, e.in_main)
                };
                if in_main {
                    shard.main_weight = shard.main_weight - old + weight;
                } else {
                    shard.small_weight = shard.small_weight - old + weight;
                }
                shard.make_room(0, &mut evicted);
                Inserted::Replaced
            } else {
                let to_main = match shard.ghost.take(hash) {
                    Some(from_main) => {
                        shard.adapt(from_main, weight);
                        true
                    }
                    None => false,
                };
                if !shard.make_room(weight, &mut evicted) {
                    return Inserted::TooHeavy;
                }
                shard.clock += weight;
                let clock = shard.clock;
                let idx = shard.alloc(Entry {
                    key,
                    value,
                    hash,
                    weight,
                    freq: AtomicU8::new(0),
                    last_used: AtomicU64::new(clock),
                    in_main: to_main,
                });
                let stamp = shard.slot(idx).stamp;
                let Shard { table, pages, .. } = &mut *shard;
                // Growing the table rehashes its items from their entries' stored hashes.
                table.insert_unique(hash, idx, |&i| {
                    pages[i as usize / PAGE][i as usize % PAGE]
                        .entry
                        .as_ref()
                        .map_or(0, |e| e.hash)
                });
                let item = QueueItem { idx, stamp };
                if to_main {
                    shard.main.push_back(item);
                    shard.main_weight += weight;
                    shard.main_len += 1;
                } else {
                    shard.small.push_back(item);
                    shard.small_weight += weight;
                    shard.small_len += 1;
                }
                Inserted::New
            }
        };
        // Values are dropped here, after the lock: freeing a large body takes time.
        drop((evicted, replaced));
        outcome
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
                out.push(shard.unlink(idx).value);
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
        let mut t = IndexStats::default();
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
