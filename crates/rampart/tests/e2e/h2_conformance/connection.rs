//! RFC 9113 §3 (starting HTTP/2), §4 (frames and header blocks) and §5 (streams): the
//! preface, frame sizes, what must be ignored, header block contiguity, stream states and
//! identifiers, concurrency, and how a connection error ends the connection.

use super::client::*;
use super::hpack;
use super::{post_fields, request_block, Server, BIG, HOST};

/// §3.4, §6.5.2: the server's preface is a SETTINGS frame (checked by `handshake`), which never
/// turns push on; then a plain GET is answered with the origin's body — over h2c and TLS.
#[tokio::test]
async fn a_plain_get_is_answered_with_the_origins_body_over_h2c_and_tls() {
    let s = Server::start().await;
    for t in Transport::BOTH {
        let mut c = s.connect(t).await;
        c.handshake(&[]).await;
        assert_ne!(c.server_setting(ENABLE_PUSH), Some(1), "{t:?}");
        c.get(1, "/plain").await;
        let r = c.response(1).await;
        assert_eq!((r.status, &r.body[..]), (200, &b"hello\n"[..]), "{t:?}");
        assert!(s.origin_saw("/plain"));
    }
}

/// §3.4: an invalid preface is a connection error PROTOCOL_ERROR (the GOAWAY may be omitted,
/// the close may not), on both transports.
#[tokio::test]
async fn an_invalid_preface_is_a_protocol_error() {
    let s = Server::start().await;
    for t in Transport::BOTH {
        let mut c = s.connect(t).await;
        c.write(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n").await;
        c.expect_goaway_or_close(PROTOCOL_ERROR).await;
    }
}

/// §3.4: the client preface is the magic string followed by a SETTINGS frame; anything else
/// first is an invalid preface.
#[tokio::test]
async fn a_preface_not_followed_by_settings_is_a_protocol_error() {
    let s = Server::start().await;
    let mut c = s.connect(Transport::H2c).await;
    c.write(PREFACE).await;
    c.send(PING, 0, 0, &[0; 8]).await;
    c.expect_goaway_or_close(PROTOCOL_ERROR).await;
}

/// §3.2, §3.4: once ALPN chose h2, an HTTP/1.1 request is an invalid preface; it never gets an
/// HTTP/1.1 answer.
#[tokio::test]
async fn after_alpn_h2_an_http11_request_gets_no_http11_answer() {
    let s = Server::start().await;
    let mut c = s.connect(Transport::Tls).await;
    c.write(format!("GET / HTTP/1.1\r\nHost: {HOST}\r\n\r\n").as_bytes())
        .await;
    let (got, closed) = c.read_to_close().await;
    assert!(
        !got.starts_with(b"HTTP/"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    assert!(closed, "the connection stayed open");
    assert!(!s.origin_saw("/"), "an HTTP/1.1 request was forwarded");
}

/// §4.1, §5.5: frames of unknown types are ignored, on stream 0 and on a stream.
#[tokio::test]
async fn unknown_frame_types_are_ignored() {
    let s = Server::start().await;
    let mut c = s.open().await;
    c.send(0xfa, 0, 0, b"extension").await;
    c.send(0xfb, 0xff, 1, b"extension").await;
    c.ping_ok().await;
    c.get(1, "/unknown-type").await;
    assert_eq!(c.response(1).await.status, 200);
}

/// §4.1: flags a frame type does not define are ignored.
#[tokio::test]
async fn unknown_flags_are_ignored() {
    let s = Server::start().await;
    let mut c = s.open().await;
    let data = *b"flags!!!";
    c.send(PING, 0xfe, 0, &data).await;
    let ack = c.until(PING).await;
    assert_eq!(
        (ack.kind, ack.flags & ACK, &ack.payload[..]),
        (PING, ACK, &data[..])
    );
    let block = request_block("/flags");
    // 0x02, 0x10, 0x40 and 0x80 mean nothing on HEADERS.
    c.send(HEADERS, 0xd2 | END_HEADERS | END_STREAM, 1, &block)
        .await;
    assert_eq!(c.response(1).await.status, 200);
}

/// §4.1: the reserved bit of the stream identifier is ignored on receipt.
#[tokio::test]
async fn the_reserved_bit_of_a_stream_id_is_ignored() {
    let s = Server::start().await;
    let mut c = s.open().await;
    let block = request_block("/reserved-bit");
    c.send(HEADERS, END_HEADERS | END_STREAM, 0x8000_0001, &block)
        .await;
    assert_eq!(c.response(1).await.status, 200);
}

/// The server's SETTINGS_MAX_FRAME_SIZE (16384 unless it said otherwise).
fn max_frame(c: &Conn) -> usize {
    c.server_setting(MAX_FRAME_SIZE).unwrap_or(16384) as usize
}

/// §4.2: a frame carrying a field block larger than SETTINGS_MAX_FRAME_SIZE is a connection
/// error FRAME_SIZE_ERROR.
#[tokio::test]
async fn a_headers_frame_over_max_frame_size_is_a_frame_size_error() {
    let s = Server::start().await;
    let mut c = s.open().await;
    let mut block = request_block("/too-big");
    hpack::literal(&mut block, "x-pad", &vec![b'p'; max_frame(&c)]);
    c.send(HEADERS, END_HEADERS | END_STREAM, 1, &block).await;
    c.expect_goaway(FRAME_SIZE_ERROR).await;
    assert!(!s.origin_saw("/too-big"));
}

/// §4.2: a DATA frame over SETTINGS_MAX_FRAME_SIZE is FRAME_SIZE_ERROR (a stream error may do).
#[tokio::test]
async fn a_data_frame_over_max_frame_size_is_a_frame_size_error() {
    let s = Server::start().await;
    let mut c = s.open().await;
    let post = post_fields("/big-data", &[]);
    c.headers(1, 0, &post).await;
    c.send(DATA, END_STREAM, 1, &vec![b'd'; max_frame(&c) + 1])
        .await;
    c.expect_stream_error(1, FRAME_SIZE_ERROR).await;
}

/// §4.3, §6.10: a header block's CONTINUATION must be on the same stream.
#[tokio::test]
async fn continuation_on_another_stream_is_a_protocol_error() {
    let s = Server::start().await;
    let mut c = s.open().await;
    let block = request_block("/split");
    c.send(HEADERS, END_STREAM, 1, &block[..2]).await;
    c.send(CONTINUATION, END_HEADERS, 3, &block[2..]).await;
    c.expect_goaway(PROTOCOL_ERROR).await;
}

/// §4.3: a header block is contiguous frames; any other frame inside one is PROTOCOL_ERROR.
#[tokio::test]
async fn a_frame_inside_a_header_block_is_a_protocol_error() {
    let s = Server::start().await;
    let mut c = s.open().await;
    let block = request_block("/interleaved");
    c.send(HEADERS, END_STREAM, 1, &block[..2]).await;
    c.send(PING, 0, 0, &[0; 8]).await;
    c.send(CONTINUATION, END_HEADERS, 1, &block[2..]).await;
    c.expect_goaway(PROTOCOL_ERROR).await;
}

/// §5.5: an extension frame inside a header block is PROTOCOL_ERROR too.
#[tokio::test]
async fn an_unknown_frame_inside_a_header_block_is_a_protocol_error() {
    let s = Server::start().await;
    let mut c = s.open().await;
    let block = request_block("/interleaved-ext");
    c.send(HEADERS, END_STREAM, 1, &block[..2]).await;
    c.send(0xfa, 0, 1, b"extension").await;
    c.send(CONTINUATION, END_HEADERS, 1, &block[2..]).await;
    c.expect_goaway(PROTOCOL_ERROR).await;
}

/// §4.3: a header block that does not decode is a connection error COMPRESSION_ERROR.
#[tokio::test]
async fn an_undecodable_header_block_is_a_compression_error() {
    let s = Server::start().await;
    let mut c = s.open().await;
    let mut block = request_block("/undecodable");
    block.push(0x80 | 70); // index 70: the dynamic table is empty
    c.send(HEADERS, END_HEADERS | END_STREAM, 1, &block).await;
    c.expect_goaway(COMPRESSION_ERROR).await;
}

/// §5.1.1: streams a client opens have odd identifiers.
#[tokio::test]
async fn headers_on_an_even_stream_is_a_protocol_error() {
    let s = Server::start().await;
    let mut c = s.open().await;
    c.get(2, "/even").await;
    c.expect_goaway(PROTOCOL_ERROR).await;
    assert!(!s.origin_saw("/even"));
}

/// §5.1.1: a new stream's identifier must be greater than every one opened before; an
/// unexpected identifier is a connection error PROTOCOL_ERROR.
#[tokio::test]
async fn a_stream_id_lower_than_a_previous_one_is_a_protocol_error() {
    let s = Server::start().await;
    let mut c = s.open().await;
    c.get(5, "/five").await;
    assert_eq!(c.response(5).await.status, 200);
    c.get(3, "/three").await;
    c.expect_goaway(PROTOCOL_ERROR).await;
    assert!(!s.origin_saw("/three"));
}

/// §5.1 (closed): HEADERS again on a stream that was opened and has closed is not a new
/// stream with an unexpected identifier but a frame on a closed stream: STREAM_CLOSED.
#[tokio::test]
async fn headers_again_on_a_finished_stream_is_stream_closed() {
    let s = Server::start().await;
    let mut c = s.open().await;
    c.get(1, "/one").await;
    assert_eq!(c.response(1).await.status, 200);
    c.get(3, "/three").await;
    assert_eq!(c.response(3).await.status, 200);
    c.get(1, "/one-again").await;
    c.expect_goaway(STREAM_CLOSED).await;
    assert!(!s.origin_saw("/one-again"));
}

/// §5.1 (idle), §6.1, §6.4, §6.9: DATA, RST_STREAM and WINDOW_UPDATE on an idle stream are a
/// connection error PROTOCOL_ERROR.
#[tokio::test]
async fn frames_on_an_idle_stream_are_a_protocol_error() {
    let s = Server::start().await;
    for (kind, payload) in [
        (DATA, &b"data"[..]),
        (RST_STREAM, &CANCEL.to_be_bytes()[..]),
        (WINDOW_UPDATE, &1u32.to_be_bytes()[..]),
    ] {
        let mut c = s.open().await;
        c.send(kind, 0, 1, payload).await;
        c.expect_goaway(PROTOCOL_ERROR).await;
    }
}

/// §5.1 (closed): DATA on a stream both sides ended is STREAM_CLOSED.
#[tokio::test]
async fn data_on_a_closed_stream_is_stream_closed() {
    let s = Server::start().await;
    let mut c = s.open().await;
    c.get(1, "/closed").await;
    assert_eq!(c.response(1).await.status, 200);
    c.send(DATA, END_STREAM, 1, b"late").await;
    c.expect_stream_error(1, STREAM_CLOSED).await;
}

/// §5.1 (half-closed remote): after the client's END_STREAM, more DATA is STREAM_CLOSED.
#[tokio::test]
async fn data_on_a_half_closed_stream_is_stream_closed() {
    let s = Server::start().await;
    let mut c = s.open().await;
    c.get(1, "/slow").await;
    c.send(DATA, 0, 1, b"more").await;
    c.expect_stream_error(1, STREAM_CLOSED).await;
}

/// §5.1 (closed): after the client reset a stream, DATA on it is STREAM_CLOSED.
#[tokio::test]
async fn data_after_the_clients_rst_stream_is_stream_closed() {
    let s = Server::start().await;
    let mut c = s.open().await;
    let post = post_fields("/slow", &[]);
    c.headers(1, 0, &post).await;
    c.send(RST_STREAM, 0, 1, &CANCEL.to_be_bytes()).await;
    c.send(DATA, 0, 1, b"after reset").await;
    c.expect_stream_error(1, STREAM_CLOSED).await;
}

/// §5.1 (half-closed remote), §6.4: RST_STREAM is allowed there; the connection carries on.
#[tokio::test]
async fn rst_stream_on_a_half_closed_stream_is_accepted() {
    let s = Server::start().await;
    let mut c = s.open().await;
    c.get(1, "/slow").await;
    c.send(RST_STREAM, 0, 1, &CANCEL.to_be_bytes()).await;
    c.ping_ok().await;
    c.get(3, "/after-reset").await;
    assert_eq!(c.response(3).await.status, 200);
    c.expect_no("a reset stream answered or an error", |f| {
        f.kind == GOAWAY || (f.stream == 1 && f.kind != RST_STREAM)
    })
    .await;
}

/// §5.1.2: streams beyond SETTINGS_MAX_CONCURRENT_STREAMS are reset with PROTOCOL_ERROR or
/// REFUSED_STREAM; the others are served.
#[tokio::test]
async fn streams_beyond_max_concurrent_streams_are_refused_and_the_others_served() {
    let s = Server::with("h2_max_concurrent_streams = 2").await;
    let mut c = s.open().await;
    assert_eq!(c.server_setting(MAX_CONCURRENT_STREAMS), Some(2));
    for id in [1, 3, 5] {
        c.get(id, "/slow").await;
    }
    let out = c.outcomes(&[1, 3, 5]).await;
    assert_eq!(
        (out[&1], out[&3]),
        (Outcome::Status(200), Outcome::Status(200)),
        "{out:?}"
    );
    assert!(
        matches!(out[&5], Outcome::Reset(PROTOCOL_ERROR | REFUSED_STREAM)),
        "{out:?}"
    );
}

/// §5.4.1, §6.8: a connection error's GOAWAY names the last stream the server processed,
/// then the connection closes.
#[tokio::test]
async fn goaway_names_the_last_stream_processed_then_the_connection_closes() {
    let s = Server::start().await;
    let mut c = s.open().await;
    c.get(1, "/first").await;
    assert_eq!(c.response(1).await.status, 200);
    c.send(DATA, 0, 0, b"on stream 0").await;
    assert_eq!(c.expect_goaway(PROTOCOL_ERROR).await, 1);
}

/// §4.2, §6.9.2 with a body bigger than one frame: the origin's BIG bytes arrive whole.
#[tokio::test]
async fn a_body_of_several_frames_arrives_whole_over_h2c_and_tls() {
    let s = Server::start().await;
    for t in Transport::BOTH {
        let mut c = s.connect(t).await;
        c.handshake(&[(MAX_FRAME_SIZE, 16384)]).await;
        c.get(1, "/big").await;
        let r = c.response(1).await;
        assert_eq!((r.status, r.body.len()), (200, BIG), "{t:?}");
    }
}
