//! The soak's TLS clients: a new TCP and TLS connection (a full handshake) for every request,
//! rustls on a blocking thread, HTTP/1.1 with `Connection: close` written and parsed by hand
//! (`Content-Length`, chunked, or up to the close), the answer judged by [`verify`].

use std::io::{Read as _, Write as _};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::clients::{failed, think};
use super::rampart::HOST;
use super::tally::Outcome;
use super::traffic::{pick, verify, Ctx, Op, Rng, REQUEST_TIMEOUT};

/// A client that opens a new TLS connection (a full handshake) for every request.
pub async fn tls_client(ctx: Arc<Ctx>, seed: u64) {
    let mut rng = Rng(seed);
    while ctx.running() {
        let op = pick(&ctx, &mut rng);
        let class = format!("tls {}", op.name());
        let started = Instant::now();
        let c = ctx.clone();
        let o = op.clone();
        let (answered, outcome) = tokio::task::spawn_blocking(move || tls_once(&c, &o))
            .await
            .unwrap_or_else(|e| (false, failed("client panic", e.to_string())));
        ctx.tally.record(&class, started, answered, outcome);
        think(&ctx).await;
    }
}

/// One request on a new TLS connection (blocking).
fn tls_once(ctx: &Ctx, op: &Op) -> (bool, Outcome) {
    let what = format!("{} {}", op.method(), op.path(ctx));
    let tcp = match std::net::TcpStream::connect_timeout(&ctx.https, Duration::from_secs(5)) {
        Ok(t) => t,
        Err(e) => return (false, failed("connect failed", format!("{what}: {e}"))),
    };
    let _ = tcp.set_read_timeout(Some(REQUEST_TIMEOUT));
    let _ = tcp.set_write_timeout(Some(REQUEST_TIMEOUT));
    let _ = tcp.set_nodelay(true);
    // invariant: HOST is a valid DNS name.
    let name = rustls::pki_types::ServerName::try_from(HOST).expect("a DNS name");
    let tls = match rustls::ClientConnection::new(ctx.tls.clone(), name) {
        Ok(t) => t,
        Err(e) => return (false, failed("tls setup failed", e.to_string())),
    };
    let mut s = rustls::StreamOwned::new(tls, tcp);
    if let Err(e) = s.write_all(&op.request_bytes(ctx)).and_then(|()| s.flush()) {
        let cause = if s.conn.is_handshaking() {
            "tls handshake failed"
        } else {
            "error before the answer"
        };
        return (false, failed(cause, format!("{what}: {e}")));
    }
    let mut buf = Vec::new();
    let mut chunk = [0u8; 64 << 10];
    let read_err = loop {
        match s.read(&mut chunk) {
            Ok(0) => break None,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if framed_complete(&buf) {
                    break None;
                }
            }
            Err(e) => break Some(e),
        }
    };
    match parse_h1(&buf) {
        Parsed::NoHead => {
            let cause = if s.conn.is_handshaking() {
                "tls handshake failed"
            } else {
                "connection closed before the answer"
            };
            (false, failed(cause, format!("{what}: {read_err:?}")))
        }
        Parsed::Cut(status, got) => (
            true,
            failed(
                "body cut",
                format!("{what} → {status}: after {got} bytes ({read_err:?})"),
            ),
        ),
        Parsed::Complete(status, headers, body) => {
            let header = |name: &str| {
                headers
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.clone())
            };
            (true, verify(ctx, op, status, &header, &body))
        }
    }
}

/// A hand-parsed HTTP/1.1 response.
enum Parsed {
    NoHead,
    /// Status and body bytes received before the framing ended early.
    Cut(u16, usize),
    Complete(u16, Vec<(String, String)>, Vec<u8>),
}

fn framed_complete(buf: &[u8]) -> bool {
    matches!(parse_h1(buf), Parsed::Complete(..))
}

/// Parses a response with `Content-Length` or chunked framing (or none: up to the close).
fn parse_h1(buf: &[u8]) -> Parsed {
    let Some(head) = crate::http1::head(buf) else {
        return Parsed::NoHead;
    };
    let rest = &buf[head.end..];
    let status = head.status;
    match head.framing {
        crate::http1::Framing::Chunked => match crate::http1::chunked(rest) {
            crate::http1::Chunked::Complete(body) => Parsed::Complete(status, head.fields, body),
            crate::http1::Chunked::Cut(n) => Parsed::Cut(status, n),
        },
        crate::http1::Framing::Length(n) if rest.len() >= n => {
            Parsed::Complete(status, head.fields, rest[..n].to_vec())
        }
        crate::http1::Framing::Length(_) => Parsed::Cut(status, rest.len()),
        crate::http1::Framing::UntilClose => Parsed::Complete(status, head.fields, rest.to_vec()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(p: Parsed) -> Option<Vec<u8>> {
        match p {
            Parsed::Complete(_, _, b) => Some(b),
            _ => None,
        }
    }

    #[test]
    fn framing_says_when_an_answer_is_whole() {
        let cl = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        assert_eq!(body(parse_h1(cl)), Some(b"hello".to_vec()));
        assert!(matches!(parse_h1(&cl[..cl.len() - 1]), Parsed::Cut(200, 4)));
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n";
        assert_eq!(body(parse_h1(chunked)), Some(b"hello".to_vec()));
        // Without the last chunk the answer is cut, however much data came.
        let no_last = &chunked[..chunked.len() - 5];
        assert!(matches!(parse_h1(no_last), Parsed::Cut(200, 5)));
        assert!(matches!(parse_h1(b"HTTP/1.1 200 OK\r\n"), Parsed::NoHead));
    }
}
