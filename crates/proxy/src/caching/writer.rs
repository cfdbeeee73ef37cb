//! store: everything that writes to the cache. A miss's response head decides whether its body
//! is stored ([`prepare`] gives a [`StoreTicket`]); the body is then copied into the ticket as it
//! streams, teed to one client ([`Tee`]) or pumped for every coalesced reader ([`publish`]), and
//! stored when it ends. A 304 updates a stored response in `freshen.rs`; an object stored here
//! goes to the shared tier through `shared_tier.rs`.
//!
//! Imports: `cache` and `coalesce` below it; `body` and the stages above it import this module,
//! never the other way round.

use rampart_head::Fields;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, AGE};
use http::{Method, StatusCode};
use http_body::{Body, Frame, SizeHint};
use rampart_cache::cache_control::ResponseDirectives;
use rampart_cache::disk::large::LargeWrite;
use rampart_cache::freshness;
use rampart_cache::key::CacheKey;
use rampart_cache::object::DiskMark;
use rampart_cache::storable::{self, NotStored};
use rampart_cache::store::{body_charge, fields, Object, Reservation, Residency};
use rampart_cache::targeted::CDN_CACHE_CONTROL;
use rampart_cache::vary::Vary;

use crate::caching::coalesce::{Feed, InflightBody, Leader, SharedHead};
use crate::caching::shared_tier::{share, SharedLock};
use crate::caching::transform::Transforms;
use crate::caching::{Cache, Missed};
use crate::outcome::{CacheLabel, CACHE_STATUS, X_ARC2_CACHE};

/// When the request that brought a response was sent and its response received (the
/// `request_time` and `response_time` of RFC 9111 §4.2.3).
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub request: SystemTime,
    pub response: SystemTime,
}

/// Decides, from the origin's response head, whether to store the body; returns what the
/// body tee needs, or why not.
pub fn prepare(
    cache: &Arc<Cache>,
    missed: &Missed,
    method: &Method,
    req_headers: &Fields,
    res: &rampart_head::response::Parts,
    timing: Timing,
    transforms: Transforms,
) -> Result<Box<StoreTicket>, NotStored> {
    let (status, res_headers) = (res.status, &res.headers);
    let (request_time, response_time) = (timing.request, timing.response);
    let directives = ResponseDirectives::parse(res_headers);
    let vary = Vary::parse(res_headers);
    let exchange = storable::Exchange {
        method,
        req_headers,
        req: &missed.directives,
        status,
        res_headers,
        res: &directives,
        vary: &vary,
        response_time,
    };
    let lifetime = storable::storable(&exchange, &missed.policy)?;
    let directives = storable::with_stale_defaults(directives, &missed.policy);
    let length = crate::headers::content_length(res_headers);
    let too_big = length.is_some_and(|n| n > cache.store().max_object() as u64);
    let variant = match &vary {
        Vary::None => None,
        v => Some(v.variant_key(req_headers).ok_or(NotStored::VaryAny)?),
    };
    let mut headers = hit_headers(&stored_headers(res_headers, &directives));
    // A picture that will get a WebP copy varies on `Accept` from its first response on, not
    // only once the copy exists (the key keeps the origin's own Vary).
    let webp = crate::caching::transform::gets_webp(&transforms, lifetime, status, res_headers);
    if webp {
        crate::caching::coding::vary_on(&mut headers, "Accept");
    }
    let ticket = |reservation: Option<Reservation>, large: Option<LargeWrite>| {
        Box::new(StoreTicket {
            cache: cache.clone(),
            key: missed.key.clone(),
            variant: variant.clone(),
            status,
            initial_age: freshness::initial_age(res_headers, request_time, response_time),
            headers: headers.clone(),
            request_time,
            response_time,
            lifetime,
            directives: directives.clone(),
            vary: vary.clone(),
            body: Vec::with_capacity(if large.is_some() {
                0
            } else {
                length.unwrap_or(0) as usize
            }),
            expected: length.map(|n| n as usize),
            reservation,
            transforms: transforms.clone(),
            shared_lock: None,
            large,
            webp,
            tags: Box::default(),
        })
    };
    if too_big {
        // Larger than memory may hold: to the disk tier only, as it arrives.
        return match large_write(cache, &missed.key, length, &transforms) {
            Some(w) => Ok(ticket(None, Some(w))),
            None => Err(NotStored::TooLarge),
        };
    }
    // The body is collected in memory charged to the store: hold room for it first (all of
    // it when its length is known, else as it arrives).
    match cache
        .store()
        .reserve(&missed.key, body_charge(length.unwrap_or(0) as usize))
    {
        Some(reservation) => Ok(ticket(Some(reservation), None)),
        // No room in memory now (many bodies being collected at once): the disk tier may
        // still take it, straight from the origin.
        None => match large_write(cache, &missed.key, length, &transforms) {
            Some(w) => Ok(ticket(None, Some(w))),
            None => Err(NotStored::NoRoom),
        },
    }
}

