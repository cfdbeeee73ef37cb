//! refresh: stale-while-revalidate. A stale object answered a client (lookup allowed it); a
//! background request built from the client's (same host, target and headers, no body, none of
//! its preconditions or ranges) runs the stages again in [`Mode::Refresh`]: it revalidates or
//! fetches, and the response is stored, not sent anywhere. One refresh per object at a time.
//! It is in no client's trace: the client's `traceparent` and `tracestate` stay behind.

use rampart_head::{Request, Response};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use http::Method;
use http_body_util::BodyExt as _;
use rampart_cache::store::Object;

use crate::body::{ProxyBody, RequestBody};
use crate::pipeline::conn_info::ConnInfo;
use crate::pipeline::txn::Mode;
use crate::pipeline::Pipeline;

/// Starts the refresh of `stale` unless one is running.
pub fn start(
    p: &Arc<Pipeline>,
    conn: &Arc<ConnInfo>,
    req: &Request<RequestBody>,
    stale: &Arc<Object>,
) {
    if stale.refreshing.swap(true, Ordering::Relaxed) {
        return;
    }
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
    // rampart's own request, in no client's trace: with tracing on it starts one of its own
    // (recv), and the origin gets rampart's context, never the client's.
    headers.remove(&rampart_otel::TRACEPARENT);
    headers.remove(&rampart_otel::TRACESTATE);
    *bg.headers_mut() = headers;
    let (p, conn, stale) = (p.clone(), conn.clone(), stale.clone());
    tokio::spawn(async move {
        // Boxed: `run` spawning `run` would otherwise be an infinitely sized future.
        let fut: std::pin::Pin<Box<dyn std::future::Future<Output = Response<ProxyBody>> + Send>> =
            Box::pin(async move { p.run(&conn, bg, Mode::Refresh, None).await });
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
