//! A stored object as bytes, for the cache tier other instances share (Redis): status, header
//! block, body, timing, freshness, the directives it was stored under and its `Vary`. The
//! encoded and WebP copies are not carried: an instance that loads an object makes its own.
//!
//! Layout (integers big-endian): `RPO1`, status (u16), request and response time (µs since
//! the epoch, u64 each), initial age and lifetime (µs, u64 each), the directive flags (u16),
//! four optional numbers (a presence byte and a u64 each: max-age, s-maxage,
//! stale-while-revalidate, stale-if-error), the withheld field names, the `Vary` (kind byte and
//! names), the header fields (u32 count, then u16 name length, name, u32 value length, value),
//! and the body (the rest). Names lists are a u16 count, then u16 length and bytes each.
//! An object with tags starts `RPO2` instead and has them after its fields: a u16 count, then
//! a u64 each ([`crate::object::tag_hash`]); one without is written `RPO1`, the format without
//! tags, which rampart versions that do not know tags read too.
//! [`decode`] checks everything and answers `None` for anything it did not write.

use rampart_head::Fields;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};

use crate::cache_control::ResponseDirectives;
use crate::object::{fields, Object};
use crate::vary::Vary;

const MAGIC: &[u8; 4] = b"RPO1";
/// The same with tags after the fields.
const MAGIC_TAGS: &[u8; 4] = b"RPO2";

/// The object as bytes (see the module notes).
pub fn encode(obj: &Object) -> Vec<u8> {
    let mut out = encode_head_with(obj, obj.body.len());
    out.extend_from_slice(&obj.body);
    out
}

/// Everything [`encode`] writes but the body (the disk tier keeps the body apart).
pub fn encode_head(obj: &Object) -> Vec<u8> {
    encode_head_with(obj, 0)
}

fn encode_head_with(obj: &Object, room: usize) -> Vec<u8> {
    let headers: usize = obj
        .headers
        .iter()
        .map(|(n, v)| 6 + n.as_str().len() + v.len())
        .sum();
    let mut out = Vec::with_capacity(128 + headers + 8 * obj.tags.len() + room);
    out.extend_from_slice(if obj.tags.is_empty() {
        MAGIC
    } else {
        MAGIC_TAGS
    });
    out.extend_from_slice(&obj.status.as_u16().to_be_bytes());
    for t in [obj.request_time, obj.response_time] {
        put_u64(
            &mut out,
            micros(t.duration_since(UNIX_EPOCH).unwrap_or_default()),
        );
    }
    put_u64(&mut out, micros(obj.initial_age));
    put_u64(&mut out, micros(obj.lifetime));
    let d = &obj.directives;
    let flags = [
        d.no_store,
        d.no_cache,
        d.no_cache_fields,
        d.private,
        d.private_fields,
        d.public,
        d.must_revalidate,
        d.proxy_revalidate,
        d.no_transform,
        d.immutable,
        d.must_understand,
        d.invalid_freshness,
        d.targeted,
    ]
    .iter()
    .enumerate()
    .fold(0u16, |acc, (i, &on)| acc | (u16::from(on) << i));
    out.extend_from_slice(&flags.to_be_bytes());
    for n in [
        d.max_age,
        d.s_maxage,
        d.stale_while_revalidate,
        d.stale_if_error,
    ] {
        out.push(u8::from(n.is_some()));
        put_u64(&mut out, n.unwrap_or(0));
    }
    put_names(&mut out, d.withheld());
    match &obj.vary {
        Vary::None => out.push(0),
        Vary::Any => out.push(1),
        Vary::Fields(f) => {
            out.push(2);
            put_names(&mut out, f);
        }
    }
    out.extend_from_slice(&(obj.headers.len() as u32).to_be_bytes());
    for (name, value) in &obj.headers {
        put_bytes16(&mut out, name.as_str().as_bytes());
        out.extend_from_slice(&(value.len() as u32).to_be_bytes());
        out.extend_from_slice(value.as_bytes());
    }
    if !obj.tags.is_empty() {
        let n = obj.tags.len().min(u16::MAX as usize);
        out.extend_from_slice(&(n as u16).to_be_bytes());
        for t in &obj.tags[..n] {
            put_u64(&mut out, *t);
        }
    }
    out
}

/// The object whose [`encode_head`] is `head`, with `body` (already owned and charged);
/// `None` unless `head` is exactly one such head.
pub fn decode_parts(
    head: &[u8],
    body: Bytes,
    residency: Option<Arc<crate::object::Residency>>,
) -> Option<Object> {
    decode_inner(head, |rest| rest.is_empty().then_some((body, residency)))
}

/// The object [`encode`] wrote, owning its memory (nothing of `bytes` is kept); `None` for
/// anything else.
pub fn decode(bytes: &[u8]) -> Option<Object> {
    decode_with(bytes, |b| (Bytes::copy_from_slice(b), None))
}

