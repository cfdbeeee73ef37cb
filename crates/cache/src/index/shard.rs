//! One shard of the index: its slab of entries, its two queues and ghost history, and the
//! eviction policy described in the parent module ([`super`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use hashbrown::HashTable;

use super::{Equivalent, Inserted};

pub(super) const MAX_FREQ: u8 = 3;
/// An entry of the main queue unused while this many times the shard's capacity was inserted is
/// evicted first (see `Shard::sweep_main`).
pub(super) const IDLE_CAPACITIES: u64 = 2;
/// Slots per page of the slab.
pub(super) const PAGE: usize = 128;

pub(super) struct Entry<K, V> {
    pub(super) key: K,
    pub(super) value: V,
    pub(super) hash: u64,
    pub(super) weight: u64,
    pub(super) freq: AtomicU8,
    /// The shard's insert clock at the entry's last use (insert or hit).
    pub(super) last_used: AtomicU64,
    pub(super) in_main: bool,
}

pub(super) struct Slot<K, V> {
    /// Bumped each time the slot is freed, so queue items that name an old occupant are
    /// recognised and skipped.
    pub(super) stamp: u32,
    pub(super) entry: Option<Entry<K, V>>,
}

#[derive(Clone, Copy)]
pub(super) struct QueueItem {
    pub(super) idx: u32,
    pub(super) stamp: u32,
}

/// Hashes of recently evicted keys, oldest first, with where each was evicted from.
pub(super) struct Ghost {
    pub(super) table: HashTable<(u64, u32, bool)>,
    pub(super) order: VecDeque<(u64, u32)>,
    pub(super) seq: u32,
    pub(super) from_small: usize,
    pub(super) from_main: usize,
}

