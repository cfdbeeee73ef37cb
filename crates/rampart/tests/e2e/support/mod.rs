//! End-to-end test harness: real origins built with [`Origin`], the real `rampart` binary started
//! by [`Proxy`], real HTTP clients. Everything listens on 127.0.0.1 port 0; readiness is polled
//! with a deadline, never slept for.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode, Uri, Version};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::sync::watch;

pub mod h3;
pub mod jaeger;
pub mod redis;
pub mod tls;

pub type BoxBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// What the origin received for one request.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: Method,
    pub uri: Uri,
    pub version: Version,
    pub headers: HeaderMap,
    pub body_len: u64,
}

/// A canned origin reply.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    pub delay: Duration,
    /// When set, the body is this many bytes streamed in 64 KiB chunks instead of `body`.
    pub stream_len: Option<u64>,
    /// When set with `stream_len`, the origin pauses this long after the first chunk.
    pub pause_after_first: Option<Duration>,
    /// Send `body` chunked (no Content-Length), in two frames.
    pub chunked: bool,
}

impl Reply {
    pub fn text(body: &str) -> Self {
        Reply {
            status: 200,
            headers: vec![("content-type".into(), "text/plain".into())],
            body: Bytes::copy_from_slice(body.as_bytes()),
            delay: Duration::ZERO,
            stream_len: None,
            pause_after_first: None,
            chunked: false,
        }
    }
    /// `body` as `content_type`.
    pub fn typed(body: &[u8], content_type: &str) -> Self {
        let mut r = Reply::text("");
        r.headers = vec![("content-type".into(), content_type.into())];
        r.body = Bytes::copy_from_slice(body);
        r
    }
    /// `body` without a Content-Length (chunked transfer coding).
    pub fn chunked(body: &str) -> Self {
        let mut r = Reply::text(body);
        r.chunked = true;
        r
    }
    /// Streams `len` bytes, pausing `pause` after the first 64 KiB chunk.
    pub fn trickled(len: u64, pause: Duration) -> Self {
        let mut r = Reply::streamed(len);
        r.pause_after_first = Some(pause);
        r
    }
    pub fn status(mut self, s: u16) -> Self {
        self.status = s;
        self
    }
    pub fn header(mut self, k: &str, v: &str) -> Self {
        self.headers.push((k.into(), v.into()));
        self
    }
    pub fn delay(mut self, d: Duration) -> Self {
        self.delay = d;
        self
    }
    pub fn streamed(len: u64) -> Self {
        let mut r = Reply::text("");
        r.stream_len = Some(len);
        r
    }
}

type Handler = Arc<dyn Fn(&Seen) -> Reply + Send + Sync>;

/// Builder for a test origin.
#[derive(Default)]
pub struct Origin {
    routes: HashMap<String, Handler>,
    early: Vec<String>,
}

/// Counters shared with a running origin.
#[derive(Default)]
pub struct OriginState {
    pub requests: AtomicUsize,
    pub connections: AtomicUsize,
    pub body_bytes: AtomicU64,
    pub seen: Mutex<Vec<Seen>>,
    /// Panics raised by route handlers (an assertion about what the origin received): the
    /// origin answers 500 and the test fails when its [`OriginHandle`] is dropped.
    pub panics: Mutex<Vec<String>>,
}

/// A running origin; stops when dropped.
pub struct OriginHandle {
    pub addr: SocketAddr,
    pub state: Arc<OriginState>,
    _stop: watch::Sender<bool>,
}

impl Drop for OriginHandle {
    /// A handler's panic ran in the origin's task, where the test cannot see it: raise it here.
    fn drop(&mut self) {
        let panics = std::mem::take(&mut *self.state.panics.lock().unwrap());
        if !panics.is_empty() && !std::thread::panicking() {
            panic!("the test origin panicked: {}", panics.join("; "));
        }
    }
}

impl OriginHandle {
    pub fn requests(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
    }
    pub fn connections(&self) -> usize {
        self.state.connections.load(Ordering::SeqCst)
    }
    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }
    pub fn last(&self) -> Seen {
        self.seen().pop().expect("origin saw no request")
    }
    pub fn port(&self) -> u16 {
        self.addr.port()
    }
    pub fn body_bytes(&self) -> u64 {
        self.state.body_bytes.load(Ordering::SeqCst)
    }
}

const CHUNK: usize = 64 * 1024;

