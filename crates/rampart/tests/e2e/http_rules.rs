//! What a rule does to messages besides proxying them, end to end through the real binary:
//! field rules for requests and responses (a path rule's too, hits included, the stored object
//! untouched), redirects, rewrites (the cache key and path rules see the rewritten path) and
//! error pages (rampart's own answers, the origin's 5xx, and stale-if-error first).
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use http::Request;
use support::*;

const SIGHUP: i32 = 1;

fn echo_origin() -> Origin {
    // Answers with what it received, as fields of its answer: `x-got-NAME: VALUE`.
    Origin::new().route_fn("*", |s| {
        let mut r = Reply::text(&format!("path={}", s.uri))
            .header("cache-control", "max-age=300")
            .header("server", "origin/1.0")
            .header("x-origin", "kept");
        for (name, value) in &s.headers {
            r = r.header(&format!("x-got-{name}"), value.to_str().unwrap_or("?"));
        }
        r
    })
}

#[tokio::test]
async fn field_rules_change_what_the_origin_and_the_client_get() {
    let origin = echo_origin().start().await;
    let rule = r#"
[proxy_rules.request_headers]
set = { "X-Real-IP" = "{client_ip}", "X-Url" = "{scheme}://{host}{path}?{query}", "X-Forwarded-Proto" = "https" }
add = { "X-Tag" = "rampart" }
remove = ["X-Debug", "X-Forwarded-For"]
[proxy_rules.response_headers]
set = { "X-Frame-Options" = "DENY", "X-Id" = "{request_id}" }
add = { "X-Origin" = "added" }
remove = ["Server"]
[[proxy_rules.path_rules]]
path = "/static"
match_type = "StartsWith"
rule_type = "Whitelist"
max_age_seconds = 600
[proxy_rules.path_rules.response_headers]
set = { "X-Frame-Options" = "SAMEORIGIN", "Cache-Control" = "public, max-age=31536000" }
"#;
    let proxy = Proxy::start(&config_for("f.test", &origin, "", rule));
    let got = fetch(
        req(&proxy, "f.test", "/page?a=1")
            .header("x-debug", "secret")
            .header("x-request-id", "req-12345")
            .header("x-tag", "client"),
    )
    .await;
    assert_eq!(got.status, 200);
    // To the origin: set, added after the client's, removed (rampart's own X-Forwarded-For
    // too), and rampart's X-Forwarded-Proto replaced.
    let seen = origin.last();
    let h = |n: &str| seen.headers.get(n).map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(h("x-real-ip").as_deref(), Some("127.0.0.1"));
    assert_eq!(h("x-url").as_deref(), Some("http://f.test/page?a=1"));
    assert_eq!(h("x-forwarded-proto").as_deref(), Some("https"));
    assert_eq!(h("x-debug"), None);
    assert_eq!(h("x-forwarded-for"), None);
    let tags: Vec<_> = seen.headers.get_all("x-tag").iter().collect();
    assert_eq!(tags, ["client", "rampart"]);
    // To the client: the miss.
    assert_eq!(got.header("x-arc2-cache"), Some("Miss"));
    assert_eq!(got.header("x-frame-options"), Some("DENY"));
    assert_eq!(got.header("x-id"), Some("req-12345"));
    assert_eq!(got.header("server"), None);
    let origins: Vec<_> = got.headers.get_all("x-origin").iter().collect();
    assert_eq!(origins, ["kept", "added"]);
    // The hit gets the same, from a stored object that kept the origin's fields.
    let hit = fetch(req(&proxy, "f.test", "/page?a=1").header("x-request-id", "req-67890")).await;
    assert_eq!(hit.header("x-arc2-cache"), Some("Hit"));
    assert_eq!(hit.header("x-frame-options"), Some("DENY"));
    assert_eq!(hit.header("x-id"), Some("req-67890"));
    assert_eq!(hit.header("server"), None);
    let origins: Vec<_> = hit.headers.get_all("x-origin").iter().collect();
    assert_eq!(origins, ["kept", "added"]);
    assert_eq!(origin.requests(), 1);
    // A path rule's rules come after the rule's.
    let s = get(&proxy, "f.test", "/static/app.js").await;
    assert_eq!(s.header("x-frame-options"), Some("SAMEORIGIN"));
    assert_eq!(s.header("cache-control"), Some("public, max-age=31536000"));
    // A synthetic answer gets them too (NGINX's `add_header ... always`): 405 from the API
    // does not, as it is not the rule's; a PURGE refusal is; a 404 for an unknown host has
    // no rule.
    let refused = fetch(
        Request::builder()
            .method("PURGE")
            .uri(proxy.url("/page"))
            .header("host", "f.test"),
    )
    .await;
    assert_eq!(refused.status, 403);
    // rampart's own answers are spared (`always = true` reaches them).
    assert_eq!(refused.header("x-frame-options"), None);
}

