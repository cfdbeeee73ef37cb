//! `rampart-bench soak-origin`: the soak's origin, one process per origin so that the fault
//! schedule can kill it (SIGKILL) and start it again on the same port. HTTP/1.1 (what rampart
//! speaks to origins by default), bodies from [`super::body::Pool`]:
//!
//! | path | answer | caching |
//! |---|---|---|
//! | `/obj/ID?size=N` | `N` bytes of object `ID`, `x-soak-sum` | `max-age=3600`; objects with [`revalidated`] ids `max-age=2` with an `ETag` (a matching `If-None-Match` gets 304) |
//! | `/pass/ID?size=N` | `N` bytes keyed by the request's `x-soak-nonce` | `no-store` (even ids) or `private` (odd) |
//! | `POST /echo` | `LEN SUM` of the body received | `no-store` |
//! | `/flaky/ID?size=N` | as `/obj/`, but the 1st, 3rd, … request for the URL (counted by this process) is cut after half the body: `ID % 3` = 0: `Content-Length` then a TCP reset, 1: `Content-Length` then a clean close (FIN), 2: chunked without the last chunk, then FIN | `max-age=3600` |
//!
//! A cut answer must never be served as complete nor stored: the clients check that every
//! `/flaky/` answer is the whole body or a clean error.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future as _;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::body::{self, checksum, revalidated, Kind, Pool};

#[derive(clap::Args, Debug)]
pub struct OriginArgs {
    /// Where to listen (port 0: the kernel chooses; the address is printed on stdout).
    #[arg(long)]
    pub listen: SocketAddr,
    /// The pool's seed (the same as the clients').
    #[arg(long)]
    pub seed: u64,
    /// This origin's name, sent back as `x-soak-origin`.
    #[arg(long, default_value = "a")]
    pub name: String,
}

type Body = BoxBody<Bytes, io::Error>;

struct State {
    pool: Pool,
    name: HeaderValue,
    /// Requests seen per `/flaky/` path.
    flaky: Mutex<HashMap<String, u64>>,
    /// Checksums already computed, per (kind, key, length).
    sums: Mutex<HashMap<(Kind, u64, usize), u64>>,
}

impl State {
    fn sum(&self, kind: Kind, key: u64, body: &Bytes) -> u64 {
        let k = (kind, key, body.len());
        if let Some(s) = self.sums.lock().ok().and_then(|m| m.get(&k).copied()) {
            return s;
        }
        let s = checksum(body);
        if let Ok(mut m) = self.sums.lock() {
            if m.len() < 100_000 {
                m.insert(k, s);
            }
        }
        s
    }
}

/// A client connection whose close becomes a TCP reset once `reset` is set (SO_LINGER 0).
struct Conn {
    tcp: TcpStream,
    reset: Arc<AtomicBool>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        if self.reset.load(Ordering::Relaxed) {
            let _ = self.tcp.set_zero_linger();
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, b: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, b)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        b: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, b)
    }
    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

/// A body that sends its first half, waits a moment (so it leaves the socket), then fails:
/// hyper then drops the connection without finishing the message.
struct Cut {
    first: Option<Bytes>,
    pause: Pin<Box<tokio::time::Sleep>>,
}

impl hyper::body::Body for Cut {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        if let Some(b) = self.first.take() {
            return Poll::Ready(Some(Ok(Frame::data(b))));
        }
        match self.pause.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => Poll::Ready(Some(Err(io::Error::other("soak: cut mid-body")))),
        }
    }
}

fn full(b: Bytes) -> Body {
    Full::new(b)
        .map_err(|never: Infallible| match never {})
        .boxed()
}

fn reply(status: StatusCode, cc: &'static str, b: Bytes) -> Response<Body> {
    let mut r = Response::new(full(b));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static(cc));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    r
}

fn sum_header(sum: u64) -> HeaderValue {
    // invariant: sixteen hex digits are a valid header value.
    HeaderValue::from_str(&format!("{sum:016x}")).expect("hex is a header value")
}

async fn serve(
    req: Request<Incoming>,
    st: Arc<State>,
    reset: Arc<AtomicBool>,
) -> Result<Response<Body>, Infallible> {
    let path = req.uri().path().to_owned();
    let size = body::size_of(req.uri().query()).unwrap_or(1000);
    let mut res = if let Some(id) = body::id_of(&path, "/obj/") {
        object(&req, &st, id, size)
    } else if let Some(id) = body::id_of(&path, "/pass/") {
        pass(&req, &st, id, size)
    } else if path == "/echo" && req.method() == http::Method::POST {
        echo(req).await
    } else if let Some(id) = body::id_of(&path, "/flaky/") {
        flaky(&st, &path, id, size, &reset)
    } else {
        reply(
            StatusCode::NOT_FOUND,
            "no-store",
            Bytes::from_static(b"no such path\n"),
        )
    };
    res.headers_mut().insert("x-soak-origin", st.name.clone());
    Ok(res)
}

