//! The thread behind the tier: it takes the directory's lock, takes stock of what is there,
//! starts the warm-up, then writes: records into segments, large objects into files of their
//! own, purges into the purge log; and reclaims space oldest first.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::ErrorKind;
use std::os::unix::fs::FileExt as _;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::key::CacheKey;
use crate::object::Object;
use crate::vary::Vary;

use super::dir::CacheDir;
use super::purges::{load_bans, rewrite_purges};
use super::record::{Kind, SummaryEntry};
use super::state::{
    list_segments, lock, micros, now_micros, segment_name, sub_used, Entry, Inner, Job, Segment,
    State, Verdict, LOCK, PAUSE, SYNC_EVERY,
};
use super::{record, warm};

/// The thread behind the tier: takes the lock, takes stock of the directory, starts the
/// warm-up, then writes.
pub(super) fn writer_main(inner: Arc<Inner>, rx: Receiver<Job>, started: Option<(File, Writer)>) {
    let (lock_file, mut w) = match started {
        Some(s) => s,
        None => match wait_and_start(&inner, &rx) {
            Some(s) => s,
            None => return,
        },
    };
    w.finish_start();
    loop {
        match rx.recv_timeout(SYNC_EVERY) {
            Ok(Job::Write {
                key,
                variant,
                object,
            }) => w.write(&key, variant.as_deref(), &object),
            Ok(Job::Purges) => w.log_purges(),
            Ok(Job::Flush(ack)) => {
                w.log_purges();
                w.sync();
                let _ = ack.send(());
            }
            Ok(Job::LargeChunk { token, data, queue }) => {
                let n: usize = data.iter().map(Bytes::len).sum();
                for piece in &data {
                    w.large_chunk(token, piece);
                }
                queue.written(n as u64);
            }
            Ok(Job::LargeEnd {
                token,
                len,
                key,
                variant,
                object,
            }) => w.large_end(token, len, &key, variant.as_deref(), &object),
            Ok(Job::LargeAbort(token)) => w.large_abort(token),
            Ok(Job::Close) | Err(RecvTimeoutError::Disconnected) => break,
            // Purges whose write failed are tried again.
            Err(RecvTimeoutError::Timeout) => w.log_purges(),
        }
        w.abandon_stale_large();
        if w.last_sync.elapsed() >= SYNC_EVERY {
            w.sync();
        }
    }
    w.log_purges();
    w.sync();
    for token in w.large.keys().copied().collect::<Vec<_>>() {
        w.large_abort(token);
    }
    w.join_warmup();
    drop(lock_file);
}

/// Waits for the directory's lock (another process has it: the one a new binary takes over
/// from), dropping what comes meanwhile; then takes stock of the directory.
pub(super) fn wait_and_start(inner: &Arc<Inner>, rx: &Receiver<Job>) -> Option<(File, Writer)> {
    let lock_file = loop {
        match take_lock(&inner.dir) {
            Ok(f) => break f,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => inner.fault("the directory's lock could not be taken", &e),
        }
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(Job::Flush(ack)) => {
                let _ = ack.send(());
            }
            Ok(Job::Write { object, .. }) => object.disk.give_back(),
            Ok(Job::LargeChunk { data, queue, .. }) => {
                queue.written(data.iter().map(|b| b.len() as u64).sum());
            }
            Ok(Job::Purges | Job::LargeEnd { .. } | Job::LargeAbort(_))
            | Err(RecvTimeoutError::Timeout) => {}
            Ok(Job::Close) | Err(RecvTimeoutError::Disconnected) => return None,
        }
    };
    match Writer::start(inner.clone()) {
        Ok(w) => Some((lock_file, w)),
        Err(e) => {
            inner.fault("the directory could not be read", &e);
            inner.state.store(State::Closed as u8, Ordering::Release);
            None
        }
    }
}

