//! HTTP/2 to origins (`origin_protocol = "h2"` over TLS with ALPN, `"h2c"` by prior
//! knowledge): one multiplexed connection per pool key and worker, opened on first use by the
//! same connector as HTTP/1.1 (so PROXY headers, SNI, certificate checks, connect timeouts and
//! the connection metrics are the same), dropped after `proxy_keepalive_sec` without a new
//! request. Streams beyond the origin's `SETTINGS_MAX_CONCURRENT_STREAMS` wait their turn on
//! the connection.
//!
//! The request's `Host` becomes `:authority` (RFC 9113 §8.3.1); `TE: trailers` is kept (gRPC
//! needs it), every other connection-specific field is already gone.

use rampart_head::{Request, Response};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use http::header::HOST;
use http::uri::{Authority, Scheme};
use http::Version;
use hyper::body::Incoming;
use hyper::client::conn::http2::{self, SendRequest};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::time::Instant;

use crate::body::RequestBody;
use crate::net::idle::PoolKey;
use crate::origin::connect::{absolute_uri, OriginConnector};

use crate::error::BoxError;

/// Why an HTTP/2 exchange with an origin failed.
#[derive(Debug)]
pub enum H2Failure {
    /// No connection: TCP, TLS or the HTTP/2 handshake failed (nothing was sent).
    Connect(BoxError),
    /// The request failed on an established connection.
    Request(hyper::Error),
    /// The origin's answer is not one a client could be given (a status outside 100–599).
    Answer(&'static str),
}

/// A worker's HTTP/2 connections to origins, by pool key.
#[derive(Clone)]
pub struct H2Pool {
    conns: Arc<Mutex<HashMap<(bool, Authority), Entry>>>,
    /// Connections being made: requests that arrive meanwhile wait for the same one (and share
    /// its failure) instead of each opening their own.
    connecting: Arc<Mutex<HashMap<(bool, Authority), Attempt>>>,
    connector: OriginConnector,
    /// `proxy_keepalive_sec`: a connection without a new request for this long is closed
    /// (once its streams end). Zero: a connection per request.
    idle: Duration,
    next_id: Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for H2Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H2Pool").finish_non_exhaustive()
    }
}

/// How often an HTTP/2 origin connection is PINGed, and how long its answer may take.
const KEEPALIVE_PING: Duration = Duration::from_secs(20);
const KEEPALIVE_PING_TIMEOUT: Duration = Duration::from_secs(10);

/// One connection attempt, awaited by every request that needs it.
type Attempt = Arc<tokio::sync::OnceCell<Result<SendRequest<RequestBody>, SharedError>>>;

/// A failed connection attempt, given to each request that waited for it. Its source is the
/// connector's error, so it is classified like one (TLS, timeout, refused).
#[derive(Debug, Clone)]
struct SharedError(Arc<BoxError>);

impl std::fmt::Display for SharedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("no HTTP/2 connection")
    }
}

impl std::error::Error for SharedError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&**self.0)
    }
}

struct Entry {
    id: u64,
    send: SendRequest<RequestBody>,
    used: Instant,
}

impl H2Pool {
    pub fn new(connector: OriginConnector, idle: Duration) -> Self {
        H2Pool {
            conns: Arc::default(),
            connecting: Arc::default(),
            connector,
            idle,
            next_id: Arc::default(),
        }
    }

