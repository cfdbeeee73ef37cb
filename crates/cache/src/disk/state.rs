//! The disk tier's shared state, which every part of it uses and which uses none of them: its
//! settings and figures, the index (hash → where the record is) in shards, the open segment
//! files, the bans reads apply, the counters, the reads every part makes, the writer's jobs,
//! and the file helpers.

use rampart_head::Fields;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::hash::{BuildHasherDefault, Hasher};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::HeaderValue;

use crate::key::CacheKey;
use crate::object::Object;
use crate::store::PurgeScope;
use crate::vary::Vary;

use super::dir::CacheDir;
use super::large;
use super::record;

/// How long writing pauses after a write error.
pub const PAUSE: Duration = Duration::from_secs(10);
/// Jobs waiting for the writer; an offer past them is dropped (counted), and offered again at
/// the object's next use. The objects waiting are mostly those memory holds anyway (a queued
/// one memory lets go stays charged to it, see `Residency`), so a long queue costs little and
/// rides out a burst of first uses while the worker keeps the CPU busy.
pub(super) const QUEUE: usize = 4096;
/// Index shards (each a mutex over a map).
pub(super) const SHARDS: usize = 16;
/// Counters of the admission sketch.
pub(super) const SKETCH: usize = 1 << 16;
/// The sketch halves its counters after this many bumps.
pub(super) const SKETCH_AGE: u64 = 1 << 18;
/// Flush written records to the device at least this often.
pub(super) const SYNC_EVERY: Duration = Duration::from_secs(1);
pub(super) const LOCK: &str = "lock";
/// The largest summary read: a segment of 64 MiB holds at most this many records' entries.
pub(super) const SUMMARY_CAP: u64 = 64 << 20;
pub(super) const PURGES: &str = "purges.log";

/// How the tier is set up (`cache_disk`, `cache_disk_size`, `cache_disk_min_uses`).
#[derive(Debug, Clone)]
pub struct DiskOptions {
    pub dir: PathBuf,
    pub size: u64,
    pub min_uses: u32,
    /// The largest body the tier takes (`cache_max_object`): larger than half a segment, an
    /// object gets a file of its own.
    pub max_object: u64,
}

impl DiskOptions {
    /// Bytes per segment: a thirty-second of the size, from 256 KiB to 64 MiB.
    pub fn segment_size(&self) -> u64 {
        (self.size / 32).clamp(256 << 10, 64 << 20)
    }

    /// The largest record a segment takes: half a segment.
    pub fn max_record(&self) -> u64 {
        self.segment_size() / 2
    }

    /// The same, in another directory.
    pub fn with_dir(&self, dir: &std::path::Path) -> DiskOptions {
        DiskOptions {
            dir: dir.to_path_buf(),
            ..self.clone()
        }
    }

    /// The largest body the tier takes: `max_object`, at most a quarter of the size.
    pub fn max_body(&self) -> u64 {
        self.max_object.min(self.size / 4)
    }
}

/// Where the tier is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Waiting for the directory's lock (another process holds it: the one being upgraded).
    Waiting = 0,
    /// Answering, while the index is being filled.
    Warming = 1,
    /// Answering with the whole index.
    Ready = 2,
    /// Closed (or the directory could not be used).
    Closed = 3,
}

/// Counters (see [`DiskStore::stats`]).
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) used: AtomicU64,
    pub(super) hits: AtomicU64,
    pub(super) misses: AtomicU64,
    pub(super) read_bytes: AtomicU64,
    pub(super) writes: AtomicU64,
    pub(super) write_bytes: AtomicU64,
    pub(super) not_admitted: AtomicU64,
    pub(super) dropped: AtomicU64,
    pub(super) errors: AtomicU64,
    pub(super) corrupt: AtomicU64,
    pub(super) reused_bytes: AtomicU64,
    pub(super) warm_segments: AtomicU64,
    pub(super) warm_total: AtomicU64,
    pub(super) warm_objects: AtomicU64,
    pub(super) warm_micros: AtomicU64,
    pub(super) reclaimed: AtomicU64,
}

/// The tier's figures now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskStats {
    pub state: u8,
    /// Bytes of the directory's files (segments, summaries, purge log).
    pub used: u64,
    pub capacity: u64,
    pub objects: u64,
    pub hits: u64,
    pub misses: u64,
    pub read_bytes: u64,
    pub writes: u64,
    pub write_bytes: u64,
    /// Offers below `cache_disk_min_uses` uses.
    pub not_admitted: u64,
    /// Offers dropped: the queue was full, writing was paused, or the object was too large.
    pub dropped: u64,
    pub errors: u64,
    /// Objects dropped because their bytes on disk were not whole (a record's or a large
    /// object's chunk failing its checksum, or unreadable): each is fetched again.
    pub corrupt: u64,
    /// Bytes of records used again after they were written (each record once): write
    /// amplification is `write_bytes` over this.
    pub reused_bytes: u64,
    /// Segments whose records are in the index, of how many there were at start.
    pub warm_segments: u64,
    pub warm_total: u64,
    /// Objects put in the index by the warm-up, and how long it took (µs; 0 until done).
    pub warm_objects: u64,
    pub warm_micros: u64,
    pub reclaimed_segments: u64,
}