/// `/obj/ID`: the object, cacheable for an hour, or for 2 s with an `ETag` when its id is
/// [`revalidated`] (a matching `If-None-Match` then gets a 304).
fn object(req: &Request<Incoming>, st: &State, id: u64, size: usize) -> Response<Body> {
    let b = st.pool.body(Kind::Obj, id, size);
    let sum = st.sum(Kind::Obj, id, &b);
    let etag = format!("\"{sum:016x}\"");
    let inm = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok());
    let mut r = if revalidated(id) && inm.is_some_and(|v| v.contains(&etag)) {
        reply(StatusCode::NOT_MODIFIED, "max-age=2", Bytes::new())
    } else if revalidated(id) {
        reply(StatusCode::OK, "max-age=2", b)
    } else {
        reply(StatusCode::OK, "max-age=3600", b)
    };
    if revalidated(id) {
        // invariant: a quoted hex string is a valid header value.
        r.headers_mut().insert(
            header::ETAG,
            HeaderValue::from_str(&etag).expect("hex is a header value"),
        );
    }
    r.headers_mut().insert("x-soak-sum", sum_header(sum));
    r
}

/// `/pass/ID`: bytes keyed by the request's `x-soak-nonce`, never to be stored.
fn pass(req: &Request<Incoming>, st: &State, id: u64, size: usize) -> Response<Body> {
    let nonce = req
        .headers()
        .get("x-soak-nonce")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let b = st.pool.body(Kind::Pass, nonce, size);
    let sum = checksum(&b);
    let cc = if id.is_multiple_of(2) {
        "no-store"
    } else {
        "private"
    };
    let mut r = reply(StatusCode::OK, cc, b);
    r.headers_mut().insert("x-soak-sum", sum_header(sum));
    r
}

/// `POST /echo`: the length and checksum of the body received.
async fn echo(req: Request<Incoming>) -> Response<Body> {
    match req.into_body().collect().await {
        Ok(c) => {
            let b = c.to_bytes();
            reply(
                StatusCode::OK,
                "no-store",
                Bytes::from(format!("{} {:016x}", b.len(), checksum(&b))),
            )
        }
        Err(_) => reply(StatusCode::BAD_REQUEST, "no-store", Bytes::new()),
    }
}

/// `/flaky/ID`: as `/obj/`, but every other answer for the URL is cut after half the body, in
/// one of three ways (see the module header).
fn flaky(st: &State, path: &str, id: u64, size: usize, reset: &AtomicBool) -> Response<Body> {
    let b = st.pool.body(Kind::Flaky, id, size);
    let sum = st.sum(Kind::Flaky, id, &b);
    let n = st.flaky.lock().map_or(1, |mut m| {
        let n = m.entry(path.to_owned()).or_insert(0);
        *n += 1;
        *n
    });
    if n.is_multiple_of(2) || b.len() < 2 {
        let mut r = reply(StatusCode::OK, "max-age=3600", b);
        r.headers_mut().insert("x-soak-sum", sum_header(sum));
        return r;
    }
    let len = b.len();
    let cut = Cut {
        first: Some(b.slice(..len / 2)),
        pause: Box::pin(tokio::time::sleep(Duration::from_millis(30))),
    };
    let mut r = Response::new(cut.boxed());
    let h = r.headers_mut();
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("max-age=3600"),
    );
    h.insert("x-soak-sum", sum_header(sum));
    match id % 3 {
        0 => {
            h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
            reset.store(true, Ordering::Relaxed);
        }
        1 => {
            h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        }
        // No length: hyper sends it chunked and never sends the last chunk.
        _ => {}
    }
    r
}

/// Runs the origin until the process is killed.
pub fn run(args: OriginArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let state = Arc::new(State {
        pool: Pool::new(args.seed),
        name: HeaderValue::from_str(&args.name)?,
        flaky: Mutex::new(HashMap::new()),
        sums: Mutex::new(HashMap::new()),
    });
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.listen).await?;
        println!("listening on {}", listener.local_addr()?);
        let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let _ = tcp.set_nodelay(true);
            let reset = Arc::new(AtomicBool::new(false));
            let st = state.clone();
            let r = reset.clone();
            let conn = builder
                .serve_connection(
                    TokioIo::new(Conn { tcp, reset }),
                    service_fn(move |req| serve(req, st.clone(), r.clone())),
                )
                .into_owned();
            tokio::spawn(conn);
        }
    })
}
