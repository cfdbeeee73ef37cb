//! OpenTelemetry traces: `tracing_endpoint` turns them on; `tracing_protocol`,
//! `tracing_headers`, `tracing_service_name`, `tracing_resource`, `tracing_sampler`,
//! `tracing_sample_ratio`, `tracing_queue_size`, `tracing_batch_size`,
//! `tracing_export_interval_ms`, `tracing_timeout_ms`, `trust_trace_context` and
//! `trust_trace_context_from` shape them. Without an endpoint the other keys have no effect (a
//! warning says so).

use std::time::Duration;

use toml_edit::{Item, Value};

use super::{cidrs, error};
use crate::diag::Severity;
use crate::model::{OtlpProtocol, Sampler, TracingConfig};
use crate::reader::{At, Section, Sink};

/// `tracing_queue_size` when unset (OpenTelemetry's batch processor's default).
pub const DEFAULT_QUEUE: usize = 2048;
/// `tracing_batch_size` when unset (OpenTelemetry's default).
pub const DEFAULT_BATCH: usize = 512;
/// `tracing_export_interval_ms` when unset (OpenTelemetry's default).
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(5000);
/// `tracing_timeout_ms` when unset (OpenTelemetry's default).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(10_000);

pub(super) fn read(s: &mut Section<'_>, sink: &mut Sink<'_>) -> Option<TracingConfig> {
    let endpoint = s.string(sink, "tracing_endpoint");
    let protocol_at = s.string(sink, "tracing_protocol");
    let headers = pairs(s, sink, "tracing_headers", true);
    let service_name = s.string(sink, "tracing_service_name");
    let resource = pairs(s, sink, "tracing_resource", false);
    let sampler_at = s.string(sink, "tracing_sampler");
    let ratio = s.fraction(sink, "tracing_sample_ratio");
    let queue = s.int(sink, "tracing_queue_size", 16, 1_000_000);
    let batch = s.int(sink, "tracing_batch_size", 1, 100_000);
    let interval = s.int(sink, "tracing_export_interval_ms", 10, 3_600_000);
    let timeout = s.int(sink, "tracing_timeout_ms", 10, 600_000);
    let trust = s.bool(sink, "trust_trace_context");
    let trust_from = cidrs(s, sink, "trust_trace_context_from");

    let protocol = match &protocol_at {
        Some(p) => match p.value.as_str() {
            "grpc" => OtlpProtocol::Grpc,
            "http/protobuf" | "http" => OtlpProtocol::HttpProtobuf,
            other => {
                error(
                    sink,
                    p,
                    format!("unknown tracing_protocol {other:?}"),
                    "use \"grpc\" (the collector's port 4317) or \"http/protobuf\" (port 4318, the default)",
                );
                OtlpProtocol::HttpProtobuf
            }
        },
        None => OtlpProtocol::HttpProtobuf,
    };
    let sampler = match &sampler_at {
        Some(at) => match Sampler::NAMES.iter().find(|(n, _)| *n == at.value) {
            Some((_, s)) => *s,
            None => {
                let names: Vec<&str> = Sampler::NAMES.iter().map(|(n, _)| *n).collect();
                error(
                    sink,
                    at,
                    format!("unknown tracing_sampler {:?}", at.value),
                    format!("use one of {}", names.join(", ")),
                );
                Sampler::ParentBasedAlwaysOn
            }
        },
        None => Sampler::ParentBasedAlwaysOn,
    };
    let queue_size = queue.as_ref().map_or(DEFAULT_QUEUE, |q| q.value as usize);
    // A batch never waits for more spans than the queue holds.
    let batch_size = match &batch {
        Some(b) if b.value as usize > queue_size => {
            error(
                sink,
                b,
                format!("a batch of {} spans is larger than the queue ({queue_size})", b.value),
                format!("use at most `tracing_batch_size = {queue_size}`, or a larger `tracing_queue_size`"),
            );
            queue_size
        }
        Some(b) => b.value as usize,
        None => DEFAULT_BATCH.min(queue_size),
    };
    let Some(endpoint) = endpoint else {
        let unused = [
            protocol_at.as_ref().map(|a| (&a.key, &a.span)),
            sampler_at.as_ref().map(|a| (&a.key, &a.span)),
            headers.as_ref().map(|a| (&a.key, &a.span)),
            service_name.as_ref().map(|a| (&a.key, &a.span)),
            resource.as_ref().map(|a| (&a.key, &a.span)),
            ratio.as_ref().map(|a| (&a.key, &a.span)),
            queue.as_ref().map(|a| (&a.key, &a.span)),
            batch.as_ref().map(|a| (&a.key, &a.span)),
            interval.as_ref().map(|a| (&a.key, &a.span)),
            timeout.as_ref().map(|a| (&a.key, &a.span)),
            trust.as_ref().map(|a| (&a.key, &a.span)),
            trust_from.as_ref().map(|a| (&a.key, &a.span)),
        ];
        for (key, span) in unused.into_iter().flatten() {
            sink.push(
                Severity::Warning,
                key,
                span.clone(),
                "has no effect without `tracing_endpoint`",
                "set `tracing_endpoint = \"http://127.0.0.1:4318\"` (your OpenTelemetry collector), or remove the key",
            );
        }
        return None;
    };
    let endpoint = check_endpoint(sink, &endpoint, protocol)?;
    let service_name = match service_name {
        Some(n) if n.value.trim().is_empty() => {
            error(
                sink,
                &n,
                "`tracing_service_name` is empty",
                "name the service as your traces should show it, e.g. \"rampart-edge\"",
            );
            "rampart".to_owned()
        }
        Some(n) => n.value,
        None => "rampart".to_owned(),
    };
    let ms =
        |v: Option<At<i64>>, d: Duration| v.map_or(d, |v| Duration::from_millis(v.value as u64));
    Some(TracingConfig {
        endpoint,
        protocol,
        headers: headers.map(|h| h.value).unwrap_or_default(),
        service_name,
        resource: resource.map(|r| r.value).unwrap_or_default(),
        sampler,
        ratio: ratio.map_or(1.0, |r| r.value),
        queue_size,
        batch_size,
        export_interval: ms(interval, DEFAULT_INTERVAL),
        timeout: ms(timeout, DEFAULT_TIMEOUT),
        trust: trust.is_none_or(|t| t.value),
        trust_from: trust_from.map(|t| t.value).unwrap_or_default(),
    })
}

