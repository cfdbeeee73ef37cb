//! A worker's client to every origin ([`OriginClient`]): rampart's own HTTP/1.1 client with its
//! idle pool (`net/idle.rs`), HTTP/2 through hyper (`h2.rs`), each exchange under
//! `proxy_timeout`. Each worker owns one, so pooled connections never cross threads.

use rampart_head::{Request, Response};
use std::time::Duration;

use http::uri::{Authority, Scheme};

use rampart_config::{OriginProtocol, UpstreamConfig};

use crate::body::origin::OriginBody;
use crate::body::RequestBodyError;
use crate::error::{BoxError, ProxyError};
use crate::http1::client::exchange::{H1Client, H1Failure};
use crate::interim::Interim;
use crate::net::idle::{IdlePool, PoolKey};
use crate::origin::connect::{absolute_uri, OriginConnectTimeout, OriginConnector, OriginTlsError};
use crate::origin::fields::Outgoing;
use crate::origin::h2::{H2Failure, H2Pool};

/// A worker's connections to all origins: its own HTTP/1.1 client with the idle pool, and
/// its HTTP/2 connections.
#[derive(Debug, Clone)]
pub struct OriginClient {
    h1: H1Client,
    /// Origins spoken to over HTTP/2 (`origin_protocol = "h2" | "h2c"`).
    h2: H2Pool,
    timeout: Option<Duration>,
    connect_timeout: Duration,
}

impl OriginClient {
    pub fn new(config: &UpstreamConfig, tls: std::sync::Arc<rustls::ClientConfig>) -> Self {
        let connector = OriginConnector::new(config.nodelay, tls.clone(), config.connect_timeout);
        OriginClient::with(config, &tls, connector)
    }

    /// A client over `connector`, with `config`'s pools and `proxy_timeout`.
    fn with(
        config: &UpstreamConfig,
        tls: &rustls::ClientConfig,
        connector: OriginConnector,
    ) -> Self {
        let h2 = H2Pool::new(connector.for_h2(tls), config.keepalive);
        let pool = IdlePool::new(config.keepalive, config.max_idle_per_origin);
        OriginClient {
            connect_timeout: connector.connect_timeout(),
            h1: H1Client::new(pool, connector),
            h2,
            timeout: config.timeout,
        }
    }

    /// A client for a fleet's peers: connections leave from `bind` (this instance's address
    /// among the peers) within `connect_timeout`; an answer's head may take `proxy_timeout`
    /// (the owner may be fetching from the origin: `origin/fleet/` checks it is alive).
    pub fn for_peers(
        config: &UpstreamConfig,
        tls: std::sync::Arc<rustls::ClientConfig>,
        bind: std::net::IpAddr,
        connect_timeout: Duration,
    ) -> Self {
        let connector =
            OriginConnector::new(config.nodelay, tls.clone(), connect_timeout).bound_to(bind);
        OriginClient::with(config, &tls, connector)
    }

    /// The `proxy_timeout` in force (`None` = no limit).
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Sends `req` (origin-form URI, the client's fields with fetch's changes beside them) to
    /// `authority` over `scheme` in `protocol`; waits at most `proxy_timeout` for the response
    /// head. `interim`: where
    /// the client's connection takes 1xx answers (HTTP/1.1 origins); `upgrade`: a WebSocket
    /// handshake (always HTTP/1.1).
    pub async fn send(
        &self,
        req: Outgoing<'_>,
        authority: &Authority,
        scheme: Scheme,
        protocol: OriginProtocol,
        interim: Option<&Interim>,
        upgrade: bool,
    ) -> Result<Response<OriginBody>, ProxyError> {
        // The client's body fault wins over whatever the exchange reports.
        let fault = req.body.fault();
        let body_fault = move || {
            fault
                .as_ref()
                .and_then(|f| f.get().copied())
                .map(ProxyError::ClientBody)
        };
        if protocol == OriginProtocol::Http1 || upgrade {
            let key = PoolKey {
                tls: scheme == Scheme::HTTPS,
                authority: authority.clone(),
            };
            // Each exchange under `proxy_timeout` as it is made: an `async fn` wrapping the
            // timeout would hold the exchange's future twice (its argument and the timeout's).
            let sent = match self.timeout {
                Some(t) => tokio::time::timeout(t, self.h1.send(req, key, interim, upgrade))
                    .await
                    .map_err(|_| ProxyError::OriginTimeout)?,
                None => self.h1.send(req, key, interim, upgrade).await,
            };
            return sent.map_err(|e| {
                body_fault().unwrap_or_else(|| match e {
                    H1Failure::Connect(e) => self.classify(e, true),
                    H1Failure::Protocol(e) => self.classify(e, false),
                    H1Failure::Body(RequestBodyError(fault)) => ProxyError::ClientBody(fault),
                })
            });
        }
        // The target as HTTP/2 sends it: scheme and pool key (`:authority` comes from
        // `Host`, see h2.rs). Boxed: HTTP/2's future is large, and the HTTP/1.1 path (every
        // request of most configurations) would otherwise carry its space.
        let Some(uri) = absolute_uri(&req.head.uri, scheme, authority.clone()) else {
            return Err(ProxyError::BadRequest("request target"));
        };
        let mut h2_req = Request::new(req.body);
        *h2_req.method_mut() = req.head.method.clone();
        *h2_req.uri_mut() = uri;
        *h2_req.headers_mut() = req.fields.apply(&req.head.headers);
        let h2 = Box::pin(self.h2.send(h2_req, authority.clone()));
        let sent = match self.timeout {
            Some(t) => tokio::time::timeout(t, h2)
                .await
                .map_err(|_| ProxyError::OriginTimeout)?,
            None => h2.await,
        };
        sent.map(|res| res.map(OriginBody::H2)).map_err(|e| {
            body_fault().unwrap_or_else(|| match e {
                H2Failure::Connect(e) => self.classify(e, true),
                H2Failure::Request(e) => self.classify(Box::new(e), false),
                H2Failure::Answer(why) => ProxyError::OriginProtocol(why.into()),
            })
        })
    }

    /// What a failed exchange means for the client; `connect`: no connection was made. The
    /// error is kept whole as the cause.
    fn classify(&self, e: BoxError, connect: bool) -> ProxyError {
        // The client's own request body failed (too large, too slow, broken): its fault.
        let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(&*e);
        let mut tls = false;
        while let Some(c) = cur {
            if let Some(RequestBodyError(fault)) = c.downcast_ref::<RequestBodyError>() {
                return ProxyError::ClientBody(*fault);
            }
            tls |= c.is::<OriginTlsError>();
            cur = c.source();
        }
        if tls {
            ProxyError::OriginTls(e)
        } else if connect && is_timeout(&*e) {
            ProxyError::OriginConnectTimeout(self.connect_timeout)
        } else if connect {
            ProxyError::OriginConnect(e)
        } else {
            ProxyError::OriginProtocol(e)
        }
    }
}

/// A connect timeout: rampart's own ([`OriginConnectTimeout`]) or the kernel's (ETIMEDOUT).
fn is_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(c) = cur {
        if c.is::<OriginConnectTimeout>() {
            return true;
        }
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::TimedOut {
                return true;
            }
        }
        cur = c.source();
    }
    false
}
