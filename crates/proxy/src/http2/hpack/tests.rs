//! RFC 7541's examples (Appendix C) and the decoder's refusals.

use super::*;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

fn decode(d: &mut Decoder, block: &[u8]) -> Result<Vec<(String, String)>, HpackError> {
    let mut got = Vec::new();
    d.decode(block, 1 << 20, |n, v| {
        got.push((
            String::from_utf8_lossy(n).into_owned(),
            String::from_utf8_lossy(v).into_owned(),
        ))
    })?;
    Ok(got)
}

fn fields(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn c1_integers() {
    // C.1.1–C.1.3
    let mut out = Vec::new();
    encode_int(10, 5, 0, &mut out);
    assert_eq!(out, [0x0a]);
    out.clear();
    encode_int(1337, 5, 0, &mut out);
    assert_eq!(out, [0x1f, 0x9a, 0x0a]);
    let mut pos = 0;
    assert_eq!(int(&out, &mut pos, 5), Ok(1337));
    out.clear();
    encode_int(42, 8, 0, &mut out);
    assert_eq!(out, [0x2a]);
}

#[test]
fn c2_literal_and_indexed_fields() {
    // C.2.1: with indexing.
    let mut d = Decoder::new(4096);
    let got = decode(
        &mut d,
        &hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572"),
    );
    assert_eq!(got, Ok(fields(&[("custom-key", "custom-header")])));
    assert_eq!(d.table_size(), 55);
    // C.2.2: without indexing.
    let mut d = Decoder::new(4096);
    let got = decode(&mut d, &hex("040c 2f73 616d 706c 652f 7061 7468"));
    assert_eq!(got, Ok(fields(&[(":path", "/sample/path")])));
    assert_eq!(d.table_size(), 0);
    // C.2.3: never indexed.
    let got = decode(&mut d, &hex("1008 7061 7373 776f 7264 0673 6563 7265 74"));
    assert_eq!(got, Ok(fields(&[("password", "secret")])));
    assert_eq!(d.table_size(), 0);
    // C.2.4: indexed.
    assert_eq!(decode(&mut d, &[0x82]), Ok(fields(&[(":method", "GET")])));
}

/// C.3 and C.4: the same three requests, without and with Huffman coding.
fn three_requests(blocks: [&str; 3]) {
    let mut d = Decoder::new(4096);
    let first = [
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "www.example.com"),
    ];
    assert_eq!(decode(&mut d, &hex(blocks[0])), Ok(fields(&first)));
    assert_eq!(d.table_size(), 57);
    let mut second = first.to_vec();
    second.push(("cache-control", "no-cache"));
    assert_eq!(decode(&mut d, &hex(blocks[1])), Ok(fields(&second)));
    assert_eq!(d.table_size(), 110);
    let third = [
        (":method", "GET"),
        (":scheme", "https"),
        (":path", "/index.html"),
        (":authority", "www.example.com"),
        ("custom-key", "custom-value"),
    ];
    assert_eq!(decode(&mut d, &hex(blocks[2])), Ok(fields(&third)));
    assert_eq!(d.table_size(), 164);
    assert_eq!(
        d.get(62).map(|(n, _)| n.to_vec()),
        Ok(b"custom-key".to_vec())
    );
    assert_eq!(
        d.get(64).map(|(n, _)| n.to_vec()),
        Ok(b":authority".to_vec())
    );
    assert_eq!(d.get(65), Err(HpackError::BadIndex));
}

#[test]
fn c3_requests_without_huffman() {
    three_requests([
        "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
        "8286 84be 5808 6e6f 2d63 6163 6865",
        "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
    ]);
}

#[test]
fn c4_requests_with_huffman() {
    three_requests([
        "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
        "8286 84be 5886 a8eb 1064 9cbf",
        "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
    ]);
}

