//! RFC 9113 §6, frame by frame: DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PING, GOAWAY,
//! WINDOW_UPDATE (and flow control) and CONTINUATION — what each must carry, where it may
//! appear, and the error each misuse is.

use std::time::Duration;

use super::client::*;
use super::{post_fields, request_block, Server, BIG};

/// A fresh h2c connection sends one frame and must get the connection error `code`.
async fn connection_error(s: &Server, kind: u8, flags: u8, stream: u32, payload: &[u8], code: u32) {
    let mut c = s.open().await;
    c.send(kind, flags, stream, payload).await;
    c.expect_goaway(code).await;
}

/// A padded payload: pad length, `data`, `pad` zero octets (§6.1).
fn padded(data: &[u8], pad: u8) -> Vec<u8> {
    let mut p = vec![pad];
    p.extend_from_slice(data);
    p.extend(std::iter::repeat_n(0, pad as usize));
    p
}

/// A connection with GET /slow open on stream 1 (half-closed remote for a while).
async fn with_open_stream(s: &Server) -> Conn {
    let mut c = s.open().await;
    c.get(1, "/slow").await;
    c
}

/// §6.1: DATA on stream 0 is a connection error PROTOCOL_ERROR.
#[tokio::test]
async fn data_on_stream_0_is_a_protocol_error() {
    let s = Server::start().await;
    connection_error(&s, DATA, 0, 0, b"data", PROTOCOL_ERROR).await;
}

/// §6.1: padded DATA is accepted; only the data reaches the origin.
#[tokio::test]
async fn padded_data_is_accepted() {
    let s = Server::start().await;
    let mut c = s.open().await;
    c.headers(1, 0, &post_fields("/padded", &[])).await;
    c.send(DATA, PADDED | END_STREAM, 1, &padded(b"abc", 7))
        .await;
    assert_eq!(c.response(1).await.status, 200);
    let seen = s.origin_request("/padded");
    assert_eq!(seen.body_len, 3);
}

/// §6.1: padding as long as the payload or longer is a connection error PROTOCOL_ERROR.
#[tokio::test]
async fn data_padding_not_shorter_than_the_payload_is_a_protocol_error() {
    let s = Server::start().await;
    let mut c = s.open().await;
    c.headers(1, 0, &post_fields("/bad-pad", &[])).await;
    c.send(DATA, PADDED | END_STREAM, 1, &[5, b'a', b'b', b'c', b'd'])
        .await;
    c.expect_goaway(PROTOCOL_ERROR).await;
}

/// §6.2: HEADERS on stream 0 is a connection error PROTOCOL_ERROR.
#[tokio::test]
async fn headers_on_stream_0_is_a_protocol_error() {
    let s = Server::start().await;
    connection_error(
        &s,
        HEADERS,
        END_HEADERS | END_STREAM,
        0,
        &request_block("/zero"),
        PROTOCOL_ERROR,
    )
    .await;
    assert!(!s.origin_saw("/zero"));
}

/// §6.2: HEADERS with the PRIORITY flag, and padded HEADERS, are served.
#[tokio::test]
async fn headers_with_priority_or_padding_are_served() {
    let s = Server::start().await;
    let mut c = s.open().await;
    let mut p = vec![0, 0, 0, 0, 15]; // depends on stream 0, weight 16
    p.extend(request_block("/priority"));
    c.send(HEADERS, PRIORITY_FLAG | END_HEADERS | END_STREAM, 1, &p)
        .await;
    assert_eq!(c.response(1).await.status, 200);
    let p = padded(&request_block("/padded-headers"), 9);
    c.send(HEADERS, PADDED | END_HEADERS | END_STREAM, 3, &p)
        .await;
    assert_eq!(c.response(3).await.status, 200);
}

/// §6.2: padding that leaves no room for the header block is PROTOCOL_ERROR.
#[tokio::test]
async fn headers_padding_longer_than_the_payload_is_a_protocol_error() {
    let s = Server::start().await;
    let mut p = vec![200];
    p.extend(request_block("/bad-headers-pad"));
    connection_error(
        &s,
        HEADERS,
        PADDED | END_HEADERS | END_STREAM,
        1,
        &p,
        PROTOCOL_ERROR,
    )
    .await;
    assert!(!s.origin_saw("/bad-headers-pad"));
}

