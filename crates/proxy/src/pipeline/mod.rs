//! The dispatcher: recv → [upgrade] → lookup → hit | miss | pass → fetch → deliver | synth.
//!
//! [`Pipeline::handle`] runs the stages over one [`Txn`]. Each stage is a function in the module
//! of its name and returns `Result<_, ProxyError>`; [`Pipeline::finish`] is the one place an
//! error becomes a response (through `synth`) and the one place the access-log record is
//! attached.

pub mod conn_info;
pub mod deliver;
pub mod fetch;
pub mod hit;
pub mod lookup;
pub mod miss;
pub mod ranges;
pub mod recv;
pub mod redis_tier;
pub mod step;
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

use crate::body::{ClientBody, ProxyBody, RequestBody};
use crate::error::ProxyError;
use crate::outcome::Served;
use crate::policy::rewrite;
use crate::telemetry::metrics;
use conn_info::{ConnInfo, Scheme};
use deliver::Delivered;
use step::Step;
use txn::{Mode, Txn};
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
        txn.protocol = metrics::Protocol::of(req.version());
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

    /// recv → lookup → hit | miss | pass → fetch → deliver: each stage names the next
    /// ([`Step`]). An `Err` ends the request in synth.
    async fn stages(
        self: &Arc<Self>,
        txn: &mut Txn,
        mut req: Request<RequestBody>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let mut step = recv::recv(&self.w, txn, &mut req).await?;
        loop {
            step = match step {
                Step::Lookup => lookup::lookup(&self.w, txn, &req)?,
                Step::Hit(stored) => {
                    if stored.served == Served::StaleWhileRevalidate
                        && !stored.obj.refreshing.swap(true, Ordering::Relaxed)
                    {
                        self.refresh_in_background(&txn.conn, &req, stored.obj.clone());
                    }
                    return Ok(hit::hit(txn, &stored, &req));
                }
                // Boxed: the waits of a miss (another client's fetch, the Redis tier) and the
                // origin's stages hold kilobytes of state across their awaits; a request
                // answered from the store should not carry (and move) them.
                Step::Miss => boxed!(miss::join(&self.w, txn, &mut req)).await?,
                Step::Pass => {
                    tracing::debug!("pass");
                    return boxed!(self.forward(txn, req)).await;
                }
                Step::Fetch => return boxed!(self.forward(txn, req)).await,
                Step::WebSocket(kind) => {
                    return boxed!(websocket::upgrade(&self.w, txn, req, kind)).await;
                }
                Step::Stream(res) => {
                    let (compress, coding) = deliver::negotiate(txn, req.headers());
                    let head = is_head(&req);
                    return Ok(deliver::compress(compress.as_deref(), coding, head, *res));
                }
                Step::Done(res) => return Ok(*res),
            };
        }
    }

    /// fetch → deliver, or the hit stage when a stored object answers instead, or fetch
    /// again for a range whose whole representation cannot be shared.
    async fn forward(
        &self,
        txn: &mut Txn,
        req: Request<RequestBody>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let head = is_head(&req);
        let (compress, coding) = deliver::negotiate(txn, req.headers());
        let delivered = match fetch::fetch(&self.w, txn, req).await {
            Ok(fetched) => deliver::deliver(&self.w, txn, fetched)?,
            Err(e) => deliver::fetch_failed(&self.w, txn, e)?,
        };
        let res = match delivered {
            Delivered::Response(res) => res,
            // Never compressed here: a stored object carries the copies made when it was
            // stored.
            Delivered::Hit(stored) => return Ok(hit::hit_after_fetch(txn, &stored)),
            Delivered::Again(range) => {
                // Boxed: rare, and it would double the size of every delivery's future.
                let plan = fetch::Plan::default();
                let again = boxed!(fetch::send(&self.w, txn, range, plan)).await;
                deliver::deliver_unstored(&self.w, txn, again)?
            }
        };
        // Compressed as it streams, when the rule compresses.
        Ok(deliver::compress(compress.as_deref(), coding, head, res))
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
        let pages = txn.route.as_ref().map(|r| &r.rule.config.error_pages);
        // From the origin or the cache (rampart's own answers are errors or unlabelled).
        let relayed = res.is_ok() && txn.outcome.is_some();
        let mut res = match res {
            Ok(res) => match pages {
                // `origin_errors`: the origin's 5xx gets the page of its status too.
                Some(p) if p.origin_errors && res.status().is_server_error() => {
                    match p.get(res.status().as_u16()) {
                        Some(page) => rewrite::with_page(res, page),
                        None => res,
                    }
                }
                _ => res,
            },
            Err(e) => {
                if client {
                    metrics::get().refused(&e);
                }
                let res = synth::error(&e, txn);
                match pages.and_then(|p| p.get(res.status().as_u16())) {
                    Some(page) if !e.is_api() => rewrite::with_page(res, page),
                    _ => res,
                }
            }
        };
        if let Some(route) = &txn.route {
            if let Some(v) = route.answer_vars() {
                let host = crate::headers::origin_host(&route.host);
                let vars = rewrite::Vars {
                    client_ip: Some(txn.client),
                    scheme: txn.conn.scheme.as_str(),
                    host: host.to_str().unwrap_or(""),
                    request_id: v.request_id.as_ref(),
                    path: &v.path,
                    query: &v.query,
                };
                let rules = rewrite::rules(&route.rule.config, route.path_rule(), true);
                let kept = relayed && rewrite::keeps_fields(res.status());
                rewrite::to_client(rules, res.headers_mut(), &vars, kept);
            }
            if let Some(secs) = route.expires() {
                if relayed && rewrite::keeps_fields(res.status()) {
                    rewrite::expires(res.headers_mut(), secs);
                }
            }
        }
        if client {
            let stats = match &txn.route {
                Some(r) => &*r.rule.stats,
                None => metrics::get().unrouted(),
            };
            stats.record(
                res.status().as_u16(),
                metrics::CacheMetric::of(txn.outcome),
                txn.protocol,
                txn.start.elapsed(),
            );
        }
        if txn.scheme() == Scheme::Https {
            if let Some(v) = txn.route.as_ref().and_then(|r| r.rule.hsts.clone()) {
                res.headers_mut().insert(STRICT_TRANSPORT_SECURITY, v);
            }
            // HTTP/3 is announced on the HTTPS (TCP) port it is served beside.
            if !self.w.alt_svc.is_empty() && txn.protocol != metrics::Protocol::Http3 {
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
        let forward = p.forward(&mut txn, Request::new(RequestBody::Empty));
        let (handle, forward) = (
            std::mem::size_of_val(&handle),
            std::mem::size_of_val(&forward),
        );
        eprintln!("handle {handle} bytes, forward {forward} bytes");
        // Debug-build sizes (tests) were about 2.3 and 2.5 KiB; the shared rate limit's Redis
        // round trip is boxed (inline it made `handle` over 3 KiB), and the origin's stages
        // inline made the first ~4 KiB (~17 KiB in release).
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
