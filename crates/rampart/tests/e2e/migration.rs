//! The migration pages' examples (docs/migrating-from-*.md, docs/examples/): the pages show
//! the files verbatim, `rampart check --strict` accepts them, and the NGINX shop does, through
//! the real binary, what its page promises. The example runs as written except for what belongs
//! to the machine: its listen and origin ports become the test's, and its certificate directory
//! (`/etc/rampart/tls/`) a scratch directory holding a test CA's certificate for its names.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::Request;
use support::tls::{self, TestCa};
use support::*;

fn docs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs")
}

/// The example files and the pages that show them.
const EXAMPLES: &[(&str, &str)] = &[
    ("examples/nginx-shop.toml", "migrating-from-nginx.md"),
    ("examples/varnish-site.toml", "migrating-from-varnish.md"),
];

/// A working directory for an example, with `tls/` holding a certificate for its names.
fn workdir(name: &str, ca: &TestCa) -> PathBuf {
    let dir = scratch(name);
    std::fs::create_dir_all(dir.join("tls")).unwrap();
    let leaf = ca.leaf(&[
        "shop.example.com",
        "office.shop.example.com",
        "api.shop.example.com",
        "www.example.org",
    ]);
    for base in ["shop.example.com", "www.example.org"] {
        std::fs::write(dir.join(format!("tls/{base}.crt")), &leaf.chain_pem).unwrap();
        std::fs::write(dir.join(format!("tls/{base}.key")), &leaf.key_pem).unwrap();
    }
    dir
}

/// `example` with its certificate directory moved to `dir/tls/`.
fn with_certificates(example: &str, dir: &Path) -> String {
    let out = example.replace("\"/etc/rampart/tls/", &format!("\"{}/tls/", dir.display()));
    assert!(
        !out.contains("\"/etc/"),
        "only the certificates are machine paths"
    );
    out
}

#[test]
fn the_pages_show_the_example_files_verbatim() {
    for (file, page) in EXAMPLES {
        let example = std::fs::read_to_string(docs().join(file)).unwrap();
        let text = std::fs::read_to_string(docs().join(page)).unwrap();
        let marker = format!("<!-- include: {file} -->\n```toml\n");
        let start = text
            .find(&marker)
            .unwrap_or_else(|| panic!("{page} does not include {file} (`{marker}`)"))
            + marker.len();
        let len = text[start..].find("```\n").unwrap();
        assert_eq!(
            &text[start..start + len],
            example,
            "{page}'s block differs from {file}: paste the file into the page"
        );
    }
}

#[test]
fn every_example_passes_check_strict() {
    let ca = TestCa::new("example CA");
    for (file, _) in EXAMPLES {
        let dir = workdir("check", &ca);
        let example = std::fs::read_to_string(docs().join(file)).unwrap();
        std::fs::write(dir.join("rampart.toml"), with_certificates(&example, &dir)).unwrap();
        let out = Command::new(rampart_bin())
            .args(["check", "--strict", "--config", "rampart.toml"])
            .current_dir(&dir)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(out.status.success(), "{file}:\n{text}");
        assert!(
            !text.contains("warning:") && text.contains(" 0 warning(s)"),
            "{file}:\n{text}"
        );
    }
}

/// `text` with `listen = [...:80]`, `listen_https = [...:443]` and the origin ports replaced.
fn with_ports(text: &str, shop: u16, api: u16) -> String {
    let out = text
        .replace("\"0.0.0.0:80\"", "\"127.0.0.1:0\"")
        .replace("\"0.0.0.0:443\"", "\"127.0.0.1:0\"")
        .replace(
            "forward_port_http = 8080",
            &format!("forward_port_http = {shop}"),
        )
        .replace(
            "forward_port_http = 8081",
            &format!("forward_port_http = {api}"),
        );
    assert!(!out.contains("0.0.0.0") && !out.contains("= 808"));
    out
}

/// The shop example running in front of test origins.
struct Shop {
    proxy: Proxy,
    https: std::net::SocketAddr,
    client: Arc<rustls::ClientConfig>,
}

