//! The writer's large objects: a body too large for a segment, written to a file of its own as
//! it arrives, finished when whole, removed when given up.

use std::io::ErrorKind;
use std::os::unix::fs::FileExt as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::key::CacheKey;
use crate::object::Object;

use super::record::Kind;
use super::state::{segment_name, sub_used, Entry, Segment, LARGE};
use super::writer::{Named, OpenLarge, Writer};
use super::{large, record};

impl Writer {
    /// Writes the next piece of a large object's body (its file made at the first).
    pub(super) fn large_chunk(&mut self, token: u64, data: &[u8]) {
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
    pub(super) fn large_end(
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
    pub(super) fn large_finish(
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
    pub(super) fn large_abort(&mut self, token: u64) {
        if let Some(open) = self.large.remove(&token) {
            let _ = self.inner.dir.remove(&segment_name(open.id, "big.tmp"));
            sub_used(&self.inner, open.len);
        }
    }

    /// Large writes that heard nothing for a minute (their end was lost: the queue was full).
    pub(super) fn abandon_stale_large(&mut self) {
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
}