/// Whether the response could be stored, as [`prepare`] decides it, without preparing to:
/// for an answer this instance does not keep (the fleet's owner of its key holds it), whose
/// key is fetched here for a while when it could not be. Larger than memory takes and more than the
/// disk tier would (or no disk tier for the rule): [`NotStored::TooLarge`], as `prepare` says
/// (the key is then fetched from the origin, not through the owner, for a while).
pub fn shareable(
    cache: &Cache,
    missed: &Missed,
    method: &Method,
    req_headers: &Fields,
    res: &rampart_head::response::Parts,
    (response_time, off_disk): (SystemTime, bool),
) -> Result<(), NotStored> {
    let directives = ResponseDirectives::parse(&res.headers);
    let vary = Vary::parse(&res.headers);
    let exchange = storable::Exchange {
        method,
        req_headers,
        req: &missed.directives,
        status: res.status,
        res_headers: &res.headers,
        res: &directives,
        vary: &vary,
        response_time,
    };
    storable::storable(&exchange, &missed.policy)?;
    let length = crate::headers::content_length(&res.headers);
    if length.is_some_and(|n| n > cache.store().max_object() as u64) {
        let disk_takes = match cache.disk() {
            Some(d) if !off_disk => length.is_some_and(|n| n <= d.max_body()),
            _ => false,
        };
        if !disk_takes {
            return Err(NotStored::TooLarge);
        }
    }
    match &vary {
        Vary::None => Ok(()),
        v => v
            .variant_key(req_headers)
            .map(drop)
            .ok_or(NotStored::VaryAny),
    }
}

/// A large object's write to the disk tier, when there is one, the rule lets its responses go
/// there and the tier takes it (see `DiskStore::begin_large`).
fn large_write(
    cache: &Cache,
    key: &CacheKey,
    length: Option<u64>,
    transforms: &Transforms,
) -> Option<LargeWrite> {
    if transforms.off_disk {
        return None;
    }
    cache.disk()?.begin_large(key, length)
}

/// Everything needed to store a response, and its body as it is collected. The body is
/// copied into one buffer this ticket owns (the chunks it arrives in are slices of the origin
/// connection's read buffer, which a stored object must not keep alive), in room reserved in the
/// store; dropping the ticket gives the room back.
#[derive(Debug)]
pub struct StoreTicket {
    cache: Arc<Cache>,
    key: CacheKey,
    variant: Option<bytes::Bytes>,
    status: StatusCode,
    /// The header block of a hit (see [`Object::headers`]), compacted at store time.
    headers: Fields,
    request_time: SystemTime,
    response_time: SystemTime,
    initial_age: Duration,
    lifetime: Duration,
    directives: ResponseDirectives,
    vary: Vary,
    body: Vec<u8>,
    /// The origin's Content-Length.
    expected: Option<usize>,
    reservation: Option<Reservation>,
    /// The rule minifies or compresses: done once the object is stored.
    transforms: Transforms,
    /// This request fetches for every instance: storing the object lifts the lock.
    shared_lock: Option<Box<SharedLock>>,
    /// Larger than memory may hold: the body goes to the disk tier as it passes, not to
    /// `body`.
    large: Option<LargeWrite>,
    /// The object will get a WebP copy: its responses vary on `Accept`.
    webp: bool,
    /// The origin's tags for it.
    tags: Box<[u64]>,
}

/// Reservations for bodies of unknown length grow by at least this much at a time.
const RESERVE_STEP: usize = 64 * 1024;