impl Shop {
    async fn start(name: &str, shop: &OriginHandle, api: &OriginHandle) -> Shop {
        let ca = TestCa::new("shop CA");
        let dir = workdir(name, &ca);
        let example = std::fs::read_to_string(docs().join("examples/nginx-shop.toml")).unwrap();
        std::fs::write(
            dir.join("rampart.toml"),
            with_ports(&with_certificates(&example, &dir), shop.port(), api.port()),
        )
        .unwrap();
        let state = dir.join("state");
        let proxy = Proxy::spawn_in(
            &dir,
            &["run", "--config", "rampart.toml"],
            &[("STATE_DIRECTORY", state.to_str().unwrap())],
        );
        let https = proxy.https.expect("the shop has an HTTPS listener");
        Shop {
            proxy,
            https,
            client: tls::browser(ca.roots()),
        }
    }

    /// GET `https://host/path` with extra request fields.
    async fn get(&self, host: &str, path: &str, fields: &[(&str, &str)]) -> Got {
        let s = tls::connect(self.https, host, &self.client).await.unwrap();
        let h2 = s.get_ref().1.alpn_protocol() == Some(b"h2");
        let mut req = if h2 {
            Request::get(format!("https://{host}{path}"))
        } else {
            Request::get(path).header("host", host)
        };
        for (k, v) in fields {
            req = req.header(*k, *v);
        }
        tls::request(s, req.body(empty()).unwrap()).await
    }
}

fn page(body: &str) -> Reply {
    // Longer than gzip_min_length (1000), so compression applies.
    Reply::typed(body.repeat(80).as_bytes(), "text/html; charset=utf-8")
}

async fn shop_origin() -> OriginHandle {
    Origin::new()
        .route("/product/1", page("<p>A fine teapot.</p>"))
        .route("/account/orders", page("<p>Your orders.</p>"))
        .route("/admin/", page("<p>Back office.</p>"))
        .route(
            "/static/app.css",
            Reply::typed(b"body{color:#333}", "text/css"),
        )
        .route(
            "/feed.xml",
            Reply::typed("<rss></rss>".repeat(200).as_bytes(), "application/xml"),
        )
        .route(
            "/checkout",
            Reply::text("origin down")
                .status(503)
                .header("cache-control", "max-age=600"),
        )
        .route("/static/down.css", Reply::text("origin down").status(503))
        .route("*", Reply::text("no such page").status(404))
        .start()
        .await
}

/// The shop example in front of its two origins.
async fn shop() -> (OriginHandle, OriginHandle, Shop) {
    let shop = shop_origin().await;
    let api = Origin::new()
        .route("*", Reply::typed(b"{\"ok\":true}", "application/json"))
        .start()
        .await;
    let s = Shop::start("nginx-shop", &shop, &api).await;
    (shop, api, s)
}

/// return 301 https://$host$request_uri; on plain HTTP, before anything reaches the origin.
#[tokio::test]
async fn shop_plain_http_gets_301_to_https() {
    let (shop, _api, s) = shop().await;
    let plain = fetch(req(&s.proxy, "shop.example.com", "/product/1?x=1")).await;
    assert_eq!(plain.status, 301, "{}", plain.text());
    assert_eq!(
        plain.header("location"),
        Some(format!("https://shop.example.com:{}/product/1?x=1", s.https.port()).as_str())
    );
    assert_eq!(shop.requests(), 0);
}

/// Product pages are cached (proxy_cache_valid 200 10m); /account and /cart never are.
#[tokio::test]
async fn shop_caches_product_pages_and_never_account_pages() {
    let (shop, _api, s) = shop().await;
    let first = s.get("shop.example.com", "/product/1", &[]).await;
    assert_eq!(first.status, 200);
    let again = s.get("shop.example.com", "/product/1", &[]).await;
    assert_eq!(again.header("x-arc2-cache"), Some("Hit"));
    assert_eq!(shop.requests(), 1, "the product page comes from the cache");
    for _ in 0..2 {
        let got = s.get("shop.example.com", "/account/orders", &[]).await;
        assert_eq!(got.status, 200, "/account is proxied, not refused");
    }
    assert_eq!(shop.requests(), 3, "/account goes to the origin every time");
}

/// /admin on the public name: 403; the office name refuses addresses outside the office.
#[tokio::test]
async fn shop_refuses_admin_outside_the_office() {
    let (shop, _api, s) = shop().await;
    let admin = s.get("shop.example.com", "/admin/", &[]).await;
    assert_eq!(admin.status, 403);
    let office = s.get("office.shop.example.com", "/admin/", &[]).await;
    assert_eq!(office.status, 403, "127.0.0.1 is not the office network");
    assert_eq!(
        shop.requests(),
        0,
        "refused requests never reach the origin"
    );
}

