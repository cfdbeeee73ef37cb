//! HTTP/3's QUIC settings: TLS from the certificate manager, the transport's limits.

use std::sync::Arc;

/// Connection attempts queued before the application sees them (quinn's default is 65,536).
const MAX_INCOMING: usize = 4096;

/// Flow-control windows: what a client may send before rampart reads (per request stream and
/// per connection), and what rampart sends before the client acknowledges (per connection).
/// They bound the memory one connection can hold; on loopback 1 MiB in flight moves several
/// Gbit/s.
const STREAM_WINDOW: u32 = 256 << 10;
const CONN_WINDOW: u32 = 1 << 20;
const SEND_WINDOW: u64 = 1 << 20;

/// Unidirectional streams a client may open: HTTP/3's control stream and QPACK's two, with
/// room for reserved (grease) stream types.
const UNI_STREAMS: u32 = 8;

/// HTTP/3's QUIC settings for a configuration, or `None` when `http3` is off.
pub fn server_config(
    config: &rampart_config::Config,
    tls: &rampart_tls::Tls,
) -> Option<Arc<quinn::ServerConfig>> {
    let h3 = config.tls.http3.as_ref()?;
    let crypto = match quinn::crypto::rustls::QuicServerConfig::try_from(tls.quic.clone()) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cannot set up TLS for HTTP/3; HTTP/3 is off");
            return None;
        }
    };
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let mut transport = quinn::TransportConfig::default();
    let idle = quinn::IdleTimeout::try_from(config.downstream.keepalive_timeout).ok();
    transport
        .max_concurrent_bidi_streams(h3.max_streams.into())
        .max_concurrent_uni_streams(UNI_STREAMS.into())
        .max_idle_timeout(idle)
        .stream_receive_window(STREAM_WINDOW.into())
        .receive_window(CONN_WINDOW.into())
        .send_window(SEND_WINDOW)
        .datagram_receive_buffer_size(None);
    server
        .transport_config(Arc::new(transport))
        .max_incoming(MAX_INCOMING)
        .incoming_buffer_size(64 << 10)
        .incoming_buffer_size_total(16 << 20);
    Some(Arc::new(server))
}
