//! The cache: its memory budget, largest object, grace, heuristic and cookie policy.

use std::time::Duration;

use super::{cache_heuristic, cache_statuses, secs, size};
use crate::model::{CacheConfig, DiskConfig};
use crate::reader::{At, Section, Sink};
use crate::Severity;

pub(super) fn read(s: &mut Section<'_>, sink: &mut Sink<'_>) -> CacheConfig {
    let memory = size(s, sink, "cache_memory", 256 << 20, 4096);
    let explicit_max = s.has("cache_max_object");
    let mut max_object = size(s, sink, "cache_max_object", 8 << 20, 1);
    let mut disk = disk(s, sink);
    if let Some(d) = &mut disk {
        // Larger objects than memory may hold go to disk only, up to a quarter of it.
        d.max_object = max_object.min(d.size / 4);
    }
    // The store keeps an object of `cache_max_object` storable only while it fits in a bit
    // under half the budget (shards, per-entry overhead).
    let fits = (memory * 45 / 100).saturating_sub(4608).max(1);
    if max_object > fits {
        if explicit_max && disk.is_none() {
            sink.push(
                Severity::Warning,
                "cache_max_object",
                None,
                format!(
                    "{max_object} bytes cannot fit in a cache of {memory} bytes; {fits} is used"
                ),
                "raise cache_memory or lower cache_max_object",
            );
        }
        max_object = fits;
    }
    CacheConfig {
        enabled: s.bool(sink, "add_caching").is_none_or(|b| b.value),
        memory,
        max_object: max_object as usize,
        grace: s
            .int(sink, "cache_grace_seconds", 0, 365 * 86400)
            .map_or(Duration::from_secs(10), |v| secs(v.value)),
        heuristic: cache_heuristic(s, sink).unwrap_or_default(),
        store_set_cookie: s.bool(sink, "store_set_cookie").is_some_and(|b| b.value),
        by_scheme: s.bool(sink, "cache_by_scheme").is_none_or(|b| b.value),
        statuses: cache_statuses(s, sink).unwrap_or_default(),
        stale_while_revalidate: s
            .int(sink, "stale_while_revalidate_seconds", 0, 365 * 86400)
            .map(|v| v.value as u64),
        stale_if_error: s
            .int(sink, "stale_if_error_seconds", 0, 365 * 86400)
            .map(|v| v.value as u64),
        tag_headers: tag_headers(s, sink),
        disk,
    }
}

/// The smallest disk tier: a few segments of the smallest size (see `rampart_cache::disk`).
pub const DISK_MIN: u64 = 16 << 20;

/// `cache_disk` (a directory, or `false`), `cache_disk_size` and `cache_disk_min_uses`.
fn disk(s: &mut Section<'_>, sink: &mut Sink<'_>) -> Option<DiskConfig> {
    let at = s.string_or_bool(sink, "cache_disk", "\"/var/cache/rampart\"");
    let size = size(s, sink, "cache_disk_size", 1 << 30, DISK_MIN);
    let min_uses = s
        .int(sink, "cache_disk_min_uses", 1, 1000)
        .map_or(2, |v| v.value as u32);
    let path = match at {
        Some(At {
            value: Ok(p),
            key,
            span,
        }) => At {
            value: p,
            key,
            span,
        },
        Some(At {
            value: Err(true),
            key,
            span,
        }) => {
            sink.push(
                Severity::Error,
                &key,
                span,
                "`cache_disk = true` does not say where",
                "name a directory, e.g. `cache_disk = \"/var/cache/rampart\"`",
            );
            return None;
        }
        _ => {
            for key in ["cache_disk_size", "cache_disk_min_uses"] {
                if s.has(key) {
                    s.missing(
                        sink,
                        key,
                        Severity::Warning,
                        &format!("`{key}` has no effect without `cache_disk`"),
                        "set `cache_disk` to a directory, or remove the key",
                    );
                }
            }
            return None;
        }
    };
    let dir = std::path::PathBuf::from(path.value.trim());
    if dir.as_os_str().is_empty() {
        sink.push(
            Severity::Error,
            &path.key,
            path.span.clone(),
            "`cache_disk` is empty",
            "name a directory, e.g. \"/var/cache/rampart\", or write `cache_disk = false`",
        );
        return None;
    }
    if let Err(why) = writable_dir(&dir) {
        sink.push(
            Severity::Error,
            &path.key,
            path.span.clone(),
            format!("{:?} cannot hold the disk cache: {why}", path.value),
            "name a directory rampart may write (it is created when missing; systemd's CacheDirectory= makes one)",
        );
        return None;
    }
    if let Err(u) = rampart_cache::disk::dir::trust(&dir) {
        sink.push(
            Severity::Error,
            &path.key,
            path.span.clone(),
            format!(
                "this directory cannot hold the disk cache safely: {}",
                u.why
            ),
            u.fix,
        );
        return None;
    }
    Some(DiskConfig {
        path: dir,
        size,
        min_uses,
        max_object: 0,
    })
}

/// Whether rampart can keep its disk cache in `dir`: a directory it can write, or a missing
/// one it can create (its nearest existing parent is a directory it can write). Writing is
/// tried with a probe file, removed at once: permission bits do not tell (root, ACLs,
/// read-only mounts).
fn writable_dir(dir: &std::path::Path) -> Result<(), String> {
    let mut at = dir;
    loop {
        match std::fs::metadata(at) {
            Ok(m) if m.is_dir() => break,
            Ok(_) if at == dir => return Err("it is not a directory".into()),
            Ok(_) => return Err(format!("{:?} is not a directory", at)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match at.parent() {
                Some(p) if !p.as_os_str().is_empty() => at = p,
                _ => {
                    at = std::path::Path::new(".");
                    break;
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
                return Err("a part of its path is a file, not a directory".into())
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    let probe = at.join(format!(".rampart-probe-{}", std::process::id()));
    // A new file only (O_EXCL): a link planted under the probe's name is never written through.
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) if at == dir => Err(format!("cannot write in it ({e})")),
        Err(e) => Err(format!("cannot create it in {at:?} ({e})")),
    }
}

/// The tag fields origins use: Fastly's, Cloudflare's and Varnish xkey's.
pub const DEFAULT_TAG_HEADERS: [&str; 3] = ["Surrogate-Key", "Cache-Tag", "xkey"];

/// `cache_tag_headers`: field names; `[]` turns tags off.
fn tag_headers(s: &mut Section<'_>, sink: &mut Sink<'_>) -> Vec<http::HeaderName> {
    let Some(list) = s.strings(sink, "cache_tag_headers") else {
        return DEFAULT_TAG_HEADERS
            .iter()
            .filter_map(|n| http::HeaderName::from_bytes(n.as_bytes()).ok())
            .collect();
    };
    let mut out = Vec::new();
    for n in &list.value {
        match http::HeaderName::from_bytes(n.value.trim().as_bytes()) {
            Ok(h) => out.push(h),
            Err(_) => sink.push(
                Severity::Error,
                &n.key,
                n.span.clone(),
                format!("{:?} is not a valid header field name", n.value),
                "write field names such as \"Surrogate-Key\"",
            ),
        }
    }
    out
}