/// NGINX's `expires`: a rule's or path rule's lifetime for clients, as `Expires` and
/// `Cache-Control: max-age`, on answers clients may keep (never on errors, never on rampart's
/// own answers); a path rule's `"off"` turns the rule's off; the cache keeps the origin's.
#[tokio::test]
async fn expires_gives_clients_a_lifetime_on_what_they_may_keep() {
    let origin = Origin::new()
        .route_fn("*", |s| match s.uri.path() {
            "/static/missing" => Reply::text("no such file").status(404),
            "/static/down" => Reply::text("maintenance")
                .status(503)
                .header("cache-control", "no-store"),
            _ => Reply::text("asset").header("cache-control", "max-age=2"),
        })
        .start()
        .await;
    let rule = r#"
expires = 3600
[[proxy_rules.path_rules]]
path = "/static"
match_type = "StartsWith"
rule_type = "Whitelist"
max_age_seconds = 600
expires = "7d"
[[proxy_rules.path_rules]]
path = "/live"
match_type = "StartsWith"
rule_type = "Whitelist"
max_age_seconds = 600
expires = "off"
"#;
    let proxy = Proxy::start(&config_for("x.test", &origin, "", rule));
    let expiry = |got: &Got| {
        let at = httpdate::parse_http_date(got.header("expires").expect("Expires")).unwrap();
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or_default()
            .as_secs()
    };
    let asset = get(&proxy, "x.test", "/static/app.css").await;
    assert_eq!(asset.status, 200);
    assert_eq!(asset.header("cache-control"), Some("max-age=604800"));
    assert!((604_790..=604_800).contains(&expiry(&asset)));
    // A hit gets it too: the stored object kept the origin's two seconds.
    let hit = get(&proxy, "x.test", "/static/app.css").await;
    assert_eq!(hit.header("x-arc2-cache"), Some("Hit"));
    assert_eq!(hit.header("cache-control"), Some("max-age=604800"));
    let page = get(&proxy, "x.test", "/page").await;
    assert_eq!(page.header("cache-control"), Some("max-age=3600"));
    assert!((3_590..=3_600).contains(&expiry(&page)));
    let live = get(&proxy, "x.test", "/live/feed").await;
    assert_eq!(live.header("cache-control"), Some("max-age=2"));
    assert_eq!(live.header("expires"), None);
    // Errors, the origin's and rampart's own, keep their own fields.
    let missing = get(&proxy, "x.test", "/static/missing").await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.header("expires"), None);
    let down = get(&proxy, "x.test", "/static/down").await;
    assert_eq!(down.status, 503);
    assert_eq!(down.header("cache-control"), Some("no-store"));
    assert_eq!(down.header("expires"), None);
    let refused = fetch(req(&proxy, "x.test", "/static/app.css").method("PURGE")).await;
    assert_eq!(refused.status, 403, "{}", refused.text());
    assert_eq!(refused.header("expires"), None);
    // After the origin's two seconds the stored copy is stale; the origin is asked again.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let again = get(&proxy, "x.test", "/static/app.css").await;
    assert_ne!(again.header("x-arc2-cache"), Some("Hit"));
}

