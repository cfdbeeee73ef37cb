//! A cache that grows with the fleet (docs/cluster.md, "Sharding"): every cache key has one
//! owner among the instances `cache_peers` lists, and a miss anywhere else asks the owner
//! before the origin, so the fleet holds one copy of each object and fetches it once.
//!
//! - **Ownership** is rendezvous (highest random weight) hashing: each member scores the key
//!   (a 64-bit mix of the key's hash and the member's), the highest score owns it. A member
//!   that joins or leaves moves only the keys it wins or won: 1/N of them, with no table to
//!   rebuild and nothing to agree on but the list. N is a handful of instances, so scoring all
//!   of them on a miss costs less than a look-up in a Maglev or ring table would save.
//! - **The request to the owner** is the miss's request with the client's fields (less the
//!   hop-by-hop ones), `Host` and the request id as they would go to the origin, sent over
//!   HTTP/1.1 keep-alive (a client and pool of its own) with `X-Rampart-Peer`: the scheme the
//!   client used, the time, the client's address and port, and an HMAC-SHA256 of those and the
//!   request line under `cache_peer_key` (`marker.rs`). It carries no forwarding fields: the
//!   owner writes them from the marker toward the origin, as the peer would have. The owner
//!   answers it from its cache or fetches it once (its coalescer takes every instance's
//!   requests), and never asks another peer: no loops.
//! - **A peer's request** is recognised by that field, from a member's address (connections to
//!   peers leave from this instance's own address) with a valid signature; anything else with
//!   the field is refused (403). The owner trusts what the peer screened: no rate limits, no
//!   screening, no rewrites again.
//! - **Faults**: a peer that does not connect within `cache_peer_timeout_ms`, refuses, or
//!   answers garbage is marked down for a few seconds; the request goes to the origin. One
//!   whose answer's head has not come by then may be fetching from a slow origin for the whole
//!   fleet, or may be stalled: it is asked [`PROBE_PATH`], which it answers at once when it
//!   runs; the request waits on only if it does.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lc_rs::hmac;
use http::header::{HeaderName, HeaderValue};
use rampart_cache::key::CacheKey;
use rampart_config::{FleetConfig, UpstreamConfig};

use crate::origin::balance::OriginSet;
use crate::origin::client::OriginClient;
use crate::origin::fields::{OriginFields, Outgoing};

mod marker;
mod roster;

use marker::{hex, unhex, Memo};
pub use marker::{Marked, Purpose};
pub use roster::{Discovery, Roster};

/// The field that marks a request from a peer (and what it is signed with).
pub static X_RAMPART_PEER: HeaderName = HeaderName::from_static("x-rampart-peer");

/// What a peer asks to learn that this instance runs (answered 204 before routing).
pub const PROBE_PATH: &str = "/.well-known/rampart-peer";
/// Where a peer sends its purges: `?soft=0|1&scope=HEX` (the scope as
/// `PurgeScope::encode` writes it), so the signature covers them.
pub const PURGE_PATH: &str = "/.well-known/rampart-peer/purge";

/// Purges waiting to go to the peers at most; past that they are dropped (and logged).
const PURGES_WAITING: usize = 10_000;
/// Longest wait for one peer to take one purge.
const PURGE_TIMEOUT: Duration = Duration::from_secs(2);

/// The members as a worker sees them at one moment.
#[derive(Debug)]
pub struct View {
    pub members: Vec<Arc<Member>>,
    /// This instance's index in `members`.
    pub me: usize,
}

/// A worker's view of the fleet.
pub struct Fleet {
    view: arc_swap::ArcSwap<View>,
    /// The discovered members this view follows (`None`: `cache_peers`, fixed).
    roster: Option<Arc<Roster>>,
    /// The roster's generation `view` was built from.
    seen: AtomicU64,
    /// Held while `view` is rebuilt (one rebuild at a time, never an older one last).
    rebuild: std::sync::Mutex<()>,
    me_addr: SocketAddr,
    key: Option<hmac::Key>,
    /// Signatures made and checked this second (see [`Memo`]).
    signed: std::sync::Mutex<Memo>,
    checked: std::sync::Mutex<Memo>,
    /// How long this instance keeps what an owner sent (`cache_peer_local_ttl_seconds`).
    pub local_ttl: Duration,
    /// `cache_peer_timeout_ms`: the connection, and an answer's head before the owner is
    /// probed.
    pub timeout: Duration,
    /// The clock [`Member::alive_ms`] counts from.
    epoch: Instant,
    /// The worker's connections to peers.
    pub client: OriginClient,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("view", &self.view)
            .finish_non_exhaustive()
    }
}

