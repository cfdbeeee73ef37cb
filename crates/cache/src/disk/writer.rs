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
use super::purges::{load_bans, Verdict};
use super::record::{Kind, SummaryEntry};
use super::{
    large, list_segments, micros, now_micros, record, segment_name, warm, Entry, Inner, Job,
    Segment, State, LARGE, LOCK, PAUSE, SUMMARY_CAP, SYNC_EVERY,
};

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
    id: u32,
    file: Arc<File>,
    len: u64,
    entries: Vec<SummaryEntry>,
    oldest: u64,
}

pub(super) struct Writer {
    pub(super) inner: Arc<Inner>,
    active: Option<Active>,
    next_id: u32,
    pub(super) purges: Option<File>,
    /// Bytes of the purge log.
    pub(super) purge_bytes: u64,
    dirty: bool,
    last_sync: Instant,
    warmup: Option<std::thread::JoinHandle<()>>,
    /// Marker generations handed out (kept above the clock, so they never repeat).
    generation: u64,
    /// Large objects being written, by token.
    large: HashMap<u64, OpenLarge>,
    /// Large writes given up (their later chunks are ignored).
    failed: HashSet<u64>,
}

/// What a record is written under (see [`Writer::name`]).
pub(super) struct Named {
    kb: Vec<u8>,
    vb: Vec<u8>,
    meta: Vec<u8>,
    hash: u64,
    time: u64,
}

/// A large object's file being written.
pub(super) struct OpenLarge {
    id: u32,
    file: File,
    len: u64,
    crcs: Vec<u32>,
    crc: crc32fast::Hasher,
    last: Instant,
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
    fn finish_start(&mut self) {
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

    fn join_warmup(&mut self) {
        if let Some(t) = self.warmup.take() {
            let _ = t.join();
        }
    }

    /// Frees room on a full disk: the oldest segment, or else the one being written; false
    /// when there is nothing left to free.
    pub(super) fn make_room(&mut self) -> bool {
        self.reclaim_oldest() || self.drop_active()
    }

    /// Drops the segment being written, its records with it.
    fn drop_active(&mut self) -> bool {
        let Some(a) = self.active.take() else {
            return false;
        };
        let inner = self.inner.clone();
        for e in &a.entries {
            let mut shard = inner.shard(e.hash);
            if shard.get(&e.hash).is_some_and(|x| x.segment == a.id) {
                shard.remove(&e.hash);
            }
        }
        let seg = inner
            .segments
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&a.id);
        drop(a.file);
        let _ = inner.dir.remove(&segment_name(a.id, "seg"));
        if let Some(seg) = seg {
            sub_used(&inner, seg.bytes);
        }
        inner.stats.reclaimed.fetch_add(1, Ordering::Relaxed);
        self.dirty = false;
        true
    }

    fn paused(&self) -> bool {
        self.inner.paused_until.load(Ordering::Relaxed) > now_micros()
    }

    fn pause(&self, what: &'static str, e: &std::io::Error) {
        self.inner.fault(what, e);
        self.inner
            .paused_until
            .store(now_micros() + PAUSE.as_micros() as u64, Ordering::Relaxed);
    }

