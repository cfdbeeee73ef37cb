//! Per-client rate limiting: governor's GCRA over a key table of bounded size.
//!
//! governor keeps one "theoretical arrival time" (TAT) per key. A key whose TAT is in the past
//! is indistinguishable from a key never seen, so such idle keys can be dropped without changing
//! any decision: [`BoundedStore`] sweeps them when a shard fills up. Only when a shard is full of
//! keys that are all still limited (a flood from more addresses than the table holds) does it
//! drop live keys, so memory stays bounded whatever the clients send.

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::StateStore;
use governor::{Quota, RateLimiter};

const SHARDS: usize = 16;

/// A sharded `IpAddr → TAT` map holding at most `capacity` keys.
#[derive(Debug, Clone)]
pub struct BoundedStore {
    inner: Arc<Table>,
}

#[derive(Debug)]
struct Table {
    shards: Vec<Mutex<HashMap<IpAddr, u64>>>,
    per_shard: usize,
    /// Nanoseconds since the limiter's start, updated on every check; keys with a TAT at or
    /// below it are idle.
    now: std::sync::atomic::AtomicU64,
}

impl BoundedStore {
    pub fn new(capacity: usize) -> Self {
        let per_shard = capacity.div_ceil(SHARDS).max(4);
        BoundedStore {
            inner: Arc::new(Table {
                shards: (0..SHARDS)
                    .map(|_| Mutex::new(HashMap::with_capacity(per_shard.min(1024))))
                    .collect(),
                per_shard,
                now: std::sync::atomic::AtomicU64::new(0),
            }),
        }
    }

    fn shard(&self, key: &IpAddr) -> &Mutex<HashMap<IpAddr, u64>> {
        // Addresses are attacker-chosen but the map itself uses a random hasher; the shard only
        // needs spreading, so mix the low bits of the address.
        let h = match key {
            IpAddr::V4(a) => u32::from(*a) as u64,
            IpAddr::V6(a) => {
                let v = u128::from(*a);
                (v ^ (v >> 64)) as u64
            }
        };
        let h = h.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60;
        &self.inner.shards[h as usize % SHARDS]
    }

    /// Keys currently held (for tests and status).
    pub fn len(&self) -> usize {
        self.inner
            .shards
            .iter()
            .map(|s| s.lock().map_or(0, |m| m.len()))
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Largest number of keys the table holds.
    pub fn capacity(&self) -> usize {
        self.inner.per_shard * SHARDS
    }
}

impl BoundedStore {
    /// The value held for `key`, if any.
    fn get(&self, key: &IpAddr) -> Option<u64> {
        let map = match self.shard(key).lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        map.get(key).copied()
    }

    /// Sets `key`'s value, as a check would (the table stays bounded the same way).
    fn put(&self, key: &IpAddr, value: u64) {
        let _ = self.measure_and_replace(key, |_| Ok::<_, ()>(((), Nanos::from(value))));
    }
}

impl StateStore for BoundedStore {
    type Key = IpAddr;

    fn measure_and_replace<T, F, E>(&self, key: &IpAddr, f: F) -> Result<T, E>
    where
        F: Fn(Option<Nanos>) -> Result<(T, Nanos), E>,
    {
        let mut map = match self.shard(key).lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        let prev = map.get(key).map(|&t| Nanos::from(t));
        let (out, tat) = f(prev)?;
        let tat = tat.as_u64();
        let per_shard = self.inner.per_shard;
        if prev.is_none() && map.len() >= per_shard {
            let now = self.inner.now.load(std::sync::atomic::Ordering::Relaxed);
            map.retain(|_, t| *t > now);
            if map.len() >= per_shard * 3 / 4 {
                // Still full of limited keys: drop arbitrary ones down to half.
                let excess = map.len() - per_shard / 2;
                let victims: Vec<IpAddr> = map.keys().take(excess).copied().collect();
                for v in victims {
                    map.remove(&v);
                }
            }
        }
        map.insert(*key, tat);
        Ok(out)
    }
}

/// The outcome of a refused request: how long until the client may try again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    pub retry_after: Duration,
}

/// One per-client limiter (the global one or a rule's).
#[derive(Debug)]
pub struct Limiter {
    inner: RateLimiter<IpAddr, BoundedStore, DefaultClock, NoOpMiddleware>,
    store: BoundedStore,
    /// Refusals decided elsewhere (by the shared limiter in Redis), by client: until when
    /// (nanoseconds since `start`) the client stays refused without asking again.
    refusals: BoundedStore,
    /// Taken just before the limiter's own start, so "now" computed from it is never earlier
    /// than the limiter's view.
    start: <DefaultClock as Clock>::Instant,
    pub per_second: u32,
    pub burst: u32,
}

