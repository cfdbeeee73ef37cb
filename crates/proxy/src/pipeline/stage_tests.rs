//! The stages one at a time, on an in-process pipeline: a real `Worker` (routing table, cache,
//! coalescer) built from a configuration, a `Txn` routed by recv's own function, and origin
//! answers made in the test (no socket). Each test drives the stages the way the dispatcher
//! does and checks the `Step` and the `Txn` they leave.

use rampart_head::{Request, Response};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::SystemTime;

use http::header::{CONTENT_LENGTH, ETAG, RANGE};
use http::{HeaderValue, Method, StatusCode, Version};
use http_body_util::BodyExt as _;

use super::*;
use crate::body::origin::OriginBody;
use crate::caching::coalesce::Role;
use crate::caching::Cache;
use crate::origin::client::OriginClient;
use crate::outcome::{CacheLabel, CacheOutcome};
use crate::pipeline::conn_info::Scheme;
use crate::pipeline::fetch::Fetched;
use crate::policy::route::Router;
use crate::policy::screening::Screen;

const RULE: &str =
    "[[proxy_rules]]\ndomain = \"*\"\nmax_age_seconds = 60\nforward_ipv4 = \"127.0.0.1\"\n";

/// A pipeline over `src` with a 1 MiB cache (its origin is never contacted here).
pub fn pipeline_of(src: &str) -> Arc<Pipeline> {
    let v = rampart_config::validate(src, 1);
    let config = v.config.unwrap_or_else(|| panic!("{:?}", v.diagnostics));
    let origin_tls =
        rampart_tls::origin::client_config(&config.upstream).unwrap_or_else(|e| panic!("{e}"));
    let w = Worker::new(
        &config,
        worker_state::Parts {
            router: Arc::new(Router::new(&config)),
            origin_client: OriginClient::new(&config.upstream, origin_tls),
            cache: Some(Arc::new(Cache::new(1 << 20, 1 << 16))),
            screen: Arc::new(Screen::new(&config, None)),
            shared: None,
            acme: None,
            https_port: None,
            control: None,
            alt_svc: Vec::new(),
            tracer: None,
            fleet: None,
            access: Arc::new(
                crate::telemetry::access_log::AccessLog::open(&config.access_log)
                    .unwrap_or_else(|e| panic!("{e}")),
            ),
        },
    );
    Arc::new(Pipeline::new(w))
}

/// A pipeline with one rule for every host that caches for 60 s.
pub fn pipeline() -> Arc<Pipeline> {
    pipeline_of(RULE)
}

fn conn() -> Arc<ConnInfo> {
    Arc::new(ConnInfo::new(
        (Ipv4Addr::LOCALHOST, 40000).into(),
        (Ipv4Addr::LOCALHOST, 80).into(),
        Scheme::Http,
    ))
}

/// A client's request for `target` on `a.example`, routed as recv routes it.
fn routed(
    p: &Pipeline,
    method: Method,
    target: &str,
    fields: &[(&str, &str)],
) -> (Txn, Request<RequestBody>) {
    let mut req = Request::builder()
        .method(method)
        .uri(format!("http://a.example{target}"));
    for (n, v) in fields {
        req = req.header(*n, *v);
    }
    let mut req = req
        .body(RequestBody::Empty)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut txn = Txn::new(&conn(), Mode::Client);
    let route = recv::route(&p.w.router, &mut req, Scheme::Http).unwrap_or_else(|e| panic!("{e}"));
    txn.route = Some(route);
    (txn, req)
}

/// What fetch would bring back for `req` had the origin answered `status` with `fields` and
/// no body.
fn fetched(
    txn: &Txn,
    req: &Request<RequestBody>,
    status: StatusCode,
    fields: &[(&str, &str)],
) -> Fetched {
    let mut res = Response::new(OriginBody::Empty);
    *res.status_mut() = status;
    for (n, v) in fields {
        res.headers_mut().append(
            http::HeaderName::from_bytes(n.as_bytes()).unwrap_or_else(|e| panic!("{e}")),
            HeaderValue::from_str(v).unwrap_or_else(|e| panic!("{e}")),
        );
    }
    res.headers_mut()
        .insert(CONTENT_LENGTH, HeaderValue::from_static("0"));
    let revalidating = txn
        .missed()
        .is_some_and(|m| m.stale.is_some() && !req.headers().contains_key("if-none-match"));
    Fetched {
        res,
        req_headers: txn.miss.is_some().then(|| req.headers().clone()),
        request_time: SystemTime::now(),
        downstream_version: Version::HTTP_11,
        method: req.method().clone(),
        unsafe_target: (!req.method().is_safe()).then(|| target_of(req)),
        revalidating,
        from_owner: false,
    }
}

