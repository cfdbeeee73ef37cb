//! The whole HTTP/1.1 connection as rampart serves it: arbitrary bytes from a client into
//! `rampart_proxy::http1::server::serve` with a handler that reads the request body as the pipeline would.
//! Must never panic or hang; a refused stream ends with a response or a close.
#![no_main]

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt as _;
use libfuzzer_sys::fuzz_target;
use rampart_proxy::body::ProxyBody;
use rampart_proxy::http1::server as h1;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fuzz_target!(|data: &[u8]| {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let (client, server) = tokio::io::duplex(1 << 16);
        let (_stop_tx, mut stop) = tokio::sync::watch::channel(false);
        let limits = h1::Limits {
            max_head: 8192,
            max_headers: 32,
            header_read_timeout: Duration::from_millis(500),
            keepalive_timeout: Duration::from_millis(500),
            body_idle_timeout: Duration::from_millis(500),
            send_timeout: Duration::from_millis(500),
            close_notify: false,
            yield_after: None,
            park_after: None,
        };
        let serve = h1::serve(
            server,
            BytesMut::new(),
            limits,
            false,
            |req| async move {
                let n = req
                    .into_body()
                    .collect()
                    .await
                    .map_or(0, |b| b.to_bytes().len());
                rampart_head::Response::new(ProxyBody::full(Bytes::from(n.to_string())))
            },
            None,
            &mut stop,
        );
        let drive = async {
            let (mut r, mut w) = tokio::io::split(client);
            let _ = w.write_all(data).await;
            let _ = w.shutdown().await;
            let mut out = Vec::new();
            let _ = r.read_to_end(&mut out).await;
        };
        let _ = tokio::time::timeout(Duration::from_secs(2), async { tokio::join!(serve, drive) })
            .await;
    });
});