    /// Sends `req` (target in absolute form with the pool key as authority, `Host` set) to
    /// the origin at `key`.
    pub async fn send(
        &self,
        mut req: Request<RequestBody>,
        key: Authority,
    ) -> Result<Response<Incoming>, H2Failure> {
        let key = &key;
        let scheme = req.uri().scheme().cloned().unwrap_or(Scheme::HTTP);
        let tls = scheme == Scheme::HTTPS;
        // `:authority` is the Host the pipeline chose; the pool key's user part (TLS name,
        // PROXY header) never leaves rampart. A userinfo part is not allowed in `:authority`
        // (RFC 9113 §8.3.1).
        let authority = req
            .headers_mut()
            .remove(HOST)
            .filter(|h| !h.as_bytes().contains(&b'@'))
            .and_then(|h| Authority::try_from(h.as_bytes()).ok())
            .unwrap_or_else(|| without_user(key));
        if let Some(uri) = absolute_uri(req.uri(), scheme.clone(), authority) {
            *req.uri_mut() = uri;
        }
        *req.version_mut() = Version::HTTP_2;

        let (mut send, pooled) = match self.pooled(tls, key) {
            Some(s) => (s, true),
            None => (self.shared_connect(tls, key, &scheme).await?, false),
        };
        if send.ready().await.is_err() {
            if !pooled {
                // A connection just made that closed at once (an HTTP/1.1 server taken for
                // h2c, say): nothing was sent, the origin is unusable.
                return Err(H2Failure::Connect(
                    "the origin closed the new HTTP/2 connection".into(),
                ));
            }
            // The pooled connection closed between the look-up and now: one fresh try.
            send = self.shared_connect(tls, key, &scheme).await?;
            send.ready()
                .await
                .map_err(|e| H2Failure::Connect(Box::new(e)))?;
        }
        let res = match send.try_send_request(req.into_http()).await {
            Ok(res) => Ok(res),
            // The connection went away (the origin's GOAWAY, an idle close) before the request
            // was taken: it was not sent, so it goes once more on a fresh connection, as the
            // HTTP/1.1 pool does.
            Err(mut e) => match e.take_message() {
                Some(req) if pooled => {
                    let mut send = self.shared_connect(tls, key, &scheme).await?;
                    send.ready()
                        .await
                        .map_err(|e| H2Failure::Connect(Box::new(e)))?;
                    send.send_request(req).await.map_err(H2Failure::Request)
                }
                _ => Err(H2Failure::Request(e.into_error())),
            },
        }?;
        // RFC 9110 §15: a status is 100–599 (`:status` may say up to 999).
        if res.status().as_u16() > 599 {
            return Err(H2Failure::Answer("status code outside 100–599"));
        }
        Ok(Response::from_http(res))
    }

    /// The open connection for `key`, marked as used now.
    fn pooled(&self, tls: bool, key: &Authority) -> Option<SendRequest<RequestBody>> {
        let mut conns = self.conns.lock().unwrap_or_else(|p| p.into_inner());
        let k = (tls, key.clone());
        match conns.get_mut(&k) {
            Some(e) if !e.send.is_closed() => {
                e.used = Instant::now();
                Some(e.send.clone())
            }
            Some(_) => {
                conns.remove(&k);
                None
            }
            None => None,
        }
    }

    /// A new connection for `key`, or the one another request is making.
    async fn shared_connect(
        &self,
        tls: bool,
        key: &Authority,
        scheme: &Scheme,
    ) -> Result<SendRequest<RequestBody>, H2Failure> {
        if self.idle.is_zero() {
            // Not pooled: a connection per request.
            return self
                .connect(tls, key, scheme)
                .await
                .map_err(H2Failure::Connect);
        }
        let k = (tls, key.clone());
        let attempt: Attempt = {
            let mut connecting = self.connecting.lock().unwrap_or_else(|p| p.into_inner());
            connecting.entry(k.clone()).or_default().clone()
        };
        // Every waiter gone before the attempt finished (clients that left): the empty attempt
        // leaves the map with the last of them.
        let _leave = Leave {
            connecting: &self.connecting,
            k: &k,
            attempt: &attempt,
        };
        let made = attempt
            .get_or_init(|| async {
                let made = self
                    .connect(tls, key, scheme)
                    .await
                    .map_err(|e| SharedError(Arc::new(e)));
                // Done: the next request that finds no connection makes a new attempt.
                let mut connecting = self.connecting.lock().unwrap_or_else(|p| p.into_inner());
                if connecting.get(&k).is_some_and(|a| Arc::ptr_eq(a, &attempt)) {
                    connecting.remove(&k);
                }
                made
            })
            .await;
        made.clone().map_err(|e| H2Failure::Connect(Box::new(e)))
    }