/// [`decode`] with the body made by `body` (a store's charged body, see
/// [`crate::object::Residency`], for an object that will be stored).
pub fn decode_with(
    bytes: &[u8],
    body: impl FnOnce(&[u8]) -> (Bytes, Option<Arc<crate::object::Residency>>),
) -> Option<Object> {
    decode_inner(bytes, |rest| Some(body(rest)))
}

fn decode_inner(
    bytes: &[u8],
    body: impl FnOnce(&[u8]) -> Option<(Bytes, Option<Arc<crate::object::Residency>>)>,
) -> Option<Object> {
    let mut r = Reader(bytes);
    let tagged = match r.take(4)? {
        m if m == MAGIC => false,
        m if m == MAGIC_TAGS => true,
        _ => return None,
    };
    let status = StatusCode::from_u16(r.u16()?).ok()?;
    let request_time = UNIX_EPOCH.checked_add(Duration::from_micros(r.u64()?))?;
    let response_time = UNIX_EPOCH.checked_add(Duration::from_micros(r.u64()?))?;
    let initial_age = Duration::from_micros(r.u64()?);
    let lifetime = Duration::from_micros(r.u64()?);
    let flags = r.u16()?;
    let on = |i: u16| flags & (1 << i) != 0;
    let mut numbers = [None; 4];
    for n in &mut numbers {
        let present = r.u8()?;
        let v = r.u64()?;
        *n = (present == 1).then_some(v);
    }
    let withheld = r.names()?;
    let directives = ResponseDirectives {
        no_store: on(0),
        no_cache: on(1),
        no_cache_fields: on(2),
        private: on(3),
        private_fields: on(4),
        public: on(5),
        must_revalidate: on(6),
        proxy_revalidate: on(7),
        no_transform: on(8),
        immutable: on(9),
        must_understand: on(10),
        invalid_freshness: on(11),
        targeted: on(12),
        max_age: numbers[0],
        s_maxage: numbers[1],
        stale_while_revalidate: numbers[2],
        stale_if_error: numbers[3],
        withheld: (!withheld.is_empty()).then(|| Arc::from(withheld)),
    };
    let vary = match r.u8()? {
        0 => Vary::None,
        1 => Vary::Any,
        2 => Vary::Fields(r.names()?),
        _ => return None,
    };
    let count = r.u32()? as usize;
    let mut headers = Fields::with_capacity(count.min(256));
    for _ in 0..count {
        let len = r.u16()? as usize;
        let name = HeaderName::from_bytes(r.take(len)?).ok()?;
        let len = r.u32()? as usize;
        let value = HeaderValue::from_bytes(r.take(len)?).ok()?;
        headers.append(name, value);
    }
    let mut tags = Vec::new();
    if tagged {
        let n = r.u16()? as usize;
        tags.reserve(n);
        for _ in 0..n {
            tags.push(r.u64()?);
        }
    }
    let f = fields(&headers, &[]);
    let (body, residency) = body(r.0)?;
    Some(Object {
        status,
        headers_charge: f.charge,
        wire: f.wire,
        headers: f.headers,
        body,
        request_time,
        response_time,
        initial_age,
        lifetime,
        directives,
        vary,
        invalidated: Default::default(),
        refreshing: Default::default(),
        encoded: Box::default(),
        webp: None,
        residency,
        disk: Default::default(),
        extent: None,
        tags: tags.into_boxed_slice(),
    })
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_be_bytes());
}

fn put_bytes16(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u16).to_be_bytes());
    out.extend_from_slice(b);
}

fn put_names(out: &mut Vec<u8>, names: &[HeaderName]) {
    out.extend_from_slice(&(names.len() as u16).to_be_bytes());
    for n in names {
        put_bytes16(out, n.as_str().as_bytes());
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }

    fn names(&mut self) -> Option<Vec<HeaderName>> {
        let count = self.u16()? as usize;
        let mut out = Vec::with_capacity(count.min(64));
        for _ in 0..count {
            let len = self.u16()? as usize;
            out.push(HeaderName::from_bytes(self.take(len)?).ok()?);
        }
        Some(out)
    }
}

