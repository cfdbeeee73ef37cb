//! The access log: one line per request, as `key=value` pairs or as a JSON object, on stdout or
//! appended to a file (reopened on SIGUSR1, for logrotate).
//!
//! Written only when the global `add_logging` and the rule's `enable_logging` are both on; the
//! pipeline does not even build a record otherwise. Fields: time, client, host, method, path,
//! status, bytes (body bytes sent), duration_us (request start to last body byte), upstream
//! (the origin's address) and upstream_us (its response-head time), cache, aborted, scheme,
//! version, request_id, user_agent and referer.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use http::header::{HeaderName, HeaderValue, REFERER, USER_AGENT};
use http::uri::Authority;
use http::Method;
use rampart_config::{AccessLogConfig, LogFormat};
use rampart_otel::{SpanId, TraceId};

/// The request-id header: passed through when the client sends a usable one, generated
/// otherwise, and sent to the origin.
pub static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Longest client request id taken as it is.
const MAX_REQUEST_ID: usize = 200;

/// Everything one access-log line needs; filled in along the pipeline.
#[derive(Debug)]
pub struct AccessRecord {
    pub sink: Arc<AccessLog>,
    pub start: Instant,
    pub time: SystemTime,
    pub client: IpAddr,
    /// `http` or `https` (how the client connected).
    pub scheme: &'static str,
    pub version: http::Version,
    pub host: String,
    pub method: Method,
    pub path: String,
    pub status: u16,
    pub bytes: u64,
    pub upstream: Option<Authority>,
    /// The origin's response-head time (from sending the request).
    pub upstream_time: Option<Duration>,
    /// The `X-Arc2-Cache` vocabulary: Miss, Hit, Dynamic, Bypass, Block, ...
    pub cache: &'static str,
    /// The body ended with an error (client or origin went away mid-stream).
    pub aborted: bool,
    pub request_id: HeaderValue,
    pub user_agent: Option<HeaderValue>,
    pub referer: Option<HeaderValue>,
    /// The request's trace and server span, when tracing is on (written as `trace_id` and
    /// `span_id`, W3C's hex form; sampled or not, so a line leads to the origin's logs too).
    pub trace: Option<(TraceId, SpanId)>,
}

impl AccessRecord {
    /// A record for a request to `host` from `client` (the address screening resolved).
    pub fn new<B>(
        sink: Arc<AccessLog>,
        start: Instant,
        client: IpAddr,
        scheme: &'static str,
        host: &HeaderValue,
        req: &rampart_head::Request<B>,
        request_id: HeaderValue,
    ) -> Self {
        let h = req.headers();
        AccessRecord {
            sink,
            start,
            time: SystemTime::now(),
            client,
            scheme,
            version: req.version(),
            host: String::from_utf8_lossy(host.as_bytes()).into_owned(),
            method: req.method().clone(),
            path: req
                .uri()
                .path_and_query()
                .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned()),
            status: 0,
            bytes: 0,
            upstream: None,
            upstream_time: None,
            cache: "Dynamic",
            aborted: false,
            request_id,
            user_agent: h.get(USER_AGENT).cloned(),
            referer: h.get(REFERER).cloned(),
            trace: None,
        }
    }

    pub fn write(&self) {
        self.sink.write(self);
    }
}

/// The request's id: the client's `X-Request-Id` when it is usable (1–200 visible ASCII
/// characters, no quote or backslash), else a new one, which is put in the request so the
/// origin gets the same id.
pub fn request_id(headers: &mut rampart_head::Fields) -> HeaderValue {
    if let Some(v) = usable_request_id(headers) {
        return v.clone();
    }
    let id = new_request_id();
    headers.insert(X_REQUEST_ID.clone(), id.clone());
    id
}