/// §5.3.1: a stream cannot depend on itself: a stream error PROTOCOL_ERROR (HEADERS and PRIORITY).
#[tokio::test]
async fn a_stream_depending_on_itself_is_a_protocol_error() {
    let s = Server::start().await;
    let mut c = s.open().await;
    let mut p = vec![0, 0, 0, 1, 15];
    p.extend(request_block("/self-dependent"));
    c.send(HEADERS, PRIORITY_FLAG | END_HEADERS | END_STREAM, 1, &p)
        .await;
    c.expect_stream_error(1, PROTOCOL_ERROR).await;
    let mut c = with_open_stream(&s).await;
    c.send(PRIORITY, 0, 1, &[0, 0, 0, 1, 15]).await;
    c.expect_stream_error(1, PROTOCOL_ERROR).await;
}

/// §6.3: PRIORITY on stream 0 is a connection error PROTOCOL_ERROR.
#[tokio::test]
async fn priority_on_stream_0_is_a_protocol_error() {
    let s = Server::start().await;
    connection_error(&s, PRIORITY, 0, 0, &[0, 0, 0, 1, 15], PROTOCOL_ERROR).await;
}

/// §6.3: a PRIORITY frame of a length other than 5 is a stream error FRAME_SIZE_ERROR.
#[tokio::test]
async fn priority_of_a_length_other_than_5_is_a_frame_size_error() {
    let s = Server::start().await;
    let mut c = with_open_stream(&s).await;
    c.send(PRIORITY, 0, 1, &[0, 0, 0, 0]).await;
    c.expect_stream_error(1, FRAME_SIZE_ERROR).await;
}

/// §5.1, §6.3: PRIORITY may be sent on a stream in any state, idle and closed included.
#[tokio::test]
async fn priority_on_idle_and_closed_streams_is_accepted() {
    let s = Server::start().await;
    let mut c = s.open().await;
    c.send(PRIORITY, 0, 1, &[0, 0, 0, 0, 15]).await;
    c.get(1, "/prioritised").await;
    assert_eq!(c.response(1).await.status, 200);
    c.send(PRIORITY, 0, 1, &[0, 0, 0, 0, 15]).await;
    c.ping_ok().await;
}

/// §6.4: RST_STREAM on stream 0 is a connection error PROTOCOL_ERROR.
#[tokio::test]
async fn rst_stream_on_stream_0_is_a_protocol_error() {
    let s = Server::start().await;
    connection_error(&s, RST_STREAM, 0, 0, &CANCEL.to_be_bytes(), PROTOCOL_ERROR).await;
}

/// §6.4: RST_STREAM of a length other than 4 is a connection error FRAME_SIZE_ERROR.
#[tokio::test]
async fn rst_stream_of_a_length_other_than_4_is_a_frame_size_error() {
    let s = Server::start().await;
    let mut c = with_open_stream(&s).await;
    c.send(RST_STREAM, 0, 1, &[0, 0, 8]).await;
    c.expect_goaway(FRAME_SIZE_ERROR).await;
}

/// §6.5.3: the server acknowledges the client's SETTINGS with an empty SETTINGS ACK.
#[tokio::test]
async fn the_server_acknowledges_the_clients_settings() {
    let s = Server::start().await;
    for t in Transport::BOTH {
        let mut c = s.connect(t).await;
        c.handshake(&[(INITIAL_WINDOW_SIZE, 100_000), (MAX_FRAME_SIZE, 32768)])
            .await;
        loop {
            let f = c.frame().await;
            if f.kind == SETTINGS && f.flags & ACK != 0 {
                assert!(f.payload.is_empty(), "{f:?}");
                break;
            }
        }
    }
}

/// §6.5: a SETTINGS ACK with a payload is a connection error FRAME_SIZE_ERROR.
#[tokio::test]
async fn settings_ack_with_a_payload_is_a_frame_size_error() {
    let s = Server::start().await;
    connection_error(
        &s,
        SETTINGS,
        ACK,
        0,
        &settings(&[(MAX_FRAME_SIZE, 16384)]),
        FRAME_SIZE_ERROR,
    )
    .await;
}

/// §6.5: a SETTINGS length that is not a multiple of 6 is FRAME_SIZE_ERROR.
#[tokio::test]
async fn settings_of_a_length_not_a_multiple_of_6_is_a_frame_size_error() {
    let s = Server::start().await;
    connection_error(
        &s,
        SETTINGS,
        0,
        0,
        &[0, 3, 0, 0, 0, 100, 0],
        FRAME_SIZE_ERROR,
    )
    .await;
}