/// How long the shared tier should keep `obj` from `now`: what is left of its freshness
/// lifetime plus the longest time it may then be served stale (stale-while-revalidate,
/// stale-if-error). Zero when it is of no use to another instance any more.
pub fn shared_ttl(obj: &Object, now: SystemTime) -> Duration {
    let d = &obj.directives;
    let stale = d
        .stale_while_revalidate
        .unwrap_or(0)
        .max(d.stale_if_error.unwrap_or(0));
    (obj.lifetime + Duration::from_secs(stale)).saturating_sub(obj.age(now))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Object {
        let mut headers = Fields::new();
        headers.insert("content-type", HeaderValue::from_static("text/plain"));
        headers.append("set-cookie", HeaderValue::from_static("a=1"));
        headers.append("set-cookie", HeaderValue::from_static("b=2"));
        headers.insert("x-custom", HeaderValue::from_static("yes"));
        let mut cc = Fields::new();
        cc.insert(
            "cache-control",
            HeaderValue::from_static("max-age=60, stale-if-error=30, private=\"x-secret\""),
        );
        let f = fields(&headers, &[]);
        Object {
            status: StatusCode::NON_AUTHORITATIVE_INFORMATION,
            headers_charge: f.charge,
            wire: f.wire,
            headers: f.headers,
            body: Bytes::from_static(b"hello, other instance"),
            request_time: UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456),
            response_time: UNIX_EPOCH + Duration::from_micros(1_700_000_000_223_456),
            initial_age: Duration::from_secs(3),
            lifetime: Duration::from_secs(60),
            directives: ResponseDirectives::parse(&cc),
            vary: Vary::Fields(vec![
                HeaderName::from_static("accept-language"),
                HeaderName::from_static("x-device"),
            ]),
            invalidated: Default::default(),
            refreshing: Default::default(),
            encoded: Box::default(),
            webp: None,
            residency: None,
            disk: Default::default(),
            extent: None,
            tags: Box::default(),
        }
    }

    #[test]
    fn objects_survive_the_trip_through_the_redis_tier() {
        let obj = sample();
        let back = decode(&encode(&obj)).expect("decodes");
        assert_eq!(back.status, obj.status);
        assert_eq!(back.headers, obj.headers);
        assert_eq!(
            back.headers.get_all("set-cookie").iter().count(),
            2,
            "repeated fields keep every line"
        );
        assert_eq!(back.body, obj.body);
        assert_eq!(back.request_time, obj.request_time);
        assert_eq!(back.response_time, obj.response_time);
        assert_eq!(back.initial_age, obj.initial_age);
        assert_eq!(back.lifetime, obj.lifetime);
        assert_eq!(back.directives, obj.directives);
        assert_eq!(
            back.directives.withheld(),
            [HeaderName::from_static("x-secret")]
        );
        assert_eq!(back.vary, obj.vary);
        assert_eq!(back.headers_charge, fields(&back.headers, &[]).charge);
        assert_eq!(back.wire.block, obj.wire.block);
    }

    #[test]
    fn tags_survive_the_trip_and_untagged_objects_stay_readable_by_earlier_versions() {
        let plain = encode(&sample());
        assert_eq!(
            &plain[..4],
            b"RPO1",
            "no tags: the format earlier versions read"
        );
        let mut tagged = sample();
        tagged.tags = vec![crate::object::tag_hash(b"a"), 7].into_boxed_slice();
        let bytes = encode(&tagged);
        assert_eq!(&bytes[..4], b"RPO2");
        let back = decode(&bytes).expect("decodes");
        assert_eq!(back.tags, tagged.tags);
        assert_eq!(back.body, tagged.body);
        assert_eq!(back.headers, tagged.headers);
        // The disk tier's head (no body) too.
        let head = encode_head(&tagged);
        let back = decode_parts(&head, Bytes::new(), None).expect("decodes");
        assert_eq!(back.tags, tagged.tags);
        assert!(decode(&plain).expect("decodes").tags.is_empty());
    }

    #[test]
    fn anything_else_is_refused() {
        let bytes = encode(&sample());
        assert!(decode(b"").is_none());
        assert!(decode(b"RPO2").is_none());
        assert!(decode(b"RPO3").is_none());
        // Cut anywhere inside the header part: refused, never a panic.
        let body_at = bytes.len() - sample().body.len();
        for cut in 0..body_at {
            assert!(decode(&bytes[..cut]).is_none(), "cut at {cut}");
        }
        let mut bad = bytes.clone();
        bad[4] = 0xff; // status 65xxx
        bad[5] = 0xff;
        assert!(decode(&bad).is_none());
    }

    #[test]
    fn the_redis_tier_keeps_freshness_plus_the_stale_allowances() {
        let obj = sample();
        let now = obj.response_time + Duration::from_secs(7);
        // lifetime 60 − age (3 + 7) = 50 s, plus stale-if-error 30 s.
        assert_eq!(shared_ttl(&obj, now), Duration::from_secs(80));
        // Stale (age 70 s): 20 s of stale-if-error left.
        let stale = obj.response_time + Duration::from_secs(67);
        assert_eq!(shared_ttl(&obj, stale), Duration::from_secs(20));
        let mut plain = sample();
        plain.directives = ResponseDirectives::default();
        assert_eq!(shared_ttl(&plain, stale), Duration::ZERO);
        assert_eq!(
            shared_ttl(&obj, obj.response_time + Duration::from_secs(500)),
            Duration::ZERO
        );
    }
}
