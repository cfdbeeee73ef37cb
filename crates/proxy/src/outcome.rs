//! What the cache did for a request, in one type: [`CacheOutcome`] gives both labels a response
//! carries, `X-Arc2-Cache` (docs/arc2.md, "Cache status header"; also the access log's `cache`
//! field) and `Cache-Status` (RFC 9211).

use http::header::{HeaderName, HeaderValue};
use rampart_head::Fields;

pub static X_ARC2_CACHE: HeaderName = HeaderName::from_static("x-arc2-cache");
pub static X_ARC2_CACHE_AGE: HeaderName = HeaderName::from_static("x-arc2-cache-age");
pub static CACHE_STATUS: HeaderName = HeaderName::from_static("cache-status");

/// The `X-Arc2-Cache` vocabulary (docs/arc2.md, "Cache status header").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheLabel {
    Miss,
    Expired,
    Hit,
    Dynamic,
    Bypass,
    Block,
}

impl CacheLabel {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheLabel::Miss => "Miss",
            CacheLabel::Expired => "Expired",
            CacheLabel::Hit => "Hit",
            CacheLabel::Dynamic => "Dynamic",
            CacheLabel::Bypass => "Bypass",
            CacheLabel::Block => "Block",
        }
    }

    pub fn header(self) -> HeaderValue {
        // Constants: `from_static` checks each byte when it runs outside one.
        match self {
            CacheLabel::Miss => const { HeaderValue::from_static("Miss") },
            CacheLabel::Expired => const { HeaderValue::from_static("Expired") },
            CacheLabel::Hit => const { HeaderValue::from_static("Hit") },
            CacheLabel::Dynamic => const { HeaderValue::from_static("Dynamic") },
            CacheLabel::Bypass => const { HeaderValue::from_static("Bypass") },
            CacheLabel::Block => const { HeaderValue::from_static("Block") },
        }
    }
}

/// Why a stored response is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// Fresh (or within the client's max-stale).
    Fresh,
    /// Stale while a background fetch refreshes it (RFC 5861).
    StaleWhileRevalidate,
    /// Stale because the origin failed (RFC 5861 stale-if-error, or the grace period).
    StaleIfError,
    /// Revalidated with the origin just now (304).
    Revalidated,
    /// Not stored here, but in the cache tier the instances share (Redis), and fresh.
    Shared,
    /// Not in memory, but in the disk tier (`cache_disk`), and fresh.
    Disk,
}

/// What happened to a response fetched from the origin, for `Cache-Status`'s `fwd`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fwd {
    /// Never looked up (path policy, method, caching off) or forced past the cache.
    Bypass,
    /// Looked up, not found; storing not yet decided.
    UriMiss,
    /// Looked up, and the response is not stored.
    Miss,
    /// The response is being stored.
    Stored,
}

/// The cache's part in one response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Answered from the store.
    Served(Served),
    /// Went to the origin; `label` is what lookup found (Miss, Expired, Bypass, Dynamic).
    Fetched { label: CacheLabel, fwd: Fwd },
    /// Streamed from another client's fetch of the same resource.
    Collapsed,
    /// `only-if-cached` with nothing usable stored (504).
    OnlyIfCached,
    /// The origin failed and nothing stale could stand in (502/504).
    OriginError(CacheLabel),
    /// Refused by screening or path policy.
    Blocked,
    /// Answered by the key's owner in the fleet (`origin/fleet/`): from its cache (`hit`) or
    /// from the origin it fetched from.
    Peer { hit: bool },
}

impl CacheOutcome {
    /// A fetch that lookup classified as `label`, before storing is decided.
    pub fn fetched(label: CacheLabel, looked_up: bool) -> Self {
        let fwd = if label == CacheLabel::Bypass || !looked_up {
            Fwd::Bypass
        } else {
            Fwd::UriMiss
        };
        CacheOutcome::Fetched { label, fwd }
    }

    /// `X-Arc2-Cache` (and the access log's `cache`).
    pub fn label(self) -> CacheLabel {
        match self {
            CacheOutcome::Served(Served::Revalidated) => CacheLabel::Expired,
            CacheOutcome::Served(_) => CacheLabel::Hit,
            CacheOutcome::Fetched { label, .. } | CacheOutcome::OriginError(label) => label,
            CacheOutcome::Collapsed | CacheOutcome::OnlyIfCached => CacheLabel::Miss,
            CacheOutcome::Peer { hit: true } => CacheLabel::Hit,
            CacheOutcome::Peer { hit: false } => CacheLabel::Miss,
            CacheOutcome::Blocked => CacheLabel::Block,
        }
    }