/// §6.5: SETTINGS on a stream is a connection error PROTOCOL_ERROR.
#[tokio::test]
async fn settings_on_a_stream_is_a_protocol_error() {
    let s = Server::start().await;
    connection_error(
        &s,
        SETTINGS,
        0,
        1,
        &settings(&[(MAX_CONCURRENT_STREAMS, 10)]),
        PROTOCOL_ERROR,
    )
    .await;
}

/// §6.5.2: SETTINGS_ENABLE_PUSH other than 0 or 1 is PROTOCOL_ERROR.
#[tokio::test]
async fn enable_push_other_than_0_or_1_is_a_protocol_error() {
    let s = Server::start().await;
    connection_error(
        &s,
        SETTINGS,
        0,
        0,
        &settings(&[(ENABLE_PUSH, 2)]),
        PROTOCOL_ERROR,
    )
    .await;
}

/// §6.5.2: SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1 is FLOW_CONTROL_ERROR.
#[tokio::test]
async fn initial_window_size_above_2_31_minus_1_is_a_flow_control_error() {
    let s = Server::start().await;
    connection_error(
        &s,
        SETTINGS,
        0,
        0,
        &settings(&[(INITIAL_WINDOW_SIZE, 1 << 31)]),
        FLOW_CONTROL_ERROR,
    )
    .await;
}

/// §6.5.2: SETTINGS_MAX_FRAME_SIZE below 2^14 or above 2^24-1 is PROTOCOL_ERROR.
#[tokio::test]
async fn max_frame_size_out_of_range_is_a_protocol_error() {
    let s = Server::start().await;
    for size in [16383, 1 << 24] {
        connection_error(
            &s,
            SETTINGS,
            0,
            0,
            &settings(&[(MAX_FRAME_SIZE, size)]),
            PROTOCOL_ERROR,
        )
        .await;
    }
}

/// §6.5.2: settings the server does not know are ignored.
#[tokio::test]
async fn unknown_settings_are_ignored() {
    let s = Server::start().await;
    let mut c = s.open_with(&[(0x00ff, 7), (0x4242, u32::MAX)]).await;
    c.get(1, "/unknown-setting").await;
    assert_eq!(c.response(1).await.status, 200);
}

/// §6.7: PING is answered with an ACK carrying the same 8 octets, over h2c and TLS.
#[tokio::test]
async fn ping_is_answered_with_an_ack_and_the_same_bytes() {
    let s = Server::start().await;
    for t in Transport::BOTH {
        let mut c = s.connect(t).await;
        c.handshake(&[]).await;
        c.ping_ok().await;
    }
}

/// §6.7: PING of a length other than 8 is a connection error FRAME_SIZE_ERROR.
#[tokio::test]
async fn ping_of_a_length_other_than_8_is_a_frame_size_error() {
    let s = Server::start().await;
    connection_error(&s, PING, 0, 0, &[1, 2, 3, 4, 5, 6], FRAME_SIZE_ERROR).await;
}

/// §6.7: PING on a stream is a connection error PROTOCOL_ERROR.
#[tokio::test]
async fn ping_on_a_stream_is_a_protocol_error() {
    let s = Server::start().await;
    connection_error(&s, PING, 0, 1, &[0; 8], PROTOCOL_ERROR).await;
}

/// §6.7: a PING with the ACK flag is never answered.
#[tokio::test]
async fn a_ping_ack_from_the_client_is_not_answered() {
    let s = Server::start().await;
    let mut c = s.open().await;
    c.send(PING, ACK, 0, b"not-sent").await;
    c.expect_no("an answer to a PING ACK", |f| f.kind == PING)
        .await;
}

/// §6.8: GOAWAY on a stream is a connection error PROTOCOL_ERROR.
#[tokio::test]
async fn goaway_on_a_stream_is_a_protocol_error() {
    let s = Server::start().await;
    connection_error(&s, GOAWAY, 0, 1, &[0, 0, 0, 0, 0, 0, 0, 0], PROTOCOL_ERROR).await;
}

/// §6.9: a connection WINDOW_UPDATE of 0 is a connection error PROTOCOL_ERROR.
#[tokio::test]
async fn window_update_of_0_on_the_connection_is_a_protocol_error() {
    let s = Server::start().await;
    connection_error(&s, WINDOW_UPDATE, 0, 0, &0u32.to_be_bytes(), PROTOCOL_ERROR).await;
}

