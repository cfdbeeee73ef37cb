//! The warm-up: the index filled from the segments there were at start, newest first, from
//! their summaries, or record by record for a segment without one.

use std::collections::HashSet;
use std::os::unix::fs::FileExt as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::record::SummaryEntry;
use super::state::{
    segment_name, sub_used, write_summary, Entry, Inner, State, LARGE, SUMMARY_CAP,
};
use super::{large, record};

/// Fills the index from the segments there were at start, newest first (see the module
/// notes).
pub(super) fn warm(inner: Arc<Inner>, ids: Vec<(u32, bool)>) {
    let start = Instant::now();
    for &(id, large) in ids.iter().rev() {
        if inner.state() == State::Closed {
            return;
        }
        if large {
            warm_large(&inner, id);
            inner.stats.warm_segments.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let entries = match inner
            .dir
            .read(&segment_name(id, "idx"), SUMMARY_CAP)
            .ok()
            .and_then(|b| record::decode_summary(&b, id))
        {
            Some((oldest, entries)) => {
                set_oldest(&inner, id, oldest);
                entries
            }
            None => scan(&inner, id),
        };
        let mut n = 0;
        for e in entries {
            let mut shard = inner.shard(e.hash);
            if let std::collections::hash_map::Entry::Vacant(v) = shard.entry(e.hash) {
                v.insert(Entry {
                    segment: id,
                    offset: e.offset,
                    head: e.head,
                    body: e.body,
                    reused: false,
                });
                n += 1;
            }
        }
        inner.stats.warm_objects.fetch_add(n, Ordering::Relaxed);
        inner.stats.warm_segments.fetch_add(1, Ordering::Relaxed);
    }
    inner.stats.warm_micros.store(
        (start.elapsed().as_micros() as u64).max(1),
        Ordering::Relaxed,
    );
    let _ = inner.state.compare_exchange(
        State::Warming as u8,
        State::Ready as u8,
        Ordering::AcqRel,
        Ordering::Acquire,
    );
}

/// A large object's file: its head read and checked, its key put in the index (if no newer
/// record has it). A file that is not whole is removed.
pub(super) fn warm_large(inner: &Inner, id: u32) {
    let Some(file) = inner.file(id) else {
        return;
    };
    let whole = large::layout(&file).ok().and_then(|l| {
        let mut head = vec![0; l.head_len as usize];
        file.read_exact_at(&mut head, l.head_at).ok()?;
        let h = record::parse_head(&head)?;
        (h.header.body_len == l.table_len).then_some(())?;
        let hash = if h.variant.is_empty() {
            record::hash(&[h.key])
        } else {
            record::hash(&[h.key, h.variant])
        };
        Some((hash, l, h.header.time))
    });
    let Some((hash, l, time)) = whole else {
        inner.fault(
            "a large object's file is not whole (removed)",
            &format_args!("{id:08x}.big"),
        );
        if let Some(seg) = inner
            .segments
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id)
        {
            sub_used(inner, seg.bytes);
        }
        let _ = inner.dir.remove(&segment_name(id, "big"));
        return;
    };
    if let Some(s) = inner
        .segments
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .get_mut(&id)
    {
        s.oldest = time;
        s.large = Some(hash);
    }
    let mut shard = inner.shard(hash);
    if let std::collections::hash_map::Entry::Vacant(v) = shard.entry(hash) {
        v.insert(Entry {
            segment: id,
            offset: LARGE,
            head: l.head_len,
            body: l.table_len,
            reused: false,
        });
        inner.stats.warm_objects.fetch_add(1, Ordering::Relaxed);
    }
}

pub(super) fn set_oldest(inner: &Inner, id: u32, oldest: u64) {
    if let Some(s) = inner
        .segments
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .get_mut(&id)
    {
        s.oldest = oldest;
    }
}

/// A segment without a summary (the one being written when the process stopped): its records
/// one by one, up to the first that is not whole. What follows is cut off, and the summary
/// written, so the next start reads it at once.
pub(super) fn scan(inner: &Inner, id: u32) -> Vec<SummaryEntry> {
    let Some(file) = inner.file(id) else {
        return Vec::new();
    };
    let len = file.metadata().map_or(0, |m| m.len());
    let mut entries = Vec::new();
    let mut oldest = u64::MAX;
    let mut at = 0u64;
    let mut fixed = [0u8; record::HEADER];
    while at + record::HEADER as u64 <= len {
        if file.read_exact_at(&mut fixed, at).is_err() {
            break;
        }
        let Some(header) = record::parse_header(&fixed) else {
            break;
        };
        let head_len = header.head_len() as u64;
        let total = head_len + u64::from(header.body_len);
        if at + total > len || total > u64::from(u32::MAX) {
            break;
        }
        let mut bytes = vec![0; total as usize];
        if file.read_exact_at(&mut bytes, at).is_err() {
            break;
        }
        let (head, body) = bytes.split_at(head_len as usize);
        let Some(h) = record::parse_head(head) else {
            break;
        };
        if !record::body_ok(&h.header, body) {
            break;
        }
        let hash = if h.variant.is_empty() {
            record::hash(&[h.key])
        } else {
            record::hash(&[h.key, h.variant])
        };
        oldest = oldest.min(h.header.time);
        entries.push(SummaryEntry {
            hash,
            offset: at as u32,
            head: head_len as u32,
            body: header.body_len,
        });
        at += total;
    }
    // Records of one key later in the segment win: keep the last one of each.
    let mut seen = HashSet::new();
    let mut latest: Vec<SummaryEntry> = entries
        .iter()
        .rev()
        .filter(|e| seen.insert(e.hash))
        .copied()
        .collect();
    latest.reverse();
    if at < len {
        inner.fault(
            "a segment ended in a torn record (cut off)",
            &format_args!("segment {id:08x} at byte {at} of {len}"),
        );
        // Through the handle that was checked when it was opened (see `dir`): never a path.
        if file.set_len(at).and_then(|()| file.sync_all()).is_ok() {
            adjust_used(inner, id, len - at);
        }
    }
    let summary = record::encode_summary(id, oldest, &latest);
    if write_summary(&inner.dir, id, &summary).is_ok() {
        inner
            .stats
            .used
            .fetch_add(summary.len() as u64, Ordering::Relaxed);
        if let Some(s) = inner
            .segments
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(&id)
        {
            s.bytes += summary.len() as u64;
        }
    }
    set_oldest(inner, id, oldest);
    latest
}

pub(super) fn adjust_used(inner: &Inner, id: u32, cut: u64) {
    sub_used(inner, cut);
    if let Some(s) = inner
        .segments
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .get_mut(&id)
    {
        s.bytes = s.bytes.saturating_sub(cut);
    }
}
