//! A raw HTTP/2 client for the conformance tests: it writes any frame, well-formed or not, and
//! reads the server's frames whole, each read bounded by [`READ_TIMEOUT`]. Header blocks the
//! server sends are joined with their CONTINUATION frames and decoded, so the HPACK state stays
//! in step however many responses a test reads. The `expect_*` helpers name the outcomes the
//! RFC allows and fail with what arrived instead.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::hpack::{self, Decoder};

/// The longest a test waits for any one thing the server should send.
pub const READ_TIMEOUT: Duration = Duration::from_secs(2);
/// How long "nothing arrives" is watched for.
pub const QUIET: Duration = Duration::from_millis(300);

pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// Frame types (RFC 9113 §6).
pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const PRIORITY: u8 = 0x2;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PUSH_PROMISE: u8 = 0x5;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;

// Flags.
pub const END_STREAM: u8 = 0x1;
pub const ACK: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const PADDED: u8 = 0x8;
pub const PRIORITY_FLAG: u8 = 0x20;

// Error codes (§7).
pub const PROTOCOL_ERROR: u32 = 0x1;
pub const FLOW_CONTROL_ERROR: u32 = 0x3;
pub const STREAM_CLOSED: u32 = 0x5;
pub const FRAME_SIZE_ERROR: u32 = 0x6;
pub const REFUSED_STREAM: u32 = 0x7;
pub const CANCEL: u32 = 0x8;
pub const COMPRESSION_ERROR: u32 = 0x9;

// Settings (§6.5.2).
pub const HEADER_TABLE_SIZE: u16 = 0x1;
pub const ENABLE_PUSH: u16 = 0x2;
pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
pub const MAX_FRAME_SIZE: u16 = 0x5;

/// The name of an error code, for messages.
pub fn code_name(code: u32) -> String {
    let names = [
        "NO_ERROR",
        "PROTOCOL_ERROR",
        "INTERNAL_ERROR",
        "FLOW_CONTROL_ERROR",
        "SETTINGS_TIMEOUT",
        "STREAM_CLOSED",
        "FRAME_SIZE_ERROR",
        "REFUSED_STREAM",
        "CANCEL",
        "COMPRESSION_ERROR",
    ];
    names
        .get(code as usize)
        .map_or(format!("{code:#x}"), |n| n.to_string())
}

/// A frame's bytes: the 9-octet header (§4.1), then `payload`.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = len.to_be_bytes()[1..].to_vec();
    f.extend_from_slice(&[kind, flags]);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A SETTINGS payload.
pub fn settings(pairs: &[(u16, u32)]) -> Vec<u8> {
    pairs
        .iter()
        .flat_map(|(id, v)| id.to_be_bytes().into_iter().chain(v.to_be_bytes()))
        .collect()
}

/// One frame from the server; for HEADERS, `fields` holds the decoded block (CONTINUATIONs
/// already joined) and `flags` gains END_HEADERS.
#[derive(Debug, Clone)]
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
    pub fields: Vec<(String, String)>,
}

impl Frame {
    fn u32_at(&self, at: usize) -> u32 {
        u32::from_be_bytes(self.payload[at..at + 4].try_into().unwrap())
    }
    /// The error code of RST_STREAM or GOAWAY.
    pub fn error_code(&self) -> u32 {
        self.u32_at(if self.kind == GOAWAY { 4 } else { 0 })
    }
    /// GOAWAY's last stream id.
    pub fn last_stream(&self) -> u32 {
        self.u32_at(0) & 0x7fff_ffff
    }
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What one read produced.
#[derive(Debug)]
pub enum Event {
    Frame(Frame),
    Closed,
    Quiet,
}

/// How a stream ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Outcome {
    Status(u16),
    Reset(u32),
}

/// A complete response on one stream.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub fields: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub trailers: Vec<(String, String)>,
}

pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// How the client reaches the server.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Transport {
    /// Cleartext, prior knowledge (RFC 9113 §3.3).
    H2c,
    /// TLS with ALPN "h2" (§3.2).
    Tls,
}

impl Transport {
    pub const BOTH: [Transport; 2] = [Transport::H2c, Transport::Tls];
}

/// An HTTP/2 connection to the server, driven frame by frame.
pub struct Conn {
    io: Box<dyn Io>,
    buf: Vec<u8>,
    hpack: Decoder,
    /// The server's SETTINGS (the first frame it sent).
    pub server_settings: Vec<(u16, u32)>,
    pub scheme: &'static str,
    pub authority: String,
}