/// Response field rules spare errors (NGINX's `add_header`): a path rule's week-long
/// `Cache-Control` went out on a 429, on the origin's 503 maintenance page and on rampart's own
/// redirects, so browsers could keep a maintenance page for a week. `remove` still applies to
/// every answer; `always = true` (NGINX's `add_header ... always`) reaches every answer.
#[tokio::test]
async fn response_field_rules_spare_errors_unless_always() {
    let origin = Origin::new()
        .route_fn("*", |s| match s.uri.path() {
            "/shop/down" | "/always/down" => Reply::text("maintenance")
                .status(503)
                .header("cache-control", "no-store")
                .header("x-powered-by", "php"),
            "/shop/missing" => Reply::text("no such page").status(404),
            _ => Reply::text("page")
                .header("cache-control", "no-store")
                .header("x-powered-by", "php"),
        })
        .start()
        .await;
    let rule = r#"
rate_limit_per_second = 1
rate_limit_burst = 8
[[proxy_rules.redirects]]
from = "^/shop/old$"
to = "/shop/new"
[proxy_rules.response_headers]
remove = ["X-Powered-By"]
[[proxy_rules.path_rules]]
path = "/shop"
match_type = "StartsWith"
rule_type = "Whitelist"
max_age_seconds = 0
[proxy_rules.path_rules.response_headers]
set = { "Cache-Control" = "max-age=604800", "X-Frame-Options" = "DENY" }
[[proxy_rules.path_rules]]
path = "/always"
match_type = "StartsWith"
rule_type = "Whitelist"
max_age_seconds = 0
[proxy_rules.path_rules.response_headers]
always = true
set = { "Cache-Control" = "max-age=60", "X-Frame-Options" = "DENY" }
"#;
    let proxy = Proxy::start(&config_for(
        "s.test",
        &origin,
        "add_rate_limiting = false\nrate_limit_exempt = []",
        rule,
    ));
    let page = get(&proxy, "s.test", "/shop/page").await;
    assert_eq!(page.status, 200);
    assert_eq!(page.header("cache-control"), Some("max-age=604800"));
    assert_eq!(page.header("x-frame-options"), Some("DENY"));
    assert_eq!(page.header("x-powered-by"), None);
    let down = get(&proxy, "s.test", "/shop/down").await;
    assert_eq!(down.status, 503);
    assert_eq!(down.header("cache-control"), Some("no-store"));
    assert_eq!(down.header("x-frame-options"), None);
    assert_eq!(
        down.header("x-powered-by"),
        None,
        "remove reaches errors too"
    );
    let missing = get(&proxy, "s.test", "/shop/missing").await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.header("cache-control"), None);
    assert_eq!(missing.header("x-frame-options"), None);
    let moved = get(&proxy, "s.test", "/shop/old").await;
    assert_eq!(moved.status, 301, "{:?} {}", moved.headers, moved.text());
    assert_ne!(moved.header("cache-control"), Some("max-age=604800"));
    assert_eq!(moved.header("x-frame-options"), None);
    // `always`: the origin's 503 gets the table's fields too.
    let always = get(&proxy, "s.test", "/always/down").await;
    assert_eq!(always.status, 503);
    assert_eq!(always.header("cache-control"), Some("max-age=60"));
    assert_eq!(always.header("x-frame-options"), Some("DENY"));
    // Once the rule's budget (8) is spent: rampart's own 429 keeps its fields.
    let mut refused = None;
    for _ in 0..60 {
        let got = get(&proxy, "s.test", "/shop/page").await;
        if got.status == 429 {
            refused = Some(got);
            break;
        }
    }
    let refused = refused.expect("a 429 within sixty requests");
    assert_ne!(refused.header("cache-control"), Some("max-age=604800"));
    assert_eq!(refused.header("x-frame-options"), None);
}

