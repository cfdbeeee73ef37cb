//! Stored objects and what they cost: [`Object`] (a stored response, with the encoded and WebP
//! copies made of it), the charges that weigh it in the store ([`alloc_size`], [`body_charge`],
//! [`StoredFields::charge`]) and the owned copies it is built from ([`owned_body`], [`fields`]). See
//! `store.rs` for why the charges matter.

use rampart_head::Fields;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};

use crate::cache_control::ResponseDirectives;
use crate::encoding::{accepts_webp, negotiate, Coding};
use crate::index::METADATA_PER_ENTRY;
use crate::vary::Vary;

/// Bytes the allocator holds for a request of `n` bytes: sizes are rounded up to one of four
/// classes per power of two (mimalloc's and jemalloc's spacing; glibc's is finer), so this
/// never undercounts them.
pub fn alloc_size(n: usize) -> u64 {
    if n == 0 {
        return 0;
    }
    if n <= 64 {
        return n.next_multiple_of(8) as u64;
    }
    let b = usize::BITS - 1 - (n - 1).leading_zeros();
    let step = 1usize << (b - 2);
    n.next_multiple_of(step) as u64
}

/// What a shared `Bytes` adds once cloned: its reference-counted header.
const SHARED_BYTES: u64 = 32;
/// One field line of a [`Fields`]: its name and its value, side by side in the vector.
const FIELD_LINE: usize = std::mem::size_of::<(HeaderName, HeaderValue)>();

/// The charge of a body of `len` owned bytes.
pub fn body_charge(len: usize) -> u64 {
    if len == 0 {
        0
    } else {
        alloc_size(len) + SHARED_BYTES
    }
}

/// Whether `http` stores this field name without an allocation (a standard name). Names not
/// listed here are charged as custom ones, which can only overcount.
fn is_standard(name: &http::header::HeaderName) -> bool {
    use http::header::*;
    static STANDARD: [HeaderName; 34] = [
        ACCEPT_RANGES,
        ACCESS_CONTROL_ALLOW_ORIGIN,
        AGE,
        ALT_SVC,
        CACHE_CONTROL,
        CONNECTION,
        CONTENT_DISPOSITION,
        CONTENT_ENCODING,
        CONTENT_LANGUAGE,
        CONTENT_LENGTH,
        CONTENT_LOCATION,
        CONTENT_RANGE,
        CONTENT_SECURITY_POLICY,
        CONTENT_TYPE,
        DATE,
        ETAG,
        EXPIRES,
        LAST_MODIFIED,
        LINK,
        LOCATION,
        PRAGMA,
        REFERRER_POLICY,
        RETRY_AFTER,
        SERVER,
        SET_COOKIE,
        STRICT_TRANSPORT_SECURITY,
        TRANSFER_ENCODING,
        VARY,
        VIA,
        WWW_AUTHENTICATE,
        X_CONTENT_TYPE_OPTIONS,
        X_FRAME_OPTIONS,
        X_XSS_PROTECTION,
        ACCESS_CONTROL_MAX_AGE,
    ];
    STANDARD.contains(name)
}

/// The charge of the fields built by [`fields`], but for their value buffer: the vector of lines
/// (exactly its length) and the custom field names.
fn map_charge(h: &Fields) -> u64 {
    let names: u64 = h
        .iter()
        .filter(|(n, _)| !is_standard(n))
        .map(|(n, _)| alloc_size(n.as_str().len()) + SHARED_BYTES)
        .sum();
    alloc_size(h.capacity() * FIELD_LINE) + names
}

/// Where a stored body's memory is charged, for as long as the body is alive: to the store's
/// entries while the store holds an object with it (its weight), and to the store's *pinned*
/// gauge otherwise, that is while it is being stored, or after the store let it go (evicted,
/// purged, replaced) while clients still read it. A slow reader then holds memory the budget
/// counts: the store evicts more instead of the process growing past `cache_memory`
/// (40 clients that never read distinct 5 MB objects took RSS from 78 to 232 MB at 64 MiB).
///
/// The body itself is a `Bytes` over a [`Charged`] owner, which gives the charge back when the
/// last clone of the body is dropped.
#[derive(Debug)]
pub struct Residency {
    charge: u64,
    /// Store entries holding the body (`>> 1`), and whether the charge is in the gauge (bit 0).
    state: AtomicU64,
    gauge: Arc<AtomicU64>,
}

