//! The dispatcher: recv → [upgrade] → lookup → hit | miss | pass → fetch → deliver | synth.
//!
//! [`Pipeline::handle`] runs the stages over one [`Txn`]. Each stage is a function in the module
//! of its name and returns `Result<_, ProxyError>`; [`Pipeline::finish`] is the one place an
//! error becomes a response (through `synth`) and the one place the access-log record is
//! attached.

pub mod deliver;
pub mod fetch;
pub mod hit;
pub mod lookup;
pub mod miss;
pub mod ranges;
pub mod recv;
pub mod redis_tier;
pub mod synth;
pub mod txn;
pub mod websocket;
pub mod worker_state;

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use http::header::{ALT_SVC, STRICT_TRANSPORT_SECURITY};
use http::{Method, Request, Response};
use http_body_util::BodyExt as _;
use tracing::Instrument as _;

use crate::admin;
use crate::body::{ClientBody, ProxyBody, RequestBody};
use crate::error::ProxyError;
use crate::outcome::{CacheOutcome, Served};
use crate::policy::route::PathDecision;
use crate::telemetry::access_log::AccessRecord;
use crate::telemetry::metrics;
use lookup::Looked;
use txn::{ConnInfo, Mode, Scheme, Txn};
use worker_state::Worker;

/// One worker's pipeline: the stages over its [`Worker`] state.
#[derive(Debug)]
pub struct Pipeline {
    w: Worker,
}

impl Pipeline {
    pub fn new(w: Worker) -> Self {
        Pipeline { w }
    }

