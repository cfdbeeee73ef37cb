//! The whole request-head path: arbitrary bytes from a client through the framing guard into
//! hyper's HTTP/1.1 server (as rampart runs it), answered by a trivial service. Must never panic
//! or hang; a refused stream must end with a response or a close.
#![no_main]

use std::convert::Infallible;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use libfuzzer_sys::fuzz_target;
use rampart_proxy::conn::GuardedIo;
use rampart_screen::h1::Guard;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fuzz_target!(|data: &[u8]| {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let (client, server) = tokio::io::duplex(1 << 16);
        let io = GuardedIo::new(
            server,
            Guard::new(8192, 32),
            "127.0.0.1:1".parse().expect("addr"),
        );
        let svc = service_fn(|req: hyper::Request<hyper::body::Incoming>| async move {
            // Read the body as the pipeline would.
            let _ = http_body_util_collect(req.into_body()).await;
            Ok::<_, Infallible>(hyper::Response::new(String::from("ok")))
        });
        let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
        builder.http1().max_buf_size(8192).max_headers(32);
        let conn = builder.serve_connection(TokioIo::new(io), svc);
        let drive = async {
            let (mut r, mut w) = tokio::io::split(client);
            let _ = w.write_all(data).await;
            let _ = w.shutdown().await;
            let mut out = Vec::new();
            let _ = r.read_to_end(&mut out).await;
        };
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            tokio::join!(conn, drive)
        })
        .await;
    });
});

async fn http_body_util_collect(mut body: hyper::body::Incoming) -> usize {
    use hyper::body::Body;
    let mut n = 0;
    while let Some(frame) = std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await {
        match frame {
            Ok(f) => n += f.data_ref().map_or(0, |d| d.len()),
            Err(_) => break,
        }
    }
    n
}