    fn write(&mut self, key: &CacheKey, variant: Option<&[u8]>, object: &Arc<Object>) {
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

    /// Writes the next piece of a large object's body (its file made at the first).
    fn large_chunk(&mut self, token: u64, data: &[u8]) {
        if self.failed.contains(&token) {
            return;
        }
        let inner = self.inner.clone();
        let n = data.len() as u64;
        while inner.stats.used.load(Ordering::Relaxed) + n > inner.options.size {
            if !self.reclaim_oldest() {
                inner.stats.dropped.fetch_add(1, Ordering::Relaxed);
                self.large_abort(token);
                self.failed.insert(token);
                return;
            }
        }
        if !self.large.contains_key(&token) {
            if self.paused() {
                inner.stats.dropped.fetch_add(1, Ordering::Relaxed);
                self.failed.insert(token);
                return;
            }
            let id = self.next_id;
            let created = inner.dir.create_fresh(&segment_name(id, "big.tmp"));
            match created {
                Ok(file) => {
                    self.next_id = id.wrapping_add(1);
                    self.large.insert(
                        token,
                        OpenLarge {
                            id,
                            file,
                            len: 0,
                            crcs: Vec::new(),
                            crc: crc32fast::Hasher::new(),
                            last: Instant::now(),
                        },
                    );
                }
                Err(e) => {
                    self.pause("a large object's file could not be created", &e);
                    self.failed.insert(token);
                    return;
                }
            }
        }
        let Some(open) = self.large.get_mut(&token) else {
            return;
        };
        if let Err(e) = open.file.write_all_at(data, open.len) {
            let what = if e.kind() == ErrorKind::StorageFull {
                "the disk is full"
            } else {
                "a large object could not be written"
            };
            self.pause(what, &e);
            self.large_abort(token);
            self.failed.insert(token);
            return;
        }
        // The chunk table: a CRC-32 per CHUNK of the body.
        let mut rest = data;
        while !rest.is_empty() {
            let in_chunk = open.len % large::CHUNK;
            let take = ((large::CHUNK - in_chunk) as usize).min(rest.len());
            open.crc.update(&rest[..take]);
            open.len += take as u64;
            rest = &rest[take..];
            if open.len % large::CHUNK == 0 {
                let done = std::mem::replace(&mut open.crc, crc32fast::Hasher::new());
                open.crcs.push(done.finalize());
            }
        }
        open.last = Instant::now();
        inner.stats.used.fetch_add(n, Ordering::Relaxed);
    }

    /// A large object's body is complete: its file finished and put in the index, unless it
    /// was given up or is not `len` bytes.
    fn large_end(
        &mut self,
        token: u64,
        len: u64,
        key: &CacheKey,
        variant: Option<&[u8]>,
        object: &Arc<Object>,
    ) {
        if self.failed.remove(&token) {
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
            self.large_abort(token);
            return;
        };
        self.large_finish(token, len, hash, &kb, &vb, &meta, time);
    }

    #[allow(clippy::too_many_arguments)]
    fn large_finish(
        &mut self,
        token: u64,
        len: u64,
        hash: u64,
        kb: &[u8],
        vb: &[u8],
        meta: &[u8],
        time: u64,
    ) {
        let inner = self.inner.clone();
        self.failed.remove(&token);
        let Some(mut open) = self.large.remove(&token) else {
            return;
        };
        if open.len != len || len == 0 {
            self.large.insert(token, open);
            self.large_abort(token);
            return;
        }
        let dir = &inner.dir;
        let tmp = segment_name(open.id, "big.tmp");
        let record = (record::HEADER + kb.len() + vb.len() + meta.len()) as u64 + len;
        if record <= inner.options.max_record() {
            // Small after all (written this way because memory had no room for it): a record
            // in the segment, not a file of its own.
            let mut body = vec![0; len as usize];
            let read = open.file.read_exact_at(&mut body, 0);
            drop(open.file);
            let _ = dir.remove(&tmp);
            sub_used(&inner, len);
            if read.is_ok() {
                self.append(Kind::Object, hash, kb, vb, meta, &body, time);
            }
            return;
        }
        if open.len % large::CHUNK != 0 {
            let last = std::mem::replace(&mut open.crc, crc32fast::Hasher::new());
            open.crcs.push(last.finalize());
        }
        let table = large::encode_table(&open.crcs);
        let head = record::encode_head(Kind::Object, kb, vb, meta, &table, time);
        let trailer = large::encode_trailer(table.len() as u32, head.len() as u32, len);
        let mut tail = table;
        tail.extend_from_slice(&head);
        tail.extend_from_slice(&trailer);
        let done = segment_name(open.id, "big");
        let res = open
            .file
            .write_all_at(&tail, open.len)
            .and_then(|()| open.file.sync_data())
            .and_then(|()| dir.rename(&tmp, &done))
            .and_then(|()| dir.sync());
        if let Err(e) = res {
            self.pause("a large object could not be finished", &e);
            let _ = dir.remove(&tmp);
            sub_used(&inner, open.len);
            return;
        }
        let n = tail.len() as u64;
        inner.stats.used.fetch_add(n, Ordering::Relaxed);
        inner
            .stats
            .write_bytes
            .fetch_add(open.len + n, Ordering::Relaxed);
        inner.stats.writes.fetch_add(1, Ordering::Relaxed);
        // The handle it was written through is the file now named `done`.
        let file = Arc::new(open.file);
        inner
            .segments
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                open.id,
                Segment {
                    file,
                    bytes: open.len + n,
                    oldest: time,
                    large: Some(hash),
                },
            );
        inner.shard(hash).insert(
            hash,
            Entry {
                segment: open.id,
                offset: LARGE,
                head: head.len() as u32,
                body: (tail.len() - head.len() - large::TRAILER) as u32,
                reused: false,
            },
        );
    }

    /// Gives up a large object being written: its file removed, its bytes no longer counted.
    fn large_abort(&mut self, token: u64) {
        if let Some(open) = self.large.remove(&token) {
            let _ = self.inner.dir.remove(&segment_name(open.id, "big.tmp"));
            sub_used(&self.inner, open.len);
        }
    }

    /// Large writes that heard nothing for a minute (their end was lost: the queue was full).
    fn abandon_stale_large(&mut self) {
        let stale: Vec<u64> = self
            .large
            .iter()
            .filter(|(_, o)| o.last.elapsed() > Duration::from_secs(60))
            .map(|(t, _)| *t)
            .collect();
        for t in stale {
            self.large_abort(t);
        }
        if self.failed.len() > 1024 {
            self.failed.clear();
        }
    }

