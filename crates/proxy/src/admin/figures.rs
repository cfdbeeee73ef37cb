//! Figures the status endpoint and the dashboard both show.

/// The disk tier's figures, for the status endpoint and the dashboard.
pub fn disk(d: &rampart_cache::disk::DiskStore) -> serde_json::Value {
    let s = d.stats();
    let state = match d.state() {
        rampart_cache::disk::State::Waiting => "waiting for the directory's lock",
        rampart_cache::disk::State::Warming => "warming",
        rampart_cache::disk::State::Ready => "ready",
        rampart_cache::disk::State::Closed => "closed",
    };
    serde_json::json!({
        "dir": d.options().dir.display().to_string(),
        "state": state,
        "used_bytes": s.used,
        "capacity_bytes": s.capacity,
        "objects": s.objects,
        "hits": s.hits,
        "misses": s.misses,
        "read_bytes": s.read_bytes,
        "writes": s.writes,
        "written_bytes": s.write_bytes,
        "reused_bytes": s.reused_bytes,
        "not_admitted": s.not_admitted,
        "dropped": s.dropped,
        "errors": s.errors,
        "reclaimed_segments": s.reclaimed_segments,
        "warm_segments": s.warm_segments,
        "segments_at_start": s.warm_total,
        "warmup_seconds": (s.warm_micros > 0).then(|| s.warm_micros as f64 / 1e6),
    })
}
