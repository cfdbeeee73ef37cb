//! HTTP/2 server conformance (RFC 9113 §3–§8, RFC 7541): every MUST and MUST NOT a server can
//! be held to from the client side, checked against the real `rampart` binary over h2c (prior
//! knowledge) and over TLS (ALPN h2) with a raw client that writes frames by hand
//! (`client.rs`, `hpack.rs`). Each test cites the section it checks. A connection error must be
//! GOAWAY with the right code and then a close; a malformed request may be refused with
//! RST_STREAM(PROTOCOL_ERROR) or a 400, but must never reach the origin.
#![allow(clippy::unwrap_used)]

mod client;
mod connection;
mod frames;
mod hpack;
mod messages;

use std::sync::Arc;
use std::time::Duration;

use crate::support::tls::{files, TestCa};
use crate::support::*;
use client::{Conn, Transport};

/// The domain of the proxy's one rule; the `:authority` of every request.
pub const HOST: &str = "a.test";
/// The body the origin sends for `/big`: more than a small flow-control window.
pub const BIG: usize = 4000;

/// An origin and rampart in front of it, listening for h2c and for TLS.
pub struct Server {
    pub origin: OriginHandle,
    pub proxy: Proxy,
    tls: Arc<rustls::ClientConfig>,
}

impl Server {
    pub async fn start() -> Server {
        Server::with("").await
    }

    /// With extra global configuration lines.
    pub async fn with(extra_global: &str) -> Server {
        let origin = Origin::new()
            .route(
                "/big",
                Reply::text(&"x".repeat(BIG)).header("cache-control", "no-store"),
            )
            .route(
                "/slow",
                Reply::text("slow\n")
                    .header("cache-control", "no-store")
                    .delay(Duration::from_millis(600)),
            )
            .route(
                "*",
                Reply::text("hello\n").header("cache-control", "no-store"),
            )
            .start()
            .await;
        let ca = TestCa::new("h2 conformance CA");
        let (cert, key) = ca.leaf(&[HOST]).write("h2-conformance");
        let global = format!("listening_port_https = 0\nworkers = 1\n{extra_global}");
        let proxy = Proxy::start(&config_for(HOST, &origin, &global, &files(&cert, &key)));
        let tls = crate::support::tls::client_config(
            ca.roots(),
            &[b"h2"],
            &[&rustls::version::TLS13, &rustls::version::TLS12],
        );
        Server { origin, proxy, tls }
    }

    /// A connection with no bytes sent yet.
    pub async fn connect(&self, t: Transport) -> Conn {
        let addr = match t {
            Transport::H2c => self.proxy.addr,
            Transport::Tls => self.proxy.https.expect("an HTTPS listener"),
        };
        Conn::connect(addr, t, HOST, &self.tls).await
    }

    /// An h2c connection past the preface, with `settings` sent as the client's SETTINGS.
    pub async fn open_with(&self, settings: &[(u16, u32)]) -> Conn {
        let mut c = self.connect(Transport::H2c).await;
        c.handshake(settings).await;
        c
    }

    /// An h2c connection past the preface.
    pub async fn open(&self) -> Conn {
        self.open_with(&[]).await
    }

    /// Whether the origin received a request for `path`.
    pub fn origin_saw(&self, path: &str) -> bool {
        self.origin.seen().iter().any(|s| s.uri.path() == path)
    }

    /// The request the origin received for `path` (the test fails when there was none).
    pub fn origin_request(&self, path: &str) -> Seen {
        self.origin
            .seen()
            .into_iter()
            .find(|s| s.uri.path() == path)
            .unwrap_or_else(|| panic!("the origin never received {path}"))
    }

    /// A malformed request sent as `fields` on `stream` (whole, END_STREAM) is refused, never
    /// forwarded; a request on a fresh connection afterwards proves the server still serves,
    /// and that the refused one did not trail behind it to the origin.
    pub async fn assert_refused(&self, fields: &[(String, String)], path: &str) {
        let before = self.origin.requests();
        let mut c = self.open().await;
        c.headers(1, client::END_STREAM, fields).await;
        c.expect_malformed(1).await;
        let mut c = self.open().await;
        c.get(1, "/after").await;
        assert_eq!(c.response(1).await.status, 200);
        assert_eq!(
            self.origin.requests(),
            before + 1,
            "{path:?} reached the origin: {fields:?}"
        );
    }
}

/// `fields` with (name, value) strings owned.
pub fn owned(fields: &[(&str, &str)]) -> Vec<(String, String)> {
    fields
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

/// The four pseudo-headers of GET `path` over h2c, then `extra`.
pub fn get_with(path: &str, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut f = owned(&[
        (":method", "GET"),
        (":scheme", "http"),
        (":authority", HOST),
        (":path", path),
    ]);
    f.extend(owned(extra));
    f
}

/// The pseudo-headers of POST `path` over h2c, then `extra`.
pub fn post_fields(path: &str, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut f = get_with(path, extra);
    f[0].1 = "POST".into();
    f
}

/// The HPACK block of `fields`.
pub fn encode(fields: &[(String, String)]) -> Vec<u8> {
    hpack::block(
        &fields
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect::<Vec<_>>(),
    )
}

/// The HPACK block of GET `path` over h2c.
pub fn request_block(path: &str) -> Vec<u8> {
    encode(&get_with(path, &[]))
}