/// gzip for the types gzip_types names (compression_types): HTML yes, XML no.
#[tokio::test]
async fn shop_compresses_only_the_listed_types() {
    let (_shop, _api, s) = shop().await;
    let html = s
        .get(
            "shop.example.com",
            "/product/1",
            &[("accept-encoding", "gzip")],
        )
        .await;
    assert_eq!(html.header("content-encoding"), Some("gzip"));
    let xml = s
        .get(
            "shop.example.com",
            "/feed.xml",
            &[("accept-encoding", "gzip")],
        )
        .await;
    assert_eq!(xml.status, 200);
    assert_eq!(
        xml.header("content-encoding"),
        None,
        "application/xml is not in compression_types"
    );
}

/// Static assets: expires 7d.
#[tokio::test]
async fn shop_static_assets_expire_in_seven_days() {
    let (_shop, _api, s) = shop().await;
    let css = s.get("shop.example.com", "/static/app.css", &[]).await;
    assert_eq!(css.status, 200);
    assert_eq!(css.header("cache-control"), Some("max-age=604800"));
    let expires = httpdate::parse_http_date(css.header("expires").expect("Expires")).unwrap();
    let ahead = expires
        .duration_since(std::time::SystemTime::now())
        .unwrap_or_default();
    assert!(
        ahead > Duration::from_secs(604_700) && ahead <= Duration::from_secs(604_801),
        "Expires is about 7 days ahead: {ahead:?}"
    );
}

/// The origin's 503: the maintenance page, without the long Cache-Control of `expires`.
#[tokio::test]
async fn shop_shows_the_maintenance_page_on_an_origin_503() {
    let (_shop, _api, s) = shop().await;
    let down = s.get("shop.example.com", "/static/down.css", &[]).await;
    assert_eq!(down.status, 503);
    assert!(down.text().contains("maintenance"), "{}", down.text());
    assert_eq!(down.header("expires"), None);
    assert!(
        !down
            .header("cache-control")
            .is_some_and(|c| c.contains("604800")),
        "{:?}",
        down.header("cache-control")
    );
    let checkout = s.get("shop.example.com", "/checkout", &[]).await;
    assert_eq!(checkout.status, 503);
    assert!(checkout.text().contains("maintenance"));
}

/// The API: limit_req burst=20 nodelay lets 21 through at once, then limit_req_status 503.
#[tokio::test]
async fn shop_api_rate_limit_lets_the_burst_through_then_answers_503() {
    let (_shop, api, s) = shop().await;
    let mut statuses = Vec::new();
    for _ in 0..40 {
        statuses.push(s.get("api.shop.example.com", "/v1/cart", &[]).await.status);
    }
    assert!(
        statuses[..21].iter().all(|st| *st == 200),
        "the burst passes: {statuses:?}"
    );
    assert!(
        statuses[21..].contains(&http::StatusCode::SERVICE_UNAVAILABLE),
        "then rate_limit_status 503: {statuses:?}"
    );
    assert!(!statuses.contains(&http::StatusCode::TOO_MANY_REQUESTS));
    assert!(api.requests() < 40);
}

/// proxy_cache_valid 404 1m: a 404 is served from the cache for a minute, then fetched again,
/// while the product page (10 minutes) is still a hit.
#[tokio::test]
async fn the_shops_404_expires_after_its_own_minute() {
    let (shop, _api, s) = shop().await;

    let product = s.get("shop.example.com", "/product/1", &[]).await;
    assert_eq!(product.status, 200);
    let start = Instant::now();
    let missing = s.get("shop.example.com", "/no-such-teapot", &[]).await;
    assert_eq!(missing.status, 404);
    let again = s.get("shop.example.com", "/no-such-teapot", &[]).await;
    assert_eq!(
        again.header("x-arc2-cache"),
        Some("Hit"),
        "the 404 is cached"
    );
    assert_eq!(shop.requests(), 2);

    // Poll until the 404 is fetched again; it must not be before its minute is up.
    let deadline = start + Duration::from_secs(90);
    loop {
        let got = s.get("shop.example.com", "/no-such-teapot", &[]).await;
        assert_eq!(got.status, 404);
        if shop.requests() == 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the 404 was still cached after 90 s"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(
        start.elapsed() >= Duration::from_secs(59),
        "the 404 expired after {:?}, before its minute",
        start.elapsed()
    );
    let product = s.get("shop.example.com", "/product/1", &[]).await;
    assert_eq!(product.header("x-arc2-cache"), Some("Hit"));
    assert_eq!(shop.requests(), 3, "the product page lives 10 minutes");
}
