//! The values of the metrics' labels, one enum per label. Each counter array is indexed by the
//! enum (`index`), and the label text comes from the same place (`LABELS`), so a value cannot
//! be counted under another's name.

use http::Version;

use crate::error::{BodyFault, ProxyError, Screened};
use crate::outcome::{CacheLabel, CacheOutcome, Served};

/// An enum whose variants are the values of one label, in the order the counters keep them.
macro_rules! label_values {
    ($(#[$m:meta])* pub enum $name:ident { $($(#[$vm:meta])* $v:ident = $label:literal,)+ }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name {
            $($(#[$vm])* $v,)+
        }

        impl $name {
            /// Every value, in counter order.
            pub const ALL: [$name; [$($label),+].len()] = [$($name::$v),+];
            /// The label of each value, in counter order.
            pub const LABELS: [&'static str; [$($label),+].len()] = [$($label),+];

            /// Where the value's count is kept.
            pub fn index(self) -> usize {
                self as usize
            }

            pub fn label(self) -> &'static str {
                Self::LABELS[self as usize]
            }
        }
    };
}

label_values! {
    /// The `cache` label of `rampart_requests_total`: what the cache did for a request.
    pub enum CacheMetric {
        Hit = "hit",
        Stale = "stale",
        Revalidated = "revalidated",
        Miss = "miss",
        Expired = "expired",
        Collapsed = "collapsed",
        Dynamic = "dynamic",
        Bypass = "bypass",
        Blocked = "blocked",
        Error = "error",
        /// Refused before the cache was asked.
        None = "none",
        /// From the Redis tier.
        Shared = "shared",
        /// From the key's owner in the fleet, out of its cache.
        PeerHit = "peer_hit",
        /// From the key's owner in the fleet, which fetched it.
        PeerMiss = "peer_miss",
    }
}

impl CacheMetric {
    pub fn of(o: Option<CacheOutcome>) -> CacheMetric {
        match o {
            None => CacheMetric::None,
            Some(CacheOutcome::Served(Served::Fresh | Served::Disk)) => CacheMetric::Hit,
            Some(CacheOutcome::Served(Served::StaleWhileRevalidate | Served::StaleIfError)) => {
                CacheMetric::Stale
            }
            Some(CacheOutcome::Served(Served::Revalidated)) => CacheMetric::Revalidated,
            Some(CacheOutcome::Served(Served::Shared)) => CacheMetric::Shared,
            Some(CacheOutcome::Fetched { label, .. }) => match label {
                CacheLabel::Miss | CacheLabel::Hit => CacheMetric::Miss,
                CacheLabel::Expired => CacheMetric::Expired,
                CacheLabel::Dynamic => CacheMetric::Dynamic,
                CacheLabel::Bypass => CacheMetric::Bypass,
                CacheLabel::Block => CacheMetric::Blocked,
            },
            Some(CacheOutcome::Collapsed) => CacheMetric::Collapsed,
            Some(CacheOutcome::OnlyIfCached) => CacheMetric::Miss,
            Some(CacheOutcome::OriginError(_)) => CacheMetric::Error,
            Some(CacheOutcome::Blocked) => CacheMetric::Blocked,
            Some(CacheOutcome::Peer { hit: true }) => CacheMetric::PeerHit,
            Some(CacheOutcome::Peer { hit: false }) => CacheMetric::PeerMiss,
        }
    }

    /// An answer from the store: the hit ratio's numerator.
    pub fn is_hit(self) -> bool {
        matches!(
            self,
            CacheMetric::Hit
                | CacheMetric::Stale
                | CacheMetric::Revalidated
                | CacheMetric::Shared
                | CacheMetric::PeerHit
        )
    }

    /// A look-up of something cacheable (answered from the store or not): the hit ratio's
    /// denominator. Passes (`dynamic`, `bypass`) are not look-ups.
    pub fn is_lookup(self) -> bool {
        self.is_hit()
            || matches!(
                self,
                CacheMetric::Miss
                    | CacheMetric::Expired
                    | CacheMetric::Collapsed
                    | CacheMetric::PeerMiss
            )
    }
}

label_values! {
    /// The `protocol` label: the HTTP version a request came in.
    pub enum Protocol {
        Http1 = "http1",
        Http2 = "http2",
        Http3 = "http3",
    }
}

impl Protocol {
    pub fn of(v: Version) -> Protocol {
        match v {
            Version::HTTP_2 => Protocol::Http2,
            Version::HTTP_3 => Protocol::Http3,
            _ => Protocol::Http1,
        }
    }
}

label_values! {
    /// Why a request to an origin failed (`rampart_origin_errors_total{kind}`).
    pub enum OriginErrorKind {
        Connect = "connect",
        ConnectTimeout = "connect_timeout",
        Timeout = "timeout",
        Tls = "tls",
        Protocol = "protocol",
    }
}

impl OriginErrorKind {
    /// `None` for an error that is not the origin's.
    pub fn of(e: &ProxyError) -> Option<OriginErrorKind> {
        Some(match e {
            ProxyError::OriginConnect(_) => OriginErrorKind::Connect,
            ProxyError::OriginConnectTimeout(_) => OriginErrorKind::ConnectTimeout,
            ProxyError::OriginTimeout => OriginErrorKind::Timeout,
            ProxyError::OriginTls(_) => OriginErrorKind::Tls,
            ProxyError::OriginProtocol(_) => OriginErrorKind::Protocol,
            _ => return None,
        })
    }
}

label_values! {
    /// Why a request was refused (`rampart_blocked_requests_total{reason}`).
    pub enum BlockReason {
        AllowIps = "allow_ips",
        DenyIps = "deny_ips",
        UserAgent = "user_agent",
        SqlInjection = "sql_injection",
        RateLimit = "rate_limit",
        PathRule = "path_rule",
        BodyTooLarge = "body_too_large",
        BodyTimeout = "body_timeout",
        BadRequest = "bad_request",
        NoRoute = "no_route",
        Busy = "busy",
        EncodedBody = "encoded_body",
        Upgrade = "upgrade",
        NotAPeer = "not_a_peer",
    }
}

impl BlockReason {
    /// `None` for an error that is not a refusal.
    pub fn of(e: &ProxyError) -> Option<BlockReason> {
        Some(match e {
            ProxyError::Blocked(why) => match why {
                Screened::NotInAllowIps => BlockReason::AllowIps,
                Screened::InDenyIps => BlockReason::DenyIps,
                Screened::UserAgent | Screened::SeveralUserAgents => BlockReason::UserAgent,
                Screened::SqlInjection => BlockReason::SqlInjection,
                Screened::EncodedBody => BlockReason::EncodedBody,
                Screened::NotAPeer => BlockReason::NotAPeer,
            },
            ProxyError::RateLimited { .. } => BlockReason::RateLimit,
            ProxyError::BlockedByPathRule => BlockReason::PathRule,
            ProxyError::ClientBody(BodyFault::TooLarge) => BlockReason::BodyTooLarge,
            ProxyError::ClientBody(BodyFault::Timeout) => BlockReason::BodyTimeout,
            ProxyError::ClientBody(BodyFault::Broken)
            | ProxyError::BadRequest(_)
            | ProxyError::MissingHost
            | ProxyError::HeadTooLarge
            | ProxyError::UriTooLong
            | ProxyError::VersionNotSupported => BlockReason::BadRequest,
            ProxyError::NoRoute(_) => BlockReason::NoRoute,
            ProxyError::Busy => BlockReason::Busy,
            ProxyError::UpgradeRefused => BlockReason::Upgrade,
            _ => return None,
        })
    }
}

label_values! {
    /// Why a connection to a PROXY protocol listener was closed before HTTP
    /// (`rampart_proxy_protocol_refused_total{reason}`).
    pub enum PpRefusal {
        /// A peer outside `proxy_protocol_from`.
        Untrusted = "untrusted",
        /// A header that is not one.
        Malformed = "malformed",
        /// No complete header within the request-head timeout.
        Timeout = "timeout",
    }
}