/// One instance of the fleet.
#[derive(Debug)]
pub struct Member {
    pub addr: SocketAddr,
    /// Its part of every key's score.
    seed: u64,
    /// The instance as the one origin of a set: its connections, health and metrics.
    pub origins: OriginSet,
    /// When it last answered a probe (ms since the fleet's epoch; 0: never).
    alive_ms: AtomicU64,
}

impl Member {
    fn new(addr: SocketAddr) -> Member {
        Member {
            addr,
            seed: member_seed(addr),
            origins: OriginSet::of_peer(addr),
            alive_ms: AtomicU64::new(0),
        }
    }
}

impl View {
    /// The view of `addrs`, keeping what `old` knew of the members it had (their connections
    /// and health).
    fn of(addrs: &[SocketAddr], me: SocketAddr, old: Option<&View>) -> View {
        let members: Vec<Arc<Member>> = addrs
            .iter()
            .map(|&a| {
                old.and_then(|o| o.members.iter().find(|m| m.addr == a).cloned())
                    .unwrap_or_else(|| Arc::new(Member::new(a)))
            })
            .collect();
        let me = members.iter().position(|m| m.addr == me).unwrap_or(0);
        View { members, me }
    }
}

impl Fleet {
    /// A worker's view of `c`'s members, or of `roster`'s when they are discovered.
    pub fn new(
        c: &FleetConfig,
        roster: Option<Arc<Roster>>,
        upstream: &UpstreamConfig,
        tls: Arc<rustls::ClientConfig>,
    ) -> Fleet {
        // The generation first: the members read after it are at least as new.
        let (seen, addrs) = match &roster {
            Some(r) => (r.generation(), r.members()),
            None => (0, Arc::new(c.members.clone())),
        };
        Fleet {
            view: arc_swap::ArcSwap::from_pointee(View::of(&addrs, c.me, None)),
            roster,
            seen: AtomicU64::new(seen),
            rebuild: std::sync::Mutex::new(()),
            me_addr: c.me,
            key: c
                .key
                .as_ref()
                .map(|k| hmac::Key::new(hmac::HMAC_SHA256, &k.0)),
            signed: std::sync::Mutex::default(),
            checked: std::sync::Mutex::default(),
            local_ttl: c.local_ttl,
            timeout: c.timeout,
            epoch: Instant::now(),
            client: OriginClient::for_peers(upstream, tls, c.me.ip(), c.timeout),
        }
    }

    /// The members now (rebuilt first when the discovered ones changed).
    pub fn view(&self) -> Arc<View> {
        if let Some(r) = &self.roster {
            if r.generation() != self.seen.load(Ordering::Acquire) {
                let _one = self.rebuild.lock().unwrap_or_else(|p| p.into_inner());
                // The generation before the members: a change in between is seen next time.
                let generation = r.generation();
                if generation != self.seen.load(Ordering::Acquire) {
                    let old = self.view.load_full();
                    let new = View::of(&r.members(), self.me_addr, Some(&old));
                    self.view.store(Arc::new(new));
                    self.seen.store(generation, Ordering::Release);
                }
            }
        }
        self.view.load_full()
    }

    /// Whether `m` runs: it answered a probe within the last `cache_peer_timeout_ms`, or
    /// answers one now within it.
    pub async fn alive(&self, m: &Member) -> bool {
        let now = || self.epoch.elapsed().as_millis() as u64 + 1;
        let last = m.alive_ms.load(Ordering::Relaxed);
        if last != 0 && now().saturating_sub(last) < self.timeout.as_millis() as u64 {
            return true;
        }
        let ok = matches!(
            tokio::time::timeout(self.timeout, self.ask(m, "GET", PROBE_PATH)).await,
            Ok(Ok(status)) if status == http::StatusCode::NO_CONTENT
        );
        if ok {
            m.alive_ms.store(now(), Ordering::Relaxed);
        }
        ok
    }

    /// The member that owns `key`, when it is another instance and not marked down (a down
    /// owner's keys go to the origin until it answers again).
    pub fn owner(&self, key: &CacheKey) -> Option<Arc<Member>> {
        let view = self.view();
        let best = owner_of(key_hash(key), view.members.iter().map(|m| m.seed));
        let m = view.members.get(best)?;
        (best != view.me && m.origins.any_up()).then(|| m.clone())
    }

    /// Whether `ip` is a member's address.
    pub fn is_member(&self, ip: IpAddr) -> bool {
        self.view()
            .members
            .iter()
            .any(|m| m.addr.ip().to_canonical() == ip)
    }
}

