//! A real Jaeger v2 (the OpenTelemetry-Collector-based `jaeger` binary, built by `.ci/run`) for
//! the tracing tests: OTLP receivers (gRPC and HTTP), in-memory storage and the query API, every
//! listener on its own free loopback port so tests can run several at once. It can be paused
//! (SIGSTOP: a collector that accepts connections but never answers), stopped and started again
//! on the same ports (its memory storage starts empty again). Killed when the handle is dropped.
//!
//! What the query API answers, `GET {query}/api/traces/{id}` (checked against Jaeger v1.76.0):
//!
//! ```text
//! {"data": [{                                   // one trace: what `Jaeger::trace` returns
//!    "traceID": "4bf92f3577b34da6a3ce929d0e0e4736",
//!    "spans": [{
//!      "traceID": "4bf9…4736", "spanID": "b7ad6b7169203331",        // lower-case hex
//!      "operationName": "origin request",                            // the OTLP span name
//!      "references": [{"refType": "CHILD_OF", "traceID": "4bf9…4736",
//!                      "spanID": "00f067aa0ba902b7"}],               // [] for a root span
//!      "startTime": 1795953877372908, "duration": 2500,              // microseconds
//!      "tags": [                                                     // sorted by key
//!        {"key": "error", "type": "bool", "value": true},            // only with status ERROR
//!        {"key": "otel.scope.name", "type": "string", "value": "rampart"},
//!        {"key": "otel.status_code", "type": "string", "value": "ERROR"},   // or "OK"; absent if unset
//!        {"key": "otel.status_description", "type": "string", "value": "origin failed"},
//!        {"key": "http.response.status_code", "type": "int64", "value": 200},
//!        {"key": "span.kind", "type": "string", "value": "client"}], // server, client, internal,
//!                                                                    // producer, consumer; absent
//!                                                                    // if unspecified
//!      "logs": [{"timestamp": 1795953877373408,                      // one per OTLP span event
//!                "fields": [{"key": "event", "type": "string", "value": "exception"},  // its name
//!                           {"key": "exception.message", "type": "string",
//!                            "value": "connection reset"}]}],        // then its attributes
//!      "processID": "p1", "warnings": null}],
//!    "processes": {"p1": {"serviceName": "rampart",                  // resource service.name
//!                         "tags": [{"key": "host.name", "type": "string", "value": "box"}]}},
//!    "warnings": null}],
//!  "total": 0, "limit": 0, "offset": 0, "errors": null}
//! ```
//!
//! Attribute types map to tag types `string`, `bool`, `int64`, `float64`. An unknown trace is a
//! 404 with `{"data": null, "errors": [{"code": 404, "msg": "trace not found"}]}`. The id in the
//! path may be upper- or lower-case and may drop leading zeros; a trace id whose upper 64 bits are
//! zero comes back as 16 hex digits (`00000000000000000123456789abcdef` is `"0123456789abcdef"`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{free_port, go_bin, scratch};

/// How long Jaeger may take to start (it is ready in well under a second on an idle machine).
const READY_WITHIN: Duration = Duration::from_secs(30);

/// One `jaeger` process and the ports it keeps across restarts.
pub struct Jaeger {
    bin: PathBuf,
    otlp_grpc: u16,
    otlp_http: u16,
    query_http: u16,
    query_grpc: u16,
    health: u16,
    dir: PathBuf,
    log: PathBuf,
    /// A built Jaeger UI the query service serves (`None`: its placeholder page).
    ui: Option<PathBuf>,
    child: Option<Child>,
}

impl Jaeger {
    /// Starts Jaeger on free loopback ports and waits until it is ready.
    pub fn start() -> Jaeger {
        Jaeger::start_with(None)
    }

    /// [`Jaeger::start`] with its UI served from `ui`, a built jaeger-ui (its `index.html` and
    /// `static/`): a `go build` of Jaeger embeds none.
    pub fn start_with_ui(ui: PathBuf) -> Jaeger {
        assert!(
            ui.join("index.html").is_file(),
            "{} is not a built Jaeger UI (no index.html)",
            ui.display()
        );
        Jaeger::start_with(Some(ui))
    }

    fn start_with(ui: Option<PathBuf>) -> Jaeger {
        let bin = go_bin(
            "JAEGER_BIN",
            "jaeger",
            "in an empty directory: go mod init x && \
             go get -tool github.com/jaegertracing/jaeger/cmd/jaeger@v1.76.0 && \
             go build -o \"$(go env GOPATH)/bin/jaeger\" github.com/jaegertracing/jaeger/cmd/jaeger",
        );
        let dir = scratch("jaeger");
        std::fs::create_dir_all(&dir).unwrap();
        let mut j = Jaeger {
            bin,
            otlp_grpc: free_port(),
            otlp_http: free_port(),
            query_http: free_port(),
            query_grpc: free_port(),
            health: free_port(),
            log: dir.join("jaeger.log"),
            dir,
            ui,
            child: None,
        };
        std::fs::write(j.dir.join("config.yaml"), j.config()).unwrap();
        j.start_again();
        j
    }

