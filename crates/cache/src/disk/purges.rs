//! Purges on disk: the bans reads apply (a record received before a ban that matches it is
//! gone, or stale for a soft one) and the purge log that keeps them across restarts: written
//! by the writer thread, flushed, acknowledged by ticket ([`DiskStore::purge_logged`]), and
//! tried again until it goes through.

use std::fs::File;
use std::io::ErrorKind;
use std::os::unix::fs::FileExt as _;

use crate::store::PurgeScope;

use super::record;
use super::state::{Ban, Inner, PURGES};

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