impl Ghost {
    pub(super) fn new() -> Self {
        Ghost {
            table: HashTable::new(),
            order: VecDeque::new(),
            seq: 0,
            from_small: 0,
            from_main: 0,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.from_small + self.from_main
    }

    pub(super) fn count(&mut self, from_main: bool, up: bool) {
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

    pub(super) fn push(&mut self, hash: u64, from_main: bool, cap: usize) {
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
    pub(super) fn take(&mut self, hash: u64) -> Option<bool> {
        let e = self.table.find_entry(hash, |e| e.0 == hash).ok()?;
        let ((_, _, from_main), _) = e.remove();
        self.count(from_main, false);
        Some(from_main)
    }

    pub(super) fn clear(&mut self) {
        self.table = HashTable::new();
        self.order = VecDeque::new();
        self.from_small = 0;
        self.from_main = 0;
    }
}

pub(super) struct Shard<K, V> {
    pub(super) table: HashTable<u32>,
    pub(super) pages: Vec<Box<[Slot<K, V>]>>,
    pub(super) free: Vec<u32>,
    pub(super) small: VecDeque<QueueItem>,
    pub(super) main: VecDeque<QueueItem>,
    pub(super) small_weight: u64,
    pub(super) main_weight: u64,
    pub(super) small_len: usize,
    pub(super) main_len: usize,
    pub(super) reserved: u64,
    pub(super) capacity: u64,
    pub(super) target_small: u64,
    pub(super) ghost: Ghost,
    pub(super) evictions: u64,
    /// Bytes inserted so far: the clock entries' last use is read on.
    pub(super) clock: u64,
    /// The index's pinned gauge and the number of shards sharing it.
    pinned: Arc<AtomicU64>,
    shards: u64,
}

impl<K, V> Shard<K, V> {
    pub(super) fn new(capacity: u64, pinned: Arc<AtomicU64>, shards: u64) -> Self {
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
            pinned,
            shards: shards.max(1),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.small_len + self.main_len
    }

    /// Entries, reservations and this shard's share of the pinned bytes.
    pub(super) fn used(&self) -> u64 {
        self.small_weight
            + self.main_weight
            + self.reserved
            + self.pinned.load(Ordering::Relaxed) / self.shards
    }

    pub(super) fn slot(&self, idx: u32) -> &Slot<K, V> {
        let i = idx as usize;
        &self.pages[i / PAGE][i % PAGE]
    }

    pub(super) fn slot_mut(&mut self, idx: u32) -> &mut Slot<K, V> {
        let i = idx as usize;
        &mut self.pages[i / PAGE][i % PAGE]
    }

    pub(super) fn entry(&self, idx: u32) -> Option<&Entry<K, V>> {
        self.slot(idx).entry.as_ref()
    }

    pub(super) fn find<Q: Equivalent<K> + ?Sized>(&self, hash: u64, q: &Q) -> Option<u32> {
        self.table
            .find(hash, |&i| {
                self.entry(i)
                    .is_some_and(|e| e.hash == hash && q.equivalent(&e.key))
            })
            .copied()
    }

    pub(super) fn alloc(&mut self, entry: Entry<K, V>) -> u32 {
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
    pub(super) fn unlink(&mut self, idx: u32) -> Entry<K, V> {
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
    pub(super) fn pop_live(&mut self, main: bool) -> Option<u32> {
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
    pub(super) fn evict_one(&mut self) -> Option<Entry<K, V>> {
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
    pub(super) fn sweep_main(&mut self) -> Option<Entry<K, V>> {
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
    pub(super) fn make_room(&mut self, extra: u64, evicted: &mut Vec<Entry<K, V>>) -> bool {
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
    pub(super) fn adapt(&mut self, from_main: bool, weight: u64) {
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
    pub(super) fn compact_queues(&mut self) {
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

    /// A hit on the entry in slot `idx`: counts it for the eviction policy (relaxed atomics,
    /// under the read lock) and returns its value.
    pub(super) fn touch(&self, idx: u32) -> Option<&V> {
        let e = self.entry(idx)?;
        let f = e.freq.load(Ordering::Relaxed);
        if f < MAX_FREQ {
            e.freq.store(f + 1, Ordering::Relaxed);
        }
        if e.last_used.load(Ordering::Relaxed) != self.clock {
            e.last_used.store(self.clock, Ordering::Relaxed);
        }
        Some(&e.value)
    }

    /// Stores `value` under `key`, evicting as needed; what it evicts or replaces is handed
    /// back in `evicted` / `replaced`, for the caller to drop after the lock.
    pub(super) fn insert(
        &mut self,
        hash: u64,
        key: K,
        value: V,
        weight: u64,
        evicted: &mut Vec<Entry<K, V>>,
        replaced: &mut Option<V>,
    ) -> Inserted
    where
        K: Eq,
    {
        if weight > self.capacity / 10 * 9 {
            return Inserted::TooHeavy;
        }
        if let Some(idx) = self.find(hash, &key) {
            let (old, in_main) = {
                // invariant: `find` returned an occupied slot.
                let e = self.slot_mut(idx).entry.as_mut().expect("invariant");
                let old = std::mem::replace(&mut e.weight, weight);
                *replaced = Some(std::mem::replace(&mut e.value, value));
                (old, e.in_main)
            };
            if in_main {
                self.main_weight = self.main_weight - old + weight;
            } else {
                self.small_weight = self.small_weight - old + weight;
            }
            self.make_room(0, evicted);
            Inserted::Replaced
        } else {
            let to_main = match self.ghost.take(hash) {
                Some(from_main) => {
                    self.adapt(from_main, weight);
                    true
                }
                None => false,
            };
            if !self.make_room(weight, evicted) {
                return Inserted::TooHeavy;
            }
            self.clock += weight;
            let clock = self.clock;
            let idx = self.alloc(Entry {
                key,
                value,
                hash,
                weight,
                freq: AtomicU8::new(0),
                last_used: AtomicU64::new(clock),
                in_main: to_main,
            });
            let stamp = self.slot(idx).stamp;
            let Shard { table, pages, .. } = self;
            // Growing the table rehashes its items from their entries' stored hashes.
            table.insert_unique(hash, idx, |&i| {
                pages[i as usize / PAGE][i as usize % PAGE]
                    .entry
                    .as_ref()
                    .map_or(0, |e| e.hash)
            });
            let item = QueueItem { idx, stamp };
            if to_main {
                self.main.push_back(item);
                self.main_weight += weight;
                self.main_len += 1;
            } else {
                self.small.push_back(item);
                self.small_weight += weight;
                self.small_len += 1;
            }
            Inserted::New
        }
    }
}