/// The client's `X-Request-Id` when it is usable (see [`request_id`]).
pub fn usable_request_id(headers: &rampart_head::Fields) -> Option<&HeaderValue> {
    let v = headers.get(&X_REQUEST_ID)?;
    let b = v.as_bytes();
    let usable = !b.is_empty()
        && b.len() <= MAX_REQUEST_ID
        && b.iter()
            .all(|c| c.is_ascii_graphic() && *c != b'"' && *c != b'\\');
    usable.then_some(v)
}

/// 32 hex digits, unique in this process (a counter through a bijective mix, under a
/// per-process random key) and unlikely to repeat across processes.
pub fn new_request_id() -> HeaderValue {
    use std::hash::{BuildHasher as _, Hasher as _};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static KEY: OnceLock<(u64, u64)> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let (a, b) = *KEY.get_or_init(|| {
        let s = std::collections::hash_map::RandomState::new();
        let mut h = s.build_hasher();
        h.write_u64(std::process::id().into());
        let a = h.finish();
        h.write_u64(a);
        (a, h.finish())
    });
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut out = [0u8; 32];
    hex(&mut out[..16], mix(n ^ a));
    hex(&mut out[16..], mix(n.wrapping_add(b)));
    // invariant: hex digits are a valid header value.
    HeaderValue::from_bytes(&out).unwrap_or(HeaderValue::from_static("0"))
}

/// splitmix64's finaliser: a bijection on u64.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn hex(out: &mut [u8], v: u64) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (i, o) in out.iter_mut().enumerate() {
        *o = DIGITS[((v >> (60 - 4 * i)) & 0xf) as usize];
    }
}

/// Where access-log lines go.
#[derive(Debug)]
pub struct AccessLog {
    config: AccessLogConfig,
    /// The open file (`None`: stdout).
    file: Option<Mutex<std::fs::File>>,
}

impl AccessLog {
    /// Opens the destination (creating the file; lines are appended).
    pub fn open(config: &AccessLogConfig) -> std::io::Result<AccessLog> {
        let file = match &config.path {
            Some(p) => Some(Mutex::new(open_append(p)?)),
            None => None,
        };
        Ok(AccessLog {
            config: config.clone(),
            file,
        })
    }

    pub fn config(&self) -> &AccessLogConfig {
        &self.config
    }

    /// Reopens the file by its name (after logrotate moved it away); stdout stays.
    pub fn reopen(&self) -> std::io::Result<()> {
        if let (Some(path), Some(file)) = (&self.config.path, &self.file) {
            let new = open_append(path)?;
            *file.lock().unwrap_or_else(|p| p.into_inner()) = new;
        }
        Ok(())
    }

    /// Writes one line (a write error is reported on stderr, at most once a minute).
    pub fn write(&self, r: &AccessRecord) {
        thread_local! {
            static LINE: RefCell<String> = const { RefCell::new(String::new()) };
        }
        LINE.with(|line| {
            let mut line = line.borrow_mut();
            line.clear();
            match self.config.format {
                LogFormat::Kv => kv(&mut line, r),
                LogFormat::Json => json(&mut line, r),
            }
            line.push('\n');
            let written = match &self.file {
                Some(f) => f
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .write_all(line.as_bytes()),
                None => std::io::stdout().lock().write_all(line.as_bytes()),
            };
            if let Err(e) = written {
                complain(&self.config.path, &e);
            }
            // A very long line (a huge path) does not keep its buffer.
            if line.capacity() > 16 * 1024 {
                *line = String::new();
            }
        });
    }
}

fn open_append(path: &PathBuf) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("cannot open the access log {}: {e}", path.display()),
            )
        })
}

fn complain(path: &Option<PathBuf>, e: &std::io::Error) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if now >= LAST.load(Ordering::Relaxed) + 60 {
        LAST.store(now, Ordering::Relaxed);
        let to = path
            .as_ref()
            .map_or_else(|| "stdout".to_owned(), |p| p.display().to_string());
        tracing::error!(error = %e, to, "cannot write the access log");
    }
}