    async fn connect(
        &self,
        tls: bool,
        key: &Authority,
        scheme: &Scheme,
    ) -> Result<SendRequest<RequestBody>, BoxError> {
        let key = PoolKey {
            tls: *scheme == Scheme::HTTPS,
            authority: key.clone(),
        };
        let io = self.connector.connect(&key).await?;
        let (send, conn) = handshake(TokioIo::new(io)).await?;
        let key = &key.authority;
        if self.idle.is_zero() {
            // Not pooled: the connection ends with its one request's stream.
            tokio::spawn(async move {
                let _ = conn.await;
            });
            return Ok(send);
        }
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        {
            let mut conns = self.conns.lock().unwrap_or_else(|p| p.into_inner());
            // A request that connected at the same time may have pooled its own: the newer
            // one replaces it, the older ends with its streams.
            conns.insert(
                (tls, key.clone()),
                Entry {
                    id,
                    send: send.clone(),
                    used: Instant::now(),
                },
            );
        }
        let conns = Arc::downgrade(&self.conns);
        let idle = self.idle;
        let k = (tls, key.clone());
        tokio::spawn(async move {
            tokio::pin!(conn);
            let mut pooled = true;
            loop {
                tokio::select! {
                    _ = &mut conn => break,
                    _ = tokio::time::sleep(idle), if pooled => {
                        pooled = still_wanted(&conns, &k, id, idle);
                    }
                }
            }
            drop_entry(&conns, &k, id);
        });
        Ok(send)
    }
}

/// The HTTP/2 client side of a connection to an origin, with rampart's settings; the
/// connection future must be polled (spawned) for requests to make progress.
pub async fn handshake<T>(
    io: T,
) -> hyper::Result<(
    SendRequest<RequestBody>,
    http2::Connection<T, RequestBody, TokioExecutor>,
)>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        // A peer that vanished (no FIN, no RST) is found by its missing PING answer, idle or
        // not; otherwise requests would keep going to the dead connection until the kernel
        // gives up on it.
        .keep_alive_interval(KEEPALIVE_PING)
        .keep_alive_timeout(KEEPALIVE_PING_TIMEOUT)
        .keep_alive_while_idle(true)
        // Response header blocks as large as an HTTP/1.1 origin's may be.
        .max_header_list_size(crate::origin::connect::ORIGIN_READ_BUFFER as u32)
        .handshake(io)
        .await
}

/// Takes an unfinished connection attempt out of the map when its last waiter leaves.
struct Leave<'a> {
    connecting: &'a Mutex<HashMap<(bool, Authority), Attempt>>,
    k: &'a (bool, Authority),
    attempt: &'a Attempt,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        let mut connecting = self.connecting.lock().unwrap_or_else(|p| p.into_inner());
        // The map's reference and this waiter's: no one else waits.
        if !self.attempt.initialized()
            && Arc::strong_count(self.attempt) == 2
            && connecting
                .get(self.k)
                .is_some_and(|a| Arc::ptr_eq(a, self.attempt))
        {
            connecting.remove(self.k);
        }
    }
}

/// Whether connection `id` is still pooled and was used within `idle`; one that was not is
/// taken out of the pool (it then ends when its last stream does).
fn still_wanted(
    conns: &Weak<Mutex<HashMap<(bool, Authority), Entry>>>,
    k: &(bool, Authority),
    id: u64,
    idle: Duration,
) -> bool {
    let Some(conns) = conns.upgrade() else {
        return false;
    };
    let mut conns = conns.lock().unwrap_or_else(|p| p.into_inner());
    match conns.get(k) {
        Some(e) if e.id == id && e.used.elapsed() < idle => true,
        Some(e) if e.id == id => {
            conns.remove(k);
            false
        }
        _ => false,
    }
}

fn drop_entry(
    conns: &Weak<Mutex<HashMap<(bool, Authority), Entry>>>,
    k: &(bool, Authority),
    id: u64,
) {
    if let Some(conns) = conns.upgrade() {
        let mut conns = conns.lock().unwrap_or_else(|p| p.into_inner());
        if conns.get(k).is_some_and(|e| e.id == id) {
            conns.remove(k);
        }
    }
}

/// `host:port` of a pool key, without its user part.
fn without_user(key: &Authority) -> Authority {
    match key.as_str().rsplit_once('@') {
        Some((_, host)) => Authority::try_from(host).unwrap_or_else(|_| key.clone()),
        None => key.clone(),
    }
}