impl Conn {
    /// A TCP (or TLS, ALPN h2) connection; nothing sent yet.
    pub async fn connect(
        addr: SocketAddr,
        transport: Transport,
        authority: &str,
        tls: &Arc<rustls::ClientConfig>,
    ) -> Conn {
        let tcp = TcpStream::connect(addr).await.unwrap();
        tcp.set_nodelay(true).unwrap();
        let (io, scheme): (Box<dyn Io>, _) = match transport {
            Transport::H2c => (Box::new(tcp), "http"),
            Transport::Tls => {
                let name = ServerName::try_from(authority.to_owned()).unwrap();
                let s = tokio_rustls::TlsConnector::from(tls.clone())
                    .connect(name, tcp)
                    .await
                    .unwrap();
                assert_eq!(s.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
                (Box::new(s), "https")
            }
        };
        Conn {
            io,
            buf: Vec::new(),
            hpack: Decoder::default(),
            server_settings: Vec::new(),
            scheme,
            authority: authority.into(),
        }
    }

    /// §3.4: sends the preface and a SETTINGS frame of `ours`; reads the server's first frame,
    /// which must be SETTINGS, and acknowledges it.
    pub async fn handshake(&mut self, ours: &[(u16, u32)]) {
        self.write(PREFACE).await;
        self.send(SETTINGS, 0, 0, &settings(ours)).await;
        if let Some(&(_, size)) = ours.iter().find(|(id, _)| *id == HEADER_TABLE_SIZE) {
            self.hpack.limit(size as usize);
        }
        let first = self.frame().await;
        assert_eq!(first.kind, SETTINGS, "the server's first frame: {first:?}");
        assert_eq!(first.flags & ACK, 0, "{first:?}");
        self.server_settings = first
            .payload
            .chunks(6)
            .map(|c| {
                (
                    u16::from_be_bytes([c[0], c[1]]),
                    u32::from_be_bytes(c[2..6].try_into().unwrap()),
                )
            })
            .collect();
        self.send(SETTINGS, ACK, 0, &[]).await;
    }

    /// The server's value for setting `id`, if it sent one.
    pub fn server_setting(&self, id: u16) -> Option<u32> {
        self.server_settings
            .iter()
            .rev()
            .find(|(i, _)| *i == id)
            .map(|(_, v)| *v)
    }

    pub async fn write(&mut self, bytes: &[u8]) {
        // The server may already have closed after an error: what it sent is what counts.
        let _ = self.io.write_all(bytes).await;
        let _ = self.io.flush().await;
    }

    pub async fn send(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        self.write(&frame(kind, flags, stream, payload)).await;
    }

    /// The request fields for GET `path`: the four pseudo-headers.
    pub fn get_fields(&self, path: &str) -> Vec<(String, String)> {
        [
            (":method", "GET"),
            (":scheme", self.scheme),
            (":authority", self.authority.as_str()),
            (":path", path),
        ]
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
    }

    /// HEADERS (END_HEADERS, plus `flags`) carrying `fields` on `stream`.
    pub async fn headers(&mut self, stream: u32, flags: u8, fields: &[(String, String)]) {
        let pairs: Vec<(&str, &str)> = fields
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        self.send(HEADERS, END_HEADERS | flags, stream, &hpack::block(&pairs))
            .await;
    }

    /// A complete GET of `path` on `stream`.
    pub async fn get(&mut self, stream: u32, path: &str) {
        let fields = self.get_fields(path);
        self.headers(stream, END_STREAM, &fields).await;
    }

    /// The next frame or event within `within`.
    pub async fn next_within(&mut self, within: Duration) -> Event {
        let deadline = Instant::now() + within;
        let Some(mut f) = self.raw_frame(deadline).await else {
            return self.ended(deadline);
        };
        if f.kind == HEADERS {
            let mut block = header_fragment(&f);
            while f.flags & END_HEADERS == 0 {
                let Some(c) = self.raw_frame(deadline).await else {
                    return self.ended(deadline);
                };
                assert_eq!((c.kind, c.stream), (CONTINUATION, f.stream), "{c:?}");
                block.extend_from_slice(&c.payload);
                f.flags |= c.flags & END_HEADERS;
            }
            f.fields = self
                .hpack
                .decode(&block)
                .expect("the server's header block decodes");
        }
        Event::Frame(f)
    }

    fn ended(&self, deadline: Instant) -> Event {
        if Instant::now() >= deadline {
            Event::Quiet
        } else {
            Event::Closed
        }
    }

    /// One frame as sent, or None when the connection closed or `deadline` passed.
    async fn raw_frame(&mut self, deadline: Instant) -> Option<Frame> {
        loop {
            if self.buf.len() >= 9 {
                let len = u32::from_be_bytes([0, self.buf[0], self.buf[1], self.buf[2]]) as usize;
                if self.buf.len() >= 9 + len {
                    let head: Vec<u8> = self.buf.drain(..9 + len).collect();
                    return Some(Frame {
                        kind: head[3],
                        flags: head[4],
                        stream: u32::from_be_bytes(head[5..9].try_into().unwrap()) & 0x7fff_ffff,
                        payload: head[9..].to_vec(),
                        fields: Vec::new(),
                    });
                }
            }
            let mut chunk = [0u8; 16384];
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.io.read(&mut chunk)).await {
                Ok(Ok(n)) if n > 0 => self.buf.extend_from_slice(&chunk[..n]),
                Ok(_) => return None,
                Err(_) => return None,
            }
        }
    }