#[tokio::test]
async fn response_rules_never_reach_the_stored_object() {
    let origin = echo_origin().start().await;
    let path = scratch("rules-reload.toml");
    let with_rules = config_for(
        "s.test",
        &origin,
        "",
        "[proxy_rules.response_headers]\nremove = [\"X-Origin\"]\nset = { \"Server\" = \"edge\" }\n",
    );
    std::fs::write(&path, &with_rules).unwrap();
    let proxy = Proxy::spawn(&["run", "--config", path.to_str().unwrap()]);
    let first = get(&proxy, "s.test", "/x").await;
    assert_eq!(first.header("x-origin"), None);
    assert_eq!(first.header("server"), Some("edge"));
    // Without the rules (a reload keeps the cache), the stored object still has the origin's
    // fields.
    std::fs::write(&path, config_for("s.test", &origin, "", "")).unwrap();
    proxy.signal(SIGHUP);
    assert!(proxy.wait_for_output("configuration reloaded", Duration::from_secs(10)));
    let hit = get(&proxy, "s.test", "/x").await;
    assert_eq!(hit.header("x-arc2-cache"), Some("Hit"));
    assert_eq!(hit.header("x-origin"), Some("kept"));
    assert_eq!(hit.header("server"), Some("origin/1.0"));
    assert_eq!(origin.requests(), 1);
}

#[tokio::test]
async fn redirects_answer_with_what_they_captured_and_rewrites_change_the_path() {
    let origin = echo_origin().start().await;
    let rule = r#"
strict_path_rules = true
[[proxy_rules.redirects]]
from = "^/blog/(\\d+)/(.*)$"
to = "https://blog.example/{host}/$2?id=$1"
[[proxy_rules.redirects]]
from = "^/moved$"
to = "/new"
status = 308
keep_query = false
[[proxy_rules.rewrites]]
from = "^/api/v1/(?P<rest>.*)$"
to = "/v1/${rest}"
[[proxy_rules.rewrites]]
from = "^/shortcut$"
to = "/private/area"
[[proxy_rules.rewrites]]
from = "^/up/(.*)$"
to = "/public/../private/$1"
[[proxy_rules.path_rules]]
path = "/private"
match_type = "StartsWith"
rule_type = "Blacklist"
max_age_seconds = 0
"#;
    let proxy = Proxy::start(&config_for("r.test", &origin, "", rule));
    let r = get(&proxy, "r.test", "/blog/42/hello-world?utm=x").await;
    assert_eq!(r.status, 301);
    assert_eq!(
        r.header("location"),
        Some("https://blog.example/r.test/hello-world?id=42&utm=x")
    );
    let r = get(&proxy, "r.test", "/moved?q=1").await;
    assert_eq!(
        (r.status.as_u16(), r.header("location")),
        (308, Some("/new"))
    );
    assert_eq!(origin.requests(), 0, "a redirect never reaches the origin");
    // A rewrite: the origin gets the new path, the query as sent.
    let a = get(&proxy, "r.test", "/api/v1/users?page=2").await;
    assert_eq!(a.text(), "path=/v1/users?page=2");
    assert_eq!(a.header("x-arc2-cache"), Some("Miss"));
    // The cache key is the rewritten path: the same resource asked by its new name is a hit.
    let b = get(&proxy, "r.test", "/v1/users?page=2").await;
    assert_eq!(b.header("x-arc2-cache"), Some("Hit"));
    assert_eq!(origin.requests(), 1);
    // Path rules see the rewritten path: /shortcut becomes /private/area, which is refused.
    assert_eq!(get(&proxy, "r.test", "/shortcut").await.status, 403);
    assert_eq!(get(&proxy, "r.test", "/private/area").await.status, 403);
    assert_eq!(origin.requests(), 1);
    // A rewrite's result is normalised before the rules see it: a dot segment in it is
    // resolved, not passed by.
    let up = get(&proxy, "r.test", "/up/area").await;
    assert_eq!(up.status, 403, "{}", up.text());
    // The client's own dot segments were resolved before any rewrite.
    let dots = get(&proxy, "r.test", "/api/v1/../private/area").await;
    assert_eq!(dots.text(), "path=/api/private/area");
}

