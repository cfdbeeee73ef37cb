//! The framing of response heads from origins (`rampart_screen::h1::response_framing`) on
//! arbitrary bytes: never panics, and every framing it accepts is the one the head's fields
//! state without ambiguity (one `Content-Length` of plain digits, or one `chunked` and nothing
//! else; no body for `HEAD`, 1xx, 204 and 304). rampart's response-head parser
//! (`http1::client::head::parse`) agrees with it, and reads the same head however the bytes are
//! split into reads, and the body after it (length or chunked, with its trailer section) the
//! same way too. The first byte says whether the request was `HEAD` and how to split.
#![no_main]

use libfuzzer_sys::fuzz_target;
use bytes::BytesMut;
use rampart_proxy::http1::body::Decoder;
use rampart_proxy::http1::client::head::{parse, ResponseHead};
use rampart_screen::h1::{response_framing, ResponseFraming};

/// What a parse saw: the head's status, framing, reuse and field count, or a refusal.
fn summary(r: &Result<Option<ResponseHead>, impl std::fmt::Debug>) -> String {
    match r {
        Ok(Some(h)) => format!("{} {:?} {} {}", h.status, h.framing, h.keep_alive, h.headers.len()),
        Ok(None) => "incomplete".to_owned(),
        Err(e) => format!("refused {e:?}"),
    }
}

/// The head read from `raw` arriving `step` bytes at a time, and then its body as the origin
/// client decodes it (the bytes, its trailer section, and whether it ended or broke).
fn in_reads(raw: &[u8], step: usize, head: bool) -> String {
    let mut buf = BytesMut::new();
    let mut last = "incomplete".to_owned();
    let mut chunks = raw.chunks(step.max(1));
    let mut parsed = None;
    for chunk in &mut chunks {
        buf.extend_from_slice(chunk);
        let r = parse(&mut buf, 8192, 64, head);
        last = summary(&r);
        if !matches!(r, Ok(None)) {
            parsed = r.ok().flatten();
            break;
        }
    }
    let Some(h) = parsed else { return last };
    let mut decoder = match h.framing {
        ResponseFraming::Length(n) => Decoder::Length(n),
        ResponseFraming::Chunked => Decoder::chunked(),
        ResponseFraming::None | ResponseFraming::UntilClose => return last,
    };
    let (mut body, mut trailers) = (Vec::new(), Vec::new());
    let mut outcome = "cut";
    'read: loop {
        loop {
            match decoder.decode_keeping(&mut buf, Some(&mut trailers)) {
                Ok(Some(d)) => body.extend_from_slice(&d),
                Ok(None) if decoder.is_done() => {
                    outcome = "ended";
                    break 'read;
                }
                Ok(None) => break,
                Err(_) => {
                    outcome = "broken";
                    break 'read;
                }
            }
        }
        match chunks.next() {
            Some(c) => buf.extend_from_slice(c),
            None => break,
        }
    }
    if let ResponseFraming::Length(n) = h.framing {
        assert!(body.len() as u64 <= n);
        assert_eq!(outcome == "ended", body.len() as u64 == n);
    }
    format!("{last} {outcome} {body:?} {trailers:?}")
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, raw)) = data.split_first() else {
        return;
    };
    let head = first & 1 == 1;
    let whole = in_reads(raw, raw.len(), head);
    assert_eq!(whole, in_reads(raw, usize::from(first >> 1), head), "split reads");
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut res = httparse::Response::new(&mut headers);
    let Ok(httparse::Status::Complete(_)) = res.parse(raw) else {
        return;
    };
    let Ok(framing) = response_framing(&res, head) else {
        assert!(whole.starts_with("refused"), "{whole}");
        return;
    };
    let values = |name: &str| -> Vec<&[u8]> {
        res.headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value.trim_ascii())
            .collect()
    };
    let lengths = values("content-length");
    let codings = values("transfer-encoding");
    // Whatever the status, an accepted head is unambiguous.
    assert!(lengths.len() <= 1, "{lengths:?}");
    assert!(lengths.is_empty() || codings.is_empty());
    let status = res.code.unwrap_or(0);
    let bodiless = head || (100..200).contains(&status) || status == 204 || status == 304;
    match framing {
        ResponseFraming::None => {
            let zero = lengths.first().is_some_and(|v| v.iter().all(|b| *b == b'0'));
            assert!(bodiless || zero, "{status} {lengths:?}");
        }
        ResponseFraming::Length(n) => {
            assert!(!bodiless && n > 0);
            let text = std::str::from_utf8(lengths[0]).unwrap_or("");
            assert_eq!(text.parse::<u64>().ok(), Some(n));
        }
        ResponseFraming::Chunked => {
            assert!(!bodiless && lengths.is_empty());
            let all: Vec<&[u8]> = codings
                .iter()
                .flat_map(|v| v.split(|b| *b == b','))
                .map(<[u8]>::trim_ascii)
                .filter(|c| !c.is_empty())
                .collect();
            assert_eq!(all.len(), 1, "{all:?}");
            assert!(all[0].eq_ignore_ascii_case(b"chunked"));
        }
        ResponseFraming::UntilClose => {
            assert!(!bodiless && lengths.is_empty() && codings.is_empty());
        }
    }
});