impl Residency {
    fn moved(&self, prev: u64, now: u64) {
        match (prev & 1, now & 1) {
            (0, 1) => {
                self.gauge.fetch_add(self.charge, Ordering::Relaxed);
            }
            (1, 0) => {
                self.gauge.fetch_sub(self.charge, Ordering::Relaxed);
            }
            _ => {}
        }
    }

    fn update(&self, f: impl Fn(u64) -> u64) {
        // invariant: the closure always returns Some, so fetch_update cannot fail.
        let prev = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| Some(f(s)))
            .unwrap_or_else(|s| s);
        self.moved(prev, f(prev));
    }

    /// A store entry took the body: its weight charges it now.
    pub fn enter(&self) {
        self.update(|s| (s & !1) + 2);
    }

    /// A store entry let the body go: pinned when no other entry holds it.
    pub fn leave(&self) {
        self.update(|s| {
            let n = (s >> 1).saturating_sub(1);
            if n == 0 {
                1
            } else {
                n << 1 | (s & 1)
            }
        });
    }

    fn freed(&self) {
        let prev = self.state.swap(0, Ordering::AcqRel);
        self.moved(prev, 0);
    }

    /// The bytes charged.
    pub fn charge(&self) -> u64 {
        self.charge
    }
}

/// The owner of a stored body's allocation (see [`Residency`]).
struct Charged {
    data: Box<[u8]>,
    residency: Arc<Residency>,
}

