//! HTTP/3: a QUIC endpoint on each UDP socket beside an HTTPS listener (`http3 = true`), its
//! connections, and their request streams, which go through the same pipeline as HTTP/1.1 and
//! HTTP/2 requests (screening, cache, logging).
//!
//! ```text
//! UDP socket → endpoint (accept_loop) → connection (serve_connection) → request stream
//!   (serve_request): head → pipeline.handle → response head, body frames, trailers
//! ```
//!
//! Limits, as for HTTP/2: concurrent request streams per connection
//! (`http3_max_concurrent_streams`, enforced by QUIC's stream credit), the header section
//! size (`h2_max_header_list_size`), flow-control windows that bound what a client can make
//! rampart buffer, connections counted in `max_connections` and `max_connections_per_ip`
//! (refused at the limit: a QUIC attempt has no backlog to wait in), the request-head timeout
//! for the handshake and for each request's head, and the keep-alive timeout for a connection
//! that starts no request. Against floods of spoofed handshakes: QUIC's anti-amplification
//! limit (three times what the client sent before its address is validated), and a Retry (a
//! round trip that proves the address) for every new client while many handshakes are in
//! progress. No 0-RTT: early data can be replayed.
//!
//! Across a binary upgrade both processes read the same UDP sockets while the old one drains;
//! [`relay`] gets each datagram to the process whose connection it is.

pub mod config;
pub mod relay;

use rampart_head::{Request, Response};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use h3::error::Code;
use h3::server::RequestStream;
use http::{Method, StatusCode};
use http_body::Body;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::Instrument as _;

use crate::body::h3::H3Body;
use crate::body::{ClientBody, ProxyBody};
use crate::interim::Interim;
use crate::pipeline::conn_info::{ConnInfo, Scheme};
use crate::telemetry::metrics::ConnStats;
use crate::transport::in_force::{ConnSettings, Slot};
use crate::transport::limits::{ConnLimit, ConnPermit, PerIpSlot};

/// While this many handshakes are in progress on one socket, a client whose address is not
/// yet validated is sent a Retry first (RFC 9000 §8.1.2): spoofed Initial packets then cost
/// one stateless packet each instead of a connection's state and a handshake's crypto.
const RETRY_ABOVE: usize = 64;

/// How long a stopping worker waits for its connections' closing packets to go out.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// What a connection holds until it ends: its connection slot, its per-address slot, its
/// count in the metrics, and the worker's drain handle.
struct Held {
    _permit: ConnPermit,
    _per_ip: Option<PerIpSlot>,
    _stats: ConnStats,
    _open: mpsc::Sender<()>,
}

/// Counts a handshake in progress until dropped.
struct Handshaking(Arc<AtomicUsize>);

impl Handshaking {
    fn new(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Handshaking(count.clone())
    }
}