    /// `Cache-Status` (each a constant: `from_static` checks every byte when it runs outside
    /// one, ~100 instructions for these).
    pub fn cache_status(self) -> HeaderValue {
        macro_rules! v {
            ($s:literal) => {
                const { HeaderValue::from_static($s) }
            };
        }
        match self {
            CacheOutcome::Served(Served::Fresh) => v!("rampart; hit"),
            CacheOutcome::Served(Served::StaleWhileRevalidate) => {
                v!("rampart; hit; detail=stale-while-revalidate")
            }
            CacheOutcome::Served(Served::StaleIfError) => v!("rampart; hit; detail=stale-if-error"),
            CacheOutcome::Served(Served::Shared) => v!("rampart; hit; detail=shared"),
            CacheOutcome::Served(Served::Disk) => v!("rampart; hit; detail=disk"),
            CacheOutcome::Served(Served::Revalidated) => {
                v!("rampart; fwd=stale; fwd-status=304; stored")
            }
            CacheOutcome::Fetched { label, fwd } => match fwd {
                Fwd::Bypass => v!("rampart; fwd=bypass"),
                Fwd::UriMiss => v!("rampart; fwd=uri-miss"),
                Fwd::Miss => v!("rampart; fwd=miss"),
                Fwd::Stored => match label {
                    CacheLabel::Expired => v!("rampart; fwd=stale; stored"),
                    CacheLabel::Bypass => v!("rampart; fwd=request; stored"),
                    _ => v!("rampart; fwd=miss; stored"),
                },
            },
            CacheOutcome::Collapsed => v!("rampart; fwd=miss; collapsed"),
            CacheOutcome::OnlyIfCached => v!("rampart; fwd=miss; detail=only-if-cached"),
            CacheOutcome::OriginError(_) => v!("rampart; fwd=miss; detail=origin-error"),
            CacheOutcome::Blocked => v!("rampart; fwd=bypass; detail=blocked"),
            CacheOutcome::Peer { hit: true } => v!("rampart; hit; detail=peer"),
            CacheOutcome::Peer { hit: false } => v!("rampart; fwd=miss; detail=peer"),
        }
    }

    /// The response was not stored after all: a looked-up request becomes `Dynamic`.
    pub fn not_stored(self) -> Self {
        match self {
            CacheOutcome::Fetched { label, .. } => CacheOutcome::Fetched {
                label: if label == CacheLabel::Bypass {
                    label
                } else {
                    CacheLabel::Dynamic
                },
                fwd: Fwd::Miss,
            },
            other => other,
        }
    }

    /// The response is being stored.
    pub fn stored(self) -> Self {
        match self {
            CacheOutcome::Fetched { label, .. } => CacheOutcome::Fetched {
                label,
                fwd: Fwd::Stored,
            },
            other => other,
        }
    }

    /// Writes both labels into `headers` (replacing any from the origin).
    pub fn write(self, headers: &mut Fields) {
        headers.insert(X_ARC2_CACHE.clone(), self.label().header());
        headers.insert(CACHE_STATUS.clone(), self.cache_status());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_vocabularies_from_one_outcome() {
        let o = CacheOutcome::fetched(CacheLabel::Miss, true);
        assert_eq!(o.cache_status(), "rampart; fwd=uri-miss");
        assert_eq!(o.stored().cache_status(), "rampart; fwd=miss; stored");
        assert_eq!(o.not_stored().label(), CacheLabel::Dynamic);
        assert_eq!(o.not_stored().cache_status(), "rampart; fwd=miss");
        let bypass = CacheOutcome::fetched(CacheLabel::Bypass, true);
        assert_eq!(bypass.cache_status(), "rampart; fwd=bypass");
        assert_eq!(bypass.not_stored().label(), CacheLabel::Bypass);
        assert_eq!(
            bypass.stored().cache_status(),
            "rampart; fwd=request; stored"
        );
        let expired = CacheOutcome::fetched(CacheLabel::Expired, true).stored();
        assert_eq!(expired.cache_status(), "rampart; fwd=stale; stored");
        assert_eq!(
            CacheOutcome::fetched(CacheLabel::Dynamic, false).cache_status(),
            "rampart; fwd=bypass"
        );
        let reval = CacheOutcome::Served(Served::Revalidated);
        assert_eq!(reval.label(), CacheLabel::Expired);
        assert_eq!(CacheOutcome::Blocked.label().as_str(), "Block");
        let mut h = Fields::new();
        CacheOutcome::Collapsed.write(&mut h);
        assert_eq!(h[&X_ARC2_CACHE], "Miss");
        assert_eq!(h[&CACHE_STATUS], "rampart; fwd=miss; collapsed");
    }
}