impl AsRef<[u8]> for Charged {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

impl Drop for Charged {
    fn drop(&mut self) {
        self.residency.freed();
    }
}

/// Bodies below this are stored as plain bytes, one allocation, not followed once the store
/// lets them go: what slow readers can hold of them is small next to their connections, and
/// the two extra allocations a followed body needs would be most of a tiny object's memory.
pub const CHARGED_FROM: usize = 16 << 10;

/// `data` as a stored body charged to `gauge` (a store's pinned gauge) until a store entry
/// takes it, and again whenever no entry holds it while it lives. Bodies under
/// [`CHARGED_FROM`] are not followed.
pub fn charged_body(data: Vec<u8>, gauge: &Arc<AtomicU64>) -> (Bytes, Option<Arc<Residency>>) {
    if data.len() < CHARGED_FROM {
        // Exactly its length, so the object holds what it is charged for.
        return (Bytes::from(data.into_boxed_slice()), None);
    }
    let charge = body_charge(data.len());
    gauge.fetch_add(charge, Ordering::Relaxed);
    let residency = Arc::new(Residency {
        charge,
        state: AtomicU64::new(1),
        gauge: gauge.clone(),
    });
    let owner = Charged {
        data: data.into_boxed_slice(),
        residency: residency.clone(),
    };
    (Bytes::from_owner(owner), Some(residency))
}

/// A stored response.
#[derive(Debug)]
pub struct Object {
    pub status: StatusCode,
    /// The header block a fresh, full hit sends: the stored fields (hop-by-hop removed, no
    /// `Age`) plus the proxy's fixed cache labels, built once at store time (with [`fields`])
    /// so a hit clones one map. Other answers replace the labels.
    pub headers: Fields,
    pub body: Bytes,
    /// When the request that produced it was sent and its response received (RFC 9111 §4.2.3).
    pub request_time: SystemTime,
    pub response_time: SystemTime,
    /// `corrected_initial_age`.
    pub initial_age: Duration,
    /// Freshness lifetime in effect.
    pub lifetime: Duration,
    pub directives: ResponseDirectives,
    pub vary: Vary,
    /// Set by a soft purge: the object is stale from then on, kept for stale-if-error.
    pub invalidated: AtomicBool,
    /// A background refresh (stale-while-revalidate) is running: start only one.
    pub refreshing: AtomicBool,
    /// What the header block holds ([`StoredFields::charge`]), computed once for the weight.
    pub headers_charge: u64,
    /// The header block as HTTP/1.1 sends it on a fresh, full hit: the start of the buffer the
    /// map's values are slices of (see [`fields`]).
    pub wire: WireFields,
    /// The same response in other content codings (compressed once, when stored), each a full
    /// object with its own header block (`Content-Encoding`, `Vary`, a weak `ETag`). Empty
    /// unless the rule compresses. Freshness and invalidation are this object's.
    pub encoded: Box<[(Coding, Arc<Object>)]>,
    /// The picture as WebP (made once, when stored), for clients whose `Accept` names
    /// `image/webp`; `None` unless the rule converts.
    pub webp: Option<Arc<Object>>,
    /// Where `body` is charged while no store entry holds it (see [`Residency`]); `None` for a
    /// body that is not (an empty one, a test's).
    pub residency: Option<Arc<Residency>>,
    /// Where the object stands with the disk tier (see [`crate::disk`]).
    pub disk: DiskMark,
    /// A large object's body, on disk (`body` is empty then): read a chunk at a time as it is
    /// sent, never whole into memory. Such an object is never put in the memory store.
    pub extent: Option<Arc<crate::extent::Extent>>,
    /// The tags its origin gave it (`Surrogate-Key`, `Cache-Tag`, `xkey`; see
    /// [`tag_hash`]), by which a purge finds it.
    pub tags: Box<[u64]>,
}

/// A tag as objects and purges carry it: 64 bits of FNV-1a over its bytes (case matters, as
/// with Fastly's and Varnish's keys). The same in every process and version, so the disk tier
/// and other instances agree on it; two tags sharing a hash only purge each other's objects.
pub fn tag_hash(tag: &[u8]) -> u64 {
    tag.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The tags in the values of a tag field: separated by spaces or commas (Fastly's
/// `Surrogate-Key` and Varnish's `xkey` use spaces, Cloudflare's `Cache-Tag` commas).
pub fn tags_in<'a>(values: impl Iterator<Item = &'a [u8]>) -> impl Iterator<Item = &'a [u8]> {
    values.flat_map(|v| {
        v.split(|&b| b == b' ' || b == b',' || b == b'\t')
            .filter(|t| !t.is_empty())
    })
}

/// Where a stored object stands with the disk tier: not written yet (the default), offered
/// to it or read from it, or kept off it (its rule says `cache_disk = false`). One relaxed
/// load on a memory hit tells whether the tier needs to hear of it.
#[derive(Debug, Default)]
pub struct DiskMark(std::sync::atomic::AtomicU8);

const DISK_PENDING: u8 = 0;
/// Offered to the disk (queued or written), not used since.
const DISK_DONE: u8 = 1;
const DISK_NEVER: u8 = 2;
/// On disk and used again since it was written (or read from it).
const DISK_USED: u8 = 3;

impl DiskMark {
    /// An object already on disk, not used since it was written.
    pub fn done() -> DiskMark {
        DiskMark(DISK_DONE.into())
    }

    /// An object read from disk (a use of what was written).
    pub fn used() -> DiskMark {
        DiskMark(DISK_USED.into())
    }

    /// Whether a memory hit on the object is news to the disk tier: a use that may admit it,
    /// or the first use of what was written.
    pub fn hit_matters(&self) -> bool {
        matches!(self.0.load(Ordering::Relaxed), DISK_PENDING | DISK_DONE)
    }

