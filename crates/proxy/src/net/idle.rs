//! A worker's idle keep-alive connections to origins, by pool key: taken by the request that
//! needs one (the most recently used first, so a quiet period lets the older ones expire),
//! given back by the response body that read its answer to the end.
//!
//! A connection idle for `proxy_keepalive_sec` is closed, checked when one is taken and by a
//! sweep while any are kept; one the origin closed (or sent bytes on unasked) is dropped when
//! found. At most `max_idle_per_origin` are kept per key; more are closed.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use http::uri::Authority;

use crate::net::origin_stream::OriginStream;

/// A word-at-a-time multiplicative hash (the pool keys are short, trusted strings: no need for
/// SipHash's flood resistance, whose cost shows in every pass-through request).
#[derive(Default)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0xf135_7aea_2e62_a9c5;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.0 = (self.0 ^ u64::from_le_bytes(w))
                .wrapping_mul(K)
                .rotate_left(26);
        }
        for &b in chunks.remainder() {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(K).rotate_left(26);
        }
    }

    fn write_u8(&mut self, b: u8) {
        self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0xf135_7aea_2e62_a9c5);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A pool key: the scheme and the authority, with the TLS name and any PROXY header in its
/// user part (see `origin/connect.rs`).
///
/// Keys compare and hash as the exact bytes of their authority: `Authority`'s own equality
/// ignores case a byte at a time and its hash feeds the hasher a byte at a time (together ~500
/// instructions a look-up, two look-ups a pass). Every key of an origin is made from the same
/// configured text, so keys that differ in case alone never meet; if they did, the cost would be
/// a connection not reused, never a wrong one.
#[derive(Debug, Clone)]
pub struct PoolKey {
    pub tls: bool,
    pub authority: Authority,
}

impl PartialEq for PoolKey {
    fn eq(&self, other: &Self) -> bool {
        self.tls == other.tls && self.authority.as_str() == other.authority.as_str()
    }
}

impl Eq for PoolKey {}

impl std::hash::Hash for PoolKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u8(u8::from(self.tls));
        state.write(self.authority.as_str().as_bytes());
    }
}

struct Idle {
    stream: OriginStream,
    since: Instant,
}

#[derive(Default)]
struct Inner {
    by_key: HashMap<PoolKey, Vec<Idle>, BuildHasherDefault<KeyHasher>>,
    /// A sweep task is running.
    sweeping: bool,
}

/// The idle connections of one worker.
pub struct IdlePool {
    inner: Mutex<Inner>,
    keepalive: Duration,
    max_per_key: usize,
}

impl std::fmt::Debug for IdlePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdlePool")
            .field("keepalive", &self.keepalive)
            .field("max_per_key", &self.max_per_key)
            .finish_non_exhaustive()
    }
}

impl IdlePool {
    /// `keepalive` zero or `max_per_key` zero: nothing is kept (a connection per request).
    pub fn new(keepalive: Duration, max_per_key: usize) -> Arc<Self> {
        Arc::new(IdlePool {
            inner: Mutex::default(),
            keepalive,
            max_per_key: if keepalive.is_zero() { 0 } else { max_per_key },
        })
    }

    /// Whether connections are kept at all.
    pub fn keeps(&self) -> bool {
        self.max_per_key > 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An idle connection to `key` that can still carry a request.
    pub fn take(&self, key: &PoolKey) -> Option<OriginStream> {
        if !self.keeps() {
            return None;
        }
        let mut inner = self.lock();
        let list = inner.by_key.get_mut(key)?;
        let now = Instant::now();
        let mut found = None;
        while let Some(mut idle) = list.pop() {
            if now.duration_since(idle.since) < self.keepalive && idle.stream.is_usable() {
                found = Some(idle.stream);
                break;
            }
        }
        // An emptied list stays (the connection usually comes back at the end of the
        // response): the sweep removes lists left empty.
        found
    }

    /// Keeps `stream` for the next request to `key` (or closes it when the key has its
    /// share already).
    pub fn put(self: &Arc<Self>, key: PoolKey, stream: OriginStream) {
        if !self.keeps() {
            return;
        }
        let mut inner = self.lock();
        let list = match inner.by_key.get_mut(&key) {
            Some(list) => list,
            None => inner.by_key.entry(key).or_default(),
        };
        if list.len() >= self.max_per_key {
            return;
        }
        list.push(Idle {
            stream,
            since: Instant::now(),
        });
        if !inner.sweeping {
            inner.sweeping = true;
            drop(inner);
            // Outside a runtime (never on a worker) nothing sweeps: connections are then
            // checked when taken.
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(sweep(Arc::downgrade(self), self.keepalive));
            }
        }
    }
}

/// Closes expired and dead idle connections every half keep-alive period until none is left
/// (or the pool is gone: a reload made a new one).
async fn sweep(pool: Weak<IdlePool>, keepalive: Duration) {
    let period = (keepalive / 2).max(Duration::from_millis(100));
    loop {
        tokio::time::sleep(period).await;
        let Some(pool) = pool.upgrade() else { return };
        let mut inner = pool.lock();
        let now = Instant::now();
        inner.by_key.retain(|_, list| {
            list.retain_mut(|i| now.duration_since(i.since) < keepalive && i.stream.is_usable());
            !list.is_empty()
        });
        if inner.by_key.is_empty() {
            inner.sweeping = false;
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn keys_hash_apart() {
        let b = BuildHasherDefault::<KeyHasher>::default();
        let k = |s: &str, tls| PoolKey {
            tls,
            authority: s.parse().unwrap_or_else(|_| Authority::from_static("x")),
        };
        let a = b.hash_one(k("127.0.0.1:8080", false));
        assert_ne!(a, b.hash_one(k("127.0.0.1:8081", false)));
        assert_ne!(a, b.hash_one(k("127.0.0.1:8080", true)));
        assert_eq!(a, b.hash_one(k("127.0.0.1:8080", false)));
        // The exact bytes: equal keys hash alike; a key in other case is another key.
        let long = format!("{}.example:443", "Sub.".repeat(40));
        assert_eq!(
            b.hash_one(k(&long, true)),
            b.hash_one(k(&long.clone(), true))
        );
        assert_ne!(k(&long, true), k(&long.to_lowercase(), true));
    }
}
