//! The access log end to end: key=value on stdout, JSON to a file, the request id passed to the
//! origin, logrotate's SIGUSR1, and stderr for everything else.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use support::*;

const SIGUSR1: i32 = 10;

/// Waits until `path` has `n` lines; returns them.
pub(crate) fn lines(path: &std::path::Path, n: usize) -> Vec<String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        if lines.len() >= n {
            return lines;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} has {} line(s), not {n}:\n{text}",
            path.display(),
            lines.len()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_in_a_file_with_the_request_id_the_origin_saw() {
    let origin = Origin::new()
        .route(
            "*",
            Reply::text("logged").header("cache-control", "max-age=60"),
        )
        .start()
        .await;
    let file = scratch("access.json.log");
    let proxy = Proxy::start(&config_for(
        "log.example",
        &origin,
        &format!(
            "add_logging = true\naccess_log_format = \"json\"\naccess_log_path = {:?}",
            file.display().to_string()
        ),
        "",
    ));
    let got = fetch(
        req(&proxy, "log.example", "/a?q=1")
            .header("user-agent", "Mozilla/5.0 (X11; \"quoted\")")
            .header("referer", "https://ref.example/page"),
    )
    .await;
    assert_eq!(got.status, 200);
    // A client's own id passes through; a cached answer logs no origin.
    fetch(req(&proxy, "log.example", "/a?q=1").header("x-request-id", "client-id-7")).await;
    let lines = lines(&file, 2);
    // Each record is written when its response has been sent, by the worker that served it:
    // the second request can be served, on the other worker, before the first one's record
    // is written. The client's id tells them apart.
    let records: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (second, first): (Vec<_>, Vec<_>) = records
        .into_iter()
        .partition(|r| r["request_id"] == "client-id-7");
    assert_eq!((first.len(), second.len()), (1, 1), "{lines:?}");
    let (first, second) = (&first[0], &second[0]);
    assert_eq!(first["client"], "127.0.0.1");
    assert_eq!(first["host"], "log.example");
    assert_eq!(first["method"], "GET");
    assert_eq!(first["path"], "/a?q=1");
    assert_eq!(first["status"], 200);
    assert_eq!(first["bytes"], 6);
    assert_eq!(first["cache"], "Miss");
    assert_eq!(first["user_agent"], "Mozilla/5.0 (X11; \"quoted\")");
    assert_eq!(first["referer"], "https://ref.example/page");
    assert_eq!(first["upstream"], format!("127.0.0.1:{}", origin.port()));
    assert!(first["upstream_us"].as_u64().unwrap() > 0, "{first}");
    assert!(first["duration_us"].as_u64().unwrap() >= first["upstream_us"].as_u64().unwrap());
    assert!(first["time"].as_str().unwrap().ends_with('Z'), "{first}");
    // The id in the log is the one the origin received.
    let id = first["request_id"].as_str().unwrap();
    assert_eq!(id.len(), 32, "{first}");
    let seen = origin.last();
    assert_eq!(seen.headers.get("x-request-id").unwrap(), id);
    assert_eq!(second["cache"], "Hit");
    // A hit's body is written with its head in one write: counted all the same.
    assert_eq!(second["bytes"], 6);
    assert_eq!(second["upstream"], serde_json::Value::Null);
    assert_eq!(second["user_agent"], serde_json::Value::Null);
    // Nothing on stdout: the lines went to the file.
    assert_eq!(
        proxy.stdout.lock().unwrap().as_str(),
        "",
        "{}",
        proxy.output()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_lines_on_stdout_quote_what_has_spaces() {
    let origin = Origin::new()
        .route("*", Reply::text("logged"))
        .start()
        .await;
    let proxy = Proxy::start(&config_for(
        "log.example",
        &origin,
        "add_logging = true",
        "",
    ));
    fetch(req(&proxy, "log.example", "/kv?q=1").header("user-agent", "curl/8 (x)")).await;
    assert!(proxy.wait_for_output("path=/kv?q=1", Duration::from_secs(5)));
    let out = proxy.stdout.lock().unwrap().clone();
    // One line per request.
    assert_eq!(out.lines().count(), 1, "{out}");
    let line = out.lines().next().unwrap().to_owned();
    assert!(line.starts_with("time="), "{line}");
    for field in [
        " client=127.0.0.1 host=log.example method=GET path=/kv?q=1 status=200 bytes=6 duration_us=",
        " cache=Miss aborted=false scheme=http version=HTTP/1.1 ",
    ] {
        assert!(line.contains(field), "missing {field:?} in {line}");
    }
    assert!(
        line.contains(" user_agent=\"curl/8 (x)\" referer=-"),
        "{line}"
    );
    assert!(line.contains(" request_id="), "{line}");
    assert!(
        line.contains(&format!(
            " upstream=127.0.0.1:{} upstream_us=",
            origin.port()
        )),
        "{line}"
    );
    // stdout has access lines only; the startup line went to stderr.
    assert!(out.lines().all(|l| l.starts_with("time=")), "{out}");
    assert!(proxy.stderr.lock().unwrap().contains("listening on"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigusr1_reopens_the_file_logrotate_moved_away() {
    let origin = Origin::new().route("*", Reply::text("x")).start().await;
    let file = scratch("access.log");
    let proxy = Proxy::start(&config_for(
        "log.example",
        &origin,
        &format!(
            "add_logging = true\naccess_log_path = {:?}",
            file.display().to_string()
        ),
        "",
    ));
    get(&proxy, "log.example", "/before").await;
    lines(&file, 1);
    // logrotate: rename, then SIGUSR1.
    let rotated = file.with_extension("log.1");
    std::fs::rename(&file, &rotated).unwrap();
    get(&proxy, "log.example", "/between").await;
    // Its line went to the renamed file before the reopen.
    lines(&rotated, 2);
    proxy.signal(SIGUSR1);
    assert!(
        proxy.wait_for_output("access log reopened", Duration::from_secs(5)),
        "{}",
        proxy.output()
    );
    get(&proxy, "log.example", "/after").await;
    let new = lines(&file, 1);
    assert!(new[0].contains("path=/after"), "{new:?}");
    let old = std::fs::read_to_string(&rotated).unwrap();
    assert!(
        old.contains("path=/before") && old.contains("path=/between"),
        "{old}"
    );
    assert!(!old.contains("path=/after"), "{old}");
}

#[test]
fn an_access_log_that_cannot_be_opened_stops_startup() {
    let out = Proxy::try_start(
        "listening_address = \"127.0.0.1\"\nlistening_port_http = 0\n\
         access_log_path = \"/nonexistent-dir/access.log\"\n\
         [[proxy_rules]]\ndomain = \"x\"\nforward_ipv4 = \"127.0.0.1\"\n",
    );
    assert!(
        out.contains("cannot open the access log /nonexistent-dir/access.log"),
        "{out}"
    );
}
