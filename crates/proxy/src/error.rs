//! The one error type of the request path and the one map from error to status.
//!
//! "What happens on a 502?" is answered here: [`ProxyError::status`] is the only place an error
//! becomes a status code, and [`ProxyError::side`] records whose fault it was (downstream client,
//! upstream origin, or rampart itself) for logs and metrics. How each error is rendered is
//! `pipeline/synth.rs`.

use std::time::Duration;

use http::StatusCode;

/// Any error, boxed, as hyper and tower take them.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// An error and every error under it (its `source` chain) on one line, as logs show them:
/// `could not connect to origin: client error (Connect): tcp connect error: Connection refused`.
#[derive(Debug, Clone, Copy)]
pub struct Chain<'a>(pub &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cur = self.0.source();
        while let Some(c) = cur {
            write!(f, ": {c}")?;
            cur = c.source();
        }
        Ok(())
    }
}

/// Where a failure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Downstream,
    OriginClient,
    Internal,
}

impl Side {
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Downstream => "downstream",
            Side::OriginClient => "upstream",
            Side::Internal => "internal",
        }
    }
}

/// Why screening refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Screened {
    NotInAllowIps,
    InDenyIps,
    UserAgent,
    /// More than one `User-Agent` line, on a rule that blocks user agents.
    SeveralUserAgents,
    SqlInjection,
    /// A compressed form or JSON body under SQL-injection screening.
    EncodedBody,
    /// `X-Rampart-Peer` from an address that is not a peer's, or not signed by one.
    NotAPeer,
}

impl Screened {
    /// For logs and the error text.
    pub fn message(self) -> &'static str {
        match self {
            Screened::NotInAllowIps => "client address not in allow_ips",
            Screened::InDenyIps => "client address in deny_ips",
            Screened::UserAgent => "disallowed user agent",
            Screened::SeveralUserAgents => "more than one User-Agent field",
            Screened::SqlInjection => "SQL injection",
            Screened::EncodedBody => "encoded form or JSON body cannot be screened",
            Screened::NotAPeer => {
                "X-Rampart-Peer from an address or with a signature that is not a peer's"
            }
        }
    }
}