    /// Handles one request end to end. Never fails: errors become synthetic responses.
    ///
    /// Not an `async fn`, so the future is `run`'s alone, without a second copy of the request.
    pub fn handle<'a>(
        self: &'a Arc<Self>,
        conn: &'a Arc<ConnInfo>,
        req: Request<ClientBody>,
    ) -> impl Future<Output = Response<ProxyBody>> + 'a {
        let limits = self.w.body_limits;
        self.run(
            conn,
            req.map(|b| RequestBody::from_client(b, limits)),
            Mode::Client,
        )
    }

    async fn run(
        self: &Arc<Self>,
        conn: &Arc<ConnInfo>,
        req: Request<RequestBody>,
        mode: Mode,
    ) -> Response<ProxyBody> {
        let span = tracing::debug_span!("request", method = %req.method(), uri = %req.uri(), ?mode);
        let mut txn = Txn::new(conn, mode);
        txn.protocol = metrics::protocol_index(req.version());
        // Without a subscriber for debug, no wrapper: `Instrumented` would move the stages'
        // future once more per request (~130 instructions of memcpy, callgrind).
        let res = if span.is_disabled() {
            self.stages(&mut txn, req).await
        } else {
            self.stages(&mut txn, req).instrument(span.clone()).await
        };
        let _in = span.enter();
        self.finish(&mut txn, res)
    }

    /// recv → lookup → hit | miss | pass → fetch → deliver. An `Err` ends the request in synth.
    async fn stages(
        self: &Arc<Self>,
        txn: &mut Txn,
        mut req: Request<RequestBody>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        // recv: the path in its normal form, answers that need no rule, then the rule, then
        // screening.
        // HTTP/2 and HTTP/3 heads are bounded in bytes by their servers; the field count
        // `max_request_headers` sets is checked here (HTTP/1.1's parser applies it itself).
        if req.version() >= http::Version::HTTP_2 && req.headers().len() > self.w.max_headers {
            return Err(ProxyError::HeadTooLarge);
        }
        recv::normalize_path(&mut req)?;
        if txn.mode == Mode::Client && admin::is_control(&self.w.admin, &req) {
            // Boxed: a configuration change is rare; every other request stays small.
            return Box::pin(admin::control(self.w.api(), req)).await;
        }
        if let Some(answer) = recv::local_answer(&self.w, txn, &req) {
            return answer;
        }
        if recv::may_be_shared_challenge(&self.w, &req) {
            if let Some(answer) = Box::pin(recv::shared_challenge(&self.w, txn, &req)).await {
                return answer;
            }
        }
        txn.route = Some(recv::route(&self.w.router, &mut req)?);
        let metrics = metrics::get();
        if metrics.watched() && txn.mode == Mode::Client {
            metrics.seen(txn.host(), req.uri().path());
        }
        if let Some(redirect) = recv::redirect_to_https(txn, &req, self.w.https_port) {
            return Ok(redirect);
        }
        if let Err(e) = recv::screen(&self.w, txn, &mut req).await {
            self.open_log(txn, &mut req);
            remember_refusal(txn, &req, &e);
            return Err(e);
        }
        if admin::is_purge(req.method()) {
            let purge = admin::Purge {
                client: txn.conn.client_ip,
                host: txn.host(),
                target: txn::target(&req),
                ignore_query: txn.route().rule.config.ignore_query_string,
            };
            return admin::purge_method(self.w.api(), purge, req.headers());
        }
        self.open_log(txn, &mut req);
        if txn.route().decision == PathDecision::Block {
            tracing::info!(host = ?txn.route().host, path = req.uri().path(), "blocked by path rule");
            txn.outcome = Some(CacheOutcome::Blocked);
            remember_refusal(txn, &req, &ProxyError::BlockedByPathRule);
            return Err(ProxyError::BlockedByPathRule);
        }

        // A switch to WebSocket passes to the origin and may become a tunnel.
        if let Some(kind) = websocket::wants(&req) {
            return Box::pin(websocket::upgrade(&self.w, txn, req, kind)).await;
        }
        // A reverse proxy opens no tunnels of its own choosing (as NGINX: 400).
        if req.method() == Method::CONNECT {
            return Err(ProxyError::BadRequest(
                "CONNECT is only served for WebSocket over HTTP/2",
            ));
        }

        // lookup → hit | miss | pass
        let looked = lookup::lookup(&self.w, txn, &req)?;
        match looked {
            Looked::Hit(obj) => {
                tracing::debug!("hit");
                let head = is_head(&req);
                Ok(hit::answer(
                    &obj,
                    req.headers(),
                    req.version(),
                    head,
                    Served::Fresh,
                ))
            }
            Looked::StaleWhileRevalidate(stale) => {
                tracing::debug!("hit, stale while it is refreshed");
                if !stale.refreshing.swap(true, Ordering::Relaxed) {
                    self.refresh_in_background(&txn.conn, &req, stale.clone());
                }
                let served = Served::StaleWhileRevalidate;
                Ok(hit::respond(&stale, req.headers(), is_head(&req), served))
            }
            // Boxed: the origin's stages hold kilobytes of state across their awaits; a
            // request answered from the store should not carry (and move) them.
            Looked::Miss => Box::pin(self.forward(txn, req, true)).await,
            Looked::Pass => {
                tracing::debug!("pass");
                Box::pin(self.forward(txn, req, false)).await
            }
        }
    }

    /// miss (when `miss`) → fetch → deliver.
    async fn forward(
        &self,
        txn: &mut Txn,
        mut req: Request<RequestBody>,
        miss: bool,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let head = is_head(&req);
        // Negotiated here, not for every request: a hit picks its stored copy itself.
        let compress = txn.route().rule.compress.clone();
        let coding = compress.as_ref().and_then(|c| c.negotiate(req.headers()));
        let joined = match miss {
            true => miss::join(&self.w, txn, &mut req).await?,
            false => None,
        };
        let res = match joined {
            Some(answer) => Ok(answer),
            None => match fetch::fetch(&self.w, txn, req).await {
                Ok(fetched) => deliver::deliver(&self.w, txn, fetched).await,
                Err(e) => deliver::fetch_failed(&self.w, txn, e),
            },
        };
        // Compressed as it streams, when the rule compresses (answers from the store are
        // compressed already: `Content-Encoding` set, nothing done).
        // An answer from a stored object is never compressed here (a stale one served for a
        // failing origin, a refreshed one): hits send the copies made when it was stored.
        let from_store = matches!(txn.outcome, Some(CacheOutcome::Served(_)));
        let compress = compress.as_deref().filter(|_| !from_store);
        res.map(|r| deliver::compress(compress, coding, head, r))
    }

    /// The end of every request: an error becomes its synthetic response (the only place),
    /// the request is counted for the metrics (once, here), HSTS is added over HTTPS, and the
    /// access-log record is attached to the body (written when the body has been sent).
    fn finish(
        &self,
        txn: &mut Txn,
        res: Result<Response<ProxyBody>, ProxyError>,
    ) -> Response<ProxyBody> {
        // Clients' requests are counted; background refreshes are not.
        let client = txn.mode == Mode::Client;
        let mut res = res.unwrap_or_else(|e| {
            if client {
                metrics::get().refused(&e);
            }
            synth::error(&e, txn)
        });
        if client {
            let stats = match &txn.route {
                Some(r) => &*r.rule.stats,
                None => metrics::get().unrouted(),
            };
            stats.record(
                res.status().as_u16(),
                metrics::cache_index(txn.outcome),
                txn.protocol,
                txn.start.elapsed(),
            );
        }
        if txn.scheme() == Scheme::Https {
            if let Some(v) = txn.route.as_ref().and_then(|r| r.rule.hsts.clone()) {
                res.headers_mut().insert(STRICT_TRANSPORT_SECURITY, v);
            }
            // HTTP/3 is announced on the HTTPS (TCP) port it is served beside.
            if !self.w.alt_svc.is_empty() && txn.protocol != metrics::PROTOCOL_H3 {
                let port = txn.conn.local.port();
                if let Some((_, v)) = self.w.alt_svc.iter().find(|(p, _)| *p == port) {
                    res.headers_mut().insert(ALT_SVC, v.clone());
                }
            }
        }
        if let Some(mut log) = txn.log.take() {
            log.status = res.status().as_u16();
            if let Some(o) = txn.outcome {
                log.cache = o.label().as_str();
            }
            res.body_mut().set_log(log);
        }
        res
    }

    /// Starts the access-log record when logging is on for the rule (client requests only),
    /// with the request's id (the client's, or a new one put in the request for the origin).
    fn open_log(&self, txn: &mut Txn, req: &mut Request<RequestBody>) {
        let route = txn.route();
        if self.w.access_log && txn.mode == Mode::Client && route.rule.config.enable_logging {
            let id = crate::telemetry::access_log::request_id(req.headers_mut());
            let record = AccessRecord::new(
                self.w.access.clone(),
                txn.start,
                txn.client,
                txn.scheme().as_str(),
                &route.host,
                req,
                id,
            );
            txn.log = Some(Box::new(record));
        }
    }

    /// stale-while-revalidate: refreshes `stale` with a background request built from this one
    /// (same host, target and headers, no body); the response is stored, not sent anywhere.
    fn refresh_in_background(
        self: &Arc<Self>,
        conn: &Arc<ConnInfo>,
        req: &Request<RequestBody>,
        stale: Arc<rampart_cache::store::Object>,
    ) {
        let mut bg = Request::new(RequestBody::Empty);
        *bg.method_mut() = Method::GET;
        *bg.uri_mut() = req.uri().clone();
        *bg.version_mut() = req.version();
        let mut headers = req.headers().clone();
        // The refresh wants the whole representation: none of the client's preconditions/ranges.
        for name in [
            http::header::IF_NONE_MATCH,
            http::header::IF_MODIFIED_SINCE,
            http::header::IF_MATCH,
            http::header::IF_UNMODIFIED_SINCE,
            http::header::IF_RANGE,
            http::header::RANGE,
        ] {
            headers.remove(name);
        }
        *bg.headers_mut() = headers;
        let (me, conn) = (self.clone(), conn.clone());
        tokio::spawn(async move {
            // Boxed: `run` spawning `run` would otherwise be an infinitely sized future.
            let fut: std::pin::Pin<
                Box<dyn std::future::Future<Output = Response<ProxyBody>> + Send>,
            > = Box::pin(async move { me.run(&conn, bg, Mode::Refresh).await });
            let mut body = fut.await.into_body();
            // Drain it so a teed body reaches the store.
            while let Some(frame) = body.frame().await {
                if frame.is_err() {
                    break;
                }
            }
            stale.refreshing.store(false, Ordering::Relaxed);
        });
    }
}

