//! HTTP/2 frames on the wire (RFC 9113 §4, §6): the 9-byte header, each frame type's checks
//! that need no connection state, and the writers of the frames a server sends.
//!
//! Reading is split from the connection so the fuzz target drives it alone: [`Head::parse`]
//! reads a header, [`Frame::parse`] checks a whole frame's payload against its type (lengths,
//! stream 0 or not, padding) and returns the parts as slices of the payload. The connection
//! (`server/`) applies the stream states and flow control.

/// Bytes of a frame header.
pub const HEAD_LEN: usize = 9;

/// The smallest SETTINGS_MAX_FRAME_SIZE, and every peer's until it says otherwise.
pub const DEFAULT_MAX_FRAME: u32 = 16_384;

/// The largest SETTINGS_MAX_FRAME_SIZE allowed (RFC 9113 §6.5.2).
pub const MAX_MAX_FRAME: u32 = (1 << 24) - 1;

/// The largest flow-control window (RFC 9113 §6.9.1).
pub const MAX_WINDOW: u32 = (1 << 31) - 1;

/// The initial window of a connection and of each stream (RFC 9113 §6.9.2).
pub const DEFAULT_WINDOW: u32 = 65_535;

pub mod kind {
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
}

pub mod flag {
    pub const END_STREAM: u8 = 0x1;
    pub const ACK: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const PADDED: u8 = 0x8;
    pub const PRIORITY: u8 = 0x20;
}

/// SETTINGS identifiers (RFC 9113 §6.5.2, RFC 8441 §3).
pub mod setting {
    pub const HEADER_TABLE_SIZE: u16 = 0x1;
    pub const ENABLE_PUSH: u16 = 0x2;
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    pub const MAX_FRAME_SIZE: u16 = 0x5;
    pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
    pub const ENABLE_CONNECT_PROTOCOL: u16 = 0x8;
}

/// Error codes (RFC 9113 §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reason(pub u32);

impl Reason {
    pub const NO_ERROR: Reason = Reason(0x0);
    pub const PROTOCOL_ERROR: Reason = Reason(0x1);
    pub const INTERNAL_ERROR: Reason = Reason(0x2);
    pub const FLOW_CONTROL_ERROR: Reason = Reason(0x3);
    pub const STREAM_CLOSED: Reason = Reason(0x5);
    pub const FRAME_SIZE_ERROR: Reason = Reason(0x6);
    pub const REFUSED_STREAM: Reason = Reason(0x7);
    pub const CANCEL: Reason = Reason(0x8);
    pub const COMPRESSION_ERROR: Reason = Reason(0x9);
    pub const CONNECT_ERROR: Reason = Reason(0xa);
    pub const ENHANCE_YOUR_CALM: Reason = Reason(0xb);
}

/// A frame header (RFC 9113 §4.1); the reserved bit of the stream id is ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub len: u32,
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
}

impl Head {
    /// The header at the start of `b`, when `b` holds one.
    pub fn parse(b: &[u8]) -> Option<Head> {
        let h: &[u8; HEAD_LEN] = b.get(..HEAD_LEN)?.try_into().ok()?;
        Some(Head {
            len: u32::from_be_bytes([0, h[0], h[1], h[2]]),
            kind: h[3],
            flags: h[4],
            stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & MAX_WINDOW,
        })
    }

    pub fn has(&self, f: u8) -> bool {
        self.flags & f != 0
    }
}