impl Drop for Handshaking {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Accepts QUIC connections on one UDP socket until the worker closes it or stops. The
/// configuration in force when a connection arrives sets its TLS and limits.
pub(crate) async fn accept_loop(
    socket: std::net::UdpSocket,
    configured: SocketAddr,
    slot: Arc<Slot>,
    limit: Arc<ConnLimit>,
    open: mpsc::Sender<()>,
    mut closed: oneshot::Receiver<()>,
    mut shutdown: watch::Receiver<bool>,
) {
    // `None`: a reload turned HTTP/3 off before this socket opened; it is being closed.
    let Some(first) = slot.load().conn.quic.clone() else {
        relay::forget(std::os::fd::AsRawFd::as_raw_fd(&socket));
        return;
    };
    let relay = relay::Relay::register(std::os::fd::AsRawFd::as_raw_fd(&socket));
    let endpoint = match start_endpoint(socket, &relay, &first) {
        Ok(e) => e,
        Err(e) => {
            tracing::error!(error = %e, %configured, "cannot start the HTTP/3 endpoint");
            return;
        }
    };
    let actual = endpoint.local_addr().unwrap_or(configured);
    let handshaking = Arc::new(AtomicUsize::new(0));
    let stopping = loop {
        let incoming = tokio::select! {
            biased;
            _ = shutdown.changed() => break true,
            _ = &mut closed => break false,
            i = endpoint.accept() => match i {
                Some(i) => i,
                None => break false,
            },
        };
        let current = slot.load_full();
        let settings = &current.conn;
        let peer = incoming.remote_address();
        let Some((connecting, held)) = admit(incoming, settings, &limit, &handshaking, &open)
        else {
            continue;
        };
        let conn = Conn {
            slot: slot.clone(),
            local: actual,
            limits: settings.limits,
            max_field_section: u64::from(settings.max_header_list),
        };
        let span = tracing::debug_span!("conn", %peer, scheme = "h3");
        let task = conn.serve(
            connecting,
            Handshaking::new(&handshaking),
            held,
            shutdown.clone(),
        );
        tokio::spawn(task.instrument(span));
    };
    // No new connections; those open go on (the endpoint runs while they do). During an
    // upgrade, new connections' first datagrams read here go to the new process.
    relay.stop_accepting();
    endpoint.set_server_config(None);
    if stopping {
        // Let the connections' closing packets out before the worker's runtime ends.
        tokio::spawn(async move {
            let _ = tokio::time::timeout(CLOSE_WAIT, endpoint.wait_idle()).await;
            drop(open);
        });
    }
}

/// The QUIC endpoint on `socket`: connection IDs that name this process's generation, and
/// datagrams read through the upgrade relay (see [`relay`]).
fn start_endpoint(
    socket: std::net::UdpSocket,
    relay: &Arc<relay::Relay>,
    server: &Arc<quinn::ServerConfig>,
) -> std::io::Result<quinn::Endpoint> {
    let mut endpoint_config = quinn::EndpointConfig::default();
    endpoint_config.cid_generator(|| Box::new(relay::Cids::default()));
    let udp = quinn::Runtime::wrap_udp_socket(&quinn::TokioRuntime, socket)?;
    quinn::Endpoint::new_with_abstract_socket(
        endpoint_config,
        Some((**server).clone()),
        Arc::new(relay::RelaySocket::new(udp, relay.clone())),
        Arc::new(quinn::TokioRuntime),
    )
}

/// A connection attempt taken, with what it holds while it lives; `None` when it was not: a
/// Retry while many handshakes are in progress (an address that has not proved itself), a
/// refusal at the connection limits or when HTTP/3 was turned off, a failed start.
fn admit(
    incoming: quinn::Incoming,
    settings: &ConnSettings,
    limit: &Arc<ConnLimit>,
    handshaking: &AtomicUsize,
    open: &mpsc::Sender<()>,
) -> Option<(quinn::Connecting, Held)> {
    let Some(server) = settings.quic.clone() else {
        incoming.refuse();
        return None;
    };
    if !incoming.remote_address_validated() && handshaking.load(Ordering::Relaxed) >= RETRY_ABOVE {
        if let Err(e) = incoming.retry() {
            e.into_incoming().refuse();
        }
        return None;
    }
    let peer = incoming.remote_address();
    let Some(permit) = limit.try_acquire() else {
        tracing::debug!(%peer, "connection limit reached; HTTP/3 connection refused");
        incoming.refuse();
        return None;
    };
    let per_ip = match &settings.per_ip {
        Some(table) => {
            let Some(s) = table.acquire(peer.ip().to_canonical()) else {
                crate::telemetry::metrics::get().refused_per_ip();
                tracing::debug!(%peer, "per-address connection limit reached; HTTP/3 connection refused");
                incoming.refuse();
                return None;
            };
            Some(s)
        }
        None => None,
    };
    let connecting = match incoming.accept_with(server) {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!(%peer, error = %e, "HTTP/3 connection attempt failed");
            return None;
        }
    };
    let held = Held {
        _permit: permit,
        _per_ip: per_ip,
        _stats: crate::telemetry::metrics::get().accepted(true),
        _open: open.clone(),
    };
    Some((connecting, held))
}

/// What a QUIC connection's task needs.
struct Conn {
    slot: Arc<Slot>,
    /// The socket's address.
    local: SocketAddr,
    limits: crate::http1::server::Limits,
    max_field_section: u64,
}