impl Limiter {
    /// `per_second` sustained, `burst` at once, tracking at most `max_clients` addresses.
    pub fn new(per_second: u32, burst: u32, max_clients: usize) -> Limiter {
        let rate = NonZeroU32::new(per_second.max(1)).unwrap_or(NonZeroU32::MIN);
        let burst_nz = NonZeroU32::new(burst.max(1)).unwrap_or(NonZeroU32::MIN);
        let quota = Quota::per_second(rate).allow_burst(burst_nz);
        let clock = DefaultClock::default();
        let start = clock.now();
        let store = BoundedStore::new(max_clients);
        Limiter {
            inner: RateLimiter::new(quota, store.clone(), clock),
            store,
            refusals: BoundedStore::new(max_clients),
            start,
            per_second,
            burst,
        }
    }

    /// Counts one request from `client`. IPv6 clients are counted per /64 (one subscriber's
    /// network: a host can pick any address in it).
    pub fn check(&self, client: IpAddr) -> Result<(), Refused> {
        let client = per_subscriber(client);
        let clock = self.inner.clock();
        self.publish_now(&self.store);
        self.inner.check_key(&client).map_err(|not_until| Refused {
            retry_after: not_until.wait_time_from(clock.now()),
        })
    }

    /// Nanoseconds since the limiter's start, published to `store` for its sweeps (a
    /// millisecond early, so no key is swept a moment before it turns idle).
    fn publish_now(&self, store: &BoundedStore) -> u64 {
        let now = self.inner.clock().now();
        let rel = now.saturating_duration_since(self.start).as_nanos() as u64;
        store.inner.now.store(
            rel.saturating_sub(1_000_000),
            std::sync::atomic::Ordering::Relaxed,
        );
        rel
    }

    /// Remembers that `client` was refused elsewhere until `retry_after` from now, so its
    /// requests until then are refused here without asking (a GCRA refusal stands until
    /// then whatever other instances admit meanwhile).
    pub fn remember_refusal(&self, client: IpAddr, retry_after: Duration) {
        let now = self.publish_now(&self.refusals);
        let until = now.saturating_add(retry_after.as_nanos() as u64);
        self.refusals.put(&per_subscriber(client), until);
    }

    /// A refusal remembered by [`Limiter::remember_refusal`] that still stands.
    pub fn refused(&self, client: IpAddr) -> Option<Refused> {
        let until = self.refusals.get(&per_subscriber(client))?;
        let now = self
            .inner
            .clock()
            .now()
            .saturating_duration_since(self.start)
            .as_nanos() as u64;
        (until > now).then(|| Refused {
            retry_after: Duration::from_nanos(until - now),
        })
    }

    fn store(&self) -> &BoundedStore {
        &self.store
    }

    /// Addresses currently tracked.
    pub fn tracked(&self) -> usize {
        self.store().len()
    }
}

/// The address a client is counted by: IPv4 as it is, IPv6 by its /64.
pub fn per_subscriber(client: IpAddr) -> IpAddr {
    match client {
        IpAddr::V6(a) => IpAddr::V6((u128::from(a) & !u128::from(u64::MAX)).into()),
        v4 => v4,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn burst_then_refusal_with_retry_after() {
        let l = Limiter::new(10, 5, 1024);
        let ip = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
        for _ in 0..5 {
            assert!(l.check(ip).is_ok());
        }
        let r = l.check(ip).unwrap_err();
        assert!(r.retry_after > Duration::ZERO && r.retry_after <= Duration::from_millis(100));
        // Another client is unaffected.
        assert!(l.check(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2))).is_ok());
    }

    #[test]
    fn table_stays_bounded_under_a_spoofed_flood() {
        let l = Limiter::new(1, 1, 1024);
        for i in 0..200_000u32 {
            let _ = l.check(IpAddr::V4(Ipv4Addr::from(i)));
        }
        assert!(l.tracked() <= l.store().capacity(), "{}", l.tracked());
        // A limited client is still limited right after the flood if it was seen recently.
        let ip = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7));
        assert!(l.check(ip).is_ok());
        assert!(l.check(ip).is_err());
    }

    #[test]
    fn ipv6_clients_share_their_64() {
        let l = Limiter::new(1, 1, 1024);
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let other: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert!(l.check(a).is_ok());
        assert!(l.check(b).is_err());
        assert!(l.check(other).is_ok());
    }

    #[test]
    fn a_refusal_decided_elsewhere_stands_until_it_runs_out() {
        let l = Limiter::new(10, 5, 1024);
        let a: IpAddr = "2001:db8::1".parse().unwrap();
        let same_64: IpAddr = "2001:db8::2".parse().unwrap();
        assert!(l.refused(a).is_none());
        l.remember_refusal(a, Duration::from_millis(50));
        let r = l.refused(same_64).unwrap();
        assert!(r.retry_after <= Duration::from_millis(50) && r.retry_after > Duration::ZERO);
        assert!(l.refused("2001:db8:0:1::1".parse().unwrap()).is_none());
        std::thread::sleep(Duration::from_millis(60));
        assert!(l.refused(a).is_none());
        // Local counting is untouched by remembered refusals.
        assert!(l.check(a).is_ok());
    }

    #[test]
    fn idle_keys_are_swept_first() {
        let l = Limiter::new(1_000_000, 1, 64);
        for i in 0..10_000u32 {
            let _ = l.check(IpAddr::V4(Ipv4Addr::from(i)));
        }
        assert!(l.tracked() <= l.store().capacity());
    }
}
