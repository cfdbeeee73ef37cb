//! What a purge addresses ([`PurgeScope`]): one URL, a prefix, a substring, a host, a tag or
//! everything; as bytes for the other instances, and matched against stored keys and objects.

use crate::key::CacheKey;
use crate::object::Object;

/// Which entries a purge addresses (the four ARC2 scopes, and tags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PurgeScope {
    /// Every object whose origin tagged it so (its [`crate::object::tag_hash`]), on any host,
    /// every variant.
    Tag(u64),
    /// One URL on one host (all its variants).
    Exact(CacheKey),
    /// Every URL on `host` that starts with `prefix`.
    Prefix { host: Vec<u8>, prefix: Vec<u8> },
    /// Every URL on `host` that contains `needle`.
    Contains { host: Vec<u8>, needle: Vec<u8> },
    /// Everything stored for `host`.
    Domain(Vec<u8>),
    /// Everything (an instance that may have missed purges from the others drops it all).
    Everything,
}

impl PurgeScope {
    /// The scope as bytes, for other instances: a kind byte, then the host and the argument
    /// separated by NUL (which neither can contain).
    pub fn encode(&self) -> Vec<u8> {
        let (kind, host, arg): (u8, &[u8], &[u8]) = match self {
            PurgeScope::Exact(k) => (b'e', k.host(), k.url()),
            PurgeScope::Prefix { host, prefix } => (b'p', host, prefix),
            PurgeScope::Contains { host, needle } => (b'c', host, needle),
            PurgeScope::Domain(host) => (b'd', host, b""),
            PurgeScope::Everything => return vec![b'*'],
            PurgeScope::Tag(t) => {
                let mut out = vec![b't'];
                out.extend_from_slice(&t.to_be_bytes());
                return out;
            }
        };
        let mut out = Vec::with_capacity(2 + host.len() + arg.len());
        out.push(kind);
        out.extend_from_slice(host);
        out.push(0);
        out.extend_from_slice(arg);
        out
    }

    /// The scope [`PurgeScope::encode`] wrote; `None` for anything else.
    pub fn decode(bytes: &[u8]) -> Option<PurgeScope> {
        let (&kind, rest) = bytes.split_first()?;
        if kind == b'*' {
            return rest.is_empty().then_some(PurgeScope::Everything);
        }
        if kind == b't' {
            return Some(PurgeScope::Tag(u64::from_be_bytes(rest.try_into().ok()?)));
        }
        let nul = rest.iter().position(|&b| b == 0)?;
        let (host, arg) = (&rest[..nul], &rest[nul + 1..]);
        Some(match kind {
            b'e' => PurgeScope::Exact(CacheKey::from_parts(host, arg)?),
            b'p' => PurgeScope::Prefix {
                host: host.to_vec(),
                prefix: arg.to_vec(),
            },
            b'c' => PurgeScope::Contains {
                host: host.to_vec(),
                needle: arg.to_vec(),
            },
            b'd' if arg.is_empty() => PurgeScope::Domain(host.to_vec()),
            _ => return None,
        })
    }

    pub(crate) fn matches(&self, key: &CacheKey) -> bool {
        match self {
            PurgeScope::Exact(k) => k.same_resource(key),
            PurgeScope::Prefix { host, prefix } => {
                key.host() == host.as_slice() && key.url().starts_with(prefix)
            }
            PurgeScope::Contains { host, needle } => {
                key.host() == host.as_slice()
                    && (needle.is_empty()
                        || key
                            .url()
                            .windows(needle.len())
                            .any(|w| w == needle.as_slice()))
            }
            PurgeScope::Domain(host) => key.host() == host.as_slice(),
            PurgeScope::Everything => true,
            // Decided by the object (see `matches_object`).
            PurgeScope::Tag(_) => false,
        }
    }

    /// Whether the scope takes `obj`, stored under `key`: by its key, or by its tags.
    pub fn matches_object(&self, key: &CacheKey, obj: &Object) -> bool {
        match self {
            PurgeScope::Tag(t) => obj.tags.contains(t),
            _ => self.matches(key),
        }
    }
}

