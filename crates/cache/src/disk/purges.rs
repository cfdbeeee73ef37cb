//! Purges on disk: the bans reads apply (a record received before a ban that matches it is
//! gone, or stale for a soft one) and the purge log that keeps them across restarts: written
//! by the writer thread, flushed, acknowledged by ticket ([`DiskStore::purge_logged`]), and
//! tried again until it goes through.

use std::fs::File;
use std::io::ErrorKind;
use std::os::unix::fs::FileExt as _;
use std::sync::atomic::Ordering;

use crate::key::CacheKey;
use crate::store::PurgeScope;

use super::writer::{sub_used, Writer};
use super::{lock, record, resource_hash, Inner, Map, PURGES};

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
    exact: Map<(u64, bool, PurgeScope)>,
    wide: Vec<Ban>,
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

/// Puts the purges the log holds in force (before any read is let in); the log's size.
pub(super) fn load_bans(inner: &Inner) -> u64 {
    // The log counts within `cache_disk_size`, but the size may have been lowered since it
    // was written: a purge must not be lost for that.
    let log = match inner.dir.read(PURGES, inner.options.size.max(1 << 30)) {
        Ok(log) => log,
        Err(e) if e.kind() == ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            inner.fault("the purge log could not be read", &e);
            Vec::new()
        }
    };
    let mut bans = inner.bans.write().unwrap_or_else(|p| p.into_inner());
    for (time, soft, scope) in record::decode_purges(&log) {
        if let Some(scope) = PurgeScope::decode(scope) {
            bans.add(Ban { time, soft, scope });
        }
    }
    log.len() as u64
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
            let res = match &self.purges {
                Some(f) => f
                    .write_all_at(&bytes, self.purge_bytes)
                    .and_then(|()| f.sync_data()),
                // Not open (its rewrite failed): the rewrite holds every purge in force.
                None => self.rewrite_purges(),
            };
            let e = match res {
                Ok(()) => {
                    if self.purges.is_some() && !bytes.is_empty() {
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

/// Writes the purge log anew from the purges in force (whole or not at all: a temporary
/// file, flushed, renamed): the handle it was made with (purges to come are written at its
/// end through it), and its size.
pub(super) fn rewrite_purges(inner: &Inner) -> std::io::Result<(File, u64)> {
    let dir = &inner.dir;
    let bytes = inner.bans.read().unwrap_or_else(|p| p.into_inner()).log();
    let tmp = format!("{PURGES}.tmp");
    let f = dir.create_fresh(&tmp)?;
    let res = f
        .write_all_at(&bytes, 0)
        .and_then(|()| f.sync_data())
        .and_then(|()| dir.rename(&tmp, PURGES))
        .and_then(|()| dir.sync());
    if let Err(e) = res {
        let _ = dir.remove(&tmp);
        return Err(e);
    }
    Ok((f, bytes.len() as u64))
}
