//! The connection driven in memory, frame by frame: answers, flow control both ways, the
//! answers of many streams in one write, and the flood defences. Each test names the part of
//! RFC 9113 it checks. (The same server against the real binary and real clients: the
//! end-to-end suites.)

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{Conn, Limits, StreamFuture};
use crate::body::{ClientBody, ProxyBody};
use crate::http2::frame::{self, flag, kind, setting, Head, Reason, HEAD_LEN};
use crate::http2::hpack::{self, Decoder};
use crate::interim::Interim;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The client's side of the socket: what it sent and the server has not read yet, what the
/// server wrote, and how many writes it took.
#[derive(Default)]
struct Wire {
    input: Vec<u8>,
    at: usize,
    written: Vec<u8>,
    writes: usize,
}

impl AsyncRead for Wire {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let n = (self.input.len() - self.at).min(buf.remaining());
        if n == 0 {
            // Nothing more yet (the connection stays open).
            return Poll::Pending;
        }
        let at = self.at;
        buf.put_slice(&self.input[at..at + n]);
        self.at += n;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Wire {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.written.extend_from_slice(data);
        self.writes += 1;
        Poll::Ready(Ok(data.len()))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let mut n = 0;
        for b in bufs {
            self.written.extend_from_slice(b);
            n += b.len();
        }
        self.writes += 1;
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

type Handler =
    Box<dyn FnMut(rampart_head::Request<ClientBody>, Arc<Interim>) -> StreamFuture + Send>;

/// Answers every request with `answer` bytes of `x`, and `got: N`: the length of the request
/// body it read to its end (`reset` when the body failed).
fn handler(answer: usize) -> Handler {
    Box::new(move |req, _| {
        Box::pin(async move {
            let got = req.into_body().collect().await.map(|b| b.to_bytes().len());
            let mut res =
                rampart_head::Response::new(ProxyBody::full(Bytes::from(vec![b'x'; answer])));
            let got = got.map_or("reset".to_owned(), |n| n.to_string());
            res.headers_mut()
                .insert("got", http::HeaderValue::from_str(&got).expect("digits"));
            res
        })
    })
}

struct Client {
    conn: Conn<Wire, Handler>,
    /// Bytes of `written` already read as frames.
    seen: usize,
    dec: Decoder,
    ended: Option<bool>,
}

/// A frame as the client read it: header, payload, and for HEADERS the decoded fields.
#[derive(Debug)]
struct Got {
    head: Head,
    payload: Vec<u8>,
    fields: Vec<(String, String)>,
}

fn limits() -> Limits {
    Limits {
        max_streams: 16,
        max_header_list: 16 * 1024,
        keepalive_timeout: Duration::from_secs(60),
        send_timeout: Duration::from_secs(60),
    }
}

impl Client {
    /// A connection past the preface and an empty SETTINGS, plus `settings`.
    fn new(answer: usize, settings: &[(u16, u32)]) -> Client {
        let mut c = Client {
            conn: Conn::new(Wire::default(), limits(), handler(answer)),
            seen: 0,
            dec: Decoder::new(4096),
            ended: None,
        };
        let mut first = PREFACE.to_vec();
        frame::settings(&mut first, settings);
        c.send(&first);
        c
    }

    fn send(&mut self, bytes: &[u8]) {
        self.conn.io_mut().input.extend_from_slice(bytes);
    }

    /// Lets the connection run until nothing moves; the frames it wrote since the last call.
    fn run(&mut self) -> Vec<Got> {
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        for _ in 0..50 {
            if let Poll::Ready(r) = self.conn.poll_run(&mut cx) {
                self.ended = Some(r.is_ok());
                break;
            }
        }
        let mut out = Vec::new();
        let written = self.conn.io_mut().written.clone();
        while let Some(head) = Head::parse(&written[self.seen..]) {
            let start = self.seen + HEAD_LEN;
            let payload = written[start..start + head.len as usize].to_vec();
            self.seen = start + head.len as usize;
            let mut fields = Vec::new();
            if head.kind == kind::HEADERS {
                self.dec
                    .decode(&payload, 1 << 20, |n, v| {
                        fields.push((
                            String::from_utf8_lossy(n).into_owned(),
                            String::from_utf8_lossy(v).into_owned(),
                        ))
                    })
                    .expect("the server's block decodes");
            }
            out.push(Got {
                head,
                payload,
                fields,
            });
        }
        out
    }
}

fn headers(stream: u32, fields: &[(&str, &str)], end_stream: bool) -> Vec<u8> {
    let mut block = Vec::new();
    for (n, v) in fields {
        hpack::encode_field(n.as_bytes(), v.as_bytes(), &mut block);
    }
    let mut out = Vec::new();
    frame::headers(&mut out, stream, &block, end_stream, 16_384);
    out
}

fn get(stream: u32) -> Vec<u8> {
    headers(
        stream,
        &[
            (":method", "GET"),
            (":scheme", "http"),
            (":path", "/"),
            (":authority", "t"),
        ],
        true,
    )
}

fn data(stream: u32, bytes: &[u8], end: bool) -> Vec<u8> {
    let mut out = Vec::new();
    frame::head(
        &mut out,
        bytes.len(),
        kind::DATA,
        if end { flag::END_STREAM } else { 0 },
        stream,
    );
    out.extend_from_slice(bytes);
    out
}

fn window_update(stream: u32, n: u32) -> Vec<u8> {
    let mut out = Vec::new();
    frame::window_update(&mut out, stream, n);
    out
}

fn field<'a>(g: &'a Got, name: &str) -> Option<&'a str> {
    g.fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

fn goaway_code(frames: &[Got]) -> Option<u32> {
    frames
        .iter()
        .find(|g| g.head.kind == kind::GOAWAY)
        .map(|g| u32::from_be_bytes([g.payload[4], g.payload[5], g.payload[6], g.payload[7]]))
}

#[tokio::test]
async fn the_server_preface_and_a_get_answered() {
    // §3.4: the server's first frame is SETTINGS; §6.5.3 it acknowledges ours.
    let mut c = Client::new(5, &[]);
    c.send(&get(1));
    let frames = c.run();
    assert_eq!(frames[0].head.kind, kind::SETTINGS);
    assert!(frames
        .iter()
        .any(|g| g.head.kind == kind::SETTINGS && g.head.has(flag::ACK)));
    let h = frames
        .iter()
        .find(|g| g.head.kind == kind::HEADERS)
        .expect("HEADERS");
    assert_eq!(field(h, ":status"), Some("200"));
    assert_eq!(field(h, "content-length"), Some("5"));
    assert_eq!(field(h, "got"), Some("0"));
    assert!(field(h, "date").is_some());
    let d = frames
        .iter()
        .find(|g| g.head.kind == kind::DATA)
        .expect("DATA");
    assert_eq!(d.payload, b"xxxxx");
    assert!(d.head.has(flag::END_STREAM));
}

#[tokio::test]
async fn data_waits_for_the_clients_window() {
    // §6.9.1: a sender MUST NOT send more than the receiver's window.
    let mut c = Client::new(100, &[(setting::INITIAL_WINDOW_SIZE, 10)]);
    c.send(&get(1));
    let sent: usize = c
        .run()
        .iter()
        .filter(|g| g.head.kind == kind::DATA)
        .map(|g| g.payload.len())
        .sum();
    assert_eq!(sent, 10);
    c.send(&window_update(1, 50));
    let more: Vec<Got> = c
        .run()
        .into_iter()
        .filter(|g| g.head.kind == kind::DATA)
        .collect();
    assert_eq!(more.iter().map(|g| g.payload.len()).sum::<usize>(), 50);
    assert!(!more.iter().any(|g| g.head.has(flag::END_STREAM)));
    c.send(&window_update(1, 40));
    let last: Vec<Got> = c
        .run()
        .into_iter()
        .filter(|g| g.head.kind == kind::DATA)
        .collect();
    assert_eq!(last.iter().map(|g| g.payload.len()).sum::<usize>(), 40);
    assert!(last.last().is_some_and(|g| g.head.has(flag::END_STREAM)));
}

#[tokio::test]
async fn a_request_body_larger_than_its_window_flows_as_it_is_read() {
    // §6.9: the stream window (256 KiB) comes back as the pipeline reads; 600 KiB go through.
    let mut c = Client::new(1, &[]);
    c.send(&headers(
        1,
        &[
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/"),
            (":authority", "t"),
        ],
        false,
    ));
    let chunk = vec![b'b'; 16_384];
    let (mut sent, total) = (0usize, 600 * 1024);
    let (mut stream_window, mut conn_window) = (65_535i64, 65_535i64);
    let mut answer = None;
    for _ in 0..200 {
        while sent < total
            && stream_window >= chunk.len() as i64
            && conn_window >= chunk.len() as i64
        {
            let n = chunk.len().min(total - sent);
            sent += n;
            stream_window -= n as i64;
            conn_window -= n as i64;
            c.send(&data(1, &chunk[..n], sent == total));
        }
        for g in c.run() {
            match g.head.kind {
                kind::SETTINGS if !g.head.has(flag::ACK) => {
                    // The server's initial stream window.
                    for p in g.payload.chunks(6) {
                        if u16::from_be_bytes([p[0], p[1]]) == setting::INITIAL_WINDOW_SIZE {
                            stream_window +=
                                i64::from(u32::from_be_bytes([p[2], p[3], p[4], p[5]])) - 65_535;
                        }
                    }
                }
                kind::WINDOW_UPDATE => {
                    let n = i64::from(u32::from_be_bytes([
                        g.payload[0],
                        g.payload[1],
                        g.payload[2],
                        g.payload[3],
                    ]));
                    if g.head.stream == 0 {
                        conn_window += n;
                    } else {
                        stream_window += n;
                    }
                }
                kind::HEADERS => answer = field(&g, "got").map(str::to_owned),
                kind::RST_STREAM | kind::GOAWAY => panic!("{g:?}"),
                _ => {}
            }
        }
        if answer.is_some() {
            break;
        }
    }
    assert_eq!(answer.as_deref(), Some("614400"));
}

#[tokio::test]
async fn the_answers_of_many_streams_leave_in_one_write() {
    let mut c = Client::new(100, &[]);
    c.run();
    let before = c.conn.io_mut().writes;
    let mut burst = Vec::new();
    for i in 0..10 {
        burst.extend(get(1 + 2 * i));
    }
    c.send(&burst);
    let frames = c.run();
    assert_eq!(
        frames
            .iter()
            .filter(|g| g.head.kind == kind::HEADERS)
            .count(),
        10
    );
    assert_eq!(c.conn.io_mut().writes - before, 1, "ten answers, one write");
}

#[tokio::test]
async fn a_ping_flood_is_cut_off() {
    // §10.5: PING floods.
    let mut c = Client::new(1, &[]);
    let mut pings = Vec::new();
    for i in 0..1_500u64 {
        frame::head(&mut pings, 8, kind::PING, 0, 0);
        pings.extend_from_slice(&i.to_be_bytes());
    }
    c.send(&pings);
    let frames = c.run();
    assert_eq!(goaway_code(&frames), Some(Reason::ENHANCE_YOUR_CALM.0));
    assert_eq!(c.ended, Some(false));
}

#[tokio::test]
async fn streams_over_the_limit_are_refused_and_the_rest_served() {
    // §5.1.2: streams past SETTINGS_MAX_CONCURRENT_STREAMS are refused (REFUSED_STREAM).
    let mut c = Client::new(1, &[]);
    let mut open = Vec::new();
    for i in 0..20 {
        // Bodies never sent: the streams stay open.
        open.extend(headers(
            1 + 2 * i,
            &[
                (":method", "POST"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "t"),
            ],
            false,
        ));
    }
    c.send(&open);
    let frames = c.run();
    let refused: Vec<u32> = frames
        .iter()
        .filter(|g| g.head.kind == kind::RST_STREAM)
        .map(|g| g.head.stream)
        .collect();
    assert_eq!(refused, (16..20).map(|i| 1 + 2 * i).collect::<Vec<u32>>());
    // One finishes; a new stream is then served.
    c.send(&data(1, b"", true));
    let mut frames = c.run();
    c.send(&get(41));
    frames.extend(c.run());
    let answered: Vec<u32> = frames
        .iter()
        .filter(|g| g.head.kind == kind::HEADERS)
        .map(|g| g.head.stream)
        .collect();
    assert_eq!(answered, vec![1, 41]);
}

#[tokio::test]
async fn malformed_heads_reset_only_their_stream() {
    // §8.1.1 / §8.3: malformed requests are stream errors; the connection goes on.
    let mut c = Client::new(1, &[]);
    let cases: [&[(&str, &str)]; 4] = [
        &[(":method", "GET"), (":path", "/"), (":authority", "t")],
        &[
            (":method", "GET"),
            (":scheme", "http"),
            (":path", "/"),
            (":authority", "t"),
            (":status", "200"),
        ],
        &[
            (":method", "GET"),
            ("x", "y"),
            (":scheme", "http"),
            (":path", "/"),
        ],
        &[
            (":method", "GET"),
            (":scheme", "http"),
            (":path", "/"),
            ("Upper", "y"),
        ],
    ];
    for (i, fields) in cases.iter().enumerate() {
        c.send(&headers(1 + 2 * i as u32, fields, true));
    }
    c.send(&get(9));
    let frames = c.run();
    let resets: Vec<(u32, u32)> = frames
        .iter()
        .filter(|g| g.head.kind == kind::RST_STREAM)
        .map(|g| {
            (
                g.head.stream,
                u32::from_be_bytes([g.payload[0], g.payload[1], g.payload[2], g.payload[3]]),
            )
        })
        .collect();
    assert_eq!(resets, vec![(1, 1), (3, 1), (5, 1), (7, 1)]);
    assert!(frames
        .iter()
        .any(|g| g.head.kind == kind::HEADERS && g.head.stream == 9));
    assert_eq!(goaway_code(&frames), None);
}

#[tokio::test]
async fn a_header_block_without_end_is_cut_off() {
    // §10.5.1 (CONTINUATION floods): the block is bounded in bytes and frames.
    let mut c = Client::new(1, &[]);
    let mut flood = Vec::new();
    frame::head(&mut flood, 1, kind::HEADERS, 0, 1);
    flood.push(0x82);
    for _ in 0..200 {
        frame::head(&mut flood, 0, kind::CONTINUATION, 0, 1);
    }
    c.send(&flood);
    assert_eq!(goaway_code(&c.run()), Some(Reason::ENHANCE_YOUR_CALM.0));
}

#[tokio::test]
async fn a_graceful_goaway_lets_started_streams_finish() {
    // §6.8: streams up to the last id named are still answered; later ones are not processed.
    let mut c = Client::new(3, &[]);
    c.send(&headers(
        1,
        &[
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/"),
            (":authority", "t"),
        ],
        false,
    ));
    c.run();
    c.conn.go_away();
    c.send(&get(3));
    c.send(&data(1, b"abc", true));
    let frames = c.run();
    assert_eq!(goaway_code(&frames), Some(Reason::NO_ERROR.0));
    let h = frames
        .iter()
        .find(|g| g.head.kind == kind::HEADERS)
        .expect("stream 1 answered");
    assert_eq!((h.head.stream, field(h, "got")), (1, Some("3")));
    assert!(frames
        .iter()
        .any(|g| g.head.kind == kind::RST_STREAM && g.head.stream == 3));
    assert_eq!(c.ended, Some(true));
}
