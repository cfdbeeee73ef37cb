//! The disk tier: the cache's second tier, larger than memory, kept across restarts and
//! `kill -9`, never serving a torn object.
//!
//! # Layout
//!
//! The directory holds a lock file, segment files (`NNNNNNNN.seg`), their summaries
//! (`NNNNNNNN.idx`) and a purge log (`purges.log`). Records are appended to the newest
//! segment (see [`record`] for the bytes); a full segment is written out (fsync), then its
//! summary (fsync, rename), and a new one starts. Space is reclaimed a whole segment at a
//! time, oldest first: the tier never uses more than `cache_disk_size`, its summaries and
//! purge log included.
//!
//! # The index
//!
//! In memory, a key hash → where its latest record is (16 bytes of payload per object). At
//! start it is empty and the tier answers at once; a background thread fills it from the
//! summaries, newest segment first, and reads through the records of any segment that has
//! none (the one being written when the process stopped), stopping at the first record whose
//! checksums fail. Newest first with "insert if absent" keeps the latest record of a key
//! whatever the order, also against records written meanwhile.
//!
//! # Reading
//!
//! Every read checks the record's head checksum and its key (hashes may collide), then the
//! body's checksum before the object is made: a record torn, truncated, altered or removed
//! behind rampart's back is a miss (counted, and logged once per kind), never an answer.
//!
//! # Writing
//!
//! Off the request path: a thread takes objects from a bounded queue (a full queue drops
//! the offer). Only objects used `cache_disk_min_uses` times are written (a small counting
//! sketch of key hashes, aged by halving), so one-hit wonders do not wear the disk. Writes
//! are flushed to the device at most a second apart, and whenever a segment is sealed: a
//! power cut loses at most the last second, and what it tore is found by the checksums.
//! A write error (disk full, a read-only directory) is logged once, counted, the partial
//! record cut off, and writing pauses for [`PAUSE`]; requests go on from memory and origin.
//!
//! # Purges
//!
//! A purge is a ban: its time and scope, kept in memory and in the purge log. A record whose
//! response was received before a ban that matches its key is gone (a hard purge) or stale
//! (a soft one) when it is read. Exact purges are kept by key, so a CMS purging a URL on every
//! publish costs one map lookup per read; wider ones in a list. A ban is forgotten once every
//! record older than it has been reclaimed.
//!
//! # `Vary`
//!
//! As in memory: a varying resource's key holds a marker record with its `Vary` and a
//! generation; each variant is keyed by the key, the generation and its variant key. A new
//! marker (the resource varies differently, or was purged) makes the old variants unreachable.
//!
//! # Files
//!
//! This file is the store's API ([`DiskStore`]). `state.rs` is what every part shares and uses
//! nothing of theirs (settings, the index, segments, bans, counters, reads, the writer's jobs);
//! `writer.rs` is the writer thread, `segments.rs` its segments (open, seal, reclaim) and
//! `large_writes.rs` its large objects; `purges.rs` the purge log; `warm.rs` the warm-up at
//! start; `record.rs`, `large.rs` and `dir.rs` the formats and the directory.

pub mod dir;
pub mod large;
mod large_writes;
mod purges;
pub mod record;
mod segments;
mod state;
mod warm;
mod writer;

use rampart_head::Fields;
use std::collections::{BTreeMap, HashSet};
use std::io::ErrorKind;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::key::CacheKey;
use crate::object::{DiskMark, Object, Residency};
use crate::store::PurgeScope;
use dir::CacheDir;
use large::{Extent, LargeWrite};
use record::Kind;

use state::{
    lock, now_micros, resource_hash, Ban, Bans, Counters, Inner, Job, Map, Verdict, LARGE, QUEUE,
    SHARDS, SKETCH, SKETCH_AGE,
};
pub use state::{DiskOptions, DiskStats, State, PAUSE};
use writer::{take_lock, writer_main, Writer};

/// What a disk lookup found: the object, and its variant key when it varies (for the memory
/// store).
#[derive(Debug)]
pub struct DiskHit {
    pub object: Object,
    pub variant: Option<Bytes>,
    /// The record was used before (read from disk, or its object hit in memory, since it was
    /// written): put the object back in memory. A first read only answers the request, so a
    /// working set larger than memory does not push out what memory holds for one use.
    pub promote: bool,
}

