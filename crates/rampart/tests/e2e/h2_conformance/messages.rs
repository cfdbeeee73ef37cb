//! RFC 9113 §8 (HTTP semantics over HTTP/2: message framing, field validity, pseudo-headers,
//! push) and RFC 7541 (what the server's HPACK decoder must refuse). A malformed request may
//! be refused with RST_STREAM(PROTOCOL_ERROR) or a 400; the origin must never receive it.

use super::client::*;
use super::hpack;
use super::{encode, get_with, owned, post_fields, Server};

/// Each `(path, fields)` is a malformed request on a connection of its own.
async fn all_refused<P: AsRef<str>>(s: &Server, cases: &[(P, Vec<(String, String)>)]) {
    for (path, fields) in cases {
        s.assert_refused(fields, path.as_ref()).await;
    }
}

/// GET `path` with one extra field.
fn get_plus(path: &str, name: &str, value: &str) -> (String, Vec<(String, String)>) {
    (path.to_string(), get_with(path, &[(name, value)]))
}

/// A request sent as HEADERS with one raw header block whose own bytes are `tail` after the
/// GET's fields is a connection error COMPRESSION_ERROR (RFC 7541 §2.3.3, §4.2, §5.2, §6.3).
async fn compression_error(s: &Server, path: &str, prefix: &[u8], tail: &[u8]) {
    let mut c = s.open().await;
    let mut block = prefix.to_vec();
    block.extend(encode(&get_with(path, &[])));
    block.extend_from_slice(tail);
    c.send(HEADERS, END_HEADERS | END_STREAM, 1, &block).await;
    c.expect_goaway(COMPRESSION_ERROR).await;
    assert!(!s.origin_saw(path), "the origin received {path}");
}

/// §8.1.1: a content-length that the DATA does not add up to makes the request malformed,
/// whether the body falls short or runs over.
#[tokio::test]
async fn a_content_length_the_data_does_not_match_is_malformed() {
    let s = Server::start().await;
    for (declared, sent) in [("10", &b"short"[..]), ("2", &b"longer"[..])] {
        let mut c = s.open().await;
        c.headers(1, 0, &post_fields("/cl", &[("content-length", declared)]))
            .await;
        c.send(DATA, END_STREAM, 1, sent).await;
        c.expect_malformed(1).await;
    }
    let complete = s
        .origin
        .seen()
        .iter()
        .any(|x| x.uri.path() == "/cl" && x.body_len > 0);
    assert!(
        !complete,
        "the origin received a request whose body broke its content-length"
    );
}

/// §8.1: a request's trailers (a last HEADERS with END_STREAM) are accepted.
#[tokio::test]
async fn trailers_are_accepted() {
    let s = Server::start().await;
    let mut c = s.open().await;
    c.headers(1, 0, &post_fields("/trailers", &[("te", "trailers")]))
        .await;
    c.send(DATA, 0, 1, b"body").await;
    c.headers(1, END_STREAM, &owned(&[("x-checksum", "abc")]))
        .await;
    assert_eq!(c.response(1).await.status, 200);
    let seen = s.origin_request("/trailers");
    assert_eq!(seen.body_len, 4);
}

/// §8.1: trailers must not carry pseudo-headers.
#[tokio::test]
async fn trailers_with_a_pseudo_header_are_malformed() {
    let s = Server::start().await;
    let mut c = s.open().await;
    c.headers(1, 0, &post_fields("/pseudo-trailer", &[])).await;
    c.send(DATA, 0, 1, b"body").await;
    c.headers(1, END_STREAM, &owned(&[(":path", "/elsewhere")]))
        .await;
    c.expect_malformed(1).await;
}

/// §8.1: a second HEADERS without END_STREAM after the request's head is malformed.
#[tokio::test]
async fn a_second_headers_without_end_stream_is_malformed() {
    let s = Server::start().await;
    let mut c = s.open().await;
    c.headers(1, 0, &post_fields("/second-headers", &[])).await;
    c.headers(1, 0, &owned(&[("x-more", "1")])).await;
    c.expect_malformed(1).await;
}

/// §8.2, §8.2.1: field names must be lowercase tokens without SP or COLON; values must not
/// hold NUL, CR or LF, nor start or end with whitespace. Each breach makes the request malformed.
#[tokio::test]
async fn invalid_field_names_and_values_are_malformed() {
    let s = Server::start().await;
    let cases = [
        get_plus("/upper", "X-Upper", "1"),
        get_plus("/space-name", "x name", "1"),
        get_plus("/colon-name", "x:name", "1"),
        get_plus("/nul", "x-v", "a\0b"),
        get_plus("/cr", "x-v", "a\rb"),
        get_plus("/lf", "x-v", "a\nb"),
        get_plus("/lead-space", "x-v", " a"),
        get_plus("/trail-tab", "x-v", "a\t"),
    ];
    all_refused(&s, &cases).await;
}