/// §6.9: a stream WINDOW_UPDATE of 0 is a stream error PROTOCOL_ERROR.
#[tokio::test]
async fn window_update_of_0_on_a_stream_is_a_protocol_error() {
    let s = Server::start().await;
    let mut c = with_open_stream(&s).await;
    c.send(WINDOW_UPDATE, 0, 1, &0u32.to_be_bytes()).await;
    c.expect_stream_error(1, PROTOCOL_ERROR).await;
}

/// §6.9: WINDOW_UPDATE of a length other than 4 is a connection error FRAME_SIZE_ERROR.
#[tokio::test]
async fn window_update_of_a_length_other_than_4_is_a_frame_size_error() {
    let s = Server::start().await;
    connection_error(&s, WINDOW_UPDATE, 0, 0, &[0, 0, 1], FRAME_SIZE_ERROR).await;
}

/// §6.9.1: a connection window pushed past 2^31-1 is a connection error FLOW_CONTROL_ERROR.
#[tokio::test]
async fn a_connection_window_past_2_31_minus_1_is_a_flow_control_error() {
    let s = Server::start().await;
    connection_error(
        &s,
        WINDOW_UPDATE,
        0,
        0,
        &0x7fff_ffffu32.to_be_bytes(),
        FLOW_CONTROL_ERROR,
    )
    .await;
}

/// §6.9.1: a stream window pushed past 2^31-1 ends the stream with FLOW_CONTROL_ERROR.
#[tokio::test]
async fn a_stream_window_past_2_31_minus_1_is_a_flow_control_error() {
    let s = Server::start().await;
    let mut c = with_open_stream(&s).await;
    c.send(WINDOW_UPDATE, 0, 1, &0x7fff_ffffu32.to_be_bytes())
        .await;
    c.expect_stream_error(1, FLOW_CONTROL_ERROR).await;
}

/// §6.9, §6.9.2: with a 10-byte stream window the server sends at most 10 bytes of DATA until
/// the window grows — by WINDOW_UPDATE or by a new SETTINGS_INITIAL_WINDOW_SIZE — then the rest.
#[tokio::test]
async fn the_server_sends_no_more_data_than_the_window_allows() {
    let s = Server::start().await;
    for by_settings in [false, true] {
        let mut c = s.open_with(&[(INITIAL_WINDOW_SIZE, 10)]).await;
        c.get(1, "/big").await;
        let (first, ended) = c.data_within(1, Duration::from_millis(500)).await;
        assert!(first <= 10 && !ended, "{first} bytes in a 10-byte window");
        if by_settings {
            c.send(SETTINGS, 0, 0, &settings(&[(INITIAL_WINDOW_SIZE, 65535)]))
                .await;
        } else {
            c.window_update(1, BIG as u32).await;
        }
        let (rest, ended) = c.data_within(1, READ_TIMEOUT).await;
        assert_eq!(
            (first + rest, ended),
            (BIG, true),
            "window grown by SETTINGS: {by_settings}"
        );
    }
}

/// §6.10: CONTINUATION without a HEADERS before it is a connection error PROTOCOL_ERROR.
#[tokio::test]
async fn continuation_without_headers_is_a_protocol_error() {
    let s = Server::start().await;
    connection_error(
        &s,
        CONTINUATION,
        END_HEADERS,
        1,
        &request_block("/orphan"),
        PROTOCOL_ERROR,
    )
    .await;
    let mut c = s.open().await;
    c.get(1, "/complete").await;
    c.send(CONTINUATION, END_HEADERS, 1, &[0x82]).await;
    c.expect_goaway(PROTOCOL_ERROR).await;
}

/// §6.10: a header block split over HEADERS and several CONTINUATIONs is one request.
#[tokio::test]
async fn a_header_block_split_over_several_continuations_is_served() {
    let s = Server::start().await;
    let mut c = s.open().await;
    let block = request_block("/continued");
    // Four pieces: HEADERS then three CONTINUATIONs (few enough for any flood limit).
    let mut parts = block.chunks(block.len().div_ceil(4));
    c.send(HEADERS, END_STREAM, 1, parts.next().unwrap()).await;
    let rest: Vec<&[u8]> = parts.collect();
    for (i, part) in rest.iter().enumerate() {
        let last = if i + 1 == rest.len() { END_HEADERS } else { 0 };
        c.send(CONTINUATION, last, 1, part).await;
    }
    assert_eq!(c.response(1).await.status, 200);
    assert!(s.origin_saw("/continued"));
}