fn version(v: http::Version) -> &'static str {
    match v {
        http::Version::HTTP_09 => "HTTP/0.9",
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_2 => "HTTP/2",
        http::Version::HTTP_3 => "HTTP/3",
        _ => "HTTP/1.1",
    }
}

fn header_text(v: Option<&HeaderValue>) -> std::borrow::Cow<'_, str> {
    match v {
        Some(v) => String::from_utf8_lossy(v.as_bytes()),
        None => std::borrow::Cow::Borrowed("-"),
    }
}

/// `key=value` pairs; a value that is empty or holds a space, quote, backslash or control
/// character is written in double quotes with those escaped.
fn kv(out: &mut String, r: &AccessRecord) {
    let _ = write!(out, "time=");
    rfc3339(out, r.time);
    let _ = write!(out, " client={}", r.client);
    let pairs: [(&str, &str); 3] = [
        ("host", &r.host),
        ("method", r.method.as_str()),
        ("path", &r.path),
    ];
    for (k, v) in pairs {
        kv_pair(out, k, v);
    }
    let _ = write!(
        out,
        " status={} bytes={} duration_us={}",
        r.status,
        r.bytes,
        r.start.elapsed().as_micros()
    );
    kv_pair(
        out,
        "upstream",
        r.upstream.as_ref().map_or("-", Authority::as_str),
    );
    match r.upstream_time {
        Some(t) => {
            let _ = write!(out, " upstream_us={}", t.as_micros());
        }
        None => out.push_str(" upstream_us=-"),
    }
    let _ = write!(
        out,
        " cache={} aborted={} scheme={} version={}",
        r.cache,
        r.aborted,
        r.scheme,
        version(r.version)
    );
    kv_pair(out, "request_id", &header_text(Some(&r.request_id)));
    kv_pair(out, "user_agent", &header_text(r.user_agent.as_ref()));
    kv_pair(out, "referer", &header_text(r.referer.as_ref()));
    if let Some((t, s)) = r.trace {
        let _ = write!(out, " trace_id={} span_id={}", t.to_hex(), s.to_hex());
    }
}

fn kv_pair(out: &mut String, key: &str, value: &str) {
    out.push(' ');
    out.push_str(key);
    out.push('=');
    let plain = !value.is_empty()
        && value
            .chars()
            .all(|c| !c.is_control() && c != ' ' && c != '"' && c != '\\');
    if plain {
        out.push_str(value);
    } else {
        json_string_into(out, value);
    }
}

/// The record as one JSON object. Written by hand into the line's buffer, as the key=value
/// form is: a line per request, with no allocation on the way (the management API's answers,
/// which are rare, go through `serde_json`).
fn json(out: &mut String, r: &AccessRecord) {
    out.push_str("{\"time\":\"");
    rfc3339(out, r.time);
    let _ = write!(out, "\",\"client\":\"{}\",\"host\":", r.client);
    json_string_into(out, &r.host);
    out.push_str(",\"method\":");
    json_string_into(out, r.method.as_str());
    out.push_str(",\"path\":");
    json_string_into(out, &r.path);
    let _ = write!(
        out,
        ",\"status\":{},\"bytes\":{},\"duration_us\":{},\"upstream\":",
        r.status,
        r.bytes,
        r.start.elapsed().as_micros()
    );
    match &r.upstream {
        Some(u) => json_string_into(out, u.as_str()),
        None => out.push_str("null"),
    }
    out.push_str(",\"upstream_us\":");
    match r.upstream_time {
        Some(t) => {
            let _ = write!(out, "{}", t.as_micros());
        }
        None => out.push_str("null"),
    }
    let _ = write!(
        out,
        ",\"cache\":\"{}\",\"aborted\":{},\"scheme\":\"{}\",\"version\":\"{}\",\"request_id\":",
        r.cache,
        r.aborted,
        r.scheme,
        version(r.version)
    );
    json_string_into(out, &header_text(Some(&r.request_id)));
    for (k, v) in [("user_agent", &r.user_agent), ("referer", &r.referer)] {
        let _ = write!(out, ",\"{k}\":");
        match v {
            Some(v) => json_string_into(out, &String::from_utf8_lossy(v.as_bytes())),
            None => out.push_str("null"),
        }
    }
    if let Some((t, s)) = r.trace {
        let _ = write!(
            out,
            ",\"trace_id\":\"{}\",\"span_id\":\"{}\"",
            t.to_hex(),
            s.to_hex()
        );
    }
    out.push('}');
}