/// §8.2.2: connection-specific fields make a request malformed; so does TE other than
/// "trailers" (which is accepted).
#[tokio::test]
async fn connection_specific_fields_are_malformed() {
    let s = Server::start().await;
    let cases = [
        get_plus("/connection", "connection", "keep-alive"),
        get_plus("/keep-alive", "keep-alive", "timeout=5"),
        get_plus("/proxy-connection", "proxy-connection", "keep-alive"),
        get_plus("/transfer-encoding", "transfer-encoding", "chunked"),
        get_plus("/upgrade", "upgrade", "websocket"),
        get_plus("/te-gzip", "te", "gzip"),
    ];
    all_refused(&s, &cases).await;
    let mut c = s.open().await;
    c.headers(
        1,
        END_STREAM,
        &get_with("/te-trailers", &[("te", "trailers")]),
    )
    .await;
    assert_eq!(c.response(1).await.status, 200);
}

/// §8.2.2, §8.2: the server's own messages carry no connection-specific fields (even when the
/// HTTP/1.1 origin sent some), only lowercase names, and pseudo-headers first.
#[tokio::test]
async fn responses_carry_no_connection_specific_fields() {
    let s = Server::start().await;
    for t in Transport::BOTH {
        let mut c = s.connect(t).await;
        c.handshake(&[]).await;
        c.get(1, "/big").await;
        let r = c.response(1).await;
        assert_eq!(r.status, 200);
        for (name, _) in &r.fields {
            let banned = [
                "connection",
                "keep-alive",
                "proxy-connection",
                "transfer-encoding",
                "upgrade",
            ];
            assert!(
                !banned.contains(&name.as_str()),
                "{t:?}: {name} in {:?}",
                r.fields
            );
            assert_eq!(name, &name.to_lowercase(), "{t:?}");
        }
        let first_regular = r
            .fields
            .iter()
            .position(|(n, _)| !n.starts_with(':'))
            .unwrap_or(0);
        assert!(
            r.fields[first_regular..]
                .iter()
                .all(|(n, _)| !n.starts_with(':')),
            "{:?}",
            r.fields
        );
    }
}

/// §8.2.3: cookie crumbs are joined with "; " before the request goes to an HTTP/1.1 origin.
#[tokio::test]
async fn cookie_crumbs_are_joined_for_the_http11_origin() {
    let s = Server::start().await;
    let mut c = s.open().await;
    c.headers(
        1,
        END_STREAM,
        &get_with("/cookies", &[("cookie", "a=1"), ("cookie", "b=2")]),
    )
    .await;
    assert_eq!(c.response(1).await.status, 200);
    let seen = s.origin_request("/cookies");
    let cookies: Vec<_> = seen.headers.get_all("cookie").iter().collect();
    assert_eq!(cookies, ["a=1; b=2"]);
}

/// §8.3.1: :method, :scheme and :path are each required exactly once.
#[tokio::test]
async fn missing_or_duplicated_pseudo_headers_are_malformed() {
    let s = Server::start().await;
    let without = |name: &str, path: &str| -> Vec<(String, String)> {
        get_with(path, &[])
            .into_iter()
            .filter(|(n, _)| n != name)
            .collect()
    };
    let mut twice = get_with("/twice", &[]);
    twice.push((":path".into(), "/twice".into()));
    let cases = [
        ("/no-method", without(":method", "/no-method")),
        ("/no-scheme", without(":scheme", "/no-scheme")),
        ("", without(":path", "")),
        ("/twice", twice),
    ];
    all_refused(&s, &cases).await;
}

/// §8.3: undefined pseudo-headers, response ones (:status) and pseudo-headers after a regular
/// field make a request malformed; §8.3.1: so does an empty :path.
#[tokio::test]
async fn misplaced_unknown_or_empty_pseudo_headers_are_malformed() {
    let s = Server::start().await;
    let mut late = get_with("/late", &[("x-first", "1")]);
    let path = late.remove(3);
    late.push(path);
    let cases = [
        (
            "/unknown-pseudo",
            get_with("/unknown-pseudo", &[(":foo", "bar")]),
        ),
        ("/status", get_with("/status", &[(":status", "200")])),
        ("/late", late),
        ("", get_with("", &[])),
    ];
    all_refused(&s, &cases).await;
}