pub(super) fn take_lock(dir: &CacheDir) -> std::io::Result<File> {
    let f = dir.open_or_create(LOCK)?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => Err(ErrorKind::WouldBlock.into()),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

/// The segment being written.
pub(super) struct Active {
    pub(super) id: u32,
    pub(super) file: Arc<File>,
    pub(super) len: u64,
    pub(super) entries: Vec<SummaryEntry>,
    pub(super) oldest: u64,
}

pub(super) struct Writer {
    pub(super) inner: Arc<Inner>,
    pub(super) active: Option<Active>,
    pub(super) next_id: u32,
    pub(super) purges: Option<File>,
    /// Bytes of the purge log.
    pub(super) purge_bytes: u64,
    pub(super) dirty: bool,
    pub(super) last_sync: Instant,
    pub(super) warmup: Option<std::thread::JoinHandle<()>>,
    /// Marker generations handed out (kept above the clock, so they never repeat).
    pub(super) generation: u64,
    /// Large objects being written, by token.
    pub(super) large: HashMap<u64, OpenLarge>,
    /// Large writes given up (their later chunks are ignored).
    pub(super) failed: HashSet<u64>,
}

/// What a record is written under (see [`Writer::name`]).
pub(super) struct Named {
    pub(super) kb: Vec<u8>,
    pub(super) vb: Vec<u8>,
    pub(super) meta: Vec<u8>,
    pub(super) hash: u64,
    pub(super) time: u64,
}

/// A large object's file being written.
pub(super) struct OpenLarge {
    pub(super) id: u32,
    pub(super) file: File,
    pub(super) len: u64,
    pub(super) crcs: Vec<u32>,
    pub(super) crc: crc32fast::Hasher,
    pub(super) last: Instant,
}

impl Writer {
    /// Takes stock of the directory: its segments (sizes counted as used), its purges (in
    /// force before any read); then lets reads in and starts the warm-up.
    pub(super) fn start(inner: Arc<Inner>) -> std::io::Result<Writer> {
        let dir = &inner.dir;
        let all = list_segments(dir)?;
        let (ids, mut used) = open_segments(&inner, &all);
        // Temporary files of an interrupted summary or large object write (a link so named is
        // removed itself, not what it points at).
        for name in dir.names()? {
            if name.ends_with(".tmp") {
                let _ = dir.remove(&name);
            }
        }
        let purge_bytes = load_bans(&inner);
        // The purge log is rewritten by `finish_start`; until then its old size counts.
        used += purge_bytes;
        inner.stats.used.store(used, Ordering::Relaxed);
        inner
            .stats
            .warm_total
            .store(ids.len() as u64, Ordering::Relaxed);
        let warming = inner.state.compare_exchange(
            State::Waiting as u8,
            State::Warming as u8,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        if warming.is_err() {
            // Closed meanwhile.
            return Err(ErrorKind::Interrupted.into());
        }
        let warmup = std::thread::Builder::new()
            .name("rampart-disk-warm".into())
            .spawn({
                let inner = inner.clone();
                let ids = ids.clone();
                move || warm::warm(inner, ids)
            })?;
        Ok(Writer {
            // Past every name taken, skipped ones too.
            next_id: all.last().map_or(1, |l| l.0.wrapping_add(1)),
            large: HashMap::new(),
            failed: HashSet::new(),
            inner,
            active: None,
            purges: None,
            purge_bytes,
            dirty: false,
            last_sync: Instant::now(),
            warmup: Some(warmup),
            generation: now_micros(),
        })
    }

    /// What can wait until reads are let in: the purge log rewritten from what is in force
    /// (one line per URL, no torn tail), then opened for the purges to come.
    pub(super) fn finish_start(&mut self) {
        // `cache_disk_size` lowered since the last run: back under it at once.
        while self.inner.stats.used.load(Ordering::Relaxed) > self.inner.options.size {
            if !self.reclaim_oldest() {
                break;
            }
        }
        if let Err(e) = self.rewrite_purges() {
            self.inner.fault("the purge log could not be rewritten", &e);
        }
        self.log_purges();
        self.sync();
    }

    pub(super) fn join_warmup(&mut self) {
        if let Some(t) = self.warmup.take() {
            let _ = t.join();
        }
    }

    pub(super) fn paused(&self) -> bool {
        self.inner.paused_until.load(Ordering::Relaxed) > now_micros()
    }

    pub(super) fn pause(&self, what: &'static str, e: &std::io::Error) {
        self.inner.fault(what, e);
        self.inner
            .paused_until
            .store(now_micros() + PAUSE.as_micros() as u64, Ordering::Relaxed);
    }

    pub(super) fn write(&mut self, key: &CacheKey, variant: Option<&[u8]>, object: &Arc<Object>) {
        let inner = self.inner.clone();
        if self.paused() {
            object.disk.give_back();
            inner.stats.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let Some(Named {
            kb,
            vb,
            meta,
            hash,
            time,
        }) = self.name(key, variant, object)
        else {
            return;
        };
        let n = (record::HEADER + kb.len() + vb.len() + meta.len() + object.body.len()) as u64;
        if n > inner.options.max_record() {
            // A file of its own, written at once from the body in memory.
            let token = u64::MAX - u64::from(self.next_id);
            self.large_chunk(token, &object.body);
            self.large_finish(token, object.body.len() as u64, hash, &kb, &vb, &meta, time);
            return;
        }
        self.append(Kind::Object, hash, &kb, &vb, &meta, &object.body, time);
    }

    /// What a record of `object` is written under: its key and variant bytes (the variant's
    /// marker written first when needed), its stored head, its key hash and receive time.
    /// `None` when it must not be written: purged since it was received, or soft-purged.
    pub(super) fn name(
        &mut self,
        key: &CacheKey,
        variant: Option<&[u8]>,
        object: &Object,
    ) -> Option<Named> {
        let time = micros(object.response_time);
        let gone = self
            .inner
            .bans
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .verdict(key, &object.tags, time)
            == Verdict::Gone;
        if gone || object.invalidated.load(Ordering::Relaxed) {
            return None;
        }
        let kb = record::key_bytes(key);
        let vb = match variant {
            None => Vec::new(),
            Some(v) => {
                let gen = self.marker_for(&kb, &object.vary)?;
                let mut vb = gen.to_be_bytes().to_vec();
                vb.extend_from_slice(v);
                vb
            }
        };
        let hash = if vb.is_empty() {
            record::hash(&[&kb])
        } else {
            record::hash(&[&kb, &vb])
        };
        Some(Named {
            meta: crate::portable::encode_head(object),
            kb,
            vb,
            hash,
            time,
        })
    }

    /// The generation of the resource's marker on disk when it varies the same way, else of
    /// a new marker written now.
    pub(super) fn marker_for(&mut self, kb: &[u8], vary: &Vary) -> Option<u64> {
        let hash = record::hash(&[kb]);
        if let Some((_, head)) = self.inner.read_head(hash) {
            if let Some(h) = record::parse_head(&head) {
                if h.key == kb && h.header.kind == Kind::Marker {
                    if let Some((gen, v)) = Inner::marker(h.meta) {
                        if &v == vary {
                            return Some(gen);
                        }
                    }
                }
            }
        }
        self.generation = self.generation.max(now_micros()) + 1;
        let gen = self.generation;
        let text = match vary {
            Vary::None => return None,
            Vary::Any => "*".to_owned(),
            Vary::Fields(f) => f.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(", "),
        };
        let mut meta = gen.to_be_bytes().to_vec();
        meta.extend_from_slice(text.as_bytes());
        self.append(Kind::Marker, hash, kb, &[], &meta, &[], now_micros())
            .then_some(gen)
    }

    /// Appends one record and points the index at it; false if it could not be written.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn append(
        &mut self,
        kind: Kind,
        hash: u64,
        key: &[u8],
        variant: &[u8],
        meta: &[u8],
        body: &[u8],
        time: u64,
    ) -> bool {
        let inner = self.inner.clone();
        let head = record::encode_head(kind, key, variant, meta, body, time);
        let n = (head.len() + body.len()) as u64;
        let seg_size = inner.options.segment_size();
        if n > inner.options.max_record() {
            inner.stats.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        if self.active.as_ref().is_some_and(|a| a.len + n > seg_size) {
            self.seal();
        }
        if self.active.is_none() && !self.open_segment() {
            return false;
        }
        // Room: the new segment counts in full from its first record (it grows to that).
        while inner.stats.used.load(Ordering::Relaxed) + n > inner.options.size {
            if !self.reclaim_oldest() {
                inner.stats.dropped.fetch_add(1, Ordering::Relaxed);
                return false;
            }
        }
        let Some(a) = self.active.as_mut() else {
            return false;
        };
        let at = a.len;
        let res = a
            .file
            .write_all_at(&head, at)
            .and_then(|()| a.file.write_all_at(body, at + head.len() as u64));
        if let Err(e) = res {
            // Cut off what was written of it; the next record starts there.
            let _ = a.file.set_len(at);
            let what = if e.kind() == ErrorKind::StorageFull {
                "the disk is full"
            } else {
                "a record could not be written"
            };
            self.pause(what, &e);
            return false;
        }
        a.len += n;
        a.oldest = a.oldest.min(time);
        let entry = SummaryEntry {
            hash,
            offset: at as u32,
            head: head.len() as u32,
            body: body.len() as u32,
        };
        a.entries.push(entry);
        let segment = a.id;
        inner.shard(hash).insert(
            hash,
            Entry {
                segment,
                offset: entry.offset,
                head: entry.head,
                body: entry.body,
                reused: false,
            },
        );
        if let Some(s) = inner
            .segments
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(&segment)
        {
            s.bytes += n;
            s.oldest = s.oldest.min(time);
        }
        inner.stats.used.fetch_add(n, Ordering::Relaxed);
        inner.stats.writes.fetch_add(1, Ordering::Relaxed);
        inner.stats.write_bytes.fetch_add(n, Ordering::Relaxed);
        self.dirty = true;
        true
    }
}

/// The segments and large objects' files among `all` (the ids named like them), opened and
/// put in the tier's map; the ids opened, and the bytes they use (summaries included).
fn open_segments(inner: &Inner, all: &[(u32, bool)]) -> (Vec<(u32, bool)>, u64) {
    let dir = &inner.dir;
    let mut ids = Vec::with_capacity(all.len());
    let mut used = 0;
    let mut segs = inner.segments.write().unwrap_or_else(|p| p.into_inner());
    for &(id, large) in all {
        // Opened for writing too: the warm-up cuts off a torn tail through this handle, the
        // one that was checked (see `dir`).
        let name = segment_name(id, if large { "big" } else { "seg" });
        let file = match dir.open_file(&name, true) {
            Ok(f) => f,
            Err(e) => {
                inner.fault("a file named like a segment was skipped", &e);
                continue;
            }
        };
        ids.push((id, large));
        let bytes = file.metadata().map_or(0, |m| m.len())
            + if large {
                0
            } else {
                dir.len_of(&segment_name(id, "idx"))
            };
        used += bytes;
        segs.insert(
            id,
            Segment {
                file: Arc::new(file),
                bytes,
                oldest: u64::MAX,
                large: large.then_some(0),
            },
        );
    }
    (ids, used)
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.join_warmup();
    }
}

impl Writer {
    /// Writes the purge log anew from every purge in force (see [`rewrite_purges`]): the
    /// purges waiting for it are in it then, and acknowledged.
    pub(super) fn rewrite_purges(&mut self) -> std::io::Result<()> {
        let inner = self.inner.clone();
        // Every purge with a ticket up to this one is a ban already (bans first, then the
        // ticket), so in the rewrite.
        let upto = inner.purge_tickets.load(Ordering::Acquire);
        let (f, n) = rewrite_purges(&inner)?;
        sub_used(&inner, self.purge_bytes);
        inner.stats.used.fetch_add(n, Ordering::Relaxed);
        self.purges = Some(f);
        self.purge_bytes = n;
        lock(&inner.purge_log).retain(|(ticket, _)| *ticket > upto);
        inner.purges_logged.fetch_max(upto, Ordering::AcqRel);
        Ok(())
    }

    /// Writes the purges waiting for the log, and flushes it: a purge survives a power cut
    /// once this returns, and its ticket says so ([`DiskStore::purge_logged`]).
    ///
    /// A write that fails is cut off and tried again: when the disk is full, after room is
    /// made by reclaiming the oldest segments (a purge outranks cached objects), and in any
    /// case at the writer's next tick. Until then the purges are kept waiting, in force for
    /// every read, and unacknowledged.
    pub(super) fn log_purges(&mut self) {
        let inner = self.inner.clone();
        let pending = std::mem::take(&mut *lock(&inner.purge_log));
        let Some(upto) = pending.iter().map(|(t, _)| *t).max() else {
            return;
        };
        let mut bytes = Vec::new();
        for (_, b) in &pending {
            bytes.extend(record::encode_purge(b.time, b.soft, &b.scope.encode()));
        }
        loop {
            // Appended to the open log, or (not open: its rewrite failed) in a rewrite that
            // holds every purge in force and counts its own bytes.
            let appended = self.purges.is_some();
            let res = match &self.purges {
                Some(f) => f
                    .write_all_at(&bytes, self.purge_bytes)
                    .and_then(|()| f.sync_data()),
                None => self.rewrite_purges(),
            };
            let e = match res {
                Ok(()) => {
                    if appended && !bytes.is_empty() {
                        self.purge_bytes += bytes.len() as u64;
                        inner
                            .stats
                            .used
                            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                    }
                    inner.purges_logged.fetch_max(upto, Ordering::AcqRel);
                    return;
                }
                Err(e) => e,
            };
            if let Some(f) = &self.purges {
                // Whatever was written of it is cut off: the log stays whole records.
                let _ = f.set_len(self.purge_bytes);
            }
            inner.fault("the purge log could not be written (tried again)", &e);
            let full = matches!(
                e.kind(),
                ErrorKind::StorageFull | ErrorKind::QuotaExceeded | ErrorKind::FileTooLarge
            );
            if !(full && self.make_room()) {
                // Kept waiting, ahead of later purges, for the next tick.
                let mut q = lock(&inner.purge_log);
                let later = std::mem::replace(&mut *q, pending);
                q.extend(later);
                return;
            }
        }
    }
}