/// What a purge did on disk ([`DiskStore::purge`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskPurge {
    /// The objects removed (soft: marked): `None` when the purge applies as a ban (a prefix,
    /// a domain, a tag: the index keeps hashes, not URLs), whose matches are not counted.
    pub counted: Option<usize>,
    /// When the purge must reach the purge log to outlive a restart, its ticket
    /// ([`DiskStore::purge_logged`]); `None` when there is nothing on disk for it to outlive.
    pub ticket: Option<u64>,
}

/// The disk tier (see the module notes).
pub struct DiskStore {
    inner: Arc<Inner>,
    tx: Mutex<Option<SyncSender<Job>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for DiskStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskStore")
            .field("dir", &self.inner.options.dir)
            .field("stats", &self.stats())
            .finish()
    }
}

impl DiskStore {
    /// Opens the tier in `options.dir` (created when missing) and returns at once: a thread
    /// takes the directory's lock (waiting while another process holds it), warms the index
    /// in the background and writes. Until it holds the lock, lookups miss and offers are
    /// dropped.
    pub fn open(options: DiskOptions) -> std::io::Result<DiskStore> {
        let dir = CacheDir::open(&options.dir)?;
        let inner = Arc::new(Inner {
            dir,
            state: AtomicU8::new(State::Waiting as u8),
            index: (0..SHARDS).map(|_| Mutex::new(Map::default())).collect(),
            segments: RwLock::new(BTreeMap::new()),
            bans: RwLock::new(Bans::default()),
            purge_log: Mutex::new(Vec::new()),
            purge_tickets: AtomicU64::new(0),
            purges_logged: AtomicU64::new(0),
            sketch: (0..SKETCH).map(|_| AtomicU8::new(0)).collect(),
            bumps: AtomicU64::new(0),
            stats: Counters::default(),
            logged: Mutex::new(HashSet::new()),
            paused_until: AtomicU64::new(0),
            options,
        });
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
        // The directory free (the usual case): taken now, so the first request can be a hit.
        let started = match take_lock(&inner.dir) {
            Ok(lock) => Some((lock, Writer::start(inner.clone())?)),
            Err(e) if e.kind() == ErrorKind::WouldBlock => None,
            Err(e) => return Err(e),
        };
        let thread = std::thread::Builder::new()
            .name("rampart-disk".into())
            .spawn({
                let inner = inner.clone();
                move || writer_main(inner, rx, started)
            })?;
        Ok(DiskStore {
            inner,
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
        })
    }

    pub fn options(&self) -> &DiskOptions {
        &self.inner.options
    }

    pub fn state(&self) -> State {
        self.inner.state()
    }

    /// The stored response for `key` that matches `request` (following a `Vary` marker),
    /// checked whole and not purged; its body made by `body` (the memory store's charged
    /// body). `None` on anything else.
    pub fn lookup(
        &self,
        key: &CacheKey,
        request: &Fields,
        body: impl FnOnce(Vec<u8>) -> (Bytes, Option<Arc<Residency>>),
    ) -> Option<DiskHit> {
        let found = self.find(key, request, body);
        let c = if found.is_some() {
            &self.inner.stats.hits
        } else {
            &self.inner.stats.misses
        };
        c.fetch_add(1, Ordering::Relaxed);
        found
    }