impl Origin {
    pub fn new() -> Self {
        Origin::default()
    }

    /// Answers requests whose path (without query) equals `path`; `"*"` answers all others.
    pub fn route(mut self, path: &str, reply: Reply) -> Self {
        self.routes
            .insert(path.into(), Arc::new(move |_| reply.clone()));
        self
    }

    /// Requests to `path` are answered as soon as their head arrives; their body is read (and
    /// counted in `body_bytes`) while the answer is written. `Seen::body_len` is 0 for them.
    pub fn answer_before_body(mut self, path: &str) -> Self {
        self.early.push(path.into());
        self
    }

    /// Answers with a reply computed from the request.
    pub fn route_fn(
        mut self,
        path: &str,
        f: impl Fn(&Seen) -> Reply + Send + Sync + 'static,
    ) -> Self {
        self.routes.insert(path.into(), Arc::new(f));
        self
    }

    pub async fn start(self) -> OriginHandle {
        self.start_inner(None).await
    }

    /// Starts the origin serving HTTPS with `config`.
    pub async fn start_tls(self, config: Arc<rustls::ServerConfig>) -> OriginHandle {
        self.start_inner(Some(tokio_rustls::TlsAcceptor::from(config)))
            .await
    }

    async fn start_inner(self, tls: Option<tokio_rustls::TlsAcceptor>) -> OriginHandle {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(OriginState::default());
        let routes = Arc::new(self.routes);
        let early = Arc::new(self.early);
        let (tx, mut rx) = watch::channel(false);
        let st = state.clone();
        tokio::spawn(async move {
            loop {
                let stream = tokio::select! {
                    r = listener.accept() => match r { Ok((s, _)) => s, Err(_) => continue },
                    _ = rx.changed() => return,
                };
                st.connections.fetch_add(1, Ordering::SeqCst);
                let (st, routes, mut stop) = (st.clone(), routes.clone(), rx.clone());
                let (tls, early) = (tls.clone(), early.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req| {
                        handle(req, st.clone(), routes.clone(), early.clone())
                    });
                    let builder =
                        hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    // A stopped origin also drops its open (pooled) connections.
                    match tls {
                        None => {
                            let conn = builder.serve_connection(TokioIo::new(stream), svc);
                            tokio::select! {
                                _ = conn => {}
                                _ = stop.changed() => {}
                            }
                        }
                        Some(acceptor) => {
                            let Ok(stream) = acceptor.accept(stream).await else {
                                return;
                            };
                            let conn = builder.serve_connection(TokioIo::new(stream), svc);
                            tokio::select! {
                                _ = conn => {}
                                _ = stop.changed() => {}
                            }
                        }
                    }
                });
            }
        });
        OriginHandle {
            addr,
            state,
            _stop: tx,
        }
    }
}

async fn handle(
    req: Request<Incoming>,
    st: Arc<OriginState>,
    routes: Arc<HashMap<String, Handler>>,
    early: Arc<Vec<String>>,
) -> Result<Response<BoxBody>, Infallible> {
    let (parts, body) = req.into_parts();
    // Read (and count) the whole request body, without keeping it: before answering, or
    // while answering for the `answer_before_body` paths.
    async fn count(mut body: Incoming) -> u64 {
        let mut n = 0u64;
        while let Some(Ok(f)) = body.frame().await {
            if let Some(d) = f.data_ref() {
                n += d.len() as u64;
            }
        }
        n
    }
    let body_len = if early.iter().any(|p| p == parts.uri.path()) {
        let st = st.clone();
        tokio::spawn(async move {
            let n = count(body).await;
            st.body_bytes.fetch_add(n, Ordering::SeqCst);
        });
        0
    } else {
        let n = count(body).await;
        st.body_bytes.fetch_add(n, Ordering::SeqCst);
        n
    };
    let seen = Seen {
        method: parts.method,
        uri: parts.uri,
        version: parts.version,
        headers: parts.headers,
        body_len,
    };
    st.requests.fetch_add(1, Ordering::SeqCst);
    st.seen.lock().unwrap().push(seen.clone());
    let handler = routes.get(seen.uri.path()).or_else(|| routes.get("*"));
    let reply = match handler {
        Some(h) => match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h(&seen))) {
            Ok(reply) => reply,
            Err(p) => {
                let msg = p
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a non-text panic".to_owned());
                st.panics
                    .lock()
                    .unwrap()
                    .push(format!("{} {}: {msg}", seen.method, seen.uri));
                Reply::text("the test origin's handler panicked\n").status(500)
            }
        },
        None => Reply::text("no such route\n").status(404),
    };
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    let mut res = Response::builder().status(reply.status);
    for (k, v) in &reply.headers {
        res = res.header(k, v);
    }
    let body: BoxBody = match reply.stream_len {
        Some(len) => {
            res = res.header("content-length", len.to_string());
            match reply.pause_after_first {
                Some(pause) => {
                    let first = len.min(CHUNK as u64);
                    let (tx, rx) =
                        tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(2);
                    tokio::spawn(async move {
                        let _ = tx
                            .send(Ok(Frame::data(Bytes::from(vec![b'x'; first as usize]))))
                            .await;
                        tokio::time::sleep(pause).await;
                        if len > first {
                            let _ = tx
                                .send(Ok(Frame::data(Bytes::from(vec![
                                    b'x';
                                    (len - first) as usize
                                ]))))
                                .await;
                        }
                    });
                    ChannelBody(rx).boxed()
                }
                None => repeat_body(len),
            }
        }
        None if reply.chunked => {
            let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(2);
            let half = reply.body.len() / 2;
            let body = reply.body;
            tokio::spawn(async move {
                for part in [body.slice(..half), body.slice(half..)] {
                    let _ = tx.send(Ok(Frame::data(part))).await;
                }
            });
            ChannelBody(rx).boxed()
        }
        None => Full::new(reply.body).boxed(),
    };
    Ok(res.body(body).unwrap())
}