/// Keeps a screening or path-rule refusal for the dashboard's list.
fn remember_refusal<B>(txn: &Txn, req: &Request<B>, e: &ProxyError) {
    let Some(i) = metrics::block_index(e) else {
        return;
    };
    metrics::get().remember_refusal(metrics::Refusal {
        time: std::time::SystemTime::now(),
        client: txn.client,
        host: txn.host().to_owned(),
        path: req.uri().path().to_owned(),
        reason: metrics::BLOCK_REASONS[i],
    });
}

fn is_head<B>(req: &Request<B>) -> bool {
    req.method() == Method::HEAD
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::body::ClientBody;
    use crate::caching::Cache;
    use crate::origin::pool::Upstream;
    use crate::policy::route::Router;
    use crate::policy::screening::Screen;

    fn pipeline() -> Arc<Pipeline> {
        let src = "[[proxy_rules]]\ndomain = \"*\"\nforward_ipv4 = \"127.0.0.1\"\n";
        let v = rampart_config::validate(src, 1);
        let config = v.config.unwrap_or_else(|| panic!("{:?}", v.diagnostics));
        let origin_tls =
            rampart_tls::origin::client_config(&config.upstream).unwrap_or_else(|e| panic!("{e}"));
        let w = Worker::new(
            &config,
            crate::pipeline::worker_state::Parts {
                router: Arc::new(Router::new(&config)),
                upstream: Upstream::new(&config.upstream, origin_tls),
                cache: Some(Arc::new(Cache::new(1 << 20, 1 << 16))),
                screen: Arc::new(Screen::new(&config, None)),
                shared: None,
                acme: None,
                https_port: None,
                control: None,
                alt_svc: Vec::new(),
                access: Arc::new(
                    crate::telemetry::access_log::AccessLog::open(&config.access_log)
                        .unwrap_or_else(|e| panic!("{e}")),
                ),
            },
        );
        Arc::new(Pipeline::new(w))
    }

    /// Not a timing test: a future's size is fixed when it is compiled, and every request moves
    /// its future (into the connection's box, through hyper). With the origin's stages inline
    /// a cached hit carried ~17 KiB of state it never used: +6 % instructions per hit.
    #[test]
    fn a_request_answered_from_the_store_carries_no_origin_state() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        let _rt = rt.enter();
        let p = pipeline();
        let conn = Arc::new(ConnInfo::new(
            (Ipv4Addr::LOCALHOST, 40000).into(),
            (Ipv4Addr::LOCALHOST, 80).into(),
            Scheme::Http,
        ));
        let handle = p.handle(&conn, Request::new(ClientBody::Empty));
        let mut txn = Txn::new(&conn, Mode::Client);
        let forward = p.forward(&mut txn, Request::new(RequestBody::Empty), true);
        let (handle, forward) = (
            std::mem::size_of_val(&handle),
            std::mem::size_of_val(&forward),
        );
        eprintln!("handle {handle} bytes, forward {forward} bytes");
        // Debug-build sizes (tests): 2,088 and 2,992 bytes with rustc 1.95 (the shared rate
        // limit's Redis round trip is boxed: inline it made `handle` 3,128); the origin's
        // stages inline made the first ~4 KiB (~17 KiB in release).
        assert!(
            handle <= 3 * 1024,
            "the future of every request is {handle} bytes"
        );
        assert!(
            forward > 1024,
            "forward is {forward} bytes: is boxing it still worth it?"
        );
    }
}
