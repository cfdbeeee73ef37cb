//! The built-in origin every peer proxies to: one process, one thread, pinned like the servers.
//!
//! | path | body | caching |
//! |---|---|---|
//! | `/hello` | `Hello World!` (12 bytes) | `max-age=3600` |
//! | `/hello-pass` | `Hello World!` (12 bytes) | `no-store` |
//! | `/image.jpg` | a 75,077-byte (73 KiB) JPEG | `max-age=3600` |
//! | `/page.html` | a ~40 KB HTML catalogue page (the `compressed` scenario) | `max-age=3600` |
//! | `/page-sized` | as many bytes as the page's Brotli copy (level 5), not compressible | `max-age=3600` |
//! | `/template` | a ~2 KB HTML page rendered per request | `no-store` |
//! | `/dynamic` | a short page with a per-request counter | `no-store` |
//! | `/blob?size=N` | N bytes (at most 8 MiB; other query parameters make other URLs) | `max-age=3600` |
//! | `/large?size=N` | N bytes, streamed in 1 MiB pieces (the disk benchmark's large object) | `max-age=3600` |
//! | `/obj?k=K&size=N` | N bytes of their own for K ([`obj_body`]; the crash check compares them) | `max-age=3600` |
//! | `POST /v1/traces` | an OTLP/HTTP sink: the body is read and dropped, the answer empty (the tracing benchmarks point `tracing_endpoint` at a second origin on the load CPU, so a collector's decoding does not take the CPU the load needs) | — |
//! | `/__stats` | request counts per path (`path count` lines) | — |
//! | `/__total` | requests of every path so far but these two | — |
//!
//! The counters let the suite check that a cached scenario really hit the cache: the origin's
//! count for the path must stay flat during a measured run.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};

/// The JPEG served as `/image.jpg` (the demo's sample image).
pub static IMAGE: &[u8] = include_bytes!("../../rampart/assets/demo.jpg");

/// Paths the origin counts, in `/__stats` order.
pub const PATHS: [&str; 7] = [
    "/hello",
    "/hello-pass",
    "/image.jpg",
    "/template",
    "/dynamic",
    "/page.html",
    "/page-sized",
];

const BLOB_MAX: usize = 8 << 20;

/// The bytes `/blob` answers with (slices of one buffer, so the origin allocates nothing per
/// request).
fn blob() -> &'static Bytes {
    static BLOB: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();
    BLOB.get_or_init(|| Bytes::from(vec![b'b'; BLOB_MAX]))
}

#[derive(Default)]
struct Counters {
    hits: [AtomicU64; PATHS.len()],
    total: AtomicU64,
}

/// `/obj?k=K&size=N`'s body: N bytes that depend on K and on their offset, so a body torn,
/// shifted or from another object does not match.
pub fn obj_body(k: u64, size: usize) -> Vec<u8> {
    (0..size)
        .map(|j| (k.wrapping_mul(31) as usize + j * 7 + j / 4093) as u8)
        .collect()
}

/// A body of `left` bytes sent as slices of the blob (nothing allocated per piece).
pub struct Big {
    left: u64,
}

impl hyper::body::Body for Big {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
        if self.left == 0 {
            return std::task::Poll::Ready(None);
        }
        let n = self.left.min(1 << 20) as usize;
        self.left -= n as u64;
        std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(blob().slice(..n)))))
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(self.left)
    }
}

type OriginBody = http_body_util::Either<Full<Bytes>, Big>;