    /// What a record of `object` is written under: its key and variant bytes (the variant's
    /// marker written first when needed), its stored head, its key hash and receive time.
    /// `None` when it must not be written: purged since it was received, or soft-purged.
    fn name(&mut self, key: &CacheKey, variant: Option<&[u8]>, object: &Object) -> Option<Named> {
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
            meta: crate::wire::encode_head(object),
            kb,
            vb,
            hash,
            time,
        })
    }

    /// The generation of the resource's marker on disk when it varies the same way, else of
    /// a new marker written now.
    fn marker_for(&mut self, kb: &[u8], vary: &Vary) -> Option<u64> {
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
    fn append(
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

    fn open_segment(&mut self) -> bool {
        let inner = self.inner.clone();
        let id = self.next_id;
        let file = match inner.dir.create_new(&segment_name(id, "seg")) {
            Ok(f) => Arc::new(f),
            Err(e) => {
                self.pause("a segment could not be created", &e);
                return false;
            }
        };
        self.next_id = id.wrapping_add(1);
        inner
            .segments
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                id,
                Segment {
                    file: file.clone(),
                    bytes: 0,
                    oldest: u64::MAX,
                    large: None,
                },
            );
        self.active = Some(Active {
            id,
            file,
            len: 0,
            entries: Vec::new(),
            oldest: u64::MAX,
        });
        true
    }

    /// Seals the active segment: its records on the device, then its summary.
    fn seal(&mut self) {
        let Some(a) = self.active.take() else {
            return;
        };
        if let Err(e) = a.file.sync_data() {
            self.pause("a segment could not be flushed", &e);
            return;
        }
        let summary = record::encode_summary(a.id, a.oldest, &a.entries);
        match write_summary(&self.inner.dir, a.id, &summary) {
            Ok(()) => {
                let n = summary.len() as u64;
                self.inner.stats.used.fetch_add(n, Ordering::Relaxed);
                if let Some(s) = self
                    .inner
                    .segments
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_mut(&a.id)
                {
                    s.bytes += n;
                }
            }
            // Without it, the next start reads the segment's records instead.
            Err(e) => self
                .inner
                .fault("a segment summary could not be written", &e),
        }
        self.dirty = false;
    }

    /// Reclaims the oldest segment but the one being written; false if there is none.
    fn reclaim_oldest(&mut self) -> bool {
        let inner = self.inner.clone();
        let active = self.active.as_ref().map(|a| a.id);
        let (id, seg) = {
            let mut segs = inner.segments.write().unwrap_or_else(|p| p.into_inner());
            let Some(id) = segs.keys().copied().find(|&id| Some(id) != active) else {
                return false;
            };
            let Some(seg) = segs.remove(&id) else {
                return false;
            };
            (id, seg)
        };
        let dir = &inner.dir;
        if let Some(hash) = seg.large {
            let mut shard = inner.shard(hash);
            if shard.get(&hash).is_some_and(|x| x.segment == id) {
                shard.remove(&hash);
            }
            drop(shard);
            let _ = dir.remove(&segment_name(id, "big"));
        } else if let Ok(bytes) = dir.read(&segment_name(id, "idx"), SUMMARY_CAP) {
            if let Some((_, entries)) = record::decode_summary(&bytes, id) {
                for e in entries {
                    let mut shard = inner.shard(e.hash);
                    if shard.get(&e.hash).is_some_and(|x| x.segment == id) {
                        shard.remove(&e.hash);
                    }
                }
            }
        }
        let _ = dir.remove(&segment_name(id, "seg"));
        let _ = dir.remove(&segment_name(id, "idx"));
        sub_used(&inner, seg.bytes);
        inner.stats.reclaimed.fetch_add(1, Ordering::Relaxed);
        // Purges older than every record left are of no use any more.
        let oldest = inner
            .segments
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|s| s.oldest)
            .min()
            .unwrap_or(u64::MAX)
            .min(self.active.as_ref().map_or(u64::MAX, |a| a.oldest));
        let trimmed = oldest != u64::MAX
            && inner
                .bans
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .trim(oldest);
        if trimmed {
            // What waits for the log is in force, so in the rewrite too (and taken off the
            // queue by it); if the rewrite fails, the next tick tries again (`purges` is then
            // `None`).
            if let Err(e) = self.rewrite_purges() {
                self.purges = None;
                inner.fault("the purge log could not be rewritten", &e);
            }
        }
        true
    }

    fn sync(&mut self) {
        if self.dirty {
            if let Some(a) = &self.active {
                if let Err(e) = a.file.sync_data() {
                    self.inner.fault("a segment could not be flushed", &e);
                }
            }
            self.dirty = false;
        }
        self.last_sync = Instant::now();
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
