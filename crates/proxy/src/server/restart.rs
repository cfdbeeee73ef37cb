//! What a reload cannot apply in place: keys that need a restart, and whether the certificate
//! manager can stay.

use rampart_config::Config;

/// Whether the certificate manager can stay: the same TLS settings and the same certificate
/// source for every rule.
pub fn same_tls(old: &Config, new: &Config) -> bool {
    let sources = |c: &Config| -> Vec<_> {
        c.rules
            .iter()
            .filter(|r| r.cert.is_some())
            .map(|r| (r.domain.clone(), r.cert.clone()))
            .collect()
    };
    // HTTP/3's own settings do not touch the certificates.
    let tls = |c: &Config| rampart_config::TlsConfig {
        http3: None,
        ..c.tls.clone()
    };
    tls(old) == tls(new) && sources(old) == sources(new)
}

/// Changed keys a reload cannot apply.
pub fn restart_needed(old: &Config, new: &Config) -> Vec<&'static str> {
    let mut keys = Vec::new();
    if old.workers != new.workers {
        keys.push("workers");
    }
    if old.runtime != new.runtime {
        keys.push("worker_runtime");
    }
    if old.cache.enabled != new.cache.enabled {
        keys.push("add_caching");
    }
    if old.cache.memory != new.cache.memory {
        keys.push("cache_memory");
    }
    if old.cache.max_object != new.cache.max_object {
        keys.push("cache_max_object");
    }
    // Each disk key that changed, not all three (the disk tier's `max_object` follows
    // `cache_max_object` and `cache_disk_size`, named above or here).
    match (&old.cache.disk, &new.cache.disk) {
        (Some(a), Some(b)) => {
            if a.path != b.path {
                keys.push("cache_disk");
            }
            if a.size != b.size {
                keys.push("cache_disk_size");
            }
            if a.min_uses != b.min_uses {
                keys.push("cache_disk_min_uses");
            }
        }
        (None, None) => {}
        _ => keys.push("cache_disk"),
    }
    let (a, b) = (&old.downstream, &new.downstream);
    if (
        a.nodelay,
        a.max_backlog,
        a.recv_buffer_size,
        a.send_buffer_size,
        a.ip_ttl,
    ) != (
        b.nodelay,
        b.max_backlog,
        b.recv_buffer_size,
        b.send_buffer_size,
        b.ip_ttl,
    ) {
        // New listeners get them; sockets kept open keep theirs.
        keys.push("listener socket options (nodelay, max_backlog, buffer sizes, ip_ttl)");
    }
    keys
}