impl StoreTicket {
    /// Keeps the stored copy fresh for at most `ttl` from now (a copy of what a fleet's owner
    /// holds: `cache_peer_local_ttl_seconds`), however long the object stays fresh there.
    pub fn cap_freshness(&mut self, ttl: Duration) {
        self.lifetime = self.lifetime.min(self.initial_age + ttl);
    }

    pub fn vary(&self) -> &Vary {
        &self.vary
    }

    /// The stored object will get a WebP copy, so every response of it says `Vary: Accept`.
    pub fn varies_on_accept(&self) -> bool {
        self.webp
    }

    /// The origin's tags for the object (see `deliver::take_tags`).
    pub fn set_tags(&mut self, tags: Box<[u64]>) {
        self.tags = tags;
    }

    /// Takes over the shared tier's fetch lock this request holds (lifted once stored).
    pub fn hold_shared_lock(&mut self, lock: Option<Box<SharedLock>>) {
        self.shared_lock = lock;
    }

    pub fn variant(&self) -> Option<&bytes::Bytes> {
        self.variant.as_ref()
    }

    /// Room in the store for a second copy of the body: the buffer coalesced readers read while
    /// it arrives (the ticket's own copy is what will be stored). Held until the buffer is
    /// freed; `None` when the store has no room for it (the response is then teed to its own
    /// client only, as any storable response).
    pub fn hold_buffer(&self) -> Option<Box<dyn Send>> {
        if self.large.is_some() {
            return None;
        }
        let bytes = body_charge(self.expected?);
        let reservation = self.cache.store().reserve(&self.key, bytes)?;
        Some(Box::new(Room {
            cache: self.cache.clone(),
            reservation: Some(reservation),
        }))
    }

    /// The fields a qualified `private` / `no-cache` withholds from other clients.
    pub fn withheld(&self) -> &[HeaderName] {
        self.directives.withheld()
    }

    /// Ready when the ticket can take more of the body: a body going to disk waits while the
    /// disk is behind (the origin is then read no faster than the disk writes).
    pub fn poll_room(&self, cx: &mut Context<'_>) -> Poll<()> {
        match &self.large {
            Some(w) => w.poll_room(cx),
            None => Poll::Ready(()),
        }
    }

    /// Adds the next chunk of the body. False when the body will not be stored (larger than
    /// `cache_max_object`, or no room for it in the store): drop the ticket then.
    pub fn push(&mut self, chunk: &Bytes) -> bool {
        if let Some(w) = &mut self.large {
            return w.push(chunk.clone());
        }
        let store = self.cache.store();
        let len = self.body.len() + chunk.len();
        if len > store.max_object() {
            // A body of unknown length outgrew memory: the disk tier may take it from here.
            let Some(mut w) = large_write(&self.cache, &self.key, None, &self.transforms) else {
                return false;
            };
            let so_far = Bytes::from(std::mem::take(&mut self.body));
            if !(so_far.is_empty() || w.push(so_far)) || !w.push(chunk.clone()) {
                return false;
            }
            if let Some(r) = self.reservation.take() {
                self.cache.store().release(r);
            }
            self.large = Some(w);
            return true;
        }
        if len > self.body.capacity() {
            // The buffer grows to the announced length, or doubles (never past the limit);
            // the store is charged for what the buffer will hold before it grows.
            let want = match self.expected {
                Some(n) if n >= len => n,
                _ => len
                    .max(2 * self.body.capacity())
                    .max(RESERVE_STEP)
                    .min(store.max_object()),
            };
            let Some(r) = self.reservation.as_mut() else {
                return false;
            };
            let need = body_charge(want);
            if need > r.bytes() && !store.grow(r, need - r.bytes()) {
                return false;
            }
            self.body.reserve_exact(want - self.body.len());
        }
        self.body.extend_from_slice(chunk);
        true
    }