/// Why a frame is refused, and how widely (RFC 9113 §5.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// The connection ends with GOAWAY and this code.
    Connection(Reason, &'static str),
    /// Only the stream is reset.
    Stream(u32, Reason, &'static str),
}

/// A frame checked against its type, its parts slices of the payload.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    Data {
        stream: u32,
        data: &'a [u8],
        end_stream: bool,
        /// The payload's whole length, padding included: what flow control counts.
        flow: u32,
    },
    Headers {
        stream: u32,
        /// The header block fragment.
        block: &'a [u8],
        end_stream: bool,
        end_headers: bool,
        /// The stream this one depends on, from the priority fields.
        depends_on: Option<u32>,
    },
    Priority {
        stream: u32,
        depends_on: u32,
    },
    Reset {
        stream: u32,
        reason: Reason,
    },
    Settings {
        ack: bool,
        /// Identifier and value pairs, 6 bytes each.
        pairs: &'a [u8],
    },
    PushPromise,
    Ping {
        ack: bool,
        data: [u8; 8],
    },
    GoAway {
        last: u32,
        reason: Reason,
    },
    WindowUpdate {
        stream: u32,
        increment: u32,
    },
    Continuation {
        stream: u32,
        block: &'a [u8],
        end_headers: bool,
    },
    /// A type this server does not know: ignored (RFC 9113 §5.5).
    Unknown,
}

fn conn(reason: Reason, why: &'static str) -> FrameError {
    FrameError::Connection(reason, why)
}

/// The payload without its padding (RFC 9113 §6.1): the pad length byte and the padding are
/// flow-controlled but carry nothing.
fn unpad(h: &Head, p: &[u8]) -> Result<(usize, usize), FrameError> {
    if !h.has(flag::PADDED) {
        return Ok((0, p.len()));
    }
    let pad = *p.first().ok_or(conn(
        Reason::FRAME_SIZE_ERROR,
        "padded frame without pad length",
    ))? as usize;
    if pad >= p.len() {
        return Err(conn(
            Reason::PROTOCOL_ERROR,
            "padding as long as the payload",
        ));
    }
    Ok((1, p.len() - pad))
}

/// A HEADERS frame's parts: the block without padding and priority fields.
fn headers_frame<'a>(h: &Head, payload: &'a [u8]) -> Result<Frame<'a>, FrameError> {
    let (mut start, end) = unpad(h, payload)?;
    let mut depends_on = None;
    if h.has(flag::PRIORITY) {
        let p = payload
            .get(start..start + 5)
            .filter(|_| start + 5 <= end)
            .ok_or(conn(Reason::FRAME_SIZE_ERROR, "HEADERS priority cut short"))?;
        depends_on = Some(u32::from_be_bytes([p[0], p[1], p[2], p[3]]) & MAX_WINDOW);
        start += 5;
    }
    Ok(Frame::Headers {
        stream: h.stream,
        block: payload.get(start..end).unwrap_or_default(),
        end_stream: h.has(flag::END_STREAM),
        end_headers: h.has(flag::END_HEADERS),
        depends_on,
    })
}

/// The frames of the connection itself (and PUSH_PROMISE, which no client may send).
fn control_frame<'a>(h: &Head, payload: &'a [u8]) -> Result<Frame<'a>, FrameError> {
    let stream = h.stream;
    let on_conn = |name: &'static str| {
        if stream != 0 {
            Err(conn(Reason::PROTOCOL_ERROR, name))
        } else {
            Ok(())
        }
    };
    Ok(match h.kind {
        kind::SETTINGS => {
            on_conn("SETTINGS on a stream")?;
            let ack = h.has(flag::ACK);
            if ack && !payload.is_empty() {
                return Err(conn(
                    Reason::FRAME_SIZE_ERROR,
                    "SETTINGS ACK with a payload",
                ));
            }
            if !payload.len().is_multiple_of(6) {
                return Err(conn(Reason::FRAME_SIZE_ERROR, "SETTINGS length"));
            }
            Frame::Settings {
                ack,
                pairs: payload,
            }
        }
        // RFC 9113 §8.4: a client cannot push.
        kind::PUSH_PROMISE => {
            return Err(conn(Reason::PROTOCOL_ERROR, "PUSH_PROMISE from a client"))
        }
        kind::PING => {
            on_conn("PING on a stream")?;
            let data: [u8; 8] = payload
                .try_into()
                .map_err(|_| conn(Reason::FRAME_SIZE_ERROR, "PING length"))?;
            Frame::Ping {
                ack: h.has(flag::ACK),
                data,
            }
        }
        kind::GOAWAY => {
            on_conn("GOAWAY on a stream")?;
            let p = payload
                .get(..8)
                .ok_or(conn(Reason::FRAME_SIZE_ERROR, "GOAWAY length"))?;
            Frame::GoAway {
                last: u32::from_be_bytes([p[0], p[1], p[2], p[3]]) & MAX_WINDOW,
                reason: Reason(u32::from_be_bytes([p[4], p[5], p[6], p[7]])),
            }
        }
        kind::WINDOW_UPDATE => {
            let p: [u8; 4] = payload
                .try_into()
                .map_err(|_| conn(Reason::FRAME_SIZE_ERROR, "WINDOW_UPDATE length"))?;
            Frame::WindowUpdate {
                stream,
                increment: u32::from_be_bytes(p) & MAX_WINDOW,
            }
        }
        _ => Frame::Unknown,
    })
}

