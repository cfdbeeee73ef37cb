//! OpenTelemetry traces end to end: the real binary exports to a real Jaeger (OTLP over
//! HTTP/protobuf and gRPC); the test origin checks the `traceparent` rampart sends; the access
//! log carries the ids; a stopped collector costs dropped spans, not requests.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::{Duration, Instant};

use crate::logs::lines;
use serde_json::Value;
use support::jaeger::{spans, tag, Jaeger};
use support::*;

const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

fn tracing_keys(endpoint: &str, protocol: &str) -> String {
    format!(
        "tracing_endpoint = {endpoint:?}\ntracing_protocol = {protocol:?}\n\
         tracing_export_interval_ms = 100\ntracing_service_name = \"rampart-e2e\"\n\
         tracing_resource = {{ \"deployment.environment.name\" = \"test\" }}\n"
    )
}

/// `00-<trace>-<span>-<flags>` split into its parts (panics on anything else).
fn parts(traceparent: &str) -> (String, String, String) {
    let p: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(p.len(), 4, "{traceparent:?}");
    assert_eq!(p[0], "00", "{traceparent:?}");
    assert_eq!(
        (p[1].len(), p[2].len(), p[3].len()),
        (32, 16, 2),
        "{traceparent:?}"
    );
    (p[1].to_owned(), p[2].to_owned(), p[3].to_owned())
}

fn seen_traceparent(origin: &OriginHandle) -> String {
    let seen = origin.last();
    let all: Vec<_> = seen.headers.get_all("traceparent").iter().collect();
    assert_eq!(all.len(), 1, "the origin got {all:?}");
    all[0].to_str().unwrap().to_owned()
}

fn span_named<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    spans
        .iter()
        .find(|s| s["operationName"] == name)
        .unwrap_or_else(|| panic!("no span {name:?} in {spans:#?}"))
}

/// The event (Jaeger's `logs`) of `span` named `name`.
fn event<'a>(span: &'a Value, name: &str) -> &'a Value {
    span["logs"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|l| tag(l, "event").is_some_and(|v| v == name))
        .unwrap_or_else(|| panic!("no event {name:?} in {:#?}", span["logs"]))
}