/// §8.4, §6.5.2: the server never pushes (push is on by default for the client), and a
/// client's SETTINGS_ENABLE_PUSH=0 is accepted.
#[tokio::test]
async fn the_server_never_sends_push_promise() {
    let s = Server::start().await;
    for push in [None, Some(0)] {
        let ours: Vec<_> = push.map(|v| (ENABLE_PUSH, v)).into_iter().collect();
        let mut c = s.open_with(&ours).await;
        c.get(1, "/").await;
        assert_eq!(c.response(1).await.status, 200);
        c.expect_no("a PUSH_PROMISE", |f| f.kind == PUSH_PROMISE)
            .await;
    }
}

/// §8.4: a client cannot push; PUSH_PROMISE from it is a connection error PROTOCOL_ERROR.
#[tokio::test]
async fn a_push_promise_from_the_client_is_a_protocol_error() {
    let s = Server::start().await;
    let mut c = s.open().await;
    c.get(1, "/slow").await;
    let mut p = 2u32.to_be_bytes().to_vec();
    p.extend(encode(&get_with("/pushed", &[])));
    c.send(PUSH_PROMISE, END_HEADERS, 1, &p).await;
    c.expect_goaway(PROTOCOL_ERROR).await;
    assert!(!s.origin_saw("/pushed"));
}

/// RFC 7541 §4.2, §6.3: a dynamic table size update above SETTINGS_HEADER_TABLE_SIZE (4096),
/// or anywhere but the start of a block, is a decoding error: COMPRESSION_ERROR.
#[tokio::test]
async fn a_table_size_update_too_large_or_late_is_a_compression_error() {
    let s = Server::start().await;
    let mut too_large = Vec::new();
    hpack::int(&mut too_large, 5, 0x20, 4097);
    compression_error(&s, "/too-large", &too_large, &[]).await;
    compression_error(&s, "/late-update", &[], &[0x20]).await;
}

/// RFC 7541 §4.2, §2.3.2: a size update within the limit, and the client's own dynamic table
/// entries (literal with incremental indexing, then its index), are accepted.
#[tokio::test]
async fn the_clients_table_size_update_and_dynamic_table_are_honoured() {
    let s = Server::start().await;
    let mut c = s.open().await;
    let mut block = vec![0x3f, 0xe1, 0x1f]; // size update to 4096 (31 + 4065)
    block.extend(encode(&get_with("/indexed-1", &[])));
    hpack::literal_indexed(&mut block, "x-indexed", "yes");
    c.send(HEADERS, END_HEADERS | END_STREAM, 1, &block).await;
    assert_eq!(c.response(1).await.status, 200);
    let mut block = encode(&get_with("/indexed-2", &[]));
    block.push(0x80 | 62); // the newest dynamic entry: x-indexed: yes
    c.send(HEADERS, END_HEADERS | END_STREAM, 3, &block).await;
    assert_eq!(c.response(3).await.status, 200);
    for seen in s
        .origin
        .seen()
        .iter()
        .filter(|x| x.uri.path().starts_with("/indexed"))
    {
        assert_eq!(seen.headers["x-indexed"], "yes", "{}", seen.uri);
    }
}

/// RFC 7541 §5.2: Huffman padding over 7 bits, padding that is not the EOS prefix, and EOS
/// itself in a string are decoding errors: COMPRESSION_ERROR.
#[tokio::test]
async fn bad_huffman_strings_are_a_compression_error() {
    let s = Server::start().await;
    // "a" is 00011: then 3 one-bits is correct padding (0x1f).
    for (path, coded) in [
        ("/pad-zeros", &[0x18][..]),
        ("/pad-too-long", &[0x1f, 0xff][..]),
        ("/eos", &[0xff, 0xff, 0xff, 0xff][..]),
    ] {
        let mut tail = vec![0x00, 3, b'x', b'-', b'h', 0x80 | coded.len() as u8];
        tail.extend_from_slice(coded);
        compression_error(&s, path, &[], &tail).await;
    }
}

/// RFC 7541 §2.3.3, §6.1: index 0, or an index past both tables, is a decoding error.
#[tokio::test]
async fn bad_indexes_are_a_compression_error() {
    let s = Server::start().await;
    compression_error(&s, "/index-0", &[], &[0x80]).await;
    compression_error(&s, "/index-far", &[], &[0xff, 0x80, 0x01]).await;
}

/// RFC 7541 §4.2, RFC 9113 §6.5.2: after the client lowers SETTINGS_HEADER_TABLE_SIZE to 0 the
/// server's encoder opens its next block with a size update within it and never uses more
/// (the client's decoder refuses anything else).
#[tokio::test]
async fn the_servers_encoder_honours_a_smaller_header_table_size() {
    let s = Server::start().await;
    let mut c = s.open_with(&[(HEADER_TABLE_SIZE, 0)]).await;
    for (id, path) in [(1, "/small-table-1"), (3, "/small-table-2")] {
        c.get(id, path).await;
        assert_eq!(c.response(id).await.status, 200);
    }
}
