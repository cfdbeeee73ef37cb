//! The writer's segments: opening the next one, sealing a full one with its summary, and
//! reclaiming the oldest when the tier is full.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::record;
use super::state::{segment_name, sub_used, write_summary, Segment, SUMMARY_CAP};
use super::writer::{Active, Writer};

impl Writer {
    /// Frees room on a full disk: the oldest segment, or else the one being written; false
    /// when there is nothing left to free.
    pub(super) fn make_room(&mut self) -> bool {
        self.reclaim_oldest() || self.drop_active()
    }

    /// Drops the segment being written, its records with it.
    pub(super) fn drop_active(&mut self) -> bool {
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

    pub(super) fn open_segment(&mut self) -> bool {
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
    pub(super) fn seal(&mut self) {
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
    pub(super) fn reclaim_oldest(&mut self) -> bool {
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

    pub(super) fn sync(&mut self) {
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