    /// The configuration: the OTLP receivers feed the memory store with no batching (a span is
    /// queryable as soon as the export is answered); the query extension (HTTP API and UI, and
    /// its gRPC API, which cannot be turned off) reads it, without tracing itself (it would
    /// export its own spans to localhost:4317); the health check (`GET /status`) says when the
    /// pipeline has started. The collector's own metrics (a Prometheus listener on port 8888 by
    /// default) are off.
    fn config(&self) -> String {
        format!(
            "\
service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: info
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  jaeger_query:
    storage:
      traces: memstore
    enable_tracing: false{ui}
    http:
      endpoint: 127.0.0.1:{query_http}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:{health}
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{otlp_grpc}
      http:
        endpoint: 127.0.0.1:{otlp_http}
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
",
            ui = match &self.ui {
                Some(dir) => format!("\n    ui:\n      assets_path: {}", dir.display()),
                None => String::new(),
            },
            query_http = self.query_http,
            query_grpc = self.query_grpc,
            health = self.health,
            otlp_grpc = self.otlp_grpc,
            otlp_http = self.otlp_http,
        )
    }

    /// Starts the process again (after [`Jaeger::stop`]) on the same ports, and waits until it
    /// is ready: the health check answers 200 once every receiver listens (while they start it
    /// answers 503, although the query API already answers). Its storage starts empty.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "jaeger already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(&self.bin)
            .current_dir(&self.dir)
            .arg("--config")
            .arg(self.dir.join("config.yaml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", self.bin.display()));
        self.child = Some(child);
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            if let Some((200, _)) = get(self.health, "/status", Duration::from_secs(1)) {
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                self.child = None;
                panic!(
                    "jaeger exited ({status}) before it was ready:\n{}",
                    self.log_tail()
                );
            }
            if Instant::now() > deadline {
                panic!(
                    "jaeger was not ready (GET http://127.0.0.1:{}/status) within {:?}:\n{}",
                    self.health,
                    READY_WITHIN,
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the process (as a crash would). Nothing holds its ports meanwhile, but they lie
    /// outside the ephemeral range ([`free_port`]), so [`Jaeger::start_again`] gets them back.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Freezes the process (SIGSTOP): connections are still accepted by the kernel, nothing is
    /// answered.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Lets a paused process run again (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("jaeger is not running").id();
        let status = Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill {sig} {pid}");
    }

    /// The OTLP/gRPC receiver, e.g. `http://127.0.0.1:4317` (HTTP/2 only).
    pub fn otlp_grpc(&self) -> String {
        format!("http://127.0.0.1:{}", self.otlp_grpc)
    }

    /// The OTLP/HTTP receiver's base URL: spans are POSTed to `{otlp_http}/v1/traces` (exactly
    /// that path; `application/x-protobuf` or `application/json`, optionally gzip-encoded).
    pub fn otlp_http(&self) -> String {
        format!("http://127.0.0.1:{}", self.otlp_http)
    }

    /// The query service's address (its HTTP API, and the UI when one is served).
    pub fn query(&self) -> String {
        format!("http://127.0.0.1:{}", self.query_http)
    }

    /// The last lines Jaeger logged (for failure messages).
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        format!(
            "{} (last lines):\n{}",
            self.log.display(),
            lines[lines.len().saturating_sub(40)..].join("\n")
        )
    }

    /// Polls the query API until the trace `trace_id_hex` (32 hex digits) has at least one span;
    /// the trace object (`data[0]` in the module documentation), or `None` after `within`.
    /// Blocking: call it where blocking is harmless (the proxy is another process).
    pub fn trace(&self, trace_id_hex: &str, within: Duration) -> Option<Value> {
        self.trace_with_spans(trace_id_hex, 1, within)
    }

    /// [`Jaeger::trace`], waiting until the trace has at least `n` spans (they may be exported
    /// in several batches).
    pub fn trace_with_spans(
        &self,
        trace_id_hex: &str,
        n: usize,
        within: Duration,
    ) -> Option<Value> {
        let path = format!("/api/traces/{trace_id_hex}");
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            // A paused Jaeger accepts the connection and never answers: bounded reads.
            if let Some((200, body)) = get(self.query_http, &path, left.min(Duration::from_secs(2)))
            {
                let v: Value = serde_json::from_slice(&body).unwrap_or_else(|e| {
                    panic!("GET {path}: {e}: {}", String::from_utf8_lossy(&body))
                });
                let trace = &v["data"][0];
                if spans(trace).len() >= n {
                    return Some(trace.clone());
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Jaeger {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The spans of a trace returned by [`Jaeger::trace`].
pub fn spans(trace: &Value) -> Vec<Value> {
    trace["spans"].as_array().cloned().unwrap_or_default()
}

/// The value of the tag `key` of a span, or of the field `key` of one of its logs:
/// `tag(&span, "span.kind")` is `Some(json!("server"))`, `tag(&span["logs"][0], "event")` the
/// span event's name.
pub fn tag(span: &Value, key: &str) -> Option<Value> {
    let list = span
        .get("tags")
        .or_else(|| span.get("fields"))?
        .as_array()?;
    list.iter()
        .find(|t| t["key"] == key)
        .map(|t| t["value"].clone())
}

/// A blocking `GET path` on 127.0.0.1:`port` (HTTP/1.0: the whole body, never chunked, then
/// close): the status and body, or `None` if the connection fails or `timeout` passes.
fn get(port: u16, path: &str, timeout: Duration) -> Option<(u16, Vec<u8>)> {
    let timeout = timeout.max(Duration::from_millis(100));
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, timeout).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    s.set_write_timeout(Some(timeout)).ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n").as_bytes())
        .ok()?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).ok()?;
    let head_end = out.windows(4).position(|w| w == b"\r\n\r\n")?;
    let status = std::str::from_utf8(&out[..head_end])
        .ok()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some((status, out[head_end + 4..].to_vec()))
}
