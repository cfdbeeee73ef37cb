//! Hot reload end to end: SIGHUP, `POST /_rampart/reload`, `watch_config`, the rule
//! operations of the management API, and a reload every second under load.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use http::Request;
use support::*;

const SIGHUP: i32 = 1;
const SIGUSR1: i32 = 10;

/// Writes `toml` to a fresh file and starts `rampart run` on it.
pub(crate) fn start(toml: &str) -> (Proxy, PathBuf) {
    let path = scratch("reload.toml");
    std::fs::write(&path, toml).unwrap();
    let proxy = Proxy::spawn(&["run", "--config", path.to_str().unwrap()]);
    (proxy, path)
}

/// Sends SIGHUP and waits for the `n`-th line saying how a reload went.
pub(crate) fn sighup(proxy: &Proxy, n: usize) -> String {
    proxy.signal(SIGHUP);
    wait_reloads(proxy, n)
}

fn wait_reloads(proxy: &Proxy, n: usize) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let out = proxy.stderr.lock().unwrap().clone();
        let done = out.matches("configuration reloaded").count() + out.matches("reload (").count();
        if done >= n {
            return out;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no reload line:\n{out}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(crate) fn rewrite(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains(from), "{from:?} not in\n{text}");
    std::fs::write(path, text.replace(from, to)).unwrap();
}

fn admin(proxy: &Proxy, method: &str, path: &str) -> http::request::Builder {
    Request::builder()
        .method(method)
        .uri(proxy.url(path))
        .header("host", "x")
        .header("authorization", format!("Bearer {API_KEY}"))
}

