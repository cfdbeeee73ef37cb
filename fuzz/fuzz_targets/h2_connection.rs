//! rampart's HTTP/2 server connection (`http2::server::Conn`) on arbitrary frames after a valid
//! preface, read in splits of every size and coalesced: the frame codec, the HPACK decoder,
//! the stream states and flow control never panic, and everything the server writes is whole
//! frames within the client's frame size, whose header blocks decode on their own (the encoder
//! uses no dynamic table). The first byte says how the input is split into reads; each stream's
//! request body is read to its end by the handler, so window updates run too.
#![no_main]

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use libfuzzer_sys::fuzz_target;
use rampart_proxy::body::ProxyBody;
use rampart_proxy::http2::frame::{kind, Head, HEAD_LEN};
use rampart_proxy::http2::hpack::Decoder;
use rampart_proxy::http2::server::{Conn, Limits, StreamFuture};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The client's bytes in reads of `step`, then the end; what the server writes is kept.
struct Wire {
    input: Vec<u8>,
    at: usize,
    step: usize,
    written: Vec<u8>,
}

impl AsyncRead for Wire {
    fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let n = self.step.min(self.input.len() - self.at).min(buf.remaining());
        let at = self.at;
        buf.put_slice(&self.input[at..at + n]);
        self.at += n;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Wire {
    fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        self.written.extend_from_slice(data);
        Poll::Ready(Ok(data.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&split, frames)) = data.split_first() else { return };
    let mut input = PREFACE.to_vec();
    input.extend_from_slice(frames);
    let wire = Wire { input, at: 0, step: usize::from(split % 64) + 1, written: Vec::new() };
    let limits = Limits {
        max_streams: 8,
        max_header_list: 4096,
        keepalive_timeout: Duration::from_secs(5),
        send_timeout: Duration::from_secs(5),
    };
    let handler = |req: rampart_head::Request<rampart_proxy::body::ClientBody>, _| {
        Box::pin(async move {
            let _ = req.into_body().collect().await;
            let mut res = rampart_head::Response::new(ProxyBody::full(Bytes::from_static(b"hello")));
            res.headers_mut().insert("x-fuzz", http::HeaderValue::from_static("1"));
            res
        }) as StreamFuture
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let written = rt.block_on(async move {
        let mut conn = Conn::new(wire, limits, handler);
        for _ in 0..10_000 {
            let polled = std::future::poll_fn(|cx| Poll::Ready(conn.poll_run(cx))).await;
            if polled.is_ready() {
                break;
            }
            tokio::task::yield_now().await;
        }
        conn.into_io().written
    });
    // Whole frames, each within the default SETTINGS_MAX_FRAME_SIZE; header blocks decode alone.
    let mut at = 0;
    while at < written.len() {
        let h = Head::parse(&written[at..]).expect("a whole frame header");
        assert!(h.len <= 16_384, "a frame over the client's frame size");
        let end = at + HEAD_LEN + h.len as usize;
        assert!(end <= written.len(), "a frame cut short");
        if h.kind == kind::HEADERS && h.flags & 0x4 != 0 && h.flags & 0x8 == 0 {
            let block = &written[at + HEAD_LEN..end];
            Decoder::new(4096).decode(block, 1 << 20, |_, _| {}).expect("our header block decodes");
        }
        at = end;
    }
});