    /// Every byte until the server closes (true) or [`READ_TIMEOUT`] passes (false).
    pub async fn read_to_close(&mut self) -> (Vec<u8>, bool) {
        let mut got = std::mem::take(&mut self.buf);
        let read = tokio::time::timeout(READ_TIMEOUT, self.io.read_to_end(&mut got)).await;
        (got, read.is_ok())
    }

    /// The next frame, which must come within [`READ_TIMEOUT`].
    pub async fn frame(&mut self) -> Frame {
        match self.next_within(READ_TIMEOUT).await {
            Event::Frame(f) => f,
            other => panic!("expected a frame, got {other:?}"),
        }
    }

    /// The next frame of type `kind`, passing over others (GOAWAY excepted).
    pub async fn until(&mut self, kind: u8) -> Frame {
        loop {
            let f = self.frame_or_panic("a frame").await;
            if f.kind == kind {
                return f;
            }
            assert_ne!(f.kind, GOAWAY, "{f:?}");
        }
    }

    /// §5.4.1: a connection error is GOAWAY with `code`, then the connection closes. Returns
    /// the GOAWAY's last stream id.
    pub async fn expect_goaway(&mut self, code: u32) -> u32 {
        loop {
            let f = self.frame_or_panic("GOAWAY").await;
            if f.kind == GOAWAY {
                assert_eq!(code_name(f.error_code()), code_name(code), "{f:?}");
                self.expect_closed().await;
                return f.last_stream();
            }
            assert_ne!(f.kind, RST_STREAM, "RST_STREAM instead of GOAWAY: {f:?}");
        }
    }

    /// §3.4: where GOAWAY may be omitted, the connection must still close, and a GOAWAY that is
    /// sent must carry `code`; returns whether one was sent.
    pub async fn expect_goaway_or_close(&mut self, code: u32) -> bool {
        loop {
            match self.next_within(READ_TIMEOUT).await {
                Event::Closed => return false,
                Event::Quiet => panic!("the connection stayed open"),
                Event::Frame(f) if f.kind == GOAWAY => {
                    assert_eq!(code_name(f.error_code()), code_name(code), "{f:?}");
                    self.expect_closed().await;
                    return true;
                }
                Event::Frame(_) => {}
            }
        }
    }

    /// How each of `streams` ended: a final status with END_STREAM, or a reset.
    pub async fn outcomes(&mut self, streams: &[u32]) -> HashMap<u32, Outcome> {
        let mut status = HashMap::new();
        let mut done = HashMap::new();
        while done.len() < streams.len() {
            let f = self.frame_or_panic("every stream's end").await;
            assert_ne!(f.kind, GOAWAY, "{f:?}");
            if !streams.contains(&f.stream) {
                continue;
            }
            match f.kind {
                RST_STREAM => {
                    done.insert(f.stream, Outcome::Reset(f.error_code()));
                }
                HEADERS => {
                    let s: u16 = f.field(":status").map_or(0, |s| s.parse().unwrap());
                    if s >= 200 {
                        status.insert(f.stream, s);
                    }
                }
                DATA => self.window_update(0, f.payload.len() as u32).await,
                _ => {}
            }
            if f.flags & END_STREAM != 0 && matches!(f.kind, HEADERS | DATA) {
                done.insert(f.stream, Outcome::Status(status[&f.stream]));
            }
        }
        done
    }

    /// A stream error with `code` on `stream` (§5.4.2), or the same as a connection error,
    /// which §5.4.1 allows an endpoint to choose instead.
    pub async fn expect_stream_error(&mut self, stream: u32, code: u32) {
        loop {
            let f = self.frame_or_panic("RST_STREAM or GOAWAY").await;
            let ours = f.kind == RST_STREAM && f.stream == stream;
            if ours || f.kind == GOAWAY {
                assert_eq!(code_name(f.error_code()), code_name(code), "{f:?}");
                if f.kind == GOAWAY {
                    self.expect_closed().await;
                }
                return;
            }
            assert!(f.kind != HEADERS || f.stream != stream, "answered: {f:?}");
        }
    }