    /// The body is complete: store the object. Returns its body (for readers still behind,
    /// who read it from then on instead of the chunks they were reading).
    pub fn finish(mut self: Box<Self>) -> Bytes {
        if let Some(w) = self.large.take() {
            self.finish_large(w);
            return Bytes::new();
        }
        // Exactly its length, so the object holds what it is charged for, and charged for as
        // long as it lives (in the store or not) before the room reserved for it is released.
        let (body, residency) = self
            .cache
            .store()
            .charged_body(std::mem::take(&mut self.body));
        if let Some(r) = self.reservation.take() {
            self.cache.store().release(r);
        }
        let obj = self.object(body.clone(), residency);
        if self.cache.store().outdated(&self.key, &obj) {
            // Purged while it was being fetched: no tier keeps it (the readers still get it).
            tracing::debug!("not stored: purged since its fetch began");
            return body;
        }
        let variant = self.variant.take();
        let obj = Arc::new(obj);
        share(
            &self.cache,
            &self.key,
            variant.as_deref(),
            &obj,
            self.shared_lock.take().map(|l| *l),
        );
        let stored = self
            .cache
            .store()
            .insert(self.key.clone(), variant.as_deref(), obj.clone());
        let transforms = std::mem::take(&mut self.transforms);
        if !stored {
            tracing::debug!(
                bytes = body.len(),
                "complete body not stored (no room in its shard)"
            );
        }
        // The disk tier hears of it even when memory had no room for it after all.
        self.cache.stored(&self.key, variant.as_deref(), &obj);
        if stored && transforms.any() {
            let (cache, key) = (self.cache.clone(), self.key.clone());
            crate::caching::transform::transform_stored(transforms, &obj, move |old, new| {
                cache.store().replace(&key, variant.as_deref(), old, new);
            });
        }
        body
    }
}

impl StoreTicket {
    /// A large object's body is all on its way to disk: its head completes the file there.
    fn finish_large(&mut self, w: LargeWrite) {
        let obj = self.object(Bytes::new(), None);
        if self.cache.store().outdated(&self.key, &obj) {
            // Purged while it was being fetched: dropping the write abandons the file.
            tracing::debug!("not stored on disk: purged since its fetch began");
            return;
        }
        w.finish(self.key.clone(), self.variant.take(), Arc::new(obj));
    }

    /// The object this ticket stores, with `body` (its fields and directives taken out of the
    /// ticket).
    fn object(&mut self, body: Bytes, residency: Option<Arc<Residency>>) -> Object {
        let f = fields(&std::mem::take(&mut self.headers), &[]);
        Object {
            status: self.status,
            headers_charge: f.charge,
            wire: f.wire,
            headers: f.headers,
            body,
            request_time: self.request_time,
            response_time: self.response_time,
            initial_age: self.initial_age,
            lifetime: self.lifetime,
            directives: std::mem::take(&mut self.directives),
            vary: std::mem::take(&mut self.vary),
            invalidated: Default::default(),
            refreshing: Default::default(),
            encoded: Box::default(),
            webp: None,
            residency,
            disk: if self.transforms.off_disk {
                DiskMark::never()
            } else {
                DiskMark::default()
            },
            extent: None,
            tags: std::mem::take(&mut self.tags),
        }
    }
}

/// Room reserved in the store, given back when dropped.
struct Room {
    cache: Arc<Cache>,
    reservation: Option<Reservation>,
}

impl Drop for Room {
    fn drop(&mut self) {
        if let Some(r) = self.reservation.take() {
            self.cache.store().release(r);
        }
    }
}

impl Drop for StoreTicket {
    fn drop(&mut self) {
        if let Some(r) = self.reservation.take() {
            self.cache.store().release(r);
        }
    }
}

/// The cache side of a teed body: each chunk is copied into the ticket's buffer as it passes
/// (see [`StoreTicket::push`]) and the object is stored when the body ends. Past the size limit,
/// or without room in the store, the ticket is dropped and the body simply streams on.
pub struct Tee<B> {
    inner: B,
    ticket: Option<Box<StoreTicket>>,
}

impl<B: Body<Data = Bytes> + Unpin> Tee<B> {
    /// Streams `body` and stores it with `ticket` when it ends completely; `None` when the body
    /// is empty (stored at once, nothing to tee).
    pub fn new(body: B, ticket: Box<StoreTicket>) -> Result<Tee<B>, B> {
        if body.is_end_stream() {
            // An empty body is never polled: store it now.
            ticket.finish();
            return Err(body);
        }
        Ok(Tee {
            inner: body,
            ticket: Some(ticket),
        })
    }