    /// Marks an offered object as used again; true for the one caller that did.
    pub fn take_first_reuse(&self) -> bool {
        self.0
            .compare_exchange(DISK_DONE, DISK_USED, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// An object its rule keeps off the disk.
    pub fn never() -> DiskMark {
        DiskMark(DISK_NEVER.into())
    }

    /// Not written yet, and it may be.
    pub fn pending(&self) -> bool {
        self.0.load(Ordering::Relaxed) == DISK_PENDING
    }

    /// Whether the object may go to the disk at all.
    pub fn allowed(&self) -> bool {
        self.0.load(Ordering::Relaxed) != DISK_NEVER
    }

    /// Marks a pending object as offered; true for the one caller that did.
    pub fn take(&self) -> bool {
        self.0
            .compare_exchange(
                DISK_PENDING,
                DISK_DONE,
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Back to pending (the offer was refused: the writer's queue was full).
    pub fn give_back(&self) {
        let _ = self.0.compare_exchange(
            DISK_DONE,
            DISK_PENDING,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }
}

impl Object {
    /// The residencies of this object's bodies: its own, its encoded copies' and its WebP's.
    fn residencies(&self) -> impl Iterator<Item = &Arc<Residency>> {
        self.residency
            .iter()
            .chain(
                self.encoded
                    .iter()
                    .filter_map(|(_, o)| o.residency.as_ref()),
            )
            .chain(self.webp.iter().filter_map(|o| o.residency.as_ref()))
    }

    /// A store entry took this object (see [`Residency::enter`]).
    pub fn entered_store(&self) {
        self.residencies().for_each(|r| r.enter());
    }

    /// A store entry let this object go (see [`Residency::leave`]).
    pub fn left_store(&self) {
        self.residencies().for_each(|r| r.leave());
    }

    /// The current age (RFC 9111 §4.2.3) at `now`.
    pub fn age(&self, now: SystemTime) -> Duration {
        let resident = now.duration_since(self.response_time).unwrap_or_default();
        self.initial_age + resident
    }

    /// Whether the object is fresh at `now`.
    pub fn is_fresh(&self, now: SystemTime) -> bool {
        self.is_fresh_at_age(self.age(now))
    }

    /// [`Object::is_fresh`] for an age already read.
    pub fn is_fresh_at_age(&self, age: Duration) -> bool {
        !self.invalidated.load(Ordering::Relaxed) && age < self.lifetime
    }

    pub fn invalidate(&self) {
        self.invalidated.store(true, Ordering::Relaxed);
    }

    /// The stored `Date`, or when the response was received (for If-Modified-Since).
    pub fn stored_date(&self) -> SystemTime {
        self.headers
            .get(http::header::DATE)
            .and_then(crate::freshness::http_date)
            .unwrap_or(self.response_time)
    }

    /// Bytes this object makes the allocator hold, with the index's entry under a key of
    /// `key_len` bytes.
    pub fn weight(&self, key_len: usize) -> u64 {
        let vary = match &self.vary {
            Vary::Fields(f) => alloc_size(f.len() * std::mem::size_of::<http::HeaderName>()),
            _ => 0,
        };
        let encoded: u64 = self
            .encoded
            .iter()
            .map(|(_, o)| {
                alloc_size(std::mem::size_of::<Object>() + 16)
                    + o.headers_charge
                    + body_charge(o.body.len())
            })
            .sum();
        let webp = self.webp.as_ref().map_or(0, |o| {
            alloc_size(std::mem::size_of::<Object>() + 16)
                + o.headers_charge
                + body_charge(o.body.len())
        });
        // Its tags, and their share of the store's count of each tag (see `store::TagState`).
        let tags = if self.tags.is_empty() {
            0
        } else {
            alloc_size(self.tags.len() * 8) + 32 * self.tags.len() as u64
        };
        entry_charge(key_len)
            + alloc_size(std::mem::size_of::<Object>() + 16)
            + self.headers_charge
            + body_charge(self.body.len())
            + vary
            + encoded
            + webp
            + tags
            + alloc_size(self.encoded.len() * std::mem::size_of::<(Coding, Arc<Object>)>())
    }

    /// The copy to send a client whose `Accept-Encoding` is `accept`: an encoded one it
    /// accepts, or this one.
    pub fn for_client<'a>(self: &'a Arc<Self>, req: &Fields) -> &'a Arc<Object> {
        if let Some(webp) = &self.webp {
            if accepts_webp(req) {
                return webp;
            }
        }
        if self.encoded.is_empty() {
            return self;
        }
        let mut codings = [Coding::Br; 3];
        let n = self.encoded.len().min(3);
        for (slot, (c, _)) in codings.iter_mut().zip(self.encoded.iter()) {
            *slot = *c;
        }
        match negotiate(
            req.get_all(http::header::ACCEPT_ENCODING).iter(),
            &codings[..n],
        ) {
            Some(c) => self
                .encoded
                .iter()
                .find(|(x, _)| *x == c)
                .map_or(self, |(_, o)| o),
            None => self,
        }
    }
}

/// The index entry and key of a slot with a `key_len`-byte key.
pub(crate) fn entry_charge(key_len: usize) -> u64 {
    METADATA_PER_ENTRY + alloc_size(key_len) + SHARED_BYTES
}

/// An object's header fields as rampart's HTTP/1.1 writer sends them on a fresh, full hit:
/// `name: value\r\n` for each field, so a hit copies one block instead of walking the map.
/// `Content-Length` is left out (the writer frames the body it sends), and so are `Connection`
/// and `Transfer-Encoding`, which a writer never passes on. The block is the start of the
/// buffer the object's map takes its values from ([`fields`]): it costs the names and the
/// separators, not a second copy of the values.
#[derive(Debug, Clone, Default)]
pub struct WireFields {
    pub block: Bytes,
    /// The block holds a `Date` field.
    pub has_date: bool,
    /// The same fields as an HPACK block without dynamic table (valid on any HTTP/2 connection),
    /// made by the HTTP/2 writer on the first HTTP/2 hit. [`fields`] charges the wire block's
    /// length once more for it (an HPACK block is about as long, Huffman coding aside).
    pub h2: std::sync::OnceLock<Bytes>,
}

/// A stored object's header fields: the map, the same fields as they go on the wire, and what
/// both hold (the object's `headers_charge`).
#[derive(Debug)]
pub struct StoredFields {
    pub headers: Fields,
    pub wire: WireFields,
    pub charge: u64,
}

/// Fields a writer frames itself or never passes on: out of the wire block.
fn framed_by_writer(name: &HeaderName) -> bool {
    name == http::header::CONTENT_LENGTH
        || name == http::header::CONNECTION
        || name == http::header::TRANSFER_ENCODING
}

/// The fields of a stored object: `h` with the fields of `set` inserted (replacing any of the
/// same name), in one buffer that the object owns. The buffer starts with the wire block
/// ([`WireFields`]) and ends with the values of the fields the block leaves out; every value in
/// the map is a slice of it. So the map never keeps a connection's read buffer alive, and its
/// table is exactly its length (a cloned map's entries are not over-allocated as a growing
/// one's are).
pub fn fields(h: &Fields, set: &[(&HeaderName, &HeaderValue)]) -> StoredFields {
    let mut all = h.clone();
    for (name, value) in set {
        all.insert((*name).clone(), (*value).clone());
    }
    let line = |(n, v): (&HeaderName, &HeaderValue)| n.as_str().len() + v.len() + 4;
    let block_len: usize = all
        .iter()
        .filter(|(n, _)| !framed_by_writer(n))
        .map(line)
        .sum();
    let rest: usize = all
        .iter()
        .filter(|(n, _)| framed_by_writer(n))
        .map(|(_, v)| v.len())
        .sum();
    let mut buf = Vec::with_capacity(block_len + rest);
    // Where each value lies in `buf`, in the map's order.
    let mut at = vec![0; all.len()];
    for (i, (name, value)) in all.iter().enumerate() {
        if !framed_by_writer(name) {
            buf.extend_from_slice(name.as_str().as_bytes());
            buf.extend_from_slice(b": ");
            at[i] = buf.len();
            buf.extend_from_slice(value.as_bytes());
            buf.extend_from_slice(b"\r\n");
        }
    }
    for (i, (name, value)) in all.iter().enumerate() {
        if framed_by_writer(name) {
            at[i] = buf.len();
            buf.extend_from_slice(value.as_bytes());
        }
    }
    let buf_len = buf.len();
    let buf = Bytes::from(buf);
    let mut out = Fields::with_capacity(all.len());
    for (i, (name, value)) in all.iter().enumerate() {
        let len = value.len();
        let owned = match HeaderValue::from_maybe_shared(buf.slice(at[i]..at[i] + len)) {
            Ok(mut v) => {
                v.set_sensitive(value.is_sensitive());
                v
            }
            // A value `http` accepted is always valid again; copy it alone if not.
            Err(_) => HeaderValue::from_bytes(value.as_bytes())
                .unwrap_or_else(|_| HeaderValue::from_static("")),
        };
        out.push(name.clone(), owned);
    }
    let headers = out;
    // The HTTP/2 block made on the first HTTP/2 hit is charged now (see `WireFields::h2`).
    let charge = map_charge(&headers) + alloc_size(buf_len) + alloc_size(block_len) + SHARED_BYTES;
    StoredFields {
        wire: WireFields {
            block: buf.slice(..block_len),
            has_date: headers.contains_key(http::header::DATE),
            h2: std::sync::OnceLock::new(),
        },
        headers,
        charge,
    }
}

/// The body as one owned allocation of exactly its length (the chunks it arrived in may be
/// slices of a connection's read buffer).
pub fn owned_body(chunks: &[Bytes]) -> Bytes {
    let len = chunks.iter().map(Bytes::len).sum();
    if len == 0 {
        return Bytes::new();
    }
    let mut v = Vec::with_capacity(len);
    for c in chunks {
        v.extend_from_slice(c);
    }
    Bytes::from(v)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use http::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, DATE};

    #[test]
    fn the_wire_block_and_the_map_share_one_buffer() {
        let mut h = Fields::new();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("text/html"));
        h.insert(CONTENT_LENGTH, HeaderValue::from_static("5"));
        h.append("x-a", HeaderValue::from_static("1"));
        h.insert(
            DATE,
            HeaderValue::from_static("Thu, 26 Nov 2026 15:00:00 GMT"),
        );
        h.append("x-a", HeaderValue::from_static("2"));
        h.insert(CONNECTION, HeaderValue::from_static("close"));
        h.insert("x-label", HeaderValue::from_static("from the origin"));
        let name = HeaderName::from_static("x-label");
        let label = HeaderValue::from_static("Hit");
        let f = fields(&h, &[(&name, &label)]);
        // The order the fields came in, the label in place of the origin's, and no field the
        // writer frames itself.
        assert_eq!(
            std::str::from_utf8(&f.wire.block).unwrap(),
            "content-type: text/html\r\nx-a: 1\r\n\
             date: Thu, 26 Nov 2026 15:00:00 GMT\r\nx-a: 2\r\nx-label: Hit\r\n"
        );
        assert!(f.wire.has_date);
        assert_eq!(f.headers[CONTENT_LENGTH], "5");
        assert_eq!(f.headers[CONNECTION], "close");
        assert_eq!(f.headers["x-label"], "Hit");
        assert_eq!(f.headers.get_all("x-a").iter().count(), 2);
        // Every value lies in the one buffer the block starts: nothing is held twice.
        let start = f.wire.block.as_ptr() as usize;
        let end = start + f.wire.block.len() + "5".len() + "close".len();
        for v in f.headers.values() {
            let at = v.as_bytes().as_ptr() as usize;
            assert!(
                at >= start && at + v.len() <= end,
                "{v:?} is outside the buffer"
            );
        }
        // The charge is the map, that buffer, and the HTTP/2 block made on the first HTTP/2
        // hit (`WireFields::h2`), charged as long as the wire block.
        assert_eq!(
            f.charge,
            map_charge(&f.headers)
                + alloc_size(end - start)
                + alloc_size(f.wire.block.len())
                + SHARED_BYTES
        );
    }
}