fn parent_of(span: &Value) -> Option<String> {
    span["references"]
        .as_array()?
        .iter()
        .find(|r| r["refType"] == "CHILD_OF")
        .and_then(|r| r["spanID"].as_str())
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_trace_goes_on_through_rampart_to_the_origin() {
    let jaeger = Jaeger::start();
    let origin = Origin::new()
        .route(
            "*",
            Reply::text("traced").header("cache-control", "max-age=60"),
        )
        .start()
        .await;
    let log = scratch("trace-access.json.log");
    let proxy = Proxy::start(&config_for(
        "trace.example",
        &origin,
        &format!(
            "{}add_logging = true\naccess_log_format = \"json\"\naccess_log_path = {:?}\n",
            tracing_keys(&jaeger.otlp_http(), "http/protobuf"),
            log.display().to_string()
        ),
        "",
    ));
    let got = fetch(
        req(&proxy, "trace.example", "/page?x=1")
            .header("traceparent", format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"))
            .header("tracestate", "congo=t61rcWkgMzE")
            .header("user-agent", "trace-test/1.0"),
    )
    .await;
    assert_eq!(got.status, 200);

    // The origin's parent is rampart's span, in the client's trace, sampled; the client's
    // tracestate goes on with it.
    let (trace, parent, flags) = parts(&seen_traceparent(&origin));
    assert_eq!(trace, CLIENT_TRACE);
    assert_ne!(parent, CLIENT_SPAN);
    assert_eq!(flags, "01");
    assert_eq!(
        origin.last().headers.get("tracestate").unwrap(),
        "congo=t61rcWkgMzE"
    );

    let t = jaeger
        .trace_with_spans(CLIENT_TRACE, 2, Duration::from_secs(15))
        .unwrap_or_else(|| panic!("no trace in Jaeger:\n{}", jaeger.log_tail()));
    let all = spans(&t);
    let server = span_named(&all, "GET trace.example");
    let server_id = server["spanID"].as_str().unwrap().to_owned();
    assert_eq!(parent_of(server).as_deref(), Some(CLIENT_SPAN));
    assert_eq!(tag(server, "span.kind").unwrap(), "server");
    assert_eq!(tag(server, "http.request.method").unwrap(), "GET");
    assert_eq!(tag(server, "http.route").unwrap(), "trace.example");
    assert_eq!(tag(server, "url.path").unwrap(), "/page");
    assert_eq!(tag(server, "http.response.status_code").unwrap(), 200);
    assert_eq!(tag(server, "client.address").unwrap(), "127.0.0.1");
    assert_eq!(tag(server, "network.protocol.version").unwrap(), "1.1");
    assert_eq!(
        tag(server, "user_agent.original").unwrap(),
        "trace-test/1.0"
    );
    assert_eq!(tag(server, "http.response.body.size").unwrap(), 6);
    // The cache's outcome as the client's `Cache-Status` says it.
    let status = tag(server, "rampart.cache_status").unwrap();
    assert_eq!(Some(status.as_str().unwrap()), got.header("cache-status"));
    assert_eq!(status, "rampart; fwd=miss; stored");
    assert!(
        tag(server, "otel.status_code").is_none(),
        "a 200 is no error"
    );
    assert_eq!(
        tag(event(server, "recv"), "rampart.screening").unwrap(),
        "passed"
    );
    assert_eq!(
        tag(event(server, "lookup"), "rampart.cache.lookup").unwrap(),
        "miss"
    );
    event(server, "deliver");
    // The origin exchange: the span whose id the origin got as its parent.
    let exchange = span_named(&all, "origin");
    assert_eq!(exchange["spanID"].as_str().unwrap(), parent);
    assert_eq!(parent_of(exchange).as_deref(), Some(server_id.as_str()));
    assert_eq!(tag(exchange, "span.kind").unwrap(), "client");
    assert_eq!(tag(exchange, "server.address").unwrap(), "127.0.0.1");
    assert_eq!(tag(exchange, "rampart.origin.attempts").unwrap(), 1);
    assert_eq!(tag(exchange, "http.response.status_code").unwrap(), 200);
    assert!(tag(exchange, "rampart.origin.time_to_head_us").is_some());
    // The origin answered at the first attempt: no failed attempt to show.
    assert!(
        exchange["logs"].as_array().is_none_or(|l| l.is_empty()),
        "{exchange:#}"
    );
    let service = &t["processes"][server["processID"].as_str().unwrap()];
    assert_eq!(service["serviceName"], "rampart-e2e");
    assert!(
        tag(service, "deployment.environment.name").is_some_and(|v| v == "test"),
        "{service:#}"
    );

    // The access log line names the trace and the server span.
    let line: Value = serde_json::from_str(&lines(&log, 1)[0]).unwrap();
    assert_eq!(line["trace_id"], CLIENT_TRACE);
    assert_eq!(line["span_id"], server_id.as_str());

    // A hit: its own trace (the client started none), no origin exchange.
    let got = get(&proxy, "trace.example", "/page?x=1").await;
    assert_eq!(got.header("x-arc2-cache"), Some("Hit"));
    let line: Value = serde_json::from_str(&lines(&log, 2)[1]).unwrap();
    let hit_trace = line["trace_id"].as_str().unwrap().to_owned();
    assert_ne!(hit_trace, CLIENT_TRACE);
    let t = jaeger
        .trace_with_spans(&hit_trace, 1, Duration::from_secs(15))
        .unwrap_or_else(|| panic!("no trace of the hit:\n{}", jaeger.log_tail()));
    let all = spans(&t);
    assert_eq!(all.len(), 1, "{all:#?}");
    assert!(parent_of(&all[0]).is_none(), "a new trace has no parent");
    assert_eq!(
        tag(event(&all[0], "lookup"), "rampart.cache.lookup").unwrap(),
        "hit"
    );
    assert_eq!(tag(&all[0], "rampart.cache").unwrap(), "Hit");

    // HTTP/2 (h2c) requests go through the same stages: traced the same way (a catch-all rule:
    // an h2c request is routed by its authority, 127.0.0.1:PORT).
    let any = Proxy::start(&config_for(
        "*",
        &origin,
        &tracing_keys(&jaeger.otlp_http(), "http/protobuf"),
        "",
    ));
    let h2_trace = "8a3c60f7d188f8fa79d48a391a778fa6";
    let res = send(
        &h2_client(),
        http::Request::get(any.url("/h2"))
            .header("traceparent", format!("00-{h2_trace}-{CLIENT_SPAN}-01"))
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(res.status, 200);
    let t = jaeger
        .trace_with_spans(h2_trace, 2, Duration::from_secs(15))
        .unwrap_or_else(|| panic!("no trace of the h2 request:\n{}", jaeger.log_tail()));
    let server = span_named(&spans(&t), "GET *").clone();
    assert_eq!(tag(&server, "network.protocol.version").unwrap(), "2");
    assert_eq!(parts(&seen_traceparent(&origin)).0, h2_trace);
}

/// An origin that cannot be reached is an `attempt` event (its error) in the exchange's span,
/// and the origin that answered next is the span's. Behind a trusted proxy, the client's
/// address is the one `X-Forwarded-For` names, the peer's the proxy's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_origin_is_an_attempt_in_the_exchange() {
    let jaeger = Jaeger::start();
    let origin = Origin::new().route("*", Reply::text("live")).start().await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    let proxy = Proxy::start(&format!(
        "listen = [\"127.0.0.1:0\"]\nworkers = 1\ntrusted_proxies = [\"127.0.0.1\"]\n{}\n\
         [[proxy_rules]]\ndomain = \"lb.example\"\n\
         max_age_seconds = 0\nupstreams = [\"127.0.0.1:{closed_port}\", \"127.0.0.1:{}\"]\n\
         [[proxy_rules]]\ndomain = \"down.example\"\nmax_age_seconds = 0\n\
         upstreams = [\"127.0.0.1:{closed_port}\"]\n",
        tracing_keys(&jaeger.otlp_http(), "http/protobuf"),
        origin.port()
    ));
    let trace = "1f2e3d4c5b6a79880f1e2d3c4b5a6978";
    let got = fetch(
        req(&proxy, "lb.example", "/")
            .header("traceparent", format!("00-{trace}-{CLIENT_SPAN}-01"))
            .header("x-forwarded-for", "203.0.113.7"),
    )
    .await;
    assert_eq!((got.status.as_u16(), got.text()), (200, "live".to_owned()));
    let t = jaeger
        .trace_with_spans(trace, 2, Duration::from_secs(15))
        .unwrap_or_else(|| panic!("no trace in Jaeger:\n{}", jaeger.log_tail()));
    let all = spans(&t);
    let server = span_named(&all, "GET lb.example");
    assert_eq!(tag(server, "client.address").unwrap(), "203.0.113.7");
    assert_eq!(tag(server, "network.peer.address").unwrap(), "127.0.0.1");
    let exchange = span_named(&all, "origin");
    assert_eq!(tag(exchange, "rampart.origin.attempts").unwrap(), 2);
    assert_eq!(
        tag(exchange, "server.port").unwrap(),
        u64::from(origin.port())
    );
    assert_eq!(tag(exchange, "http.response.status_code").unwrap(), 200);
    let failed = event(exchange, "attempt");
    assert_eq!(tag(failed, "server.port").unwrap(), u64::from(closed_port));
    assert_eq!(tag(failed, "error.type").unwrap(), "connect");
    assert!(tag(failed, "rampart.error").is_some(), "{failed:#}");
    assert!(tag(exchange, "otel.status_code").is_none(), "{exchange:#}");

    // No origin answers: the span names the one tried last, and is an error.
    let down = "2f3e4d5c6b7a8998a0b1c2d3e4f50617";
    let got = fetch(
        req(&proxy, "down.example", "/")
            .header("traceparent", format!("00-{down}-{CLIENT_SPAN}-01")),
    )
    .await;
    assert_eq!(got.status.as_u16(), 502);
    let t = jaeger
        .trace_with_spans(down, 2, Duration::from_secs(15))
        .unwrap_or_else(|| panic!("no trace in Jaeger:\n{}", jaeger.log_tail()));
    let all = spans(&t);
    let exchange = span_named(&all, "origin");
    assert_eq!(tag(exchange, "server.address").unwrap(), "127.0.0.1");
    assert_eq!(
        tag(exchange, "server.port").unwrap(),
        u64::from(closed_port)
    );
    assert_eq!(tag(exchange, "otel.status_code").unwrap(), "ERROR");
    assert_eq!(
        tag(event(exchange, "attempt"), "error.type").unwrap(),
        "connect"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_grpc_a_malformed_traceparent_is_replaced_and_refusals_show_their_reason() {
    let jaeger = Jaeger::start();
    let origin = Origin::new().route("*", Reply::text("fine")).start().await;
    let config = config_for(
        "grpc.example",
        &origin,
        &format!(
            "{}add_logging = true\nadd_sql_injection_protection = true\n",
            tracing_keys(&jaeger.otlp_grpc(), "grpc")
        ),
        "",
    )
    .replace(
        "enable_sql_injection_protection = false",
        "enable_sql_injection_protection = true",
    );
    let proxy = Proxy::start(&config);
    // Upper-case hex: malformed. The origin gets rampart's own, valid context, and no
    // tracestate (it belonged to a context that did not parse).
    let bad = "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01";
    let got = fetch(
        req(&proxy, "grpc.example", "/x")
            .header("traceparent", bad)
            .header("tracestate", "congo=t61rcWkgMzE"),
    )
    .await;
    assert_eq!(got.status, 200);
    let sent = seen_traceparent(&origin);
    assert_ne!(sent, bad);
    let (trace, _, flags) = parts(&sent);
    assert_ne!(trace, CLIENT_TRACE.to_owned());
    assert_eq!(flags, "03", "sampled, and rampart's own trace id is random");
    assert!(origin.last().headers.get("tracestate").is_none());
    let t = jaeger
        .trace_with_spans(&trace, 2, Duration::from_secs(15))
        .unwrap_or_else(|| panic!("no trace over gRPC:\n{}", jaeger.log_tail()));
    let server = span_named(&spans(&t), "GET grpc.example").clone();
    assert!(parent_of(&server).is_none());

    // Two traceparent fields are malformed too.
    let got = fetch(
        req(&proxy, "grpc.example", "/y")
            .header("traceparent", format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"))
            .header("traceparent", format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-00")),
    )
    .await;
    assert_eq!(got.status, 200);
    let (trace, _, _) = parts(&seen_traceparent(&origin));
    assert_ne!(trace, CLIENT_TRACE);

    // A refusal is in its trace with the reason; nothing reaches the origin.
    let before = origin.requests();
    let refused_trace = "0af7651916cd43dd8448eb211c80319c";
    let got = fetch(
        req(
            &proxy,
            "grpc.example",
            "/search?q=1%27%20OR%20%271%27%3D%271",
        )
        .header(
            "traceparent",
            format!("00-{refused_trace}-b7ad6b7169203331-01"),
        ),
    )
    .await;
    assert_eq!(got.status, 403);
    assert_eq!(origin.requests(), before);
    let t = jaeger
        .trace_with_spans(refused_trace, 1, Duration::from_secs(15))
        .unwrap_or_else(|| panic!("no trace of the refusal:\n{}", jaeger.log_tail()));
    let server = span_named(&spans(&t), "GET grpc.example").clone();
    let refused = event(&server, "refused");
    assert_eq!(tag(refused, "rampart.refusal").unwrap(), "sql_injection");
    assert_eq!(tag(&server, "http.response.status_code").unwrap(), 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_client_cannot_continue_its_trace_or_force_sampling() {
    let jaeger = Jaeger::start();
    let origin = Origin::new().route("*", Reply::text("edge")).start().await;
    // An edge: nobody's context is trusted, and a new trace is sampled at 0 %.
    let proxy = Proxy::start(&config_for(
        "edge.example",
        &origin,
        &format!(
            "{}trust_trace_context = false\ntracing_sampler = \"parentbased_traceidratio\"\n\
             tracing_sample_ratio = 0.0\nadd_logging = true\n",
            tracing_keys(&jaeger.otlp_http(), "http/protobuf")
        ),
        "",
    ));
    let got = fetch(
        req(&proxy, "edge.example", "/")
            .header("traceparent", format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"))
            .header("tracestate", "congo=t61rcWkgMzE"),
    )
    .await;
    assert_eq!(got.status, 200);
    let (trace, _, flags) = parts(&seen_traceparent(&origin));
    assert_ne!(trace, CLIENT_TRACE);
    assert_eq!(
        flags, "02",
        "the client's sampled flag forced nothing (02: random id)"
    );
    assert!(origin.last().headers.get("tracestate").is_none());
    assert!(jaeger.trace(CLIENT_TRACE, Duration::from_secs(1)).is_none());

    // Trusted only from listed addresses: 127.0.0.1 is not in 10.0.0.0/8.
    let listed = Proxy::start(&config_for(
        "edge.example",
        &origin,
        &format!(
            "{}trust_trace_context_from = [\"10.0.0.0/8\"]\n",
            tracing_keys(&jaeger.otlp_http(), "http/protobuf")
        ),
        "",
    ));
    fetch(
        req(&listed, "edge.example", "/other")
            .header("traceparent", format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01")),
    )
    .await;
    let (trace, _, flags) = parts(&seen_traceparent(&origin));
    assert_ne!(trace, CLIENT_TRACE);
    // A new trace under parentbased_always_on (the default): sampled.
    assert_eq!(flags, "03");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_refresh_is_in_a_trace_of_its_own() {
    let jaeger = Jaeger::start();
    let origin = Origin::new()
        .route(
            "*",
            Reply::text("stale soon")
                .header("cache-control", "max-age=1, stale-while-revalidate=30"),
        )
        .start()
        .await;
    let proxy = Proxy::start(&config_for(
        "swr.example",
        &origin,
        &tracing_keys(&jaeger.otlp_http(), "http/protobuf"),
        "",
    ));
    assert_eq!(get(&proxy, "swr.example", "/s").await.status, 200);
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    // Answered stale; the refresh that follows is rampart's request, not the client's.
    let got = fetch(
        req(&proxy, "swr.example", "/s")
            .header("traceparent", format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"))
            .header("tracestate", "congo=t61rcWkgMzE"),
    )
    .await;
    assert_eq!(got.status, 200);
    let deadline = Instant::now() + Duration::from_secs(10);
    while origin.requests() < 2 {
        assert!(Instant::now() < deadline, "no refresh reached the origin");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (trace, _, _) = parts(&seen_traceparent(&origin));
    assert_ne!(
        trace, CLIENT_TRACE,
        "the refresh carried the client's trace"
    );
    assert!(origin.last().headers.get("tracestate").is_none());
    let t = jaeger
        .trace_with_spans(&trace, 2, Duration::from_secs(15))
        .unwrap_or_else(|| panic!("no trace of the refresh:\n{}", jaeger.log_tail()));
    let server = span_named(&spans(&t), "GET swr.example").clone();
    assert_eq!(tag(&server, "rampart.refresh").unwrap(), true);
    assert!(parent_of(&server).is_none());
    // The client's request: its own trace, answered stale, no origin exchange.
    let t = jaeger
        .trace_with_spans(CLIENT_TRACE, 1, Duration::from_secs(15))
        .unwrap_or_else(|| panic!("no trace of the stale answer:\n{}", jaeger.log_tail()));
    let all = spans(&t);
    assert_eq!(all.len(), 1, "{all:#?}");
    assert_eq!(
        tag(event(&all[0], "lookup"), "rampart.cache.lookup").unwrap(),
        "stale-while-revalidate"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_puts_new_tracing_keys_in_service_and_keeps_the_counters() {
    let jaeger = Jaeger::start();
    let origin = Origin::new().route("*", Reply::text("ok")).start().await;
    let (proxy, path) = crate::reload::start(&config_for(
        "reload.example",
        &origin,
        &format!(
            "{}metrics_allow = [\"127.0.0.0/8\"]\n",
            tracing_keys(&jaeger.otlp_http(), "http/protobuf")
        ),
        "",
    ));
    let before = "1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f";
    fetch(
        req(&proxy, "reload.example", "/a")
            .header("traceparent", format!("00-{before}-{CLIENT_SPAN}-01")),
    )
    .await;
    jaeger
        .trace_with_spans(before, 2, Duration::from_secs(15))
        .unwrap_or_else(|| panic!("no trace before the reload:\n{}", jaeger.log_tail()));
    let (exported, _, _) = trace_counters(&proxy).await;
    assert!(exported >= 2);
    // A new service name: a new exporter; the old one ends once its last request does.
    crate::reload::rewrite(&path, "rampart-e2e", "rampart-reloaded");
    let out = crate::reload::sighup(&proxy, 1);
    assert!(out.contains("configuration reloaded"), "{out}");
    let after = "6f5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c";
    fetch(
        req(&proxy, "reload.example", "/b")
            .header("traceparent", format!("00-{after}-{CLIENT_SPAN}-01")),
    )
    .await;
    let t = jaeger
        .trace_with_spans(after, 2, Duration::from_secs(15))
        .unwrap_or_else(|| panic!("no trace after the reload:\n{}", jaeger.log_tail()));
    let server = span_named(&spans(&t), "GET reload.example").clone();
    assert_eq!(
        t["processes"][server["processID"].as_str().unwrap()]["serviceName"],
        "rampart-reloaded"
    );
    let (again, _, _) = trace_counters(&proxy).await;
    assert!(
        again >= exported + 2,
        "the counters went on: {exported} then {again}"
    );
}

/// The exporter's counters from `/_rampart/metrics`.
async fn trace_counters(proxy: &Proxy) -> (u64, u64, u64) {
    let text = get(proxy, "anything", "/_rampart/metrics").await.text();
    let value = |name: &str| -> u64 {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {name} in:\n{text}")) as u64
    };
    (
        value("rampart_trace_spans_exported_total"),
        value("rampart_trace_spans_dropped_total"),
        value("rampart_trace_spans_failed_total"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_collector_costs_dropped_spans_not_requests_and_export_resumes() {
    let mut jaeger = Jaeger::start();
    let origin = Origin::new().route("*", Reply::text("ok")).start().await;
    let proxy = Proxy::start(&config_for(
        "stop.example",
        &origin,
        &format!(
            "{}tracing_queue_size = 64\ntracing_batch_size = 16\ntracing_timeout_ms = 300\n\
             metrics_allow = [\"127.0.0.0/8\"]\n",
            tracing_keys(&jaeger.otlp_http(), "http/protobuf")
        ),
        "",
    ));
    // The collector stops answering (connections are accepted and never served).
    jaeger.pause();
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    for i in 0..400 {
        let t = Instant::now();
        let got = get(&proxy, "stop.example", &format!("/p{i}")).await;
        assert_eq!(got.status, 200);
        slowest = slowest.max(t.elapsed());
    }
    let (_, dropped, failed) = trace_counters(&proxy).await;
    assert!(
        dropped > 0,
        "a full queue drops (dropped {dropped}, failed {failed})"
    );
    assert!(
        slowest < Duration::from_secs(1),
        "a request waited {slowest:?} for the collector (400 took {:?})",
        started.elapsed()
    );
    // Then it goes away altogether, and comes back on the same address.
    jaeger.resume();
    jaeger.stop();
    for i in 0..20 {
        get(&proxy, "stop.example", &format!("/q{i}")).await;
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    let (_, _, failed_after) = trace_counters(&proxy).await;
    assert!(
        failed_after > failed,
        "exports to a stopped collector fail and are counted"
    );
    jaeger.start_again();
    let back = "5f2c6f8ad2e9d4b1a3c7e8f901234567";
    let deadline = Instant::now() + Duration::from_secs(20);
    let found = loop {
        fetch(
            req(&proxy, "stop.example", "/again")
                .header("traceparent", format!("00-{back}-{CLIENT_SPAN}-01")),
        )
        .await;
        if let Some(t) = jaeger.trace(back, Duration::from_secs(1)) {
            break t;
        }
        assert!(
            Instant::now() < deadline,
            "export did not resume:\n{}",
            jaeger.log_tail()
        );
    };
    assert!(!spans(&found).is_empty());
    let (exported, dropped, _) = trace_counters(&proxy).await;
    assert!(exported > 0);

    // The dashboard shows the same counters.
    let res = client()
        .request(
            http::Request::get(proxy.url("/_rampart/dashboard/events"))
                .header("host", "stop.example")
                .body(empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let mut body = res.into_body();
    let mut buf = String::new();
    let event = crate::metrics::event_until(&mut body, &mut buf, Duration::from_secs(5), |v| {
        v["traces"]["exported"]
            .as_u64()
            .is_some_and(|n| n >= exported)
    })
    .await;
    assert_eq!(event["traces"]["dropped"], dropped, "{event}");
}

/// The screenshots in docs/operations.md: a trace through rampart in the real Jaeger UI, made by
/// the browser harness (`tests/browser/jaeger.mjs`, headless Chromium). Opt-in: a `go build` of
/// Jaeger serves no UI and no package registry ships a built one, so this runs when
/// `JAEGER_UI_DIR` names a built jaeger-ui (its `index.html` and `static/`); with
/// `RAMPART_SCREENSHOTS` set, the PNGs are written there (`docs/images` for the docs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trace_shows_in_jaegers_ui() {
    let Some(ui) = std::env::var_os("JAEGER_UI_DIR").map(std::path::PathBuf::from) else {
        eprintln!("skipped: set JAEGER_UI_DIR to a built jaeger-ui (index.html and static/)");
        return;
    };
    let browser = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    assert!(
        browser.join("node_modules/playwright-core").is_dir(),
        "run `npm ci --prefix {}` (.ci/run does)",
        browser.display()
    );
    let jaeger = Jaeger::start_with_ui(ui);
    let origin = Origin::new()
        .route("*", Reply::text("<h1>shop</h1>\n"))
        .start()
        .await;
    let proxy = Proxy::start(&config_for(
        "shop.example",
        &origin,
        // The service as the docs show it.
        &tracing_keys(&jaeger.otlp_http(), "http/protobuf").replace("rampart-e2e", "rampart"),
        "",
    ));
    // The caller: a service whose span is rampart's parent.
    let (trace, caller) = ("7b7d1e5c3a9f4e2b8c6d0a1f2e3d4c5b", "a1b2c3d4e5f60718");
    let got = fetch(
        req(&proxy, "shop.example", "/index.html")
            .header("traceparent", format!("00-{trace}-{caller}-01"))
            .header("user-agent", "storefront/2.4"),
    )
    .await;
    assert_eq!(got.status, 200);
    let t = jaeger
        .trace_with_spans(trace, 2, Duration::from_secs(15))
        .unwrap_or_else(|| panic!("no trace:\n{}", jaeger.log_tail()));
    let server = span_named(&spans(&t), "GET shop.example").clone();
    let start_us = server["startTime"].as_u64().unwrap();
    let took_us = server["duration"].as_u64().unwrap();
    // The caller's span (sent as the caller would, over OTLP/JSON) around rampart's.
    let caller_span = serde_json::json!({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "storefront"}}]},
        "scopeSpans": [{"scope": {"name": "storefront"}, "spans": [{
            "traceId": trace, "spanId": caller, "name": "GET /index.html", "kind": 3,
            "startTimeUnixNano": ((start_us - 2_000) * 1_000).to_string(),
            "endTimeUnixNano": ((start_us + took_us + 3_000) * 1_000).to_string(),
            "attributes": [{"key": "server.address", "value": {"stringValue": "shop.example"}}]
        }]}]
    }]});
    let posted = send(
        &client(),
        http::Request::post(format!("{}/v1/traces", jaeger.otlp_http()))
            .header("content-type", "application/json")
            .body(full(caller_span.to_string()))
            .unwrap(),
    )
    .await;
    assert_eq!(posted.status, 200);
    jaeger
        .trace_with_spans(trace, 3, Duration::from_secs(15))
        .unwrap_or_else(|| panic!("no caller span:\n{}", jaeger.log_tail()));
    let out = std::env::var_os("RAMPART_SCREENSHOTS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| scratch("jaeger-shots"));
    std::fs::create_dir_all(&out).unwrap();
    for (file, expand) in [
        ("jaeger-trace.png", None),
        ("jaeger-trace-detail.png", Some("1")),
    ] {
        let mut cmd = std::process::Command::new("node");
        cmd.current_dir(&browser)
            .arg("jaeger.mjs")
            .arg(jaeger.query())
            .arg(trace)
            .arg(out.join(file));
        if let Some(row) = expand {
            cmd.env("EXPAND", row);
        }
        let run = cmd.output().expect("run node");
        let stdout = String::from_utf8_lossy(&run.stdout);
        let result = stdout
            .lines()
            .find_map(|l| l.strip_prefix("RESULT "))
            .unwrap_or_else(|| {
                panic!(
                    "no result: {stdout}\n{}",
                    String::from_utf8_lossy(&run.stderr)
                )
            });
        let result: Value = serde_json::from_str(result).unwrap();
        assert!(run.status.success(), "{result:#}");
        let rows: Vec<&str> = result["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(
            rows,
            [
                "storefront GET /index.html",
                "rampart GET shop.example",
                "rampart origin"
            ],
            "{result:#}"
        );
        assert!(out.join(file).is_file());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rules_request_fields_have_the_last_word_on_traceparent() {
    let origin = Origin::new().route("*", Reply::text("ok")).start().await;
    // No collector is needed: what is checked is what the origin gets.
    let keys = tracing_keys("http://127.0.0.1:9", "http/protobuf");
    let sent = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    for (table, want) in [
        ("", None),
        ("remove = [\"traceparent\"]", Some(None)),
        (
            "set = { \"traceparent\" = \"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\" }",
            Some(Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")),
        ),
    ] {
        let rule = if table.is_empty() {
            String::new()
        } else {
            format!("[proxy_rules.request_headers]\n{table}\n")
        };
        let proxy = Proxy::start(&config_for("rules.example", &origin, &keys, &rule));
        let got = fetch(req(&proxy, "rules.example", "/").header("traceparent", &sent)).await;
        assert_eq!(got.status, 200, "{table}");
        let seen = origin.last();
        let all: Vec<_> = seen
            .headers
            .get_all("traceparent")
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect();
        match want {
            // rampart's own, continuing the client's trace with a span of its own.
            None => {
                assert_eq!(all.len(), 1, "{all:?}");
                let (trace, span, _) = parts(&all[0]);
                assert_eq!(trace, CLIENT_TRACE);
                assert_ne!(span, CLIENT_SPAN);
            }
            Some(None) => assert!(all.is_empty(), "removed, yet sent: {all:?}"),
            Some(Some(v)) => assert_eq!(all, [v], "{table}"),
        }
    }
}