    /// The next frame of the origin's body, copied to the store on its way.
    pub fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        if let Some(t) = &self.ticket {
            ready!(t.poll_room(cx));
        }
        let frame = ready!(Pin::new(&mut self.inner).poll_frame(cx));
        self.on_frame(&frame);
        Poll::Ready(frame)
    }

    pub fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    pub fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }

    fn on_frame(&mut self, frame: &Option<Result<Frame<Bytes>, B::Error>>) {
        match frame {
            Some(Ok(f)) => {
                if let (Some(d), Some(t)) = (f.data_ref(), &mut self.ticket) {
                    if !t.push(d) {
                        self.ticket = None;
                        return;
                    }
                }
                // hyper stops polling a body once its declared length has been written, so a
                // length-delimited body is complete when the origin's body says so.
                if self.inner.is_end_stream() {
                    self.complete();
                }
            }
            // The origin failed mid-body: never store a truncated response.
            Some(Err(_)) => self.ticket = None,
            None => self.complete(),
        }
    }

    fn complete(&mut self) {
        if let Some(t) = self.ticket.take() {
            t.finish();
        }
    }
}

/// A coalescing leader's storable response: publishes its head to the waiters and pumps the
/// origin body into the shared buffer and the store (on a task of its own, so a leader's
/// client that goes away does not stop the fetch the others read). Returns the leader's reader.
/// `room` is what the shared buffer is charged to ([`StoreTicket::hold_buffer`]).
pub fn publish<B>(
    leader: Leader,
    head: SharedHead,
    body: B,
    ticket: Box<StoreTicket>,
    room: Box<dyn Send>,
    idle: Option<Duration>,
) -> InflightBody
where
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: std::fmt::Display,
{
    let (feed, reader) = leader.publish(head);
    feed.hold(room);
    tokio::spawn(pump(feed, body, ticket, idle));
    reader
}

/// Reads the origin body into the shared buffer. `idle` (the `proxy_timeout`) bounds the wait
/// for each chunk: an origin that stalls mid-body fails the fetch (readers get an error, later
/// misses start a new one) instead of holding every reader of the URL forever.
async fn pump<B>(feed: Feed, mut body: B, ticket: Box<StoreTicket>, idle: Option<Duration>)
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    use http_body_util::BodyExt;
    let mut ticket = Some(ticket);
    loop {
        let next = match idle {
            Some(t) => match tokio::time::timeout(t, body.frame()).await {
                Ok(f) => f,
                Err(_) => {
                    tracing::warn!(
                        ?t,
                        "origin stalled mid-body while coalesced clients were reading it"
                    );
                    feed.finish(true);
                    return;
                }
            },
            None => body.frame().await,
        };
        match next {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    // Past the size limit or without room in the store: stream on, unstored.
                    if ticket.as_mut().is_some_and(|t| !t.push(&data)) {
                        ticket = None;
                    }
                    feed.push(data);
                }
            }
            Some(Err(e)) => {
                tracing::warn!(error = %e, "origin body failed while coalesced clients were reading it");
                feed.finish(true);
                return;
            }
            None => break,
        }
    }
    // Stored: readers still behind read the stored body, and the buffer is freed.
    match ticket {
        Some(t) => feed.complete(t.finish()),
        None => feed.finish(false),
    }
}

/// The fields a stored copy keeps: not `Age` (recomputed per answer), not `CDN-Cache-Control`
/// (rampart is its target; it is not forwarded), and none that a qualified `private="…"` /
/// `no-cache="…"` withholds from shared reuse.
pub(super) fn stored_headers(res_headers: &Fields, directives: &ResponseDirectives) -> Fields {
    let mut stored = res_headers.clone();
    for name in directives.withheld() {
        stored.remove(name);
    }
    stored.remove(AGE);
    stored.remove(&CDN_CACHE_CONTROL);
    stored
}

/// The header block of a fresh full hit, minus `Age`/`X-Arc2-Cache-Age`: the stored fields
/// with the hit labels. The object built from it owns them in one buffer (see
/// [`rampart_cache::store::fields`]).
pub(super) fn hit_headers(stored: &Fields) -> Fields {
    static HIT: HeaderValue = HeaderValue::from_static("rampart; hit");
    let mut h = stored.clone();
    h.insert(X_ARC2_CACHE.clone(), CacheLabel::Hit.header());
    h.insert(CACHE_STATUS.clone(), HIT.clone());
    h
}