    fn find(
        &self,
        key: &CacheKey,
        request: &Fields,
        body: impl FnOnce(Vec<u8>) -> (Bytes, Option<Arc<Residency>>),
    ) -> Option<DiskHit> {
        let inner = &*self.inner;
        if !matches!(inner.state(), State::Warming | State::Ready) {
            return None;
        }
        let kb = record::key_bytes(key);
        let mut hash = record::hash(&[&kb]);
        let (mut entry, mut head) = inner.read_head(hash)?;
        let mut variant = None;
        let parsed = record::parse_head(&head)?;
        if parsed.key != kb.as_slice() || !parsed.variant.is_empty() {
            return None;
        }
        if parsed.header.kind == Kind::Marker {
            let (gen, vary) = Inner::marker(parsed.meta)?;
            let v = vary.variant_key(request)?;
            let mut vb = gen.to_be_bytes().to_vec();
            vb.extend_from_slice(&v);
            hash = record::hash(&[&kb, &vb]);
            (entry, head) = inner.read_head(hash)?;
            let p = record::parse_head(&head)?;
            if p.key != kb.as_slice() || p.variant != vb.as_slice() {
                return None;
            }
            variant = Some(v);
        }
        let parsed = record::parse_head(&head)?;
        if parsed.header.kind != Kind::Object {
            return None;
        }
        let verdict = inner
            .bans
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .verdict(key, &[], parsed.header.time);
        if verdict == Verdict::Gone {
            inner.remove_if(hash, entry);
            return None;
        }
        let bytes = inner.read_body(hash, entry, &parsed.header)?;
        inner.stats.read_bytes.fetch_add(
            u64::from(entry.head) + bytes.len() as u64,
            Ordering::Relaxed,
        );
        let (body, residency, extent) = if entry.offset == LARGE {
            let file = inner.file(entry.segment)?;
            let len = large::layout(&file).ok()?.body_len;
            let crcs = large::decode_table(&bytes).into_boxed_slice();
            // Its first chunk checked before a head can be sent: bad, it is dropped (by the
            // extent, through `ExtentSink::corrupt`) and this is a miss.
            let extent = Extent::open(file, entry.segment, len, crcs, self.inner.clone()).ok()?;
            (Bytes::new(), None, Some(Arc::new(extent)))
        } else {
            let (body, residency) = body(bytes);
            (body, residency, None)
        };
        let Some(mut object) = crate::portable::decode_parts(parsed.meta, body, residency) else {
            inner.fault(
                "a record holds an object this version cannot read",
                &"skipped",
            );
            inner.remove_if(hash, entry);
            return None;
        };
        // Tag purges judge by the tags the record holds.
        let verdict = {
            let bans = inner.bans.read().unwrap_or_else(|p| p.into_inner());
            match (verdict, bans.has_tags() && !object.tags.is_empty()) {
                (Verdict::Gone, _) | (_, false) => verdict,
                (_, true) => bans.verdict(key, &object.tags, parsed.header.time),
            }
        };
        if verdict == Verdict::Gone {
            inner.remove_if(hash, entry);
            return None;
        }
        object.disk = DiskMark::used();
        object.extent = extent;
        let promote = inner.mark_reused(hash).unwrap_or(false);
        if verdict == Verdict::Stale {
            object.invalidate();
        }
        Some(DiskHit {
            object,
            variant,
            promote,
        })
    }