impl<'a> Frame<'a> {
    /// Checks `payload` as the payload of a frame with header `h`.
    pub fn parse(h: &Head, payload: &'a [u8]) -> Result<Frame<'a>, FrameError> {
        let stream = h.stream;
        let on_stream = |name: &'static str| {
            if stream == 0 {
                Err(conn(Reason::PROTOCOL_ERROR, name))
            } else {
                Ok(())
            }
        };
        Ok(match h.kind {
            kind::DATA => {
                on_stream("DATA on stream 0")?;
                let (start, end) = unpad(h, payload)?;
                Frame::Data {
                    stream,
                    data: payload.get(start..end).unwrap_or_default(),
                    end_stream: h.has(flag::END_STREAM),
                    flow: payload.len() as u32,
                }
            }
            kind::HEADERS => {
                on_stream("HEADERS on stream 0")?;
                headers_frame(h, payload)?
            }
            kind::PRIORITY => {
                on_stream("PRIORITY on stream 0")?;
                let p: &[u8; 5] = payload.try_into().map_err(|_| {
                    FrameError::Stream(stream, Reason::FRAME_SIZE_ERROR, "PRIORITY length")
                })?;
                Frame::Priority {
                    stream,
                    depends_on: u32::from_be_bytes([p[0], p[1], p[2], p[3]]) & MAX_WINDOW,
                }
            }
            kind::RST_STREAM => {
                on_stream("RST_STREAM on stream 0")?;
                let p: [u8; 4] = payload
                    .try_into()
                    .map_err(|_| conn(Reason::FRAME_SIZE_ERROR, "RST_STREAM length"))?;
                Frame::Reset {
                    stream,
                    reason: Reason(u32::from_be_bytes(p)),
                }
            }
            kind::SETTINGS
            | kind::PUSH_PROMISE
            | kind::PING
            | kind::GOAWAY
            | kind::WINDOW_UPDATE => control_frame(h, payload)?,
            kind::CONTINUATION => {
                on_stream("CONTINUATION on stream 0")?;
                Frame::Continuation {
                    stream,
                    block: payload,
                    end_headers: h.has(flag::END_HEADERS),
                }
            }
            _ => Frame::Unknown,
        })
    }
}

// --- Writers --------------------------------------------------------------------------------

/// A frame header.
pub fn head_bytes(len: usize, kind: u8, flags: u8, stream: u32) -> [u8; HEAD_LEN] {
    let l = (len as u32).to_be_bytes();
    let s = (stream & MAX_WINDOW).to_be_bytes();
    [l[1], l[2], l[3], kind, flags, s[0], s[1], s[2], s[3]]
}

/// A frame header into `out`.
pub fn head(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    out.extend_from_slice(&head_bytes(len, kind, flags, stream));
}

