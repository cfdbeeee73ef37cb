//! HTTP/1.1 responses as the benchmark clients read them off a socket: the head parsed from the
//! bytes received so far ([`head`]), and a chunked body decoded ([`chunked`]). Each client keeps
//! its own read loop (plain or TLS, blocking or not, keeping the body or not); the parsing is
//! this one.

/// How a response's body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// After `Content-Length` bytes.
    Length(usize),
    /// At the last chunk.
    Chunked,
    /// When the server closes the connection.
    UntilClose,
}

/// A response head.
#[derive(Debug)]
pub struct Head {
    pub status: u16,
    /// Where the body starts in the buffer (after the blank line).
    pub end: usize,
    /// The header fields, names as sent.
    pub fields: Vec<(String, String)>,
    pub framing: Framing,
    /// The server closes the connection after this response (`Connection: close`, HTTP/1.0).
    pub close: bool,
}

impl Head {
    /// The first value of field `name` (any case).
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The response head at the start of `buf`: `None` until all of it has arrived. A status line
/// without a number reads as status 0.
pub fn head(buf: &[u8]) -> Option<Head> {
    let at = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let text = String::from_utf8_lossy(&buf[..at]);
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let fields: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let mut h = Head {
        status,
        end: at + 4,
        fields,
        framing: Framing::UntilClose,
        close: status_line.starts_with("HTTP/1.0"),
    };
    if h.field("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        h.framing = Framing::Chunked;
    } else if let Some(n) = h.field("content-length").and_then(|v| v.parse().ok()) {
        h.framing = Framing::Length(n);
    }
    if let Some(c) = h.field("connection") {
        h.close = c.eq_ignore_ascii_case("close");
    }
    Some(h)
}

/// A chunked body decoded from the bytes after the head.
#[derive(Debug, PartialEq, Eq)]
pub enum Chunked {
    /// Up to the last chunk (no trailers are expected): the body.
    Complete(Vec<u8>),
    /// Not all there yet (or malformed): the body bytes received so far.
    Cut(usize),
}

/// Decodes the chunked body at the start of `rest`.
pub fn chunked(rest: &[u8]) -> Chunked {
    let mut body = Vec::new();
    let mut at = 0;
    loop {
        let Some(eol) = rest[at..].windows(2).position(|w| w == b"\r\n") else {
            return Chunked::Cut(body.len());
        };
        let line = String::from_utf8_lossy(&rest[at..at + eol]);
        let Ok(n) = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16) else {
            return Chunked::Cut(body.len());
        };
        at += eol + 2;
        if n == 0 {
            return if rest.len() >= at + 2 {
                Chunked::Complete(body)
            } else {
                Chunked::Cut(body.len())
            };
        }
        if rest.len() < at + n + 2 {
            return Chunked::Cut(body.len() + rest.len().saturating_sub(at));
        }
        body.extend_from_slice(&rest[at..at + n]);
        at += n + 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_and_chunked_bodies() {
        assert!(head(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n").is_none());
        let h = head(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nCache-Status: rampart; hit\r\n\r\nhello",
        )
        .unwrap_or_else(|| panic!("a head"));
        assert_eq!(
            (h.status, h.end, h.framing, h.close),
            (200, 66, Framing::Length(5), false)
        );
        assert_eq!(h.field("cache-status"), Some("rampart; hit"));
        let h = head(b"HTTP/1.0 404 Not Found\r\n\r\n").unwrap_or_else(|| panic!("a head"));
        assert_eq!(
            (h.status, h.framing, h.close),
            (404, Framing::UntilClose, true)
        );
        let h = head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
            .unwrap_or_else(|| panic!("a head"));
        assert_eq!((h.framing, h.close), (Framing::Chunked, true));
        let body = b"3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n";
        assert_eq!(chunked(body), Chunked::Complete(b"hello".to_vec()));
        assert_eq!(chunked(&body[..body.len() - 5]), Chunked::Cut(5));
    }
}