impl Conn {
    /// The handshake (within the request-head timeout), then HTTP/3 until the connection
    /// ends, the worker stops (GOAWAY, in-flight requests finish), or no request starts for a
    /// whole keep-alive period.
    async fn serve(
        self,
        connecting: quinn::Connecting,
        handshaking: Handshaking,
        held: Held,
        mut stop: watch::Receiver<bool>,
    ) {
        let metrics = crate::telemetry::metrics::get();
        let handshake = tokio::select! {
            r = tokio::time::timeout(self.limits.header_read_timeout, connecting) => r,
            _ = stop.changed() => return,
        };
        drop(handshaking);
        let conn = match handshake {
            Ok(Ok(c)) => {
                metrics.handshake(Some(true));
                c
            }
            Ok(Err(e)) => {
                metrics.handshake(Some(false));
                tracing::debug!(error = %e, "QUIC handshake failed");
                return;
            }
            Err(_) => {
                metrics.handshake(None);
                tracing::debug!("QUIC handshake timed out");
                return;
            }
        };
        let local = SocketAddr::new(
            conn.local_ip().unwrap_or(self.local.ip()),
            self.local.port(),
        );
        let info = Arc::new(ConnInfo::new(conn.remote_address(), local, Scheme::Https));
        let mut builder = h3::server::builder();
        builder.max_field_section_size(self.max_field_section);
        let h3 = builder
            .build::<_, Bytes>(h3_quinn::Connection::new(conn.clone()))
            .await;
        let mut h3 = match h3 {
            Ok(h) => h,
            Err(e) => {
                tracing::debug!(error = %e, "HTTP/3 connection setup failed");
                return;
            }
        };
        let keepalive = self.limits.keepalive_timeout;
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + keepalive, keepalive);
        let (mut started, mut seen, mut closing) = (0u64, 0u64, false);
        loop {
            tokio::select! {
                biased;
                r = h3.accept() => match r {
                    Ok(Some(resolver)) => {
                        started += 1;
                        let task = serve_request(
                            resolver,
                            self.slot.clone(),
                            info.clone(),
                            self.limits.header_read_timeout,
                            self.limits.send_timeout,
                        );
                        tokio::spawn(task.in_current_span());
                    }
                    // GOAWAY sent or received, and every request finished.
                    Ok(None) => break,
                    Err(e) => {
                        tracing::debug!(error = %e, "HTTP/3 connection ended");
                        break;
                    }
                },
                _ = stop.changed(), if !closing => {
                    closing = true;
                    let _ = h3.shutdown(0).await;
                }
                _ = tick.tick(), if !closing => {
                    if started == seen {
                        tracing::debug!("idle HTTP/3 connection closed");
                        closing = true;
                        let _ = h3.shutdown(0).await;
                    }
                    seen = started;
                }
            }
        }
        conn.close(
            Code::H3_NO_ERROR.value().try_into().unwrap_or_default(),
            b"",
        );
        drop(held);
    }
}

