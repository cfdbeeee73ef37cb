//! The access log: one structured line per request on the `access` tracing target.
//!
//! Written only when the global `add_logging` and the rule's `enable_logging` are both on; the
//! pipeline does not even build a record otherwise. Fields: client, host, method, path, status,
//! bytes (body bytes sent), duration_us (request start to last body byte), upstream, cache,
//! scheme (`http`/`https`) and version (`HTTP/1.1`, `HTTP/2`).

use std::net::IpAddr;
use std::time::Instant;

use http::uri::Authority;
use http::Method;

/// The tracing target of the access log.
pub const ACCESS_TARGET: &str = "access";

/// Everything one access-log line needs; filled in along the pipeline.
#[derive(Debug)]
pub struct AccessRecord {
    pub start: Instant,
    pub client: IpAddr,
    /// `http` or `https` (how the client connected).
    pub scheme: &'static str,
    pub version: http::Version,
    pub host: String,
    pub method: Method,
    pub path: String,
    pub status: u16,
    pub bytes: u64,
    pub upstream: Option<Authority>,
    /// The `X-Arc2-Cache` vocabulary: Miss, Hit, Dynamic, Bypass, Block, ...
    pub cache: &'static str,
    /// The body ended with an error (client or origin went away mid-stream).
    pub aborted: bool,
}

impl AccessRecord {
    /// A record for a request to `host` from `client` (the address screening resolved).
    pub fn new<B>(
        start: Instant,
        client: IpAddr,
        scheme: &'static str,
        host: &http::HeaderValue,
        req: &http::Request<B>,
    ) -> Self {
        AccessRecord {
            start,
            client,
            scheme,
            version: req.version(),
            host: String::from_utf8_lossy(host.as_bytes()).into_owned(),
            method: req.method().clone(),
            path: req
                .uri()
                .path_and_query()
                .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned()),
            status: 0,
            bytes: 0,
            upstream: None,
            cache: "Dynamic",
            aborted: false,
        }
    }

    pub fn write(&self) {
        let upstream = self.upstream.as_ref().map_or("-", Authority::as_str);
        tracing::info!(
            target: ACCESS_TARGET,
            client = %self.client,
            host = %self.host,
            method = %self.method,
            path = %self.path,
            status = self.status,
            bytes = self.bytes,
            duration_us = self.start.elapsed().as_micros() as u64,
            upstream,
            cache = self.cache,
            aborted = self.aborted,
            scheme = self.scheme,
            version = ?self.version,
        );
    }
}