/// SETTINGS with `pairs` (identifier, value).
pub fn settings(out: &mut Vec<u8>, pairs: &[(u16, u32)]) {
    head(out, pairs.len() * 6, kind::SETTINGS, 0, 0);
    for (id, value) in pairs {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&value.to_be_bytes());
    }
}

pub fn settings_ack(out: &mut Vec<u8>) {
    head(out, 0, kind::SETTINGS, flag::ACK, 0);
}

pub fn ping_ack(out: &mut Vec<u8>, data: &[u8; 8]) {
    head(out, 8, kind::PING, flag::ACK, 0);
    out.extend_from_slice(data);
}

pub fn window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    head(out, 4, kind::WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&(increment & MAX_WINDOW).to_be_bytes());
}

pub fn reset(out: &mut Vec<u8>, stream: u32, reason: Reason) {
    head(out, 4, kind::RST_STREAM, 0, stream);
    out.extend_from_slice(&reason.0.to_be_bytes());
}

pub fn goaway(out: &mut Vec<u8>, last: u32, reason: Reason) {
    head(out, 8, kind::GOAWAY, 0, 0);
    out.extend_from_slice(&(last & MAX_WINDOW).to_be_bytes());
    out.extend_from_slice(&reason.0.to_be_bytes());
}

/// A header block as HEADERS (with END_STREAM when `end_stream`) and as many CONTINUATION
/// frames as `max_frame` needs.
pub fn headers(out: &mut Vec<u8>, stream: u32, block: &[u8], end_stream: bool, max_frame: usize) {
    let mut chunks = block.chunks(max_frame.max(1));
    let first = chunks.next().unwrap_or_default();
    let more = block.len() > first.len();
    let mut flags = if end_stream { flag::END_STREAM } else { 0 };
    if !more {
        flags |= flag::END_HEADERS;
    }
    head(out, first.len(), kind::HEADERS, flags, stream);
    out.extend_from_slice(first);
    let mut rest = chunks.peekable();
    while let Some(c) = rest.next() {
        let flags = if rest.peek().is_none() {
            flag::END_HEADERS
        } else {
            0
        };
        head(out, c.len(), kind::CONTINUATION, flags, stream);
        out.extend_from_slice(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        head(&mut v, payload.len(), kind, flags, stream);
        v.extend_from_slice(payload);
        v
    }

    fn parse(b: &[u8]) -> Result<Frame<'_>, FrameError> {
        let h = Head::parse(b).expect("a header");
        Frame::parse(&h, &b[HEAD_LEN..])
    }

    #[test]
    fn a_header_round_trips_and_the_reserved_bit_is_ignored() {
        // RFC 9113 §4.1: the reserved bit MUST be ignored when receiving.
        let mut b = frame(kind::PING, 0, 0, &[0; 8]);
        b[5] |= 0x80;
        let h = Head::parse(&b).expect("a header");
        assert_eq!(h.stream, 0);
        assert_eq!(h.len, 8);
        assert!(Head::parse(&b[..8]).is_none());
    }

    #[test]
    fn padding_is_removed_and_overlong_padding_refused() {
        // RFC 9113 §6.1
        let b = frame(
            kind::DATA,
            flag::PADDED | flag::END_STREAM,
            1,
            &[2, b'h', b'i', 0, 0],
        );
        assert_eq!(
            parse(&b),
            Ok(Frame::Data {
                stream: 1,
                data: b"hi",
                end_stream: true,
                flow: 5
            })
        );
        let b = frame(kind::DATA, flag::PADDED, 1, &[4, 0, 0, 0]);
        assert!(matches!(
            parse(&b),
            Err(FrameError::Connection(Reason::PROTOCOL_ERROR, _))
        ));
        let b = frame(kind::DATA, flag::PADDED, 1, &[]);
        assert!(parse(&b).is_err());
    }

    #[test]
    fn stream_zero_rules() {
        // RFC 9113 §6.1, §6.2, §6.3, §6.4, §6.10: stream frames on stream 0; §6.5, §6.7,
        // §6.8: connection frames on a stream.
        for k in [
            kind::DATA,
            kind::HEADERS,
            kind::RST_STREAM,
            kind::CONTINUATION,
        ] {
            let b = frame(k, 0, 0, &[0; 4]);
            assert!(
                matches!(
                    parse(&b),
                    Err(FrameError::Connection(Reason::PROTOCOL_ERROR, _))
                ),
                "{k}"
            );
        }
        for k in [kind::SETTINGS, kind::PING, kind::GOAWAY] {
            let b = frame(k, 0, 3, &[0; 8]);
            assert!(
                matches!(
                    parse(&b),
                    Err(FrameError::Connection(Reason::PROTOCOL_ERROR, _))
                ),
                "{k}"
            );
        }
    }

    #[test]
    fn lengths_are_checked() {
        // RFC 9113 §6.3 (a stream error), §6.4, §6.5, §6.7, §6.9.
        let b = frame(kind::PRIORITY, 0, 1, &[0; 4]);
        assert!(matches!(
            parse(&b),
            Err(FrameError::Stream(1, Reason::FRAME_SIZE_ERROR, _))
        ));
        for (k, len) in [
            (kind::RST_STREAM, 3),
            (kind::SETTINGS, 5),
            (kind::PING, 7),
            (kind::WINDOW_UPDATE, 5),
        ] {
            let b = frame(
                k,
                0,
                if k == kind::RST_STREAM { 1 } else { 0 },
                &vec![0; len],
            );
            assert!(
                matches!(
                    parse(&b),
                    Err(FrameError::Connection(Reason::FRAME_SIZE_ERROR, _))
                ),
                "{k}"
            );
        }
        let b = frame(kind::SETTINGS, flag::ACK, 0, &[0; 6]);
        assert!(matches!(
            parse(&b),
            Err(FrameError::Connection(Reason::FRAME_SIZE_ERROR, _))
        ));
    }

    #[test]
    fn headers_with_priority_and_padding() {
        // RFC 9113 §6.2
        let mut p = vec![1];
        p.extend_from_slice(&[0, 0, 0, 3, 16]);
        p.extend_from_slice(&[0x82, 0x84]);
        p.push(0);
        let b = frame(
            kind::HEADERS,
            flag::PADDED | flag::PRIORITY | flag::END_HEADERS,
            5,
            &p,
        );
        assert_eq!(
            parse(&b),
            Ok(Frame::Headers {
                stream: 5,
                block: &[0x82, 0x84],
                end_stream: false,
                end_headers: true,
                depends_on: Some(3),
            })
        );
    }

    #[test]
    fn a_client_push_promise_and_unknown_types() {
        // RFC 9113 §8.4 and §5.5.
        let b = frame(kind::PUSH_PROMISE, 0, 1, &[0; 4]);
        assert!(parse(&b).is_err());
        let b = frame(0x42, 0xff, 7, b"whatever");
        assert_eq!(parse(&b), Ok(Frame::Unknown));
    }

    #[test]
    fn header_blocks_are_split_into_continuations() {
        let mut out = Vec::new();
        headers(&mut out, 1, &[7u8; 10], true, 4);
        // HEADERS(4) + CONTINUATION(4) + CONTINUATION(2, END_HEADERS)
        assert_eq!(out.len(), 3 * HEAD_LEN + 10);
        let h = Head::parse(&out).expect("a header");
        assert_eq!((h.kind, h.flags), (kind::HEADERS, flag::END_STREAM));
        let last = Head::parse(&out[2 * HEAD_LEN + 8..]).expect("a header");
        assert_eq!(
            (last.kind, last.flags, last.len),
            (kind::CONTINUATION, flag::END_HEADERS, 2)
        );
    }
}