fn json_string_into(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `t` as `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC).
fn rfc3339(out: &mut String, t: SystemTime) {
    let t = time::OffsetDateTime::from(t);
    let _ = write!(
        out,
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `s` as a JSON string literal.
    fn json_string(s: &str) -> String {
        let mut out = String::with_capacity(s.len() + 2);
        json_string_into(&mut out, s);
        out
    }

    fn record(sink: Arc<AccessLog>) -> AccessRecord {
        let req = rampart_head::Request::get("/a%20b?q=%22x%22")
            .header("user-agent", "Mozilla/5.0 (X11)")
            .body(())
            .unwrap_or_default();
        let mut r = AccessRecord::new(
            sink,
            Instant::now(),
            IpAddr::from([127, 0, 0, 1]),
            "http",
            &HeaderValue::from_static("example.com"),
            &req,
            HeaderValue::from_static("abc"),
        );
        r.time = SystemTime::UNIX_EPOCH + Duration::from_millis(1_764_000_000_123);
        r.status = 200;
        r
    }

    #[test]
    fn kv_quotes_what_needs_it_and_json_parses() {
        let sink = Arc::new(
            AccessLog::open(&AccessLogConfig::default()).unwrap_or_else(|e| panic!("{e}")),
        );
        let r = record(sink);
        let mut line = String::new();
        kv(&mut line, &r);
        assert!(line.starts_with("time=2025-11-24T16:00:00.123Z client=127.0.0.1 host=example.com method=GET path=/a%20b?q=%22x%22 status=200"), "{line}");
        assert!(
            line.ends_with(" user_agent=\"Mozilla/5.0 (X11)\" referer=-"),
            "{line}"
        );
        assert!(line.contains(" request_id=abc "), "{line}");
        assert!(
            line.contains(" upstream=- upstream_us=- cache=Dynamic"),
            "{line}"
        );
        let mut line = String::new();
        json(&mut line, &r);
        assert!(
            line.starts_with("{\"time\":\"2025-11-24T16:00:00.123Z\",\"client\":\"127.0.0.1\""),
            "{line}"
        );
        assert!(
            line.contains("\"user_agent\":\"Mozilla/5.0 (X11)\",\"referer\":null}"),
            "{line}"
        );
        assert_eq!(json_string("a\"b\\c\u{1}"), "\"a\\\"b\\\\c\\u0001\"");
    }

    #[test]
    fn request_ids_pass_through_or_are_made() {
        let mut h = rampart_head::Fields::new();
        h.insert(&X_REQUEST_ID, HeaderValue::from_static("req-42"));
        assert_eq!(request_id(&mut h), "req-42");
        h.insert(&X_REQUEST_ID, HeaderValue::from_static("has space"));
        let made = request_id(&mut h);
        assert_eq!(made.len(), 32);
        assert_eq!(h.get(&X_REQUEST_ID), Some(&made), "sent on to the origin");
        let mut h = rampart_head::Fields::new();
        let (a, b) = (request_id(&mut h), new_request_id());
        assert_ne!(a, b);
        assert!(a.as_bytes().iter().all(u8::is_ascii_hexdigit));
    }

    #[test]
    fn dates() {
        let at = |ms: u64| {
            let mut s = String::new();
            rfc3339(&mut s, SystemTime::UNIX_EPOCH + Duration::from_millis(ms));
            s
        };
        assert_eq!(at(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(951_782_400_007), "2000-02-29T00:00:00.007Z");
    }
}
