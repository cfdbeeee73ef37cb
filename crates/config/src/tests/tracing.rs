//! The `tracing_*` keys and `trust_trace_context`: what they read to, and every mistake reported
//! with its key, line and a fix.

use super::*;
use crate::model::{OtlpProtocol, Sampler};

const RULE: &str = "[[proxy_rules]]\ndomain = \"a.example\"\nforward_ipv4 = \"127.0.0.1\"\n";

fn with(global: &str) -> Validated {
    validate(&format!("{global}\n{RULE}"), 1)
}

/// The diagnostics of the tracing keys (the rule has warnings of its own).
fn ours(v: &Validated) -> Vec<&Diagnostic> {
    v.diagnostics
        .iter()
        .filter(|d| d.key.starts_with("tracing_") || d.key.starts_with("trust_trace"))
        .collect()
}

#[test]
fn without_an_endpoint_tracing_is_off_and_its_keys_are_reported_unused() {
    let v = with("");
    assert_eq!(v.config.as_ref().map(|c| c.tracing.is_some()), Some(false));
    let v = with("tracing_sample_ratio = 0.5\ntrust_trace_context = false");
    let c = v.config.as_ref().expect("warnings only");
    assert!(c.tracing.is_none());
    let warned: Vec<&Diagnostic> = ours(&v);
    let keys: Vec<&str> = warned.iter().map(|d| d.key.as_str()).collect();
    assert_eq!(keys, ["tracing_sample_ratio", "trust_trace_context"]);
    assert!(warned[0].to_string().contains("tracing_endpoint"));
}

#[test]
fn the_defaults_are_opentelemetrys() {
    let v = with("tracing_endpoint = \"http://127.0.0.1:4318\"");
    let t = v.config.and_then(|c| c.tracing).expect("on");
    assert_eq!(t.endpoint, "http://127.0.0.1:4318/v1/traces");
    assert_eq!(t.protocol, OtlpProtocol::HttpProtobuf);
    assert_eq!(t.sampler, Sampler::ParentBasedAlwaysOn);
    assert_eq!((t.ratio, t.queue_size, t.batch_size), (1.0, 2048, 512));
    assert_eq!(t.export_interval, std::time::Duration::from_secs(5));
    assert_eq!(t.timeout, std::time::Duration::from_secs(10));
    assert_eq!(t.service_name, "rampart");
    assert!(t.trust && t.trust_from.is_empty());
    assert!(t.trusts("203.0.113.9".parse().expect("ip")));
}

#[test]
fn every_key_reads_to_its_setting() {
    let v = with(
        r#"tracing_endpoint = "https://otel.example:4317"
tracing_protocol = "grpc"
tracing_headers = { authorization = "Bearer abc", "x-team" = "edge" }
tracing_service_name = "edge"
tracing_resource = { "deployment.environment.name" = "prod" }
tracing_sampler = "parentbased_traceidratio"
tracing_sample_ratio = 0.25
tracing_queue_size = 100
tracing_batch_size = 10
tracing_export_interval_ms = 250
tracing_timeout_ms = 2000
trust_trace_context_from = ["10.0.0.0/8"]"#,
    );
    assert!(ours(&v).is_empty(), "{:?}", v.diagnostics);
    let t = v.config.and_then(|c| c.tracing).expect("on");
    assert_eq!(t.endpoint, "https://otel.example:4317");
    assert_eq!(t.protocol, OtlpProtocol::Grpc);
    assert_eq!(
        t.headers,
        [
            ("authorization".to_owned(), "Bearer abc".to_owned()),
            ("x-team".to_owned(), "edge".to_owned())
        ]
    );
    assert_eq!(t.resource.len(), 1);
    assert_eq!(t.sampler, Sampler::ParentBasedTraceIdRatio);
    assert_eq!((t.ratio, t.queue_size, t.batch_size), (0.25, 100, 10));
    assert!(t.trusts("10.1.2.3".parse().expect("ip")));
    assert!(!t.trusts("203.0.113.9".parse().expect("ip")));
    assert!(t.trusts("::ffff:10.1.2.3".parse().expect("ip")));
    // A URL with a path is used as written (HTTP/protobuf).
    let v = with("tracing_endpoint = \"http://c.example/otlp/v1/traces\"");
    let t = v.config.and_then(|c| c.tracing).expect("on");
    assert_eq!(t.endpoint, "http://c.example/otlp/v1/traces");
}

#[test]
fn mistakes_are_listed_with_their_key_and_line() {
    let v = with(
        r#"tracing_endpoint = "127.0.0.1:4318"
tracing_protocol = "thrift"
tracing_sampler = "sometimes"
tracing_sample_ratio = 1.5
tracing_headers = { "bad name" = "x" }
tracing_queue_size = 16
tracing_batch_size = 20"#,
    );
    assert!(v.config.is_none());
    let keyed: Vec<(String, usize)> = v.errors().map(|d| (d.key.clone(), d.line)).collect();
    assert_eq!(
        keyed,
        [
            ("tracing_endpoint".to_owned(), 1),
            ("tracing_protocol".to_owned(), 2),
            ("tracing_sampler".to_owned(), 3),
            ("tracing_sample_ratio".to_owned(), 4),
            ("tracing_headers.bad name".to_owned(), 5),
            ("tracing_batch_size".to_owned(), 7),
        ]
    );
    let text: Vec<String> = v.errors().map(|d| d.to_string()).collect();
    assert!(text[0].contains("http://127.0.0.1:4318"), "{}", text[0]);
    assert!(text[2].contains("parentbased_traceidratio"), "{}", text[2]);
    // Without a batch key, a small queue makes the batch as small.
    let v = with("tracing_endpoint = \"http://c:4318\"\ntracing_queue_size = 100");
    let t = v.config.and_then(|c| c.tracing).expect("on");
    assert_eq!((t.queue_size, t.batch_size), (100, 100));
    // A percentage is shown as the fraction it means.
    let v = with("tracing_endpoint = \"http://c:4318\"\ntracing_sample_ratio = \"10%\"");
    let e = v.errors().next().expect("an error").to_string();
    assert!(e.contains("tracing_sample_ratio = 0.1"), "{e}");
    // gRPC endpoints have no path.
    let v = with("tracing_endpoint = \"http://c:4317/v1/traces\"\ntracing_protocol = \"grpc\"");
    let e = v.errors().next().expect("an error").to_string();
    assert!(e.contains("tracing_endpoint = \"http://c:4317\""), "{e}");
}