/// Where a key's latest record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Entry {
    pub(super) segment: u32,
    pub(super) offset: u32,
    pub(super) head: u32,
    pub(super) body: u32,
    /// Used again since it was written (counted once in `reused_bytes`).
    pub(super) reused: bool,
}

/// The index's maps are keyed by hashes already.
#[derive(Default)]
pub(super) struct Ident(u64);

impl Hasher for Ident {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

pub(super) type Map<V> = HashMap<u64, V, BuildHasherDefault<Ident>>;

pub(super) struct Segment {
    pub(super) file: Arc<File>,
    /// Bytes of its file and its summary.
    pub(super) bytes: u64,
    /// The oldest receive time of its records (µs; `u64::MAX` while unknown or empty).
    pub(super) oldest: u64,
    /// A large object's file (see [`large`]), and its key hash once known.
    pub(super) large: Option<u64>,
}

/// An index entry's offset that says: a large object's file (see [`large`]).
pub(super) const LARGE: u32 = u32::MAX;

pub(super) fn resource_hash(key: &CacheKey) -> u64 {
    record::hash(&[key.host(), key.url()])
}

pub(super) fn now_micros() -> u64 {
    micros(SystemTime::now())
}

pub(super) fn micros(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

pub(crate) struct Inner {
    pub(super) options: DiskOptions,
    /// The directory, held open: every file is opened through it (see [`dir`]).
    pub(super) dir: CacheDir,
    pub(super) state: AtomicU8,
    pub(super) index: Box<[Mutex<Map<Entry>>]>,
    pub(super) segments: RwLock<BTreeMap<u32, Segment>>,
    pub(super) bans: RwLock<Bans>,
    /// Purges waiting for the purge log, with their tickets.
    pub(super) purge_log: Mutex<Vec<(u64, Ban)>>,
    /// The last purge ticket handed out, and the last one whose purge is in the log (every
    /// one up to it is).
    pub(super) purge_tickets: AtomicU64,
    pub(super) purges_logged: AtomicU64,
    pub(super) sketch: Box<[AtomicU8]>,
    pub(super) bumps: AtomicU64,
    pub(super) stats: Counters,
    /// Kinds of fault already logged.
    pub(super) logged: Mutex<HashSet<&'static str>>,
    /// Writing pauses until then (µs since the epoch) after a write error.
    pub(super) paused_until: AtomicU64,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Inner {
    pub(super) fn shard(&self, hash: u64) -> std::sync::MutexGuard<'_, Map<Entry>> {
        lock(&self.index[(hash >> 60) as usize % SHARDS])
    }

    pub(super) fn state(&self) -> State {
        match self.state.load(Ordering::Acquire) {
            0 => State::Waiting,
            1 => State::Warming,
            2 => State::Ready,
            _ => State::Closed,
        }
    }

    /// Counts a fault and logs its kind the first time.
    pub(super) fn fault(&self, what: &'static str, detail: &dyn std::fmt::Display) {
        self.stats.errors.fetch_add(1, Ordering::Relaxed);
        if lock(&self.logged).insert(what) {
            tracing::warn!(
                dir = %self.options.dir.display(),
                "disk cache: {what}: {detail} (logged once; rampart_cache_disk_errors_total counts each)"
            );
        }
    }

    /// A large object's file found not whole: out of the index and removed (readers that
    /// have it open keep their handle), counted.
    pub(super) fn drop_large(&self, id: u32) {
        let seg = {
            let mut segs = self.segments.write().unwrap_or_else(|p| p.into_inner());
            match segs.get(&id) {
                Some(s) if s.large.is_some() => segs.remove(&id),
                _ => None,
            }
        };
        let Some(seg) = seg else {
            // Dropped already (another reader found it first).
            return;
        };
        if let Some(hash) = seg.large {
            let mut shard = self.shard(hash);
            if shard.get(&hash).is_some_and(|e| e.segment == id) {
                shard.remove(&hash);
            }
        }
        let _ = self.dir.remove(&segment_name(id, "big"));
        sub_used(self, seg.bytes);
        self.stats.corrupt.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn remove_if(&self, hash: u64, entry: Entry) {
        let mut shard = self.shard(hash);
        if shard
            .get(&hash)
            .is_some_and(|e| (e.segment, e.offset) == (entry.segment, entry.offset))
        {
            shard.remove(&hash);
        }
    }

    /// The record for `hash` was used again since it was written: counted once (write
    /// amplification is the bytes written over these).
    /// `None` when the index has no record for `hash`, else whether it was marked before.
    pub(super) fn mark_reused(&self, hash: u64) -> Option<bool> {
        let mut shard = self.shard(hash);
        let e = shard.get_mut(&hash)?;
        if e.reused {
            return Some(true);
        }
        e.reused = true;
        let bytes = u64::from(e.head) + u64::from(e.body);
        drop(shard);
        self.stats.reused_bytes.fetch_add(bytes, Ordering::Relaxed);
        Some(false)
    }

    pub(super) fn file(&self, segment: u32) -> Option<Arc<File>> {
        self.segments
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&segment)
            .map(|s| s.file.clone())
    }

    /// The checked head of the record for `hash`, with where it is; a record that cannot be
    /// read or is not whole is dropped from the index.
    pub(super) fn read_head(&self, hash: u64) -> Option<(Entry, Vec<u8>)> {
        let entry = *self.shard(hash).get(&hash)?;
        let Some(file) = self.file(entry.segment) else {
            self.remove_if(hash, entry);
            return None;
        };
        let mut head = vec![0; entry.head as usize];
        let at = if entry.offset == LARGE {
            match large::layout(&file) {
                Ok(l) if l.head_len == entry.head && l.table_len == entry.body => l.head_at,
                Ok(_) | Err(_) => {
                    self.fault(
                        "a large object's file is not whole",
                        &format_args!("{:08x}.big", entry.segment),
                    );
                    self.remove_if(hash, entry);
                    self.drop_large(entry.segment);
                    return None;
                }
            }
        } else {
            u64::from(entry.offset)
        };
        if let Err(e) = file.read_exact_at(&mut head, at) {
            self.fault("a record could not be read", &e);
            self.remove_if(hash, entry);
            return None;
        }
        if record::parse_head(&head).is_none_or(|h| h.header.body_len != entry.body) {
            self.fault(
                "a record's head failed its checksum",
                &format_args!("segment {} offset {}", entry.segment, entry.offset),
            );
            self.remove_if(hash, entry);
            self.stats.corrupt.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some((entry, head))
    }

    pub(super) fn read_body(
        &self,
        hash: u64,
        entry: Entry,
        header: &record::Header,
    ) -> Option<Vec<u8>> {
        let file = self.file(entry.segment)?;
        let mut body = vec![0; entry.body as usize];
        let at = if entry.offset == LARGE {
            // A large object's "body" here is its chunk table.
            large::layout(&file).ok()?.table_at
        } else {
            u64::from(entry.offset) + u64::from(entry.head)
        };
        if let Err(e) = file.read_exact_at(&mut body, at) {
            self.fault("a record could not be read", &e);
            self.remove_if(hash, entry);
            return None;
        }
        if !record::body_ok(header, &body) {
            self.fault(
                "a record's body failed its checksum",
                &format_args!("segment {} offset {}", entry.segment, entry.offset),
            );
            self.remove_if(hash, entry);
            if entry.offset == LARGE {
                // A large object's chunk table.
                self.drop_large(entry.segment);
            } else {
                self.stats.corrupt.fetch_add(1, Ordering::Relaxed);
            }
            return None;
        }
        Some(body)
    }

    /// The marker generation and `Vary` a marker head holds.
    pub(super) fn marker(meta: &[u8]) -> Option<(u64, Vary)> {
        let (gen, text) = meta.split_at_checked(8)?;
        let mut h = Fields::new();
        h.insert(http::header::VARY, HeaderValue::from_bytes(text).ok()?);
        Some((u64::from_be_bytes(gen.try_into().ok()?), Vary::parse(&h)))
    }
}

impl crate::extent::ExtentSink for Inner {
    fn read(&self, bytes: u64) {
        self.stats.read_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    fn fault(&self, e: &std::io::Error) {
        Inner::fault(self, "a large object's chunk could not be read whole", e);
    }

    fn corrupt(&self, id: u32) {
        self.drop_large(id);
    }
}

pub(crate) enum Job {
    Write {
        key: CacheKey,
        variant: Option<Bytes>,
        object: Arc<Object>,
    },
    /// Purges are waiting in `purge_log`.
    Purges,
    /// Write out everything queued and flush it; then say so.
    Flush(SyncSender<()>),
    /// The next pieces of a large object's body (`queue` counts what is waiting).
    LargeChunk {
        token: u64,
        data: Vec<Bytes>,
        queue: Arc<large::Queue>,
    },
    /// A large object's body is complete (`len` bytes): finish its file.
    LargeEnd {
        token: u64,
        len: u64,
        key: CacheKey,
        variant: Option<Bytes>,
        object: Arc<Object>,
    },
    /// A large object's body will not be complete: remove its file.
    LargeAbort(u64),
    /// Write out what came before, flush, and stop (large writes still going are given up:
    /// their senders outlive the store's own).
    Close,
}

/// A segment's (or a large object's, or a summary's) file name.
pub(super) fn segment_name(id: u32, ext: &str) -> String {
    format!("{id:08x}.{ext}")
}

/// The segment ids in `dir`, oldest first.
pub(super) fn list_segments(dir: &CacheDir) -> std::io::Result<Vec<(u32, bool)>> {
    let mut ids = Vec::new();
    for name in dir.names()? {
        let (stem, large) = match (name.strip_suffix(".seg"), name.strip_suffix(".big")) {
            (Some(s), _) => (s, false),
            (_, Some(s)) => (s, true),
            _ => continue,
        };
        if let Some(id) = Some(stem)
            .filter(|n| n.len() == 8)
            .and_then(|n| u32::from_str_radix(n, 16).ok())
        {
            ids.push((id, large));
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

pub(super) fn sub_used(inner: &Inner, n: u64) {
    let _ = inner
        .stats
        .used
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
            Some(u.saturating_sub(n))
        });
}

/// Writes a summary so that it is whole or absent: a temporary file, flushed, renamed.
pub(super) fn write_summary(dir: &CacheDir, id: u32, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = segment_name(id, "idx.tmp");
    let f = dir.create_fresh(&tmp)?;
    let res = f
        .write_all_at(bytes, 0)
        .and_then(|()| f.sync_data())
        .and_then(|()| dir.rename(&tmp, &segment_name(id, "idx")))
        .and_then(|()| dir.sync());
    if res.is_err() {
        let _ = dir.remove(&tmp);
    }
    res
}

/// A purge, as reads apply it.
#[derive(Debug, Clone)]
pub(super) struct Ban {
    pub(super) time: u64,
    pub(super) soft: bool,
    pub(super) scope: PurgeScope,
}

#[derive(Default)]
pub(super) struct Bans {
    /// Exact purges by resource (host and URL, both schemes): the latest one's time, whether
    /// it was soft, and its scope (for the purge log).
    pub(super) exact: Map<(u64, bool, PurgeScope)>,
    pub(super) wide: Vec<Ban>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    Keep,
    Stale,
    Gone,
}

impl Bans {
    /// What the bans say of a record of `key` received at `time` carrying `tags` (a tag ban
    /// needs the tags: pass them when known, see [`Bans::has_tags`]).
    pub(super) fn verdict(&self, key: &CacheKey, tags: &[u64], time: u64) -> Verdict {
        let mut v = Verdict::Keep;
        if let Some(&(at, soft, _)) = self.exact.get(&resource_hash(key)) {
            if time < at {
                if !soft {
                    return Verdict::Gone;
                }
                v = Verdict::Stale;
            }
        }
        for b in self.wide.iter().filter(|b| time < b.time) {
            let hit = match &b.scope {
                PurgeScope::Tag(t) => tags.contains(t),
                s => s.matches(key),
            };
            if hit {
                if !b.soft {
                    return Verdict::Gone;
                }
                v = Verdict::Stale;
            }
        }
        v
    }

    /// Whether a tag purge is in force (a record's tags must then be read to judge it).
    pub(super) fn has_tags(&self) -> bool {
        self.wide
            .iter()
            .any(|b| matches!(b.scope, PurgeScope::Tag(_)))
    }

    pub(super) fn add(&mut self, ban: Ban) {
        match &ban.scope {
            PurgeScope::Exact(k) => {
                let e = self
                    .exact
                    .entry(resource_hash(k))
                    .or_insert((0, true, ban.scope.clone()));
                // A later purge replaces an earlier one; of two at once, the hard one wins.
                if ban.time > e.0 || (ban.time == e.0 && !ban.soft) {
                    *e = (ban.time, ban.soft, ban.scope.clone());
                }
            }
            _ => self.wide.push(ban),
        }
    }

    /// Forgets bans older than every record (`oldest`).
    pub(super) fn trim(&mut self, oldest: u64) -> bool {
        let before = self.exact.len() + self.wide.len();
        self.exact.retain(|_, (t, _, _)| *t > oldest);
        self.wide.retain(|b| b.time > oldest);
        before != self.exact.len() + self.wide.len()
    }

    /// Every purge in force, as the purge log holds them.
    pub(super) fn log(&self) -> Vec<u8> {
        let exact = self.exact.values().map(|(t, soft, s)| (*t, *soft, s));
        let wide = self.wide.iter().map(|b| (b.time, b.soft, &b.scope));
        exact
            .chain(wide)
            .flat_map(|(t, soft, s)| record::encode_purge(t, soft, &s.encode()))
            .collect()
    }
}
