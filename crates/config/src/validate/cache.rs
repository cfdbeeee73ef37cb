//! The cache: its memory budget, largest object, grace, heuristic and cookie policy.

use std::time::Duration;

use super::{cache_heuristic, secs, size};
use crate::model::CacheConfig;
use crate::reader::{Section, Sink};
use crate::Severity;

pub(super) fn read(s: &mut Section<'_>, sink: &mut Sink<'_>) -> CacheConfig {
    let memory = size(s, sink, "cache_memory", 256 << 20, 4096);
    let explicit_max = s.has("cache_max_object");
    let mut max_object = size(s, sink, "cache_max_object", 8 << 20, 1);
    // The store keeps an object of `cache_max_object` storable only while it fits in a bit
    // under half the budget (shards, per-entry overhead).
    let fits = (memory * 45 / 100).saturating_sub(4608).max(1);
    if max_object > fits {
        if explicit_max {
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
    }
}
