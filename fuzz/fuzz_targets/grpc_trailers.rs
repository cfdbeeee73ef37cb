//! An origin's HTTP/2 answer to a gRPC call, as rampart's origin client
//! (`rampart_proxy::origin::h2::handshake`) reads it: frames, header blocks and trailers
//! (`grpc-status`, `grpc-message`, anything else) made of the fuzzer's bytes, then the head
//! through rampart's hop-by-hop rewrite and the body through the response body that streams
//! it to the client. The first bytes are the client's `TE` value, through `wants_trailers`.
//! Must never panic or hang; trailers come last, at most once.
#![no_main]

use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderValue, TE};
use http::Request;
use http_body_util::BodyExt;
use libfuzzer_sys::fuzz_target;
use rampart_head::Fields;
use rampart_proxy::body::origin::OriginBody;
use rampart_proxy::body::{ProxyBody, RequestBody};
use rampart_proxy::headers::{strip_hop_by_hop, wants_trailers};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let (te, origin_bytes) = rest.split_at((n as usize % 32).min(rest.len()));
    let mut h = Fields::new();
    if let Ok(v) = HeaderValue::from_bytes(te) {
        h.insert(TE, v);
        let _ = wants_trailers(&h);
    }
    let origin_bytes = origin_bytes.to_vec();
    // Paused time: once nothing can move, the clock jumps and the timeout ends the exchange.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let (client, mut origin) = tokio::io::duplex(64 * 1024);
        tokio::spawn(async move {
            // The origin answers once the request's HEADERS frame has arrived (frames for a
            // stream the client has not opened yet are a protocol error, not an answer).
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            while !has_headers_frame(&seen) {
                match origin.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => seen.extend_from_slice(&buf[..n]),
                }
            }
            let _ = origin.write_all(&origin_bytes).await;
            while let Ok(n) = origin.read(&mut buf).await {
                if n == 0 {
                    break;
                }
            }
        });
        let exchange = async {
            let io = hyper_util::rt::TokioIo::new(client);
            let Ok((mut send, conn)) = rampart_proxy::origin::h2::handshake(io).await else {
                return;
            };
            tokio::spawn(conn);
            let Ok(req) = Request::post("http://o.test/echo.Echo/Unary")
                .header(TE, "trailers")
                .header("content-type", "application/grpc")
                .body(RequestBody::Full(
                    Some(Bytes::from_static(b"\0\0\0\0\x05hello")),
                    None,
                ))
            else {
                return;
            };
            let Ok(res) = send.send_request(req).await else {
                return;
            };
            // hyper's answer becomes rampart's head at the edge, as `origin/h2.rs` does.
            let (parts, body) = res.into_parts();
            let mut headers = Fields::from(parts.headers);
            strip_hop_by_hop(&mut headers);
            let mut body = ProxyBody::stream(OriginBody::H2(body));
            let mut trailers = false;
            while let Some(frame) = body.frame().await {
                let Ok(frame) = frame else { break };
                assert!(!trailers, "a frame after the trailers");
                trailers = frame.is_trailers();
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(5), exchange).await;
    });
});

/// Whether the client's bytes (the 24-byte preface, then frames) hold a HEADERS frame.
fn has_headers_frame(bytes: &[u8]) -> bool {
    let mut rest = bytes.get(24..).unwrap_or_default();
    while rest.len() >= 9 {
        let len = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
        if rest[3] == 1 {
            return true;
        }
        rest = rest.get(9 + len..).unwrap_or_default();
    }
    false
}