/// Sends this instance's purges and invalidations to the other members (a thread of its
/// own), so a purge made anywhere reaches the owner and every copy. Replaced with the
/// configuration: the thread ends when the last sender goes.
#[derive(Debug)]
pub struct PeerPurges {
    tx: tokio::sync::mpsc::Sender<(Vec<u8>, bool)>,
}

impl PeerPurges {
    pub fn start(
        c: &FleetConfig,
        roster: Option<Arc<Roster>>,
        upstream: &UpstreamConfig,
        tls: Arc<rustls::ClientConfig>,
    ) -> std::io::Result<PeerPurges> {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<(Vec<u8>, bool)>(PURGES_WAITING);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (c, upstream) = (c.clone(), upstream.clone());
        std::thread::Builder::new()
            .name("rampart-peer-purge".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let fleet = Arc::new(Fleet::new(&c, roster, &upstream, tls));
                    while let Some((scope, soft)) = rx.recv().await {
                        let view = fleet.view();
                        let others = (0..view.members.len()).filter(|&i| i != view.me);
                        let sends: Vec<_> = others
                            .map(|i| {
                                let (fleet, scope) = (fleet.clone(), scope.clone());
                                let m = view.members[i].clone();
                                tokio::spawn(
                                    async move { fleet.send_purge(&m, &scope, soft).await },
                                )
                            })
                            .collect();
                        for s in sends {
                            let _ = s.await;
                        }
                    }
                })
            })?;
        Ok(PeerPurges { tx })
    }

    /// Queues a purge for the peers (never waits).
    pub fn send(&self, scope: &rampart_cache::store::PurgeScope, soft: bool) {
        if self.tx.try_send((scope.encode(), soft)).is_err() {
            tracing::warn!("too many purges waiting for the peers: one is not sent to them");
        }
    }
}

impl Fleet {
    /// Sends one purge to `m`; a member that fails is logged and marked down (the purges
    /// made meanwhile do not reach it: `redis_purge` replays them).
    async fn send_purge(&self, m: &Member, scope: &[u8], soft: bool) {
        if !m.origins.any_up() {
            tracing::warn!(peer = %m.addr, "peer down: a purge does not reach it");
            return;
        }
        let target = format!("{PURGE_PATH}?soft={}&scope={}", u8::from(soft), hex(scope));
        let ok = matches!(
            tokio::time::timeout(PURGE_TIMEOUT, self.ask(m, "POST", &target)).await,
            Ok(Ok(status)) if status == http::StatusCode::NO_CONTENT
        );
        if !ok {
            tracing::warn!(peer = %m.addr, "a purge did not reach the peer; not asking it for a while");
            m.origins.mark_all_down();
        }
    }

    /// One of rampart's own requests to `m` (a probe, a purge), signed: its status.
    async fn ask(
        &self,
        m: &Member,
        method: &str,
        target: &str,
    ) -> Result<http::StatusCode, crate::error::ProxyError> {
        let (mut head, ()) = rampart_head::Request::get(target)
            .body(())
            .unwrap_or_default()
            .into_parts();
        head.method = method.parse().unwrap_or(http::Method::GET);
        let mut fields = OriginFields::default();
        let host = HeaderValue::from_static("rampart-peer");
        fields.set(
            X_RAMPART_PEER.clone(),
            self.sign(&Marked::control(), method, host.as_bytes(), target),
        );
        fields.set(http::header::HOST, host);
        let authority: http::uri::Authority = m
            .addr
            .to_string()
            .parse()
            .map_err(|_| crate::error::ProxyError::BadRequest("peer address"))?;
        let res = self
            .client
            .send(
                Outgoing {
                    head: &head,
                    fields: &fields,
                    body: crate::body::RequestBody::Empty,
                },
                &authority,
                http::uri::Scheme::HTTP,
                rampart_config::OriginProtocol::Http1,
                None,
                false,
            )
            .await?;
        Ok(res.status())
    }
}

/// A peer's purge (the query of [`PURGE_PATH`]): the scope and whether it is soft.
pub fn purge_of(query: &str) -> Option<(rampart_cache::store::PurgeScope, bool)> {
    let (mut soft, mut scope) = (None, None);
    for pair in query.split('&') {
        match pair.split_once('=')? {
            ("soft", "0") => soft = Some(false),
            ("soft", "1") => soft = Some(true),
            ("scope", h) => scope = rampart_cache::store::PurgeScope::decode(&unhex(h)?),
            _ => return None,
        }
    }
    Some((scope?, soft?))
}