#[tokio::test]
async fn error_pages_for_ramparts_answers_and_the_origins_but_stale_if_error_first() {
    let dir = scratch("pages");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("502.html"), "<h1>Origin away</h1>").unwrap();
    std::fs::write(dir.join("oops.json"), "{\"error\":\"oops\"}").unwrap();
    let origin = Origin::new()
        .route("/boom", Reply::text("stack trace!").status(500))
        .route(
            "/cached",
            Reply::text("fresh copy").header("cache-control", "max-age=1, stale-if-error=600"),
        )
        .route("*", Reply::text("ok"))
        .start()
        .await;
    let rule = format!(
        r#"deny_ips = ["10.9.9.9"]
[proxy_rules.error_pages]
502 = {:?}
500 = {:?}
403 = {{ body = "<p>Not for you</p>" }}
429 = {{ body = "slow down, please", content_type = "text/plain; charset=utf-8" }}
origin_errors = true
"#,
        dir.join("502.html").display().to_string(),
        dir.join("oops.json").display().to_string(),
    );
    let proxy = Proxy::start(&config_for(
        "e.test",
        &origin,
        "trusted_proxies = [\"127.0.0.1\"]",
        &rule,
    ));
    // rampart's own 403 (deny_ips; the client comes through a trusted proxy here).
    let denied = fetch(req(&proxy, "e.test", "/").header("x-forwarded-for", "10.9.9.9")).await;
    assert_eq!(denied.status, 403);
    assert_eq!(denied.text(), "<p>Not for you</p>");
    assert_eq!(
        denied.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    // The origin's 500, with origin_errors.
    let boom = get(&proxy, "e.test", "/boom").await;
    assert_eq!(boom.status, 500);
    assert_eq!(boom.text(), "{\"error\":\"oops\"}");
    assert_eq!(boom.header("content-type"), Some("application/json"));
    assert_eq!(
        boom.header("content-length"),
        Some("16"),
        "the page's length, not the origin's"
    );
    // Stored, then the origin goes: a stale copy the origin allows wins over the page.
    assert_eq!(get(&proxy, "e.test", "/cached").await.text(), "fresh copy");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    drop(origin);
    let stale = get(&proxy, "e.test", "/cached").await;
    assert_eq!(
        (stale.status.as_u16(), stale.text()),
        (200, "fresh copy".to_owned())
    );
    // Without one, rampart's 502 gets its page from the file.
    let down = get(&proxy, "e.test", "/other").await;
    assert_eq!(down.status, 502);
    assert_eq!(down.text(), "<h1>Origin away</h1>");
    assert_eq!(
        down.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    // A HEAD gets the status and the page's fields, no body.
    let head = fetch(Request::head(proxy.url("/other")).header("host", "e.test")).await;
    assert_eq!(head.status, 502);
    assert!(head.body.is_empty());
}

const API_KEY: &str = "0123456789abcdef0123456789abcdef";

/// A rule operation of the management API, with the key.
async fn rule_api(proxy: &Proxy, method: &str, path: &str, body: &str) -> Got {
    let b = Request::builder()
        .method(method)
        .uri(proxy.url(path))
        .header("host", "e.test")
        .header("authorization", format!("Bearer {API_KEY}"));
    send(&client(), b.body(full(body.to_owned())).unwrap()).await
}

#[tokio::test]
async fn the_rule_api_cannot_publish_a_file_outside_error_pages_dir() {
    // The configuration's directory (the default `error_pages_dir`) with a page in it, and a
    // secret beside it, outside it.
    let dir = scratch("api-pages");
    std::fs::create_dir_all(dir.join("errors")).unwrap();
    std::fs::write(dir.join("errors/404.html"), "<h1>Not here</h1>").unwrap();
    let secret = scratch("secret.txt");
    std::fs::write(&secret, "the secret").unwrap();
    std::os::unix::fs::symlink(&secret, dir.join("errors/link.html")).unwrap();
    let origin = Origin::new().route("*", Reply::text("ok")).start().await;
    let path = dir.join("rampart.toml");
    std::fs::write(
        &path,
        config_for("e.test", &origin, &format!("api_key = \"{API_KEY}\""), ""),
    )
    .unwrap();
    let proxy = Proxy::spawn(&["run", "--config", path.to_str().unwrap()]);
    let rule = |page: &str| {
        format!(
            "domain = \"leak.test\"\nforward_ipv4 = \"127.0.0.1\"\nforward_port_http = {}\n\
             max_age_seconds = 0\ndeny_ips = [\"127.0.0.0/8\"]\n\
             [error_pages]\n403 = {{ file = {page:?}, content_type = \"text/plain\" }}\n",
            origin.port()
        )
    };
    let name = secret.file_name().unwrap().to_str().unwrap();
    for page in [
        secret.to_str().unwrap().to_owned(),
        "/etc/passwd".to_owned(),
        format!("../{name}"),
        format!("errors/../../{name}"),
        "errors/link.html".to_owned(),
        dir.join("errors/link.html").to_str().unwrap().to_owned(),
    ] {
        let got = rule_api(&proxy, "POST", "/_rampart/rules", &rule(&page)).await;
        assert_eq!(got.status, 422, "{page}: {}", got.text());
        let answer: serde_json::Value = serde_json::from_slice(&got.body).unwrap();
        let problems = answer["problems"].as_array().unwrap();
        assert_eq!(problems.len(), 1, "{page}: {answer}");
        assert_eq!(problems[0]["key"], "proxy_rules[1].error_pages.403");
        let message = problems[0]["message"].as_str().unwrap();
        assert!(message.contains("error_pages_dir"), "{page}: {message}");
        // Nothing changed: the host has no rule, and nobody gets the file.
        let leaked = get(&proxy, "leak.test", "/").await;
        assert_eq!(leaked.status, 404, "{page}");
        assert!(!leaked.text().contains("secret"), "{page}");
        assert!(!std::fs::read_to_string(&path)
            .unwrap()
            .contains("leak.test"));
    }
    // A page inside the directory is taken, relative to it.
    let got = rule_api(&proxy, "POST", "/_rampart/rules", &rule("errors/404.html")).await;
    assert_eq!(got.status, 201, "{}", got.text());
    let page = get(&proxy, "leak.test", "/").await;
    assert_eq!(
        (page.status.as_u16(), page.text()),
        (403, "<h1>Not here</h1>".to_owned())
    );
}

#[tokio::test]
async fn a_redirect_never_sends_a_path_a_browser_reads_as_another_host() {
    let origin = echo_origin().start().await;
    let rule = r#"
[[proxy_rules.redirects]]
from = "^/old(.*)$"
to = "$1"
[[proxy_rules.redirects]]
from = "^/p/(.*)$"
to = "/$1"
[[proxy_rules.redirects]]
from = "^(.*[^/])$"
to = "$1/"
"#;
    let proxy = Proxy::start(&config_for("r.test", &origin, "", rule));
    for (asked, safe) in [
        // Browsers read `\` as `/`: `/\evil.com/` is `//evil.com/`, another host.
        ("/\\evil.com", "/evil.com/"),
        ("/old\\\\evil.com", "/evil.com"),
        ("/old\\/evil.com", "/evil.com"),
        ("/old/\\evil.com", "/evil.com"),
        ("/p/\\evil.com", "/evil.com"),
        // Encoded, and mixed.
        ("/%5Cevil.com", "/evil.com/"),
        ("/%5cevil.com", "/evil.com/"),
        ("/old%2F%2Fevil.com", "/evil.com"),
        ("/old%2f%5C/evil.com", "/evil.com"),
        ("/p/%2F/evil.com", "/evil.com"),
        ("/old%09/%0D%0A/evil.com", "/evil.com"),
        // A scheme from what `from` captured is not a scheme of the answer.
        ("/oldhttps:/evil.com", "./https:/evil.com"),
        ("/oldjavascript:alert(1)", "./javascript:alert(1)"),
        // What is harmless stays as it is.
        ("/a\\b", "/a\\b/"),
        ("/old/new", "/new"),
        ("/oldnew", "new"),
    ] {
        let r = get(&proxy, "r.test", asked).await;
        assert_eq!(r.status, 301, "{asked}: {}", r.text());
        assert_eq!(r.header("location"), Some(safe), "{asked}");
    }
    assert_eq!(origin.requests(), 0);
}

#[tokio::test]
async fn host_in_a_redirect_and_a_field_rule_is_the_normalised_host() {
    // `{host}` was the Host as sent: `F.TEST.` made `https://F.TEST./abc`.
    let origin = echo_origin().start().await;
    let rule = r#"
[proxy_rules.request_headers]
set = { "X-Host" = "{host}" }
[proxy_rules.response_headers]
set = { "X-Host" = "{host}" }
[[proxy_rules.redirects]]
from = "^/go$"
to = "https://{host}/abc"
"#;
    let proxy = Proxy::start(&config_for("f.test", &origin, "", rule));
    for host in ["F.TEST.", "f.Test.:8080", "f.test"] {
        let r = get(&proxy, host, "/go").await;
        assert_eq!(r.status, 301, "{host}");
        assert_eq!(r.header("location"), Some("https://f.test/abc"), "{host}");
        // A redirect is rampart's own answer: the response rules spare it.
        assert_eq!(r.header("x-host"), None, "{host}");
        let page = get(&proxy, host, "/page").await;
        assert_eq!(page.header("x-got-x-host"), Some("f.test"), "{host}");
        assert_eq!(page.header("x-host"), Some("f.test"), "{host}");
    }
}

#[tokio::test]
async fn an_error_page_drops_the_fields_that_described_the_origins_body() {
    let dir = scratch("origin-pages");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("500.html"), "<h1>Sorry</h1>").unwrap();
    let mut reply = Reply::text("stack trace!").status(500);
    for (name, value) in [
        ("content-md5", "Q2hlY2sgSW50ZWdyaXR5IQ=="),
        (
            "digest",
            "sha-256=X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=",
        ),
        (
            "repr-digest",
            "sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:",
        ),
        (
            "content-digest",
            "sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:",
        ),
        ("content-disposition", "attachment; filename=\"trace.txt\""),
        ("content-language", "de"),
        ("content-location", "/traces/1"),
        ("etag", "\"trace-1\""),
        ("last-modified", "Tue, 15 Nov 1994 12:45:26 GMT"),
        ("x-origin", "kept"),
    ] {
        reply = reply.header(name, value);
    }
    let origin = Origin::new().route("/boom", reply).start().await;
    let rule = format!(
        "[proxy_rules.error_pages]\n500 = {:?}\norigin_errors = true\n",
        dir.join("500.html").to_str().unwrap()
    );
    let proxy = Proxy::start(&config_for("e.test", &origin, "", &rule));
    let boom = get(&proxy, "e.test", "/boom").await;
    assert_eq!(boom.status, 500);
    assert_eq!(boom.text(), "<h1>Sorry</h1>");
    for gone in [
        "content-md5",
        "digest",
        "repr-digest",
        "content-digest",
        "content-disposition",
        "content-language",
        "content-location",
        "etag",
        "last-modified",
    ] {
        assert_eq!(boom.header(gone), None, "{gone}");
    }
    assert_eq!(boom.header("x-origin"), Some("kept"));
}
