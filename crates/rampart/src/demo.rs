//! `rampart demo`: a built-in sample origin and rampart in front of it, from an embedded config.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, SET_COOKIE};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// The ~73 KB sample image.
pub static DEMO_JPEG: &[u8] = include_bytes!("../assets/demo.jpg");

/// The configuration `rampart demo` runs with; `{LISTEN}` and `{ORIGIN_PORT}` are filled in.
pub const DEMO_CONFIG: &str = r#"# rampart demo: an ARC2-style file plus rampart's own `listen` and `workers` keys.
listen = ["{LISTEN}"]
listen_https = ["{LISTEN_HTTPS}"]   # HTTPS for `localhost`, certificate from rampart's local CA
workers = 1
logging_level = "warn"
add_logging = true
add_caching = true
add_sql_injection_protection = true

[[proxy_rules]]
domain = "localhost"
tls = "internal"             # a certificate from rampart's local CA (rampart extension)
max_age_seconds = 60
rule_type = "Whitelist"
forward_ipv4 = "127.0.0.1"
forward_port_http = {ORIGIN_PORT}
enable_logging = true
ignore_query_string = false
enable_sql_injection_protection = true
enable_compression = false
enable_minification = false
enable_webp_transformation = false

[[proxy_rules]]
domain = "*"                 # every other host name (rampart extension; ARC2 files name one domain)
max_age_seconds = 60
paths = ["/"]
rule_type = "Whitelist"
forward_ipv4 = "127.0.0.1"
forward_port_http = {ORIGIN_PORT}
enable_logging = true
ignore_query_string = false
enable_sql_injection_protection = true
enable_compression = false
enable_minification = false
enable_webp_transformation = false
"#;

/// Answers one request of the sample site.
async fn sample_site(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let mut b = Response::builder();
    let body: Bytes = match req.uri().path() {
        "/" => {
            b = b
                .header(CONTENT_TYPE, "text/plain")
                .header(CACHE_CONTROL, "public, max-age=60");
            Bytes::from_static(b"Hello World!")
        }
        "/image.jpg" => {
            b = b
                .header(CONTENT_TYPE, "image/jpeg")
                .header(CACHE_CONTROL, "public, max-age=3600");
            Bytes::from_static(DEMO_JPEG)
        }
        "/slow" => {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis());
            b = b
                .header(CONTENT_TYPE, "text/html; charset=utf-8")
                .header(CACHE_CONTROL, "no-store");
            Bytes::from(format!(
                "<!doctype html><title>slow</title><p>Rendered slowly at {now} ms after the epoch.</p>\n"
            ))
        }
        "/cookie" => {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            b = b.header(CONTENT_TYPE, "text/plain").header(
                SET_COOKIE,
                format!("demo_session={now:x}; Path=/; HttpOnly"),
            );
            Bytes::from_static(
                b"Here is a cookie. Responses that set cookies are never shared by a cache.\n",
            )
        }
        _ => {
            b = b
                .status(StatusCode::NOT_FOUND)
                .header(CONTENT_TYPE, "text/plain");
            Bytes::from_static(b"not found\n")
        }
    };
    Ok(b.body(Full::new(body))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()))))
}

/// Serves the sample site on `listener` until `shutdown` turns true.
pub async fn serve_origin(listener: TcpListener, mut shutdown: watch::Receiver<bool>) {
    let builder = auto::Builder::new(TokioExecutor::new());
    loop {
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(_) => continue,
            },
            _ = shutdown.changed() => return,
        };
        let conn = builder
            .serve_connection(TokioIo::new(stream), service_fn(sample_site))
            .into_owned();
        tokio::spawn(conn);
    }
}

/// The state directory of a demo run as root: `$HOME/.local/share/rampart-demo`, else
/// `./rampart-demo-state`. `None` for other users, whose default state directory is their own.
///
/// As root, rampart's default `state_dir` is `/var/lib/rampart`, the service's: a demo there
/// would create (or reuse) the local CA that the service's `tls = "internal"` certificates
/// chain to. The demo keeps its CA apart, in root's home, where it survives restarts (a root
/// trusted once stays trusted) and cannot be planted by another user as a file in /tmp could.
pub fn root_state_dir() -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt as _;
    if !std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0) {
        return None;
    }
    Some(match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(h) => PathBuf::from(h).join(".local/share/rampart-demo"),
        None => PathBuf::from("rampart-demo-state"),
    })
}

/// What `rampart demo` prints once both servers are up.
pub fn instructions(
    proxy: SocketAddr,
    https: Option<SocketAddr>,
    state_dir: &Path,
    root: &Path,
    origin: SocketAddr,
) -> String {
    let base = format!("http://{proxy}");
    let tls = match https {
        Some(a) => format!(
            "\n  curl -i --cacert {} https://localhost:{}/   # HTTPS (HTTP/2) with a local-CA certificate",
            root.display(),
            a.port()
        ),
        None => String::new(),
    };
    format!(
        "rampart demo is running.\n\
         \n  sample origin : http://{origin}\n  rampart       : {base}  (in front of the origin)\
         \n  state         : {}  (the local CA; delete it to start afresh)\n\
         \nTry:\n\
         \n  curl -i {base}/                  # \"Hello World!\" from the origin: X-Arc2-Cache: Miss\
         \n  curl -i {base}/                  # again, from the cache: X-Arc2-Cache: Hit, Age\
         \n  curl -s -o /dev/null -w '%{{size_download}} bytes in %{{time_total}}s\\n' {base}/image.jpg\
         \n  curl -i {base}/slow              # slow dynamic page, no-store: never cached (Dynamic)\
         \n  curl -i {base}/cookie            # sets a cookie: never shared by the cache (Dynamic)\
         \n  curl -i -H 'Host: anything.example' {base}/   # every host is routed in the demo config\
         \n  curl -i --http2-prior-knowledge {base}/        # HTTP/2 over cleartext\
         \n  curl -i \"{base}/search?q=1%27%20OR%20%271%27%3D%271\"   # SQL injection: 403, X-Arc2-Cache: Block\
         {tls}\
         \n\nPress Ctrl-C to stop.\n",
        state_dir.display()
    )
}