/// The `compressed` scenario's page: ~40 KB of HTML as a CMS renders a catalogue.
pub fn page() -> &'static Bytes {
    static PAGE: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();
    PAGE.get_or_init(|| {
        let mut s = String::from(
            "<!doctype html>\n<html lang=en><head><meta charset=utf-8><title>Catalogue</title>\n\
             <link rel=stylesheet href=/site.css></head><body>\n<header><nav><a href=/>Home</a> \
             <a href=/shop>Shop</a> <a href=/about>About</a></nav></header>\n<main><ul class=products>\n",
        );
        for i in 0..300 {
            s.push_str(&format!(
                "  <li class=\"product\" data-id=\"{i}\"><a href=\"/p/{i}\"><img src=\"/img/{i}.jpg\" alt=\"Product {i}\"></a>\n    \
                 <h2>Product {i}</h2><p class=\"price\">{}.{:02} EUR</p><button data-add=\"{i}\">Add to cart</button></li>\n",
                (i * 37) % 200 + 1,
                (i * 13) % 100
            ));
        }
        s.push_str("</ul></main>\n<footer>rampart-bench origin</footer></body></html>\n");
        Bytes::from(s)
    })
}

/// `/page-sized`: as many bytes as the Brotli copy rampart stores of `/page.html`.
fn page_sized() -> &'static Bytes {
    static SIZED: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();
    SIZED.get_or_init(|| {
        let len = rampart_transform::compress::compress(
            rampart_cache::encoding::Coding::Br,
            rampart_transform::compress::Levels::default(),
            page(),
        )
        .map_or(8_000, |v| v.len());
        Bytes::from(vec![b'p'; len])
    })
}

fn template(n: u64) -> String {
    let mut rows = String::new();
    for i in 0..34 {
        rows.push_str(&format!(
            "<tr><td>item {i}</td><td>{}</td><td>in stock</td></tr>\n",
            (i * 37 + n) % 1000
        ));
    }
    format!(
        "<!doctype html>\n<html><head><title>Catalogue</title><meta charset=utf-8></head>\n<body><h1>Catalogue</h1>\n\
         <p>Rendered for request {n}.</p>\n<table>\n{rows}</table>\n<footer>rampart-bench origin</footer></body></html>\n"
    )
}

async fn serve(
    req: Request<Incoming>,
    c: Arc<Counters>,
) -> Result<Response<OriginBody>, Infallible> {
    let path = req.uri().path();
    if path == "/__total" {
        let n = c.total.load(Ordering::Relaxed);
        return Ok(Response::new(http_body_util::Either::Left(Full::new(
            Bytes::from(n.to_string()),
        ))));
    }
    if path == "/v1/traces" {
        use http_body_util::BodyExt as _;
        let _ = req.into_body().collect().await;
        return Ok(Response::new(http_body_util::Either::Left(Full::new(
            Bytes::new(),
        ))));
    }
    if path != "/__stats" {
        c.total.fetch_add(1, Ordering::Relaxed);
    }
    if path == "/obj" {
        return Ok(object(&req));
    }
    if path == "/large" {
        return Ok(large(&req));
    }
    let idx = PATHS.iter().position(|p| *p == path);
    let n = idx.map_or(0, |i| c.hits[i].fetch_add(1, Ordering::Relaxed) + 1);
    let (ctype, cc, body) = match path {
        "/hello" => (
            "text/plain",
            "max-age=3600",
            Bytes::from_static(b"Hello World!"),
        ),
        // The APISIX seed's single-core pass-through: the same 12 bytes, never stored.
        "/hello-pass" => (
            "text/plain",
            "no-store",
            Bytes::from_static(b"Hello World!"),
        ),
        "/image.jpg" => ("image/jpeg", "max-age=3600", Bytes::from_static(IMAGE)),
        "/page.html" => ("text/html; charset=utf-8", "max-age=3600", page().clone()),
        "/page-sized" => (
            "application/octet-stream",
            "max-age=3600",
            page_sized().clone(),
        ),
        "/template" => (
            "text/html; charset=utf-8",
            "no-store",
            Bytes::from(template(n)),
        ),
        "/dynamic" => (
            "text/plain",
            "no-store",
            Bytes::from(format!("dynamic response {n}\n")),
        ),
        // `size` bytes (at most 8 MiB), cacheable: the memory benchmark's objects.
        "/blob" => {
            let size = req
                .uri()
                .query()
                .and_then(|q| q.split('&').find_map(|p| p.strip_prefix("size=")))
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(100_000)
                .min(BLOB_MAX);
            (
                "application/octet-stream",
                "max-age=3600",
                blob().slice(..size),
            )
        }
        "/__stats" => {
            let mut s = String::new();
            for (i, p) in PATHS.iter().enumerate() {
                s.push_str(&format!("{p} {}\n", c.hits[i].load(Ordering::Relaxed)));
            }
            ("text/plain", "no-store", Bytes::from(s))
        }
        _ => {
            let mut r = Response::new(http_body_util::Either::Left(Full::new(Bytes::from_static(
                b"not found\n",
            ))));
            *r.status_mut() = http::StatusCode::NOT_FOUND;
            return Ok(r);
        }
    };
    let mut r = Response::new(http_body_util::Either::Left(Full::new(body)));
    let h = r.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(ctype),
    );
    h.insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static(cc),
    );
    Ok(r)
}