/// A body fed from a channel.
pub struct ChannelBody(pub tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, Infallible>>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx)
    }
}

/// Raises this process's open-files limit (tests that open ~1000 connections): rampart's own.
#[allow(unused_imports)] // not every test file opens that many
pub use rampart_proxy::server::raise_fd_limit;

/// A body of `remaining` bytes sent in 64 KiB chunks of a shared buffer.
pub struct Repeat {
    remaining: u64,
    chunk: Bytes,
}

impl hyper::body::Body for Repeat {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.remaining == 0 {
            return std::task::Poll::Ready(None);
        }
        let n = self.remaining.min(self.chunk.len() as u64) as usize;
        self.remaining -= n as u64;
        std::task::Poll::Ready(Some(Ok(Frame::data(self.chunk.slice(..n)))))
    }
    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(self.remaining)
    }
}

/// A streamed body of `len` bytes.
pub fn repeat_body(len: u64) -> BoxBody {
    Repeat {
        remaining: len,
        chunk: Bytes::from(vec![b'x'; CHUNK]),
    }
    .boxed()
}

// ---------------------------------------------------------------------------------------------

static NEXT_FILE: AtomicUsize = AtomicUsize::new(0);

/// A scratch file path unique to this test process.
pub fn scratch(name: &str) -> PathBuf {
    let n = NEXT_FILE.fetch_add(1, Ordering::SeqCst);
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(format!("{n}-{name}"))
}

/// A running `rampart` process; killed when dropped.
pub struct Proxy {
    pub child: Child,
    pub addr: SocketAddr,
    /// The HTTPS listener, when the config has one.
    pub https: Option<SocketAddr>,
    /// The HTTP/3 (UDP) socket, when `http3` is on.
    pub h3: Option<SocketAddr>,
    pub stdout: Arc<Mutex<String>>,
    pub stderr: Arc<Mutex<String>>,
}

pub fn rampart_bin() -> &'static str {
    env!("CARGO_BIN_EXE_rampart")
}

fn pump(
    r: impl Read + Send + 'static,
    buf: Arc<Mutex<String>>,
    ready: Option<std::sync::mpsc::Sender<SocketAddr>>,
) {
    std::thread::spawn(move || {
        let mut ready = ready;
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            if let Some(tx) = &ready {
                if let Some(rest) = line.split("listening on http://").nth(1) {
                    if let Ok(a) = rest.split_whitespace().next().unwrap_or("").parse() {
                        let _ = tx.send(a);
                        ready = None;
                    }
                }
            }
            let mut b = buf.lock().unwrap();
            b.push_str(&line);
            b.push('\n');
        }
    });
}