    /// An object stored in memory was used (fetched and stored, or served): counts the use,
    /// and queues it for writing once it has been used `cache_disk_min_uses` times.
    pub fn offer(&self, key: &CacheKey, variant: Option<&[u8]>, object: &Arc<Object>) {
        if !object.disk.pending() || self.inner.state() == State::Closed {
            return;
        }
        if self.bump(key) < self.inner.options.min_uses {
            self.inner
                .stats
                .not_admitted
                .fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.queue(key, variant, object);
    }

    /// Starts writing a large object (one whose body does not go to memory) as it arrives:
    /// `None` unless the tier takes it (ready, not paused, `len` within `cache_max_object`
    /// when known, and used `cache_disk_min_uses` times). Feed the returned handle the body.
    pub fn begin_large(&self, key: &CacheKey, len: Option<u64>) -> Option<LargeWrite> {
        static TOKENS: AtomicU64 = AtomicU64::new(1);
        let inner = &self.inner;
        let limit = inner.options.max_body();
        let paused = inner.paused_until.load(Ordering::Relaxed) > now_micros();
        if !matches!(inner.state(), State::Warming | State::Ready) || paused {
            inner.stats.dropped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        if len.is_some_and(|n| n > limit) {
            inner.stats.dropped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        if self.bump(key) < inner.options.min_uses {
            inner.stats.not_admitted.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let tx = lock(&self.tx).clone()?;
        Some(LargeWrite {
            token: TOKENS.fetch_add(1, Ordering::Relaxed),
            tx,
            written: 0,
            limit,
            queue: Arc::new(large::Queue::default()),
            batch: Vec::new(),
            batch_len: 0,
            done: false,
            aborted: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        })
    }

    /// The largest body the tier takes.
    pub fn max_body(&self) -> u64 {
        self.inner.options.max_body()
    }

    /// An object written (or queued) to disk was used again from memory: counted once per
    /// record for write amplification.
    pub fn reused(&self, key: &CacheKey, variant: Option<&[u8]>, object: &Object) {
        if !object.disk.hit_matters() {
            return;
        }
        let kb = record::key_bytes(key);
        let hash = match variant {
            None => record::hash(&[&kb]),
            Some(v) => {
                // The variant's record is keyed by the marker's generation: read it.
                let Some((_, head)) = self.inner.read_head(record::hash(&[&kb])) else {
                    return;
                };
                let Some(gen) = record::parse_head(&head)
                    .filter(|h| h.header.kind == Kind::Marker)
                    .and_then(|h| Inner::marker(h.meta))
                    .map(|(g, _)| g)
                else {
                    return;
                };
                let mut vb = gen.to_be_bytes().to_vec();
                vb.extend_from_slice(v);
                record::hash(&[&kb, &vb])
            }
        };
        // Not written yet (still queued): a later use counts it.
        if self.inner.mark_reused(hash).is_some() {
            object.disk.take_first_reuse();
        }
    }

    /// Queues `object` for writing whatever its uses (a 304 refreshed an object on disk: its
    /// new headers go there too).
    pub fn rewrite(&self, key: &CacheKey, variant: Option<&[u8]>, object: &Arc<Object>) {
        if object.disk.pending() {
            self.queue(key, variant, object);
        }
    }

    fn queue(&self, key: &CacheKey, variant: Option<&[u8]>, object: &Arc<Object>) {
        let inner = &self.inner;
        let body = object.body.len() as u64;
        let paused = inner.paused_until.load(Ordering::Relaxed) > now_micros();
        if paused || body > inner.options.max_body() || inner.state() == State::Waiting {
            inner.stats.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if !object.disk.take() {
            return;
        }
        let job = Job::Write {
            key: key.clone(),
            variant: variant.map(Bytes::copy_from_slice),
            object: object.clone(),
        };
        let tx = lock(&self.tx);
        match tx.as_ref().map(|t| t.try_send(job)) {
            Some(Ok(())) => {}
            Some(Err(TrySendError::Full(_))) => {
                object.disk.give_back();
                inner.stats.dropped.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }

    /// Counts a use of `key` in the admission sketch; the count so far.
    fn bump(&self, key: &CacheKey) -> u32 {
        let inner = &self.inner;
        if inner.options.min_uses <= 1 {
            return 1;
        }
        let h = resource_hash(key) ^ u64::from(key.is_https());
        let c = &inner.sketch[(h as usize) % SKETCH];
        let prev = c
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_add(1))
            })
            .unwrap_or(0);
        if inner.bumps.fetch_add(1, Ordering::Relaxed) % SKETCH_AGE == SKETCH_AGE - 1 {
            for c in inner.sketch.iter() {
                c.store(c.load(Ordering::Relaxed) / 2, Ordering::Relaxed);
            }
        }
        u32::from(prev) + 1
    }

    /// Purges `scope` on disk (see the module notes): applies at once to reads, and is
    /// written to the purge log. What it reports: the objects it removed (or, soft, marked)
    /// where the index can say (a URL, everything), and the ticket that says when the purge
    /// is in the log ([`DiskStore::purge_logged`]).
    pub fn purge(&self, scope: &PurgeScope, soft: bool) -> DiskPurge {
        let inner = &self.inner;
        let ban = Ban {
            time: now_micros(),
            soft,
            scope: scope.clone(),
        };
        // An exact purge of a URL the disk does not hold (every successful POST invalidates
        // its URL) is kept in memory only: it still stops a write queued for it.
        let mut persist = true;
        let counted = match scope {
            PurgeScope::Exact(k) => {
                let mut present = 0;
                for https in [false, true] {
                    let h = record::hash(&[&record::key_bytes(&k.clone().for_https(https))]);
                    let mut shard = inner.shard(h);
                    present += usize::from(if soft {
                        shard.contains_key(&h)
                    } else {
                        shard.remove(&h).is_some()
                    });
                }
                persist = present > 0 || inner.state() != State::Ready;
                Some(present)
            }
            PurgeScope::Everything => {
                let mut all = 0;
                for s in inner.index.iter() {
                    let mut s = lock(s);
                    all += s.len();
                    if !soft {
                        s.clear();
                    }
                }
                Some(all)
            }
            // The index keeps hashes, not URLs or tags: these apply as bans, read by read.
            PurgeScope::Prefix { .. }
            | PurgeScope::Contains { .. }
            | PurgeScope::Domain(_)
            | PurgeScope::Tag(_) => None,
        };
        inner
            .bans
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .add(ban.clone());
        if !persist || inner.state() == State::Closed {
            return DiskPurge {
                counted,
                ticket: None,
            };
        }
        // After the ban: a rewrite of the log that has read this ticket has the ban.
        let ticket = {
            let mut q = lock(&inner.purge_log);
            let t = inner.purge_tickets.fetch_add(1, Ordering::AcqRel) + 1;
            q.push((t, ban));
            t
        };
        if let Some(tx) = lock(&self.tx).as_ref() {
            let _ = tx.try_send(Job::Purges);
        }
        DiskPurge {
            counted,
            ticket: Some(ticket),
        }
    }

    /// Whether the purge that got `ticket` is in the purge log, flushed: it outlives a restart
    /// and a power cut.
    pub fn purge_logged(&self, ticket: u64) -> bool {
        self.inner.purges_logged.load(Ordering::Acquire) >= ticket
    }

    /// Waits until everything queued so far is written and flushed (tests, shutdown).
    pub fn flush(&self) {
        let (ack, done) = std::sync::mpsc::sync_channel(1);
        let sent = lock(&self.tx)
            .as_ref()
            .is_some_and(|t| t.send(Job::Flush(ack)).is_ok());
        if sent {
            let _ = done.recv_timeout(Duration::from_secs(30));
        }
    }

    /// Writes out what is queued, flushes it and lets the directory go (its lock with it):
    /// at shutdown, or before a new binary takes over.
    pub fn close(&self) {
        // First, so a warm-up still running stops at its next segment.
        self.inner
            .state
            .store(State::Closed as u8, Ordering::Release);
        if let Some(tx) = lock(&self.tx).take() {
            let _ = tx.send(Job::Close);
        }
        if let Some(t) = lock(&self.thread).take() {
            let _ = t.join();
        }
        self.inner
            .state
            .store(State::Closed as u8, Ordering::Release);
    }

    /// Waits (up to `limit`) until the index is warm; whether it is.
    pub fn wait_ready(&self, limit: Duration) -> bool {
        let start = Instant::now();
        while self.state() != State::Ready {
            if start.elapsed() > limit || self.state() == State::Closed {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        true
    }

    pub fn stats(&self) -> DiskStats {
        let c = &self.inner.stats;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        DiskStats {
            state: self.inner.state.load(Ordering::Relaxed),
            used: l(&c.used),
            capacity: self.inner.options.size,
            objects: self.inner.index.iter().map(|s| lock(s).len() as u64).sum(),
            hits: l(&c.hits),
            misses: l(&c.misses),
            read_bytes: l(&c.read_bytes),
            writes: l(&c.writes),
            write_bytes: l(&c.write_bytes),
            not_admitted: l(&c.not_admitted),
            dropped: l(&c.dropped),
            errors: l(&c.errors),
            corrupt: l(&c.corrupt),
            reused_bytes: l(&c.reused_bytes),
            warm_segments: l(&c.warm_segments),
            warm_total: l(&c.warm_total),
            warm_objects: l(&c.warm_objects),
            warm_micros: l(&c.warm_micros),
            reclaimed_segments: l(&c.reclaimed),
        }
    }
}

impl Drop for DiskStore {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests;