/// `/obj?k=K&size=N`: object K of N bytes (its bytes differ by K), cacheable for an hour;
/// `tag=T` tags it `bulk` and T (for purges by tag, `rampart-bench tags`).
fn object(req: &Request<Incoming>) -> Response<OriginBody> {
    let param = |name: &str| {
        req.uri()
            .query()
            .and_then(|q| q.split('&').find_map(|p| p.strip_prefix(name)))
            .and_then(|v| v.parse::<u64>().ok())
    };
    let k = param("k=").unwrap_or(0);
    let size = param("size=").unwrap_or(1000).min(BLOB_MAX as u64) as usize;
    let mut r = Response::new(http_body_util::Either::Left(Full::new(Bytes::from(
        obj_body(k, size),
    ))));
    r.headers_mut().insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("max-age=3600"),
    );
    // `tag=T`: tagged `bulk` and T, for purges by tag (`rampart-bench tags`).
    let tag = req
        .uri()
        .query()
        .and_then(|q| q.split('&').find_map(|p| p.strip_prefix("tag=")));
    if let Some(v) = tag.and_then(|t| http::HeaderValue::from_str(&format!("bulk {t}")).ok()) {
        r.headers_mut().insert("surrogate-key", v);
    }
    r
}

/// `/large?size=N`: N bytes (1 GiB by default) made as they are sent, cacheable for an hour.
fn large(req: &Request<Incoming>) -> Response<OriginBody> {
    let size = req
        .uri()
        .query()
        .and_then(|q| q.split('&').find_map(|p| p.strip_prefix("size=")))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(1 << 30);
    let mut r = Response::new(http_body_util::Either::Right(Big { left: size }));
    let h = r.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("max-age=3600"),
    );
    h.insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(size));
    r
}

/// Runs the origin on `listen` until the process is killed.
pub fn run(listen: SocketAddr) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(listen).await?;
        println!("origin listening on http://{}", listener.local_addr()?);
        let counters = Arc::new(Counters::default());
        let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(x) => x,
                Err(_) => continue,
            };
            let _ = stream.set_nodelay(true);
            let c = counters.clone();
            let conn = builder
                .serve_connection(
                    TokioIo::new(stream),
                    service_fn(move |req| serve(req, c.clone())),
                )
                .into_owned();
            tokio::spawn(conn);
        }
    })
}

/// Parses `/__stats` output into counts per path.
pub fn parse_stats(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|l| {
            let (p, n) = l.split_once(' ')?;
            Some((p.to_owned(), n.trim().parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_is_about_two_kilobytes() {
        let t = template(7);
        assert!((1800..2600).contains(&t.len()), "{}", t.len());
        assert_eq!(
            parse_stats("/hello 3\n/image.jpg 0\n"),
            vec![("/hello".into(), 3), ("/image.jpg".into(), 0)]
        );
        assert!(IMAGE.starts_with(&[0xFF, 0xD8]));
    }
}