/// One request stream: its head (within the request-head timeout), the pipeline, the response.
async fn serve_request(
    resolver: h3::server::RequestResolver<h3_quinn::Connection, Bytes>,
    slot: Arc<Slot>,
    info: Arc<ConnInfo>,
    head_timeout: Duration,
    send_timeout: Duration,
) {
    let (req, stream) = match tokio::time::timeout(head_timeout, resolver.resolve_request()).await {
        Ok(Ok(x)) => x,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "HTTP/3 request head refused");
            return;
        }
        Err(_) => {
            tracing::debug!("HTTP/3 request head timed out");
            return;
        }
    };
    let (mut send, recv) = stream.split();
    // The h3 crate speaks `http`'s types: the head becomes rampart's here, at its edge.
    let req = Request::from_http(req);
    let head = req.method() == Method::HEAD;
    // Where the origin's interim answers (103 Early Hints) for this request go: each is sent
    // as a HEADERS frame of its own ahead of the final one (RFC 9114 §4.1).
    let interim = Arc::new(Interim::default());
    let res = if let Some(why) = crate::transport::malformed::malformed(&req) {
        tracing::debug!(why, "malformed HTTP/3 request");
        crate::telemetry::metrics::get().malformed(400);
        crate::error::ProxyError::BadRequest(why).to_response()
    } else {
        let mut body = H3Body::new(recv);
        // A body already ended with the head (a GET's) is Empty: it can be resent to another
        // origin and carries no timers.
        let body = if body.ended_without_body() {
            ClientBody::Empty
        } else {
            ClientBody::H3(Box::new(body))
        };
        let req: Request<ClientBody> = req.map(|()| body);
        let pipeline = slot.load().pipeline.clone();
        let handled = pipeline.handle(&info, req, Some(interim.clone()));
        tokio::pin!(handled);
        loop {
            tokio::select! {
                biased;
                res = &mut handled => break res,
                list = std::future::poll_fn(|cx| interim.poll_take(cx)) => {
                    send_interim(&mut send, list).await;
                }
            }
        }
    };
    // Interim answers read in the same breath as the final one still go first.
    send_interim(&mut send, interim.take()).await;
    respond(&mut send, res, head, send_timeout).await;
}

/// Interim (1xx) answers from the origin, each a HEADERS frame (never stored).
async fn send_interim(send: &mut SendHalf, list: Vec<(StatusCode, rampart_head::Fields)>) {
    for (status, mut headers) in list {
        crate::headers::strip_hop_by_hop(&mut headers);
        let mut res = Response::new(());
        *res.status_mut() = status;
        *res.headers_mut() = headers;
        if let Err(e) = send.send_response(res.into_http()).await {
            tracing::debug!(error = %e, "HTTP/3 interim answer not sent");
            return;
        }
    }
}

type SendHalf = RequestStream<h3_quinn::SendStream<Bytes>, Bytes>;

/// Sends a response: its head (connection-specific fields removed), its body's data frames
/// (none for HEAD), its trailers, the end of the stream. A body that fails midway resets the
/// stream, so the client sees an error rather than a short response.
///
/// Each piece of the body the client does not take within `send_timeout`
/// (`client_send_timeout_seconds`) ends the stream.
async fn respond(
    send: &mut SendHalf,
    res: Response<ProxyBody>,
    head: bool,
    send_timeout: Duration,
) {
    let (mut parts, mut body) = res.into_parts();
    crate::headers::strip_hop_by_hop(&mut parts.headers);
    let bodiless =
        head || parts.status == StatusCode::NO_CONTENT || parts.status == StatusCode::NOT_MODIFIED;
    if let Err(e) = send
        .send_response(Response::from_parts(parts, ()).into_http())
        .await
    {
        tracing::debug!(error = %e, "HTTP/3 response head not sent");
        return;
    }
    if !bodiless {
        loop {
            let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
            match frame {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) if data.is_empty() => {}
                    Ok(data) => {
                        match tokio::time::timeout(send_timeout, send.send_data(data)).await {
                            Ok(Ok(())) => {}
                            Ok(Err(e)) => {
                                tracing::debug!(error = %e, "HTTP/3 client went away");
                                return;
                            }
                            Err(_) => {
                                tracing::info!(?send_timeout, "HTTP/3 client took nothing of a response for client_send_timeout_seconds; stream reset");
                                crate::telemetry::metrics::get().send_timeout();
                                send.stop_stream(Code::H3_REQUEST_CANCELLED);
                                return;
                            }
                        }
                    }
                    Err(frame) => {
                        if let Ok(trailers) = frame.into_trailers() {
                            if let Err(e) = send.send_trailers(trailers).await {
                                tracing::debug!(error = %e, "HTTP/3 trailers not sent");
                                return;
                            }
                            break;
                        }
                    }
                },
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "response body failed; HTTP/3 stream reset");
                    send.stop_stream(Code::H3_INTERNAL_ERROR);
                    return;
                }
                None => break,
            }
        }
    }
    if let Err(e) = send.finish().await {
        tracing::debug!(error = %e, "HTTP/3 response not finished");
    }
}