#[test]
fn c5_responses_evict_from_a_256_octet_table() {
    let mut d = Decoder::new(256);
    let first = decode(
        &mut d,
        &hex("4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d"),
    );
    let date = "Mon, 21 Oct 2013 20:13:21 GMT";
    assert_eq!(
        first,
        Ok(fields(&[
            (":status", "302"),
            ("cache-control", "private"),
            ("date", date),
            ("location", "https://www.example.com"),
        ]))
    );
    assert_eq!(d.table_size(), 222);
    let second = decode(&mut d, &hex("4803 3330 37c1 c0bf"));
    assert_eq!(
        second,
        Ok(fields(&[
            (":status", "307"),
            ("cache-control", "private"),
            ("date", date),
            ("location", "https://www.example.com"),
        ]))
    );
    // `:status: 302` was evicted for `:status: 307`.
    assert_eq!(d.table_size(), 222);
    assert_eq!(d.get(62).map(|(_, v)| v.to_vec()), Ok(b"307".to_vec()));
}

#[test]
fn what_the_encoder_writes_decodes_back_and_leaves_no_table() {
    let mut out = Vec::new();
    encode_status(200, &mut out);
    assert_eq!(out, [0x88]);
    encode_status(103, &mut out);
    encode_field(b"content-type", b"text/html; charset=utf-8", &mut out);
    encode_field(b"x-custom", b"a value", &mut out);
    encode_field_never_indexed(b"set-cookie", b"id=1", &mut out);
    encode_table_size_update(0, &mut Vec::new());
    let mut d = Decoder::new(4096);
    assert_eq!(
        decode(&mut d, &out),
        Ok(fields(&[
            (":status", "200"),
            (":status", "103"),
            ("content-type", "text/html; charset=utf-8"),
            ("x-custom", "a value"),
            ("set-cookie", "id=1"),
        ]))
    );
    assert_eq!(d.table_size(), 0);
    // content-type is static index 31, as a literal without indexing: 0000 + 4-bit prefix
    // (15) + 16.
    let mut one = Vec::new();
    encode_field(b"content-type", b"x", &mut one);
    assert_eq!(&one[..2], &[0x0f, 31 - 15]);
}

#[test]
fn size_updates_only_first_and_within_the_limit() {
    // RFC 7541 §4.2, §6.3.
    let mut d = Decoder::new(4096);
    assert_eq!(
        decode(&mut d, &[0x3f, 0xe2, 0x1f]),
        Err(HpackError::TableSizeUpdate)
    );
    assert_eq!(
        decode(&mut d, &[0x82, 0x20]),
        Err(HpackError::TableSizeUpdate)
    );
    assert_eq!(
        decode(&mut d, &[0x20, 0x82]),
        Ok(fields(&[(":method", "GET")]))
    );
}

#[test]
fn an_oversize_list_is_decoded_to_its_end_and_refused() {
    let mut d = Decoder::new(4096);
    // Adds custom-key: custom-header (C.2.1) to the table, in a list over a 40-octet limit.
    let block = hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572");
    let mut seen = 0;
    assert_eq!(
        d.decode(&block, 40, |_, _| seen += 1),
        Err(HpackError::ListTooLarge)
    );
    assert_eq!(seen, 0);
    // The table stayed in step: index 62 is that entry.
    assert_eq!(
        decode(&mut d, &[0x80 | 62]),
        Ok(fields(&[("custom-key", "custom-header")]))
    );
}

#[test]
fn a_string_longer_than_the_limit_fails_before_decoding() {
    let mut d = Decoder::new(4096);
    // A literal name claiming 2^21 octets.
    let mut block = vec![0x00];
    encode_int(1 << 21, 7, 0, &mut block);
    assert_eq!(
        d.decode(&block, 65_536, |_, _| {}),
        Err(HpackError::StringTooLong)
    );
}

#[test]
fn bad_input_never_panics() {
    let mut d = Decoder::new(4096);
    assert_eq!(decode(&mut d, &[0x80]), Err(HpackError::BadIndex));
    assert_eq!(
        decode(&mut d, &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]),
        Err(HpackError::IntegerOverflow)
    );
    assert_eq!(decode(&mut d, &[0x80 | 70]), Err(HpackError::BadIndex));
    // Every cut of a valid block.
    let block = hex("8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf");
    for cut in 0..block.len() {
        let mut d = Decoder::new(4096);
        let _ = d.decode(&block[..cut], 1 << 16, |_, _| {});
    }
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..5_000 {
        let n = (x % 40) as usize;
        let bytes: Vec<u8> = (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let _ = d.decode(&bytes, 1 << 16, |_, _| {});
    }
}