    /// §8.1.1: a malformed request is answered with RST_STREAM(PROTOCOL_ERROR), a 400 response,
    /// or the connection error PROTOCOL_ERROR (§5.4.1 lets any stream error become one).
    pub async fn expect_malformed(&mut self, stream: u32) {
        loop {
            let f = self.frame_or_panic("a malformed request's rejection").await;
            if f.kind == HEADERS && f.stream == stream {
                let status = f.field(":status").unwrap_or("");
                assert!(
                    status == "400",
                    "a malformed request was answered {status}: {f:?}"
                );
                return;
            }
            if (f.kind == RST_STREAM && f.stream == stream) || f.kind == GOAWAY {
                assert_eq!(
                    code_name(f.error_code()),
                    code_name(PROTOCOL_ERROR),
                    "{f:?}"
                );
                return;
            }
        }
    }

    /// The connection ends (EOF or reset) within [`READ_TIMEOUT`]; frames before that are fine.
    pub async fn expect_closed(&mut self) {
        loop {
            match self.next_within(READ_TIMEOUT).await {
                Event::Closed => return,
                Event::Quiet => panic!("the connection stayed open"),
                Event::Frame(_) => {}
            }
        }
    }

    /// Nothing matching `unwanted` arrives for [`QUIET`]; other frames are passed over.
    pub async fn expect_no(&mut self, what: &str, unwanted: impl Fn(&Frame) -> bool) {
        let deadline = Instant::now() + QUIET;
        let left = || deadline.saturating_duration_since(Instant::now());
        while let Event::Frame(f) = self.next_within(left()).await {
            assert!(!unwanted(&f), "{what}: {f:?}");
            if Instant::now() >= deadline {
                break;
            }
        }
    }

    async fn frame_or_panic(&mut self, wanted: &str) -> Frame {
        match self.next_within(READ_TIMEOUT).await {
            Event::Frame(f) => f,
            other => panic!("waiting for {wanted}: {other:?}"),
        }
    }

    /// PING is answered with the same bytes: the connection is alive and in good standing.
    pub async fn ping_ok(&mut self) {
        let data = *b"alive?!\0";
        self.send(PING, 0, 0, &data).await;
        loop {
            let f = self.frame_or_panic("PING ACK").await;
            assert_ne!(f.kind, GOAWAY, "{f:?}");
            if f.kind == PING && f.flags & ACK != 0 {
                assert_eq!(f.payload, data);
                return;
            }
        }
    }

    /// Reads the response on `stream` to its END_STREAM, opening windows as DATA arrives.
    pub async fn response(&mut self, stream: u32) -> Response {
        let mut r = Response {
            status: 0,
            fields: Vec::new(),
            body: Vec::new(),
            trailers: Vec::new(),
        };
        loop {
            let f = self.frame_or_panic("a response").await;
            assert!(
                f.kind != GOAWAY && !(f.kind == RST_STREAM && f.stream == stream),
                "{f:?}"
            );
            if f.stream != stream || !matches!(f.kind, HEADERS | DATA) {
                continue;
            }
            if f.kind == DATA {
                r.body.extend_from_slice(data_payload(&f));
                self.window_update(0, f.payload.len() as u32).await;
                self.window_update(stream, f.payload.len() as u32).await;
            } else if r.status == 0 || r.status < 200 {
                r.status = f.field(":status").expect(":status").parse().unwrap();
                r.fields = f.fields;
            } else {
                r.trailers = f.fields;
            }
            if f.flags & END_STREAM != 0 && r.status >= 200 {
                return r;
            }
        }
    }

    /// The DATA bytes that arrive on `stream` within `within`, and whether END_STREAM came.
    pub async fn data_within(&mut self, stream: u32, within: Duration) -> (usize, bool) {
        let deadline = Instant::now() + within;
        let mut n = 0;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_within(left).await {
                Event::Frame(f) if f.stream == stream && f.kind == DATA => {
                    n += data_payload(&f).len();
                    if f.flags & END_STREAM != 0 {
                        return (n, true);
                    }
                }
                Event::Frame(f) => assert!(f.kind != GOAWAY && f.kind != RST_STREAM, "{f:?}"),
                Event::Quiet => return (n, false),
                Event::Closed => panic!("closed while DATA was awaited"),
            }
        }
    }

    pub async fn window_update(&mut self, stream: u32, increment: u32) {
        if increment > 0 {
            self.send(WINDOW_UPDATE, 0, stream, &increment.to_be_bytes())
                .await;
        }
    }
}

/// A DATA frame's data, padding removed.
pub fn data_payload(f: &Frame) -> &[u8] {
    if f.flags & PADDED != 0 {
        let pad = f.payload[0] as usize;
        &f.payload[1..f.payload.len() - pad]
    } else {
        &f.payload
    }
}

/// A HEADERS frame's header block fragment: padding and priority removed.
fn header_fragment(f: &Frame) -> Vec<u8> {
    let mut p = &f.payload[..];
    let mut pad = 0;
    if f.flags & PADDED != 0 {
        pad = p[0] as usize;
        p = &p[1..];
    }
    if f.flags & PRIORITY_FLAG != 0 {
        p = &p[5..];
    }
    p[..p.len() - pad].to_vec()
}