/// Everything that can end a request with a synthetic response.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("no rule for host {0:?}")]
    NoRoute(String),
    #[error("request has no Host header")]
    MissingHost,
    #[error("malformed request: {0}")]
    BadRequest(&'static str),
    #[error("request head over the size or field-count limit")]
    HeadTooLarge,
    #[error("request target longer than the head limit")]
    UriTooLong,
    #[error("HTTP version other than 1.0 or 1.1")]
    VersionNotSupported,
    #[error("blocked by path rule")]
    BlockedByPathRule,
    /// No connection to the origin (nothing was sent); the cause is the `source`.
    #[error("could not connect to origin")]
    OriginConnect(#[source] BoxError),
    #[error("origin connect timed out after {0:?}")]
    OriginConnectTimeout(Duration),
    #[error("origin did not answer within proxy_timeout")]
    OriginTimeout,
    /// The exchange failed on a connection, or the origin's answer broke HTTP's rules.
    #[error("origin connection failed")]
    OriginProtocol(#[source] BoxError),
    /// TLS to the origin failed (its certificate, its name, the handshake).
    #[error("TLS to the origin failed")]
    OriginTls(#[source] BoxError),
    #[error("only-if-cached and nothing usable is stored")]
    NotCached,
    #[error("blocked: {}", .0.message())]
    Blocked(Screened),
    #[error("rate limited")]
    /// `status`: the limiter's `rate_limit_status` (429 unless configured).
    RateLimited {
        retry_after: Duration,
        limit: u32,
        status: StatusCode,
    },
    #[error("request body: {0:?}")]
    ClientBody(BodyFault),
    #[error("too busy to screen the request body")]
    Busy,
    #[error("protocol upgrades (WebSocket) are not allowed on this site")]
    UpgradeRefused,
    // The management API and PURGE (answered as JSON: `{"error": "<this text>"}`).
    #[error("missing API key: send it as `Authorization: Bearer KEY` or `X-Api-Key: KEY`")]
    ApiKey,
    #[error("wrong API key")]
    ApiWrongKey,
    #[error("PURGE is not allowed from this address: send the api_key, or add the address to purge_allow")]
    PurgeNotAllowed,
    #[error("PURGE is not allowed from this address, and no api_key is configured that a request could carry")]
    PurgeNoKeyConfigured,
    /// A management endpoint asked with a method it does not take; the methods it takes.
    #[error("method not allowed here: use {0}")]
    ApiMethod(&'static str),
    #[error("{0}")]
    ApiBadRequest(&'static str),
    #[error("no such endpoint: see docs/operations.md for /_rampart/status, metrics, dashboard, purge, reload and rules")]
    ApiNoSuchEndpoint,
}

impl ProxyError {
    /// The one error → status map.
    pub fn status(&self) -> StatusCode {
        match self {
            ProxyError::NoRoute(_) => StatusCode::NOT_FOUND,
            ProxyError::MissingHost | ProxyError::BadRequest(_) | ProxyError::ApiBadRequest(_) => {
                StatusCode::BAD_REQUEST
            }
            ProxyError::ApiKey | ProxyError::ApiWrongKey => StatusCode::UNAUTHORIZED,
            ProxyError::PurgeNotAllowed | ProxyError::PurgeNoKeyConfigured => StatusCode::FORBIDDEN,
            ProxyError::ApiMethod(_) => StatusCode::METHOD_NOT_ALLOWED,
            ProxyError::ApiNoSuchEndpoint => StatusCode::NOT_FOUND,
            ProxyError::HeadTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ProxyError::UriTooLong => StatusCode::URI_TOO_LONG,
            ProxyError::VersionNotSupported => StatusCode::HTTP_VERSION_NOT_SUPPORTED,
            ProxyError::BlockedByPathRule | ProxyError::Blocked(_) | ProxyError::UpgradeRefused => {
                StatusCode::FORBIDDEN
            }
            ProxyError::RateLimited { status, .. } => *status,
            ProxyError::ClientBody(BodyFault::TooLarge) => StatusCode::PAYLOAD_TOO_LARGE,
            ProxyError::ClientBody(BodyFault::Timeout) => StatusCode::REQUEST_TIMEOUT,
            ProxyError::ClientBody(BodyFault::Broken) => StatusCode::BAD_REQUEST,
            ProxyError::Busy => StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::OriginConnect(_)
            | ProxyError::OriginProtocol(_)
            | ProxyError::OriginTls(_) => StatusCode::BAD_GATEWAY,
            // RFC 9111 §5.2.1.7: only-if-cached with nothing stored → 504.
            ProxyError::OriginConnectTimeout(_)
            | ProxyError::OriginTimeout
            | ProxyError::NotCached => StatusCode::GATEWAY_TIMEOUT,
        }
    }

    pub fn side(&self) -> Side {
        match self {
            ProxyError::NoRoute(_)
            | ProxyError::MissingHost
            | ProxyError::BadRequest(_)
            | ProxyError::HeadTooLarge
            | ProxyError::UriTooLong
            | ProxyError::VersionNotSupported
            | ProxyError::BlockedByPathRule
            | ProxyError::Blocked(_)
            | ProxyError::UpgradeRefused
            | ProxyError::RateLimited { .. }
            | ProxyError::ClientBody(_)
            | ProxyError::NotCached
            | ProxyError::ApiKey
            | ProxyError::ApiWrongKey
            | ProxyError::PurgeNotAllowed
            | ProxyError::PurgeNoKeyConfigured
            | ProxyError::ApiMethod(_)
            | ProxyError::ApiBadRequest(_)
            | ProxyError::ApiNoSuchEndpoint => Side::Downstream,
            ProxyError::OriginConnect(_)
            | ProxyError::OriginConnectTimeout(_)
            | ProxyError::OriginTimeout
            | ProxyError::OriginProtocol(_)
            | ProxyError::OriginTls(_) => Side::OriginClient,
            ProxyError::Busy => Side::Internal,
        }
    }

    /// Whether another upstream may be tried (nothing was sent to this one).
    pub fn may_fail_over(&self) -> bool {
        matches!(
            self,
            ProxyError::OriginConnect(_)
                | ProxyError::OriginConnectTimeout(_)
                | ProxyError::OriginTls(_)
        )
    }

    /// Errors of the management API and `PURGE`, which answer in JSON.
    pub fn is_api(&self) -> bool {
        matches!(
            self,
            ProxyError::ApiKey
                | ProxyError::ApiWrongKey
                | ProxyError::PurgeNotAllowed
                | ProxyError::PurgeNoKeyConfigured
                | ProxyError::ApiMethod(_)
                | ProxyError::ApiBadRequest(_)
                | ProxyError::ApiNoSuchEndpoint
        )
    }
}

/// Why a client's request body failed. It travels inside the upstream client's error
/// (`fetch::classify` finds it there), so the client gets 413/408/400, not 502.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFault {
    /// More than the body limit (413).
    TooLarge,
    /// The client paused longer than the body idle timeout, or took longer than the total
    /// timeout (408).
    Timeout,
    /// The client's framing broke or it went away (400).
    Broken,
}