fn target_of(req: &Request<RequestBody>) -> String {
    txn::target(req).to_owned()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Stores a 200 for `target` the way a miss does: lookup, miss (leading), store, deliver, and
/// the body read to its end (the store keeps it then).
async fn store_through_stages(p: &Pipeline, target: &str, fields: &[(&str, &str)]) {
    let (mut txn, mut req) = routed(p, Method::GET, target, &[]);
    assert!(matches!(
        lookup::lookup(&p.w, &mut txn, &req),
        Ok(Step::Miss)
    ));
    assert!(matches!(
        miss::join(&p.w, &mut txn, &mut req).await,
        Ok(Step::Fetch)
    ));
    let f = fetched(&txn, &req, StatusCode::OK, fields);
    let Ok(Step::Deliver(d)) = store::store(&p.w, &mut txn, f) else {
        panic!("a storable 200 is delivered")
    };
    assert!(d.ticket.is_some(), "the store keeps it");
    let res = deliver::deliver(&p.w, &mut txn, *d);
    let _ = res.into_body().collect().await;
    drop(txn);
    // The leader's body is pumped into the store by a task of its own: let it end.
    for _ in 0..100 {
        let (mut txn, req) = routed(p, Method::GET, target, &[]);
        if !matches!(lookup::lookup(&p.w, &mut txn, &req), Ok(Step::Miss)) || stale_expected(fields)
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// Whether a response with `fields` is stale as soon as it is stored (the loop above cannot
/// wait for a hit then).
fn stale_expected(fields: &[(&str, &str)]) -> bool {
    fields
        .iter()
        .any(|(n, v)| *n == "cache-control" && v.contains("max-age=1"))
}

#[test]
fn lookup_decides_hit_miss_or_pass() {
    let rt = rt();
    rt.block_on(async {
        let p = pipeline();
        // Nothing stored: a GET misses and the miss state is set; a HEAD and a POST pass.
        let (mut txn, req) = routed(&p, Method::GET, "/a", &[]);
        assert!(matches!(
            lookup::lookup(&p.w, &mut txn, &req),
            Ok(Step::Miss)
        ));
        assert!(txn.missed().is_some_and(|m| m.stale.is_none()));
        assert_eq!(txn.outcome.map(|o| o.label()), Some(CacheLabel::Miss));
        let (mut txn, req) = routed(&p, Method::HEAD, "/a", &[]);
        assert!(matches!(
            lookup::lookup(&p.w, &mut txn, &req),
            Ok(Step::Pass)
        ));
        assert!(txn.miss.is_none());
        let (mut txn, req) = routed(&p, Method::POST, "/a", &[]);
        assert!(matches!(
            lookup::lookup(&p.w, &mut txn, &req),
            Ok(Step::Pass)
        ));
        // only-if-cached with nothing stored ends in lookup (504).
        let (mut txn, req) = routed(
            &p,
            Method::GET,
            "/a",
            &[("cache-control", "only-if-cached")],
        );
        assert!(matches!(
            lookup::lookup(&p.w, &mut txn, &req),
            Err(ProxyError::NotCached)
        ));
        assert_eq!(txn.outcome, Some(CacheOutcome::OnlyIfCached));
        // Stored through the stages: the next GET is a fresh hit, a HEAD too.
        store_through_stages(&p, "/a", &[]).await;
        for method in [Method::GET, Method::HEAD] {
            let (mut txn, req) = routed(&p, method, "/a", &[]);
            let Ok(Step::Hit(stored)) = lookup::lookup(&p.w, &mut txn, &req) else {
                panic!("stored: a hit")
            };
            assert_eq!(stored.served, Served::Fresh);
            let res = hit::hit(&mut txn, &stored, &req);
            assert_eq!(res.status(), StatusCode::OK);
        }
    });
}

#[test]
fn the_first_miss_leads_and_later_ones_wait() {
    let rt = rt();
    rt.block_on(async {
        let p = pipeline();
        let (mut a, mut ra) = routed(&p, Method::GET, "/lead", &[]);
        assert!(matches!(lookup::lookup(&p.w, &mut a, &ra), Ok(Step::Miss)));
        assert!(matches!(
            miss::join(&p.w, &mut a, &mut ra).await,
            Ok(Step::Fetch)
        ));
        assert!(
            a.miss.as_ref().is_some_and(|m| m.lead.is_some()),
            "the first miss leads the fetch"
        );
        // A second miss on the same key would wait for the leader's head.
        let key = a
            .missed()
            .map(|m| m.key.clone())
            .unwrap_or_else(|| panic!("a miss"));
        let cache = p.w.cache.as_ref().unwrap_or_else(|| panic!("a cache"));
        assert!(matches!(cache.coalescer().join(&key), Role::Waiter(_)));
        // A client-forced refresh fetches for itself.
        let (mut b, mut rb) = routed(&p, Method::GET, "/lead", &[("cache-control", "no-cache")]);
        assert!(matches!(lookup::lookup(&p.w, &mut b, &rb), Ok(Step::Miss)));
        assert!(matches!(
            miss::join(&p.w, &mut b, &mut rb).await,
            Ok(Step::Fetch)
        ));
        assert!(b.miss.as_ref().is_some_and(|m| m.lead.is_none()));
    });
}

#[test]
fn a_range_miss_is_widened_and_asked_again_when_not_storable() {
    let rt = rt();
    rt.block_on(async {
        let p = pipeline();
        let (mut txn, mut req) = routed(&p, Method::GET, "/r", &[("range", "bytes=0-1")]);
        assert!(matches!(
            lookup::lookup(&p.w, &mut txn, &req),
            Ok(Step::Miss)
        ));
        assert!(matches!(
            miss::join(&p.w, &mut txn, &mut req).await,
            Ok(Step::Fetch)
        ));
        assert!(
            !req.headers().contains_key(RANGE),
            "the fetch is for the whole object"
        );
        let widened = txn
            .miss
            .as_ref()
            .and_then(|m| m.lead.as_ref())
            .is_some_and(|l| l.widened.is_some());
        assert!(widened, "the client's range is kept with the lead");
        // The origin's 200 may not be stored: the client's request goes again as it was.
        let f = fetched(&txn, &req, StatusCode::OK, &[("cache-control", "no-store")]);
        let Ok(Step::Refetch(again)) = store::store(&p.w, &mut txn, f) else {
            panic!("asked again")
        };
        assert_eq!(
            again.headers().get(RANGE).map(HeaderValue::as_bytes),
            Some(&b"bytes=0-1"[..])
        );
        assert!(
            txn.miss.is_none(),
            "nothing is stored for the second answer"
        );
        assert_eq!(txn.outcome.map(|o| o.label()), Some(CacheLabel::Dynamic));
    });
}

#[test]
fn store_freshens_on_304_and_stands_in_on_5xx() {
    let rt = rt();
    rt.block_on(async {
        let p = pipeline_of(
            "stale_if_error_seconds = 60\n[[proxy_rules]]\ndomain = \"*\"\nmax_age_seconds = 60\nforward_ipv4 = \"127.0.0.1\"\n",
        );
        // Stored for one second, one with a validator.
        store_through_stages(&p, "/s", &[("etag", "\"v1\""), ("cache-control", "max-age=1")]).await;
        store_through_stages(&p, "/e", &[("cache-control", "max-age=1")]).await;
        // Both go stale.
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
        let (mut txn, mut req) = routed(&p, Method::GET, "/s", &[]);
        assert!(matches!(lookup::lookup(&p.w, &mut txn, &req), Ok(Step::Miss)));
        assert!(txn.missed().is_some_and(|m| m.stale.is_some()));
        assert_eq!(txn.outcome.map(|o| o.label()), Some(CacheLabel::Expired));
        assert!(matches!(miss::join(&p.w, &mut txn, &mut req).await, Ok(Step::Fetch)));
        let f = fetched(&txn, &req, StatusCode::NOT_MODIFIED, &[("etag", "\"v1\"")]);
        let Ok(Step::Hit(stored)) = store::store(&p.w, &mut txn, f) else {
            panic!("a 304 answers from the entry")
        };
        assert_eq!(stored.served, Served::Revalidated);
        let res = hit::hit(&mut txn, &stored, &req);
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(res.headers().get(ETAG).map(HeaderValue::as_bytes), Some(&b"\"v1\""[..]));
        drop(txn);
        // The origin fails: the stale entry stands in (stale-if-error).
        let (mut txn, mut req) = routed(&p, Method::GET, "/e", &[]);
        assert!(matches!(lookup::lookup(&p.w, &mut txn, &req), Ok(Step::Miss)));
        assert!(matches!(miss::join(&p.w, &mut txn, &mut req).await, Ok(Step::Fetch)));
        let f = fetched(&txn, &req, StatusCode::SERVICE_UNAVAILABLE, &[]);
        let Ok(Step::Hit(stored)) = store::store(&p.w, &mut txn, f) else {
            panic!("a 503 is covered by the stale entry")
        };
        assert_eq!(stored.served, Served::StaleIfError);
        // And so is a failed connection.
        let failed = store::fetch_failed(&p.w, &mut txn, ProxyError::OriginTimeout);
        assert!(matches!(failed, Ok(Step::Hit(ref s)) if s.served == Served::StaleIfError));
    });
}

#[test]
fn store_refuses_what_may_not_be_stored_and_releases_the_waiters() {
    let rt = rt();
    rt.block_on(async {
        let p = pipeline();
        let (mut txn, mut req) = routed(&p, Method::GET, "/private", &[]);
        assert!(matches!(
            lookup::lookup(&p.w, &mut txn, &req),
            Ok(Step::Miss)
        ));
        assert!(matches!(
            miss::join(&p.w, &mut txn, &mut req).await,
            Ok(Step::Fetch)
        ));
        let key = txn
            .missed()
            .map(|m| m.key.clone())
            .unwrap_or_else(|| panic!("a miss"));
        let f = fetched(&txn, &req, StatusCode::OK, &[("cache-control", "private")]);
        let Ok(Step::Deliver(d)) = store::store(&p.w, &mut txn, f) else {
            panic!("delivered")
        };
        assert!(d.ticket.is_none() && d.leader.is_none());
        assert_eq!(txn.outcome.map(|o| o.label()), Some(CacheLabel::Dynamic));
        // The next misses fetch on their own for a while instead of waiting.
        let cache = p.w.cache.as_ref().unwrap_or_else(|| panic!("a cache"));
        assert!(matches!(cache.coalescer().join(&key), Role::Alone));
        let res = deliver::deliver(&p.w, &mut txn, *d);
        assert_eq!(res.status(), StatusCode::OK);
    });
}

#[test]
fn a_failed_upload_is_the_clients_fault_and_an_unsafe_success_invalidates() {
    let rt = rt();
    rt.block_on(async {
        let p = pipeline();
        let (mut txn, req) = routed(&p, Method::POST, "/form", &[]);
        assert!(matches!(
            lookup::lookup(&p.w, &mut txn, &req),
            Ok(Step::Pass)
        ));
        let e = ProxyError::ClientBody(crate::error::BodyFault::TooLarge);
        assert!(matches!(
            store::fetch_failed(&p.w, &mut txn, e),
            Err(ProxyError::ClientBody(_))
        ));
        assert_eq!(txn.outcome, Some(CacheOutcome::Blocked));
        // A stored object, then a successful POST to it: the entry is gone (RFC 9111 §4.4).
        store_through_stages(&p, "/form", &[]).await;
        let (mut txn, req) = routed(&p, Method::POST, "/form", &[]);
        assert!(matches!(
            lookup::lookup(&p.w, &mut txn, &req),
            Ok(Step::Pass)
        ));
        let f = fetched(&txn, &req, StatusCode::SEE_OTHER, &[]);
        assert!(matches!(
            store::store(&p.w, &mut txn, f),
            Ok(Step::Deliver(_))
        ));
        let (mut txn, req) = routed(&p, Method::GET, "/form", &[]);
        assert!(matches!(
            lookup::lookup(&p.w, &mut txn, &req),
            Ok(Step::Miss)
        ));
    });
}

#[test]
fn respond_compresses_only_the_origins_answers() {
    let rt = rt();
    rt.block_on(async {
        let p = pipeline_of(&format!(
            "enable_compression = true\n{RULE}enable_compression = true\n"
        ));
        let text = |n: usize| {
            let mut res = Response::new(crate::body::ProxyBody::full(bytes::Bytes::from(vec![
                b'a';
                n
            ])));
            res.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain"),
            );
            res.headers_mut()
                .insert(CONTENT_LENGTH, HeaderValue::from(n));
            res
        };
        let gzip = [("accept-encoding", "gzip")];
        let (mut txn, req) = routed(&p, Method::GET, "/t", &gzip);
        respond::negotiate(&mut txn, &req);
        assert!(
            txn.compress.as_ref().is_some_and(|(_, c)| c.is_some()),
            "{:?}",
            txn.compress
        );
        let res = respond::respond(&p.w, &mut txn, Ok(respond::Reply::Origin(text(4096))));
        assert_eq!(
            res.headers()
                .get(http::header::CONTENT_ENCODING)
                .map(HeaderValue::as_bytes),
            Some(&b"gzip"[..])
        );
        // The same response as a ready answer (a hit's) is sent as it is.
        let (mut txn, req) = routed(&p, Method::GET, "/t", &gzip);
        respond::negotiate(&mut txn, &req);
        let res = respond::respond(&p.w, &mut txn, Ok(respond::Reply::Ready(text(4096))));
        assert!(!res.headers().contains_key(http::header::CONTENT_ENCODING));
        // An error becomes its response here.
        let (mut txn, _) = routed(&p, Method::GET, "/t", &gzip);
        let res = respond::respond(&p.w, &mut txn, Err(ProxyError::OriginTimeout));
        assert_eq!(res.status(), StatusCode::GATEWAY_TIMEOUT);
    });
}