/// FNV-1a over `parts`: specified, so every instance (whatever its build) scores a key alike.
fn fnv1a<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in p {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// SplitMix64's finaliser: every bit of the input moves about half the output's.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A key's hash, as every instance computes it: its host, URL and side (HTTP or HTTPS).
pub fn key_hash(key: &CacheKey) -> u64 {
    let side: &[u8] = if key.is_https() { b"s" } else { b"h" };
    fnv1a([key.host(), &b"\xff"[..], key.url(), side])
}

/// A member's part of every score: its address as written.
fn member_seed(addr: SocketAddr) -> u64 {
    mix(fnv1a([addr.to_string().as_bytes()]))
}

/// The index of the member whose score for `key_hash` is highest (the first, on a tie).
pub fn owner_of(key_hash: u64, seeds: impl Iterator<Item = u64>) -> usize {
    let mut best = (0, 0u64);
    for (i, seed) in seeds.enumerate() {
        let score = mix(key_hash ^ seed);
        if i == 0 || score > best.1 {
            best = (i, score);
        }
    }
    best.0
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn seeds(n: usize) -> Vec<u64> {
        (0..n)
            .map(|i| member_seed(format!("10.0.0.{}:80", i + 1).parse().unwrap()))
            .collect()
    }

    fn keys(n: usize) -> Vec<u64> {
        (0..n)
            .map(|i| {
                key_hash(&CacheKey::new(
                    "shop.example",
                    &format!("/p/{i}?v=2"),
                    false,
                ))
            })
            .collect()
    }

    #[test]
    fn keys_spread_evenly_over_the_members() {
        let keys = keys(100_000);
        for n in [2, 3, 5, 8] {
            let s = seeds(n);
            let mut count = vec![0usize; n];
            for &k in &keys {
                count[owner_of(k, s.iter().copied())] += 1;
            }
            let fair = keys.len() / n;
            for c in &count {
                // Within 3 % of a fair share.
                assert!(c.abs_diff(fair) * 100 < fair * 3, "{n} members: {count:?}");
            }
        }
    }

    #[test]
    fn a_member_joining_or_leaving_moves_only_its_keys() {
        let keys = keys(100_000);
        let four = seeds(4);
        let five = seeds(5);
        let before: Vec<usize> = keys
            .iter()
            .map(|&k| owner_of(k, four.iter().copied()))
            .collect();
        let after: Vec<usize> = keys
            .iter()
            .map(|&k| owner_of(k, five.iter().copied()))
            .collect();
        let moved = before.iter().zip(&after).filter(|(a, b)| a != b).count();
        // Every moved key went to the new member, and about 1/5 moved.
        assert!(before.iter().zip(&after).all(|(a, b)| a == b || *b == 4));
        let share = moved as f64 / keys.len() as f64;
        assert!((0.18..0.22).contains(&share), "moved {share}");
        // The member at index 1 leaving: only its keys move.
        let without: Vec<u64> = four
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != 1)
            .map(|(_, s)| *s)
            .collect();
        let index = [0, 2, 3];
        for (&k, &was) in keys.iter().zip(&before) {
            let now = index[owner_of(k, without.iter().copied())];
            assert!(
                was == 1 || now == was,
                "a key of member {was} moved to {now}"
            );
        }
    }

    #[test]
    fn every_instance_scores_alike() {
        // The hash is specified (FNV-1a and SplitMix64), not the process's: fixed values.
        assert_eq!(fnv1a([&b"a"[..]]), 0xaf63_dc4c_8601_ec8c);
        let k = CacheKey::new("a.example", "/x", false);
        assert_eq!(
            key_hash(&k),
            key_hash(&CacheKey::new("a.example", "/x", false))
        );
        assert_ne!(key_hash(&k), key_hash(&k.clone().for_https(true)));
    }

    #[test]
    fn the_roster_keeps_this_instance_and_at_most_max_members() {
        let me: SocketAddr = "10.9.0.1:80".parse().unwrap();
        let many: Vec<SocketAddr> = (0..600u32)
            .map(|i| SocketAddr::from(([10, 1, (i / 250) as u8, (i % 250) as u8], 80)))
            .collect();
        let r = Roster::default();
        assert!(r.set(many.clone(), me, false));
        let m = r.members();
        assert_eq!(m.len(), roster::MAX_MEMBERS);
        assert!(m.contains(&me));
        // The same members whatever order Redis lists them in.
        let mut reversed = many;
        reversed.reverse();
        assert!(!r.set(reversed, me, false));
        // Growing only: a member missing from the list read is kept.
        let other: SocketAddr = "10.9.0.2:80".parse().unwrap();
        let r = Roster::default();
        r.set(vec![me, other], me, false);
        assert!(!r.set(vec![me], me, true));
        assert_eq!(r.members().len(), 2);
        assert!(r.set(vec![me], me, false));
        assert_eq!(*r.members(), vec![me]);
    }
}