/// How long a purge is remembered for the fetches that were under way when it was made.
pub const RECENT_FOR: std::time::Duration = std::time::Duration::from_secs(600);
/// Purges of one URL remembered at most (each a hash and a time; invalidations after unsafe
/// requests are these, and may come by the thousand a second from a fleet).
pub const RECENT_EXACT_MAX: usize = 100_000;
/// Purges of wider scopes (prefix, substring, host, tag, everything) remembered at most.
pub const RECENT_WIDE_MAX: usize = 1024;

/// The purges of the last [`RECENT_FOR`] (at most [`RECENT_EXACT_MAX`] of single URLs and
/// [`RECENT_WIDE_MAX`] of wider scopes): a fetch that began before one of them and ends after
/// it brings the version the purge was made to remove, so its object is not stored. A fetch
/// that began before a purge since forgotten is not stored either (it cannot be told apart).
#[derive(Debug, Default)]
pub(crate) struct RecentPurges {
    /// When the latest purge was made (Unix ns; 0: none yet): an object fetched after it is
    /// stored without a look at the lists.
    latest: std::sync::atomic::AtomicU64,
    lists: std::sync::Mutex<Recent>,
}

#[derive(Debug, Default)]
struct Recent {
    /// The latest purge of each URL (by [`resource_hash`]), and the same in the order made.
    exact: std::collections::HashMap<u64, u64>,
    exact_order: std::collections::VecDeque<(u64, u64)>,
    wide: std::collections::VecDeque<(u64, PurgeScope)>,
    /// When the newest purge no longer remembered was made (Unix ns).
    forgotten: u64,
}

fn unix_ns(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// A URL's hash, the same for both schemes' keys (a collision only keeps an object out).
fn resource_hash(key: &CacheKey) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    key.host().hash(&mut h);
    key.url().hash(&mut h);
    h.finish()
}

impl RecentPurges {
    /// A purge of `scope` is made now.
    pub(crate) fn record(&self, scope: &PurgeScope) {
        let now = unix_ns(std::time::SystemTime::now());
        let mut l = self.lists.lock().unwrap_or_else(|p| p.into_inner());
        let horizon = now.saturating_sub(RECENT_FOR.as_nanos() as u64);
        let l = &mut *l;
        while let Some(&(at, h)) = l.exact_order.front() {
            if l.exact_order.len() < RECENT_EXACT_MAX && at >= horizon {
                break;
            }
            l.exact_order.pop_front();
            if l.exact.get(&h) == Some(&at) {
                l.exact.remove(&h);
            }
            l.forgotten = l.forgotten.max(at);
        }
        while let Some(&(at, _)) = l.wide.front() {
            if l.wide.len() < RECENT_WIDE_MAX && at >= horizon {
                break;
            }
            l.wide.pop_front();
            l.forgotten = l.forgotten.max(at);
        }
        match scope {
            PurgeScope::Exact(k) => {
                let h = resource_hash(k);
                l.exact.insert(h, now);
                l.exact_order.push_back((now, h));
            }
            wide => l.wide.push_back((now, wide.clone())),
        }
        self.latest
            .fetch_max(now, std::sync::atomic::Ordering::Release);
    }

    /// Whether `obj`, fetched to be stored under `key`, was fetched before a purge that takes it.
    pub(crate) fn outdates(&self, key: &CacheKey, obj: &Object) -> bool {
        let began = unix_ns(obj.request_time);
        if began > self.latest.load(std::sync::atomic::Ordering::Acquire) {
            return false;
        }
        let l = self.lists.lock().unwrap_or_else(|p| p.into_inner());
        began <= l.forgotten
            || l.exact
                .get(&resource_hash(key))
                .is_some_and(|&at| at >= began)
            || l.wide
                .iter()
                .rev()
                .take_while(|(at, _)| *at >= began)
                .any(|(_, s)| s.matches_object(key, obj))
    }
}