/// The collector's URL: `http(s)://host:port`, with a path only for HTTP/protobuf (where a URL
/// without one gets `/v1/traces`, OpenTelemetry's `OTEL_EXPORTER_OTLP_ENDPOINT` rule).
fn check_endpoint(sink: &mut Sink<'_>, at: &At<String>, protocol: OtlpProtocol) -> Option<String> {
    let example = match protocol {
        OtlpProtocol::Grpc => "\"http://127.0.0.1:4317\"",
        OtlpProtocol::HttpProtobuf => "\"http://127.0.0.1:4318\"",
    };
    let uri = at.value.trim().parse::<http::Uri>().ok();
    let Some(uri) = uri.filter(|u| {
        matches!(u.scheme_str(), Some("http" | "https"))
            && u.authority().is_some_and(|a| !a.host().is_empty())
            && u.query().is_none()
    }) else {
        error(
            sink,
            at,
            format!("{:?} is not a collector's URL", at.value),
            format!("write `tracing_endpoint = {example}` (http:// or https://, host and port)"),
        );
        return None;
    };
    let path = uri.path();
    let base = at.value.trim().trim_end_matches('/');
    match protocol {
        OtlpProtocol::Grpc if path != "/" && !path.is_empty() => {
            error(
                sink,
                at,
                format!("an OTLP/gRPC endpoint has no path ({path:?})"),
                format!(
                    "write `tracing_endpoint = \"{}://{}\"`",
                    uri.scheme_str().unwrap_or("http"),
                    uri.authority().map_or("", |a| a.as_str())
                ),
            );
            None
        }
        OtlpProtocol::Grpc => Some(base.to_owned()),
        OtlpProtocol::HttpProtobuf if path == "/" || path.is_empty() => {
            Some(format!("{base}/v1/traces"))
        }
        OtlpProtocol::HttpProtobuf => Some(at.value.trim().to_owned()),
    }
}

/// A table of string pairs (`tracing_headers = { authorization = "..." }`); for headers, the
/// names and values must be fit for an HTTP field.
fn pairs(
    s: &mut Section<'_>,
    sink: &mut Sink<'_>,
    key: &'static str,
    fields: bool,
) -> Option<At<Vec<(String, String)>>> {
    let mut t = s.table(sink, key)?;
    let span = t.span();
    let mut out = Vec::new();
    for (name, at) in t.entries() {
        let value = match at.value {
            Item::Value(Value::String(v)) => v.value().clone(),
            _ => {
                error(
                    sink,
                    &at,
                    "expected a string",
                    format!("write it as `{name} = \"...\"`"),
                );
                continue;
            }
        };
        if fields {
            if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                error(
                    sink,
                    &at,
                    format!("{name:?} is not a header name"),
                    "use letters, digits and dashes, e.g. `authorization` or `x-api-key`",
                );
                continue;
            }
            if http::HeaderValue::from_str(&value).is_err() {
                error(
                    sink,
                    &at,
                    "the value has characters a header cannot carry",
                    "use visible ASCII characters and spaces",
                );
                continue;
            }
        }
        out.push((name.to_owned(), value));
    }
    Some(At {
        value: out,
        key: s.key_path(key),
        span,
    })
}