async fn call(b: http::request::Builder, body: &str) -> Got {
    send(&client(), b.body(full(body.to_owned())).unwrap()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_changes_a_path_rule_for_the_next_request_on_the_same_connection() {
    let origin = Origin::new()
        .route(
            "*",
            Reply::text("page").header("cache-control", "max-age=60"),
        )
        .start()
        .await;
    let rules = "strict_path_rules = true\n\
                 [[proxy_rules.path_rules]]\npath = \"/admin\"\nmatch_type = \"StartsWith\"\nrule_type = \"Blacklist\"\n";
    // One worker: each has its own pool of origin connections, and the client's connection may
    // be accepted by either (with two, this failed about one run in six).
    let cfg = config_for("x", &origin, "workers = 1", rules);
    let (mut proxy, path) = start(&cfg);
    // One keep-alive connection for every request below.
    let c = client();
    let get = |p: &str| send(&c, req(&proxy, "x", p).body(empty()).unwrap());
    assert_eq!(get("/admin/panel").await.status, 403);
    assert_eq!(get("/page").await.header("x-arc2-cache"), Some("Miss"));
    assert_eq!(get("/page").await.header("x-arc2-cache"), Some("Hit"));

    rewrite(&path, "path = \"/admin\"", "path = \"/private\"");
    let out = sighup(&proxy, 1);
    assert!(out.contains("configuration reloaded"), "{out}");
    assert_eq!(get("/admin/panel").await.status, 200, "the next request");
    assert_eq!(get("/private/x").await.status, 403);
    // The cache survived the reload.
    assert_eq!(get("/page").await.header("x-arc2-cache"), Some("Hit"));
    assert_eq!(origin.connections(), 1, "one connection to the origin");
    assert_eq!(
        origin.requests(),
        2,
        "the hit after the reload came from the cache"
    );
    assert_eq!(proxy.wait_exit(Duration::ZERO), None, "still running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_file_is_reported_and_the_configuration_in_service_stays() {
    let origin = Origin::new().route("*", Reply::text("old")).start().await;
    let key = format!("api_key = \"{API_KEY}\"");
    let (proxy, path) = start(&config_for("x", &origin, &key, ""));
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        format!("proxy_timeout = \"soon\"\nmax_backlog = \"lots\"\n{text}"),
    )
    .unwrap();
    let out = sighup(&proxy, 1);
    let name = path.display().to_string();
    assert!(out.contains("reload (SIGHUP) refused: 2 error(s)"), "{out}");
    // Every problem, with line and column.
    assert!(out.contains(&format!("{name}:")), "{out}");
    assert!(
        out.contains("`proxy_timeout`") && out.contains("`max_backlog`"),
        "{out}"
    );
    assert_eq!(get(&proxy, "x", "/").await.text(), "old");

    // A file that does not parse at all.
    std::fs::write(&path, "[[proxy_rules]\n").unwrap();
    let out = sighup(&proxy, 2);
    assert!(out.contains(&format!("{name}:1:")), "{out}");
    assert_eq!(get(&proxy, "x", "/").await.text(), "old");

    // The same through the API: 422 with the problems as JSON.
    std::fs::write(&path, format!("max_backlog = \"lots\"\n{text}")).unwrap();
    let got = call(admin(&proxy, "POST", "/_rampart/reload"), "").await;
    assert_eq!(got.status, 422, "{}", got.text());
    assert!(
        got.text().contains("\"key\":\"max_backlog\""),
        "{}",
        got.text()
    );
    assert!(got.text().contains("\"line\":"), "{}", got.text());
    assert_eq!(get(&proxy, "x", "/").await.text(), "old");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_reloads_with_the_key_only_and_switches_origins() {
    let old = Origin::new().route("*", Reply::text("old")).start().await;
    let new = Origin::new().route("*", Reply::text("new")).start().await;
    let (proxy, path) = start(&config_for(
        "x",
        &old,
        &format!("api_key = \"{API_KEY}\"\nadd_caching = false"),
        "",
    ));
    assert_eq!(get(&proxy, "x", "/").await.text(), "old");
    rewrite(
        &path,
        &format!("forward_port_http = {}", old.port()),
        &format!("forward_port_http = {}", new.port()),
    );
    let got = fetch(req(&proxy, "x", "/_rampart/reload").method("POST")).await;
    assert_eq!(got.status, 401, "no key");
    assert_eq!(get(&proxy, "x", "/").await.text(), "old");
    let got = call(admin(&proxy, "POST", "/_rampart/reload"), "").await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert!(got.text().contains("\"reloaded\":true"), "{}", got.text());
    assert_eq!(get(&proxy, "x", "/").await.text(), "new");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_requests_finish_on_the_old_configuration() {
    let slow = Origin::new()
        .route(
            "*",
            Reply::text("slow old").delay(Duration::from_millis(1500)),
        )
        .start()
        .await;
    let new = Origin::new().route("*", Reply::text("new")).start().await;
    let (proxy, path) = start(&config_for("x", &slow, "add_caching = false", ""));
    let url = proxy.url("/");
    let in_flight = tokio::spawn(async move {
        send(
            &client(),
            Request::get(url).header("host", "x").body(empty()).unwrap(),
        )
        .await
    });
    // The request has reached the slow origin before the reload.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while slow.requests() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the request never arrived"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    rewrite(
        &path,
        &format!("forward_port_http = {}", slow.port()),
        &format!("forward_port_http = {}", new.port()),
    );
    sighup(&proxy, 1);
    assert_eq!(get(&proxy, "x", "/").await.text(), "new");
    let got = in_flight.await.unwrap();
    assert_eq!(got.status, 200);
    assert_eq!(got.text(), "slow old");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_address_opens_before_the_old_one_closes() {
    let origin = Origin::new().route("*", Reply::text("hi")).start().await;
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let (a, b) = (free(), free());
    let cfg = config_for("x", &origin, "", "").replace(
        "listening_port_http = 0",
        &format!("listening_port_http = {a}"),
    );
    let (proxy, path) = start(&cfg);
    rewrite(
        &path,
        &format!("listening_port_http = {a}"),
        &format!("listening_port_http = {b}"),
    );
    let out = sighup(&proxy, 1);
    assert!(
        out.contains(&format!("now also listening on 127.0.0.1:{b}"))
            && out.contains(&format!("no longer listening on 127.0.0.1:{a}")),
        "{out}"
    );
    let got = fetch(Request::get(format!("http://127.0.0.1:{b}/")).header("host", "x")).await;
    assert_eq!(got.text(), "hi");
    // The old address is closed: nothing listens there any more.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(std::net::TcpStream::connect(("127.0.0.1", a)).is_err());
    // And the port can be taken back.
    rewrite(
        &path,
        &format!("listening_port_http = {b}"),
        &format!("listening_port_http = {a}"),
    );
    sighup(&proxy, 2);
    let got = fetch(Request::get(format!("http://127.0.0.1:{a}/")).header("host", "x")).await;
    assert_eq!(got.text(), "hi");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_config_reloads_when_the_file_changes() {
    let origin = Origin::new().route("*", Reply::text("hi")).start().await;
    let (proxy, path) = start(&config_for("x", &origin, "watch_config = true", ""));
    assert_eq!(get(&proxy, "y", "/").await.status, 404, "no rule for y yet");
    rewrite(&path, "domain = \"x\"", "domain = \"y\"");
    // The watcher may see the file half written first (refused: it has no rules yet); the
    // whole file is then put in service.
    assert!(
        proxy.wait_for_output("(the file changed): 1 rule(s)", Duration::from_secs(10)),
        "{}",
        proxy.output()
    );
    assert_eq!(get(&proxy, "y", "/").await.text(), "hi");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigusr1_does_not_stop_the_process() {
    let origin = Origin::new().route("*", Reply::text("hi")).start().await;
    let (mut proxy, _) = start(&config_for("x", &origin, "", ""));
    proxy.signal(SIGUSR1);
    proxy.signal(SIGHUP);
    wait_reloads(&proxy, 1);
    assert_eq!(proxy.wait_exit(Duration::from_millis(300)), None);
    assert_eq!(get(&proxy, "x", "/").await.text(), "hi");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_are_added_replaced_and_removed_through_the_api_and_kept_in_the_file() {
    let a = Origin::new()
        .route("*", Reply::text("from a"))
        .start()
        .await;
    let b = Origin::new()
        .route("*", Reply::text("from b"))
        .start()
        .await;
    let global = format!("api_key = \"{API_KEY}\"\nadd_caching = false");
    let (proxy, path) = start(&format!(
        "# operator's comment, kept\n{}",
        config_for("x", &a, &global, "")
    ));
    let rule = |domain: &str, port: u16| {
        format!(
            "domain = \"{domain}\"\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = {port}\n\
             rule_type = \"Whitelist\"\nenable_logging = false\nignore_query_string = false\n\
             enable_sql_injection_protection = false\nenable_compression = false\n\
             enable_minification = false\nenable_webp_transformation = false\nmax_age_seconds = 0\n"
        )
    };

    // Add (TOML).
    let got = call(
        admin(&proxy, "POST", "/_rampart/rules"),
        &rule("new.example", b.port()),
    )
    .await;
    assert_eq!(got.status, 201, "{}", got.text());
    assert_eq!(get(&proxy, "new.example", "/").await.text(), "from b");
    let file = std::fs::read_to_string(&path).unwrap();
    assert!(file.starts_with("# operator's comment, kept\n"), "{file}");
    assert!(file.contains("domain = \"new.example\""), "{file}");
    // The same domain again: 409.
    let got = call(
        admin(&proxy, "POST", "/_rampart/rules"),
        &rule("new.example", b.port()),
    )
    .await;
    assert_eq!(got.status, 409, "{}", got.text());

    // List.
    let got = call(admin(&proxy, "GET", "/_rampart/rules"), "").await;
    assert_eq!(got.status, 200);
    let listed: serde_json::Value = serde_json::from_slice(&got.body).unwrap();
    assert_eq!(listed["rules"][1]["domain"], "new.example");

    // Replace (JSON): the rule now goes to origin a.
    let json = format!(
        r#"{{"domain":"new.example","forward_ipv4":"127.0.0.1","forward_port_http":{},"rule_type":"Whitelist","enable_logging":false,"ignore_query_string":false,"enable_sql_injection_protection":false,"enable_compression":false,"enable_minification":false,"enable_webp_transformation":false,"max_age_seconds":0}}"#,
        a.port()
    );
    let got = call(
        admin(&proxy, "PUT", "/_rampart/rules/new.example")
            .header("content-type", "application/json"),
        &json,
    )
    .await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(get(&proxy, "new.example", "/").await.text(), "from a");

    // A rule that does not validate: 422 with the problem, nothing changed.
    let before = std::fs::read_to_string(&path).unwrap();
    let got = call(
        admin(&proxy, "PUT", "/_rampart/rules/new.example"),
        &rule("new.example", b.port())
            .replace("rule_type = \"Whitelist\"", "rule_type = \"Greylist\""),
    )
    .await;
    assert_eq!(got.status, 422, "{}", got.text());
    assert!(got.text().contains("rule_type"), "{}", got.text());
    assert_eq!(std::fs::read_to_string(&path).unwrap(), before);
    assert_eq!(get(&proxy, "new.example", "/").await.text(), "from a");
    let got = call(
        admin(&proxy, "PUT", "/_rampart/rules/new.example"),
        "domain = ",
    )
    .await;
    assert_eq!(got.status, 400, "{}", got.text());

    // Remove.
    let got = call(admin(&proxy, "DELETE", "/_rampart/rules/new.example"), "").await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(get(&proxy, "new.example", "/").await.status, 404);
    assert!(!std::fs::read_to_string(&path)
        .unwrap()
        .contains("new.example"));
    let got = call(admin(&proxy, "DELETE", "/_rampart/rules/new.example"), "").await;
    assert_eq!(got.status, 404, "{}", got.text());

    // A change that cannot be written: refused, and nothing changed. (A directory where the
    // new file would go stops even root, which may write anywhere else.)
    let blocker = path.with_file_name(format!(
        ".{}.rampart-new",
        path.file_name().unwrap().to_string_lossy()
    ));
    std::fs::create_dir(&blocker).unwrap();
    let before = std::fs::read_to_string(&path).unwrap();
    let got = call(
        admin(&proxy, "POST", "/_rampart/rules"),
        &rule("other.example", b.port()),
    )
    .await;
    assert_eq!(got.status, 409, "{}", got.text());
    assert!(got.text().contains("cannot be kept"), "{}", got.text());
    assert_eq!(
        get(&proxy, "other.example", "/").await.status,
        404,
        "not applied"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), before);
    std::fs::remove_dir(&blocker).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configuration_without_a_file_refuses_reloads_and_rule_changes() {
    let origin = Origin::new().route("*", Reply::text("hi")).start().await;
    let proxy = Proxy::spawn(&[
        "proxy",
        "--from",
        "127.0.0.1:0",
        "--to",
        &format!("127.0.0.1:{}", origin.port()),
    ]);
    proxy.signal(SIGHUP);
    assert!(
        proxy.wait_for_output("nothing to reload", Duration::from_secs(10)),
        "{}",
        proxy.output()
    );
    assert_eq!(get(&proxy, "x", "/").await.text(), "hi");
}

/// The issue's goal: `wrk -c64` for 30 s with a reload every second: no failed, reset or
/// refused request. Each reload switches a path rule, so every one is a real change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_every_second_under_load_fails_no_request() {
    if std::process::Command::new("wrk")
        .arg("--version")
        .output()
        .is_err()
    {
        panic!("wrk is needed (.ci/run installs it)");
    }
    let origin = Origin::new()
        .route(
            "*",
            Reply::text("page").header("cache-control", "max-age=1"),
        )
        .start()
        .await;
    let rules = "[[proxy_rules.path_rules]]\npath = \"/never-0\"\nmatch_type = \"StartsWith\"\nrule_type = \"Blacklist\"\n";
    let (proxy, path) = start(&config_for("localhost", &origin, "", rules));
    let url = format!("http://localhost:{}/page", proxy.addr.port());
    let seconds = 30;
    let wrk = std::process::Command::new("wrk")
        .args(["-t2", "-c64", &format!("-d{seconds}s"), "--latency", &url])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    for i in 1..seconds {
        tokio::time::sleep(Duration::from_secs(1)).await;
        rewrite(
            &path,
            &format!("path = \"/never-{}\"", i - 1),
            &format!("path = \"/never-{i}\""),
        );
        sighup(&proxy, i);
    }
    let out = wrk.wait_with_output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    let err = proxy.output();
    assert_eq!(
        err.matches("configuration reloaded").count(),
        seconds - 1,
        "{err}"
    );
    assert!(report.contains("requests in"), "{report}");
    assert!(!report.contains("Socket errors"), "{report}");
    assert!(!report.contains("Non-2xx"), "{report}");
    let requests: u64 = report
        .lines()
        .find(|l| l.contains("requests in"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(requests > 10_000, "{report}");
    eprintln!("{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_certificates_and_adds_a_domain_on_the_same_https_socket() {
    use support::tls::{self, TestCa};
    let origin = Origin::new().route("*", Reply::text("hello")).start().await;
    let ca = TestCa::new("test CA");
    let first = ca.leaf(&["a.test"]);
    let (c, k) = first.write("reload-a");
    let cert_rule = |domain: &str, c: &Path, k: &Path| {
        format!(
            "\n[[proxy_rules]]\ndomain = \"{domain}\"\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = {}\n\
             tls_cert_file = {:?}\ntls_key_file = {:?}\n",
            origin.port(),
            c.display().to_string(),
            k.display().to_string()
        )
    };
    let global =
        "listening_address = \"127.0.0.1\"\nlistening_port_http = 0\nlistening_port_https = 0\n\
                  workers = 1\nlogging_level = \"warn\"\ntls_reload_interval_seconds = 3600\n";
    let (proxy, path) = start(&format!("{global}{}", cert_rule("a.test", &c, &k)));
    let https = proxy.https.unwrap();
    let client = tls::browser(ca.roots());
    let served = async |name: &str| {
        let s = tls::connect(https, name, &client).await.unwrap();
        tls::peer_leaf(&s)
    };
    assert_eq!(served("a.test").await, first.der);

    // Renewed files and SIGHUP: served at once (the file check runs hourly here).
    let second = ca.leaf(&["a.test"]);
    std::fs::write(&c, &second.chain_pem).unwrap();
    std::fs::write(&k, &second.key_pem).unwrap();
    sighup(&proxy, 1);
    let mut renewed = false;
    for _ in 0..20 {
        if served("a.test").await == second.der {
            renewed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(renewed, "{}", proxy.output());

    // A new domain with its own certificate: the same HTTPS socket serves it.
    let b = ca.leaf(&["b.test"]);
    let (bc, bk) = b.write("reload-b");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, format!("{text}{}", cert_rule("b.test", &bc, &bk))).unwrap();
    let out = sighup(&proxy, 2);
    assert!(!out.contains("no longer listening"), "{out}");
    assert_eq!(served("b.test").await, b.der);
    assert_eq!(served("a.test").await, second.der);
    let got = tls::get(https, "b.test", "/", &client).await;
    assert_eq!(got.text(), "hello");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_gives_no_client_a_fresh_rate_limit_burst() {
    let origin = Origin::new().route("*", Reply::text("hi")).start().await;
    let global = "add_rate_limiting = true\nrate_limit_per_second = 1\nrate_limit_burst = 2\nrate_limit_exempt = []\nadd_caching = false";
    let (proxy, path) = start(&config_for("x", &origin, global, ""));
    let statuses = async |n: usize| {
        let mut out = Vec::new();
        for _ in 0..n {
            out.push(get(&proxy, "x", "/").await.status.as_u16());
        }
        out
    };
    assert_eq!(statuses(3).await, [200, 200, 429]);
    sighup(&proxy, 1);
    assert_eq!(statuses(1).await, [429], "the same limiter after a reload");
    // A new rate is a new limiter.
    rewrite(&path, "rate_limit_burst = 2", "rate_limit_burst = 50");
    sighup(&proxy, 2);
    assert_eq!(statuses(3).await, [200, 200, 200]);
}

/// A file truncated before its first `[[proxy_rules]]` (an editor or a deploy that wrote half of
/// it) is refused rather than put in service to answer every request 404; `proxy_rules = []`
/// empties the rules on purpose.
#[tokio::test]
async fn a_reload_that_would_drop_every_rule_is_refused_unless_said_on_purpose() {
    let origin = Origin::new()
        .route("*", Reply::text("page").header("cache-control", "no-store"))
        .start()
        .await;
    let cfg = config_for("x", &origin, "", "");
    let (proxy, path) = start(&cfg);
    assert_eq!(get(&proxy, "x", "/").await.status, 200);
    let head = cfg.split("[[proxy_rules]]").next().unwrap().to_owned();
    std::fs::write(&path, &head).unwrap();
    let out = sighup(&proxy, 1);
    assert!(out.contains("has no [[proxy_rules]] (truncated?)"), "{out}");
    assert_eq!(get(&proxy, "x", "/").await.status, 200);
    // Said on purpose: the rules go.
    std::fs::write(&path, format!("{head}proxy_rules = []\n")).unwrap();
    let out = sighup(&proxy, 2);
    assert!(out.contains("0 rule(s)"), "{out}");
    assert_eq!(get(&proxy, "x", "/").await.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_names_only_the_restart_keys_that_changed() {
    // Changing `cache_disk` alone was reported as "cache_disk, cache_disk_size,
    // cache_disk_min_uses".
    let origin = Origin::new().route("*", Reply::text("page")).start().await;
    let (a, b) = (scratch("disk-a"), scratch("disk-b"));
    let global = format!(
        "api_key = \"{API_KEY}\"\ncache_disk = \"{}\"\ncache_disk_size = \"64MiB\"",
        a.display()
    );
    let (proxy, path) = start(&config_for("x", &origin, &global, ""));
    assert_eq!(get(&proxy, "x", "/").await.text(), "page");
    rewrite(&path, &a.display().to_string(), &b.display().to_string());
    let got = call(admin(&proxy, "POST", "/_rampart/reload"), "").await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert!(
        got.text().contains("\"restart_needed\":[\"cache_disk\"]"),
        "{}",
        got.text()
    );
    let _ = std::fs::remove_dir_all(&a);
    let _ = std::fs::remove_dir_all(&b);
}
