//! An HTTP/3 upload without a declared length, cut at the body limit while it streams: the
//! origin's side of the exchange fails too, and the client's fault must win over it (413, not
//! 502). Run beside `http3.rs`, it also exercises that file's early refusals (403, 413 before the
//! body is read): a refusal may drop the body while a read of the request stream is in flight,
//! where h3-quinn's `stop_sending` panics and would take the worker's task (and the response)
//! down, and h3 leaves a read in flight even after returning buffered data. rampart therefore
//! never calls `stop_sending` (`body/h3.rs`); the loop here repeats the race.
#![allow(clippy::unwrap_used)]

use crate::support;
use crate::support::h3 as h3c;

use bytes::Bytes;
use http::Request;
use support::tls::{files, TestCa};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_cut_at_the_limit_is_a_413() {
    let origin = Origin::new()
        .route_fn("/upload", |s| {
            Reply::text(&format!("got {} bytes", s.body_len))
        })
        .start()
        .await;
    let ca = TestCa::new("test CA");
    let (c, k) = ca.leaf(&["a.test"]).write("h3-cut");
    let proxy = Proxy::start(&format!(
        "listening_address = \"127.0.0.1\"\nlistening_port_http = 0\nlistening_port_https = 0\n\
         workers = 2\nlogging_level = \"info\"\nhttp3 = true\n\
         [[proxy_rules]]\ndomain = \"a.test\"\nmax_age_seconds = 60\nforward_ipv4 = \"127.0.0.1\"\n\
         forward_port_http = {}\nrule_type = \"Whitelist\"\nenable_logging = true\nignore_query_string = false\n\
         enable_sql_injection_protection = false\nenable_compression = false\nenable_minification = false\n\
         enable_webp_transformation = false\n{}\n",
        origin.port(),
        files(&c, &k)
    ));
    let udp = proxy.h3.expect("an HTTP/3 socket");
    for _ in 0..6 {
        let mut h3 = h3c::connect(udp, "a.test", ca.roots()).await.unwrap();
        let req = Request::post("https://a.test/upload").body(()).unwrap();
        let too_big = h3
            .send(req, Bytes::from(vec![b'u'; 3 << 20]))
            .await
            .unwrap();
        assert_eq!(too_big.status, 413, "{}", too_big.text());
    }
}