impl Proxy {
    /// Starts `rampart run` with `toml` (listen on 127.0.0.1:0 there) and waits until it listens.
    pub fn start(toml: &str) -> Proxy {
        let path = scratch("rampart.toml");
        std::fs::write(&path, toml).unwrap();
        Proxy::spawn(&["run", "--config", path.to_str().unwrap()])
    }

    /// Runs `rampart run` with `toml` expecting it to refuse to start: asserts exit status 1
    /// and returns what it printed (stdout, then stderr).
    pub fn try_start(toml: &str) -> String {
        let path = scratch("rampart.toml");
        std::fs::write(&path, toml).unwrap();
        let mut child = Command::new(rampart_bin())
            .args(["run", "--config", path.to_str().unwrap()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run rampart");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while child.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("rampart started, or hung, instead of refusing to start");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(1), "{text}");
        text
    }

    /// Starts the binary with `args`; waits for its "listening on" line.
    pub fn spawn(args: &[&str]) -> Proxy {
        Proxy::spawn_env(args, &[])
    }

    /// [`Proxy::spawn`] with extra environment variables.
    pub fn spawn_env(args: &[&str], env: &[(&str, &str)]) -> Proxy {
        Proxy::spawn_in(&std::env::current_dir().unwrap(), args, env)
    }

    /// [`Proxy::spawn_env`] in the working directory `dir` (where relative paths start).
    pub fn spawn_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Proxy {
        let mut child = Command::new(rampart_bin())
            .current_dir(dir)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start rampart");
        let stdout = Arc::new(Mutex::new(String::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        // Startup lines go to stderr; the access log to stdout.
        pump(child.stdout.take().unwrap(), stdout.clone(), None);
        pump(child.stderr.take().unwrap(), stderr.clone(), Some(tx));
        let addr = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(a) => a,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "rampart did not start listening.\nstdout:\n{}\nstderr:\n{}",
                    stdout.lock().unwrap(),
                    stderr.lock().unwrap()
                );
            }
        };
        // rampart prints its HTTPS lines before the HTTP one.
        let https = stderr
            .lock()
            .unwrap()
            .split("listening on https://")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|a| a.parse().ok());
        let h3 = stderr
            .lock()
            .unwrap()
            .split("listening for HTTP/3 on udp://")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|a| a.parse().ok());
        Proxy {
            child,
            addr,
            https,
            h3,
            stdout,
            stderr,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal (e.g. libc::SIGTERM).
    pub fn signal(&self, sig: i32) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid().to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for the process to exit; returns its exit code.
    pub fn wait_exit(&mut self, within: Duration) -> Option<i32> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Polls until `needle` appears in stdout or stderr.
    pub fn wait_for_output(&self, needle: &str, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.stdout.lock().unwrap().contains(needle)
                || self.stderr.lock().unwrap().contains(needle)
            {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    pub fn output(&self) -> String {
        format!(
            "stdout:\n{}\nstderr:\n{}",
            self.stdout.lock().unwrap(),
            self.stderr.lock().unwrap()
        )
    }

    /// Peak resident memory (VmHWM) in KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        self.status_kib("VmHWM:")
    }

    /// The process's resident memory now, in KiB.
    pub fn rss_kib(&self) -> u64 {
        self.status_kib("VmRSS:")
    }

    fn status_kib(&self, key: &str) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        s.lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A config with one rule for `domain` forwarding to `origin`. `extra_global` lines replace the
/// defaults with the same key (`workers = 2`, `logging_level = "warn"`, `add_logging = false`).
pub fn config_for(
    domain: &str,
    origin: &OriginHandle,
    extra_global: &str,
    extra_rule: &str,
) -> String {
    config_for_port(domain, origin.port(), extra_global, extra_rule)
}

/// [`config_for`] with the origin given by its port on 127.0.0.1.
pub fn config_for_port(domain: &str, port: u16, extra_global: &str, extra_rule: &str) -> String {
    let mut global = String::from("listening_address = \"127.0.0.1\"\nlistening_port_http = 0\n");
    for (key, line) in [
        ("workers", "workers = 2"),
        ("logging_level", "logging_level = \"warn\""),
        ("add_logging", "add_logging = false"),
    ] {
        if !extra_global
            .lines()
            .any(|l| l.trim_start().starts_with(key))
        {
            global.push_str(line);
            global.push('\n');
        }
    }
    format!(
        "{global}{extra_global}\n\
         [[proxy_rules]]\ndomain = \"{domain}\"\nmax_age_seconds = 60\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = {}\n\
         rule_type = \"Whitelist\"\nenable_logging = true\nignore_query_string = false\nenable_sql_injection_protection = false\n\
         enable_compression = false\nenable_minification = false\nenable_webp_transformation = false\n{extra_rule}\n",
        port
    )
}

// ---------------------------------------------------------------------------------------------

/// An HTTP/1.1 client (keep-alive pool) for tests.
pub fn client() -> Client<hyper_util::client::legacy::connect::HttpConnector, BoxBody> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// An HTTP/2 prior-knowledge (h2c) client.
pub fn h2_client() -> Client<hyper_util::client::legacy::connect::HttpConnector, BoxBody> {
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

pub fn empty() -> BoxBody {
    Empty::new().boxed()
}

pub fn full(b: impl Into<Bytes>) -> BoxBody {
    Full::new(b.into()).boxed()
}

/// A complete response, body collected.
#[derive(Debug)]
pub struct Got {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub version: Version,
}

impl Got {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// GET `path` through `proxy` with the given Host header.
pub async fn get(proxy: &Proxy, host: &str, path: &str) -> Got {
    fetch(req(proxy, host, path)).await
}

/// A GET of `path` through `proxy` with the given Host header, to add headers to before
/// [`fetch`].
pub fn req(proxy: &Proxy, host: &str, path: &str) -> http::request::Builder {
    Request::get(proxy.url(path)).header("host", host)
}

/// Sends a request built with [`req`] (or any builder) without a body.
pub async fn fetch(b: http::request::Builder) -> Got {
    send(&client(), b.body(empty()).unwrap()).await
}

/// The management API key the tests configure (`api_key`).
pub const API_KEY: &str = "0123456789abcdef0123456789abcdef";

pub async fn send(
    c: &Client<hyper_util::client::legacy::connect::HttpConnector, BoxBody>,
    req: Request<BoxBody>,
) -> Got {
    let res = tokio::time::timeout(Duration::from_secs(30), c.request(req))
        .await
        .expect("response within 30 s")
        .expect("request failed");
    let (parts, body) = res.into_parts();
    let body = body.collect().await.expect("body").to_bytes();
    Got {
        status: parts.status,
        headers: parts.headers,
        body,
        version: parts.version,
    }
}

/// A free loopback port: bound, then released for a server that needs a fixed one in its
/// configuration (Pebble, HAProxy).
///
/// Chosen below the kernel's ephemeral range (32768–60999 by default), where a port freed here
/// could be handed to any other socket's `bind(0)` or `connect` before the process it is meant
/// for binds it (an ACME test lost its port to another test that way): outside it, only
/// another explicit choice can take it.
pub fn free_port() -> u16 {
    use std::sync::atomic::AtomicU32;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let seed = std::process::id().wrapping_mul(2_654_435_761);
    for _ in 0..10_000 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = 20_000 + (seed.wrapping_add(n.wrapping_mul(7_919)) % 12_000) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Writes raw bytes on a new connection and reads until the peer closes or `idle` passes
/// without data.
pub fn raw(addr: SocketAddr, bytes: &[u8], idle: Duration) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(idle)).unwrap();
    s.write_all(bytes).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(_) => break,
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One PNG chunk: length, type, data and CRC (for the pictures tests build by hand).
pub fn png_chunk(kind: &[u8], data: &[u8]) -> Vec<u8> {
    let mut c = (data.len() as u32).to_be_bytes().to_vec();
    c.extend_from_slice(kind);
    c.extend_from_slice(data);
    let mut crc = flate2::Crc::new();
    crc.update(kind);
    crc.update(data);
    c.extend_from_slice(&crc.sum().to_be_bytes());
    c
}

/// A tool `go install` put in `$GOPATH/bin` (or the path in the environment variable `env`):
/// `.ci/run` installs them; `install` says how to by hand.
pub fn go_bin(env: &str, name: &str, install: &str) -> std::path::PathBuf {
    if let Some(p) = std::env::var_os(env) {
        return std::path::PathBuf::from(p);
    }
    let gopath = std::process::Command::new("go")
        .args(["env", "GOPATH"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| format!("{}/go", std::env::var("HOME").unwrap_or_default()));
    let p = std::path::PathBuf::from(gopath).join("bin").join(name);
    assert!(
        p.exists(),
        "{name} is not installed ({}); `bash .ci/run` installs it, or: {install}",
        p.display()
    );
    p
}
