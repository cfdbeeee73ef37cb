//! Request coalescing: concurrent misses on one resource send one request to the origin.
//!
//! The first miss on a key becomes the *leader* and registers an [`Inflight`]; later misses on
//! the same key become *waiters*. When the origin's response head arrives the leader decides:
//!
//! - storable with a known length (≤ `cache_max_object`): the head is published and a pump task
//!   reads the origin body into the in-flight buffer (and then into the store). The leader and
//!   every waiter stream from that buffer as it fills — nobody waits for the whole body, and a
//!   client that goes away does not stop the fetch the others are reading. Once the body is
//!   stored, readers still behind read the stored body instead ([`Feed::complete`]) and the
//!   buffer is freed: a slow reader then holds only what the cache's budget counts, not a
//!   second copy (the buffer itself is charged while it lives, see [`Feed::hold`]).
//! - anything else (not storable, unknown length, origin error, leader cancelled): the waiters
//!   are released at once and fetch on their own. A response that is not storable (and not a
//!   5xx) is remembered for [`UNCACHEABLE_FOR`]: misses on the key then fetch at once, in
//!   parallel, instead of each waiting for another's answer first (Varnish's hit-for-miss);
//!   a response stored meanwhile ends it.
//!
//! Invariant: an `Inflight` is in the table only while its head is pending or its body is being
//! pumped; the [`Leader`] guard (then the [`Feed`]) removes it in every outcome, including drop
//! on cancellation. This module knows nothing of the store: `writer.rs` pumps the body into a
//! [`Feed`] and into the store.

use rampart_head::Fields;
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::StatusCode;
use http_body::{Body, Frame, SizeHint};
use rampart_cache::key::CacheKey;
use rampart_cache::vary::Vary;
use tokio::sync::watch;

/// The response head shared with waiters.
#[derive(Debug)]
pub struct SharedHead {
    pub status: StatusCode,
    pub headers: Fields,
    pub vary: Vary,
    /// The leader's variant key (when the response varies).
    pub variant: Option<Bytes>,
    pub length: u64,
}

#[derive(Debug, Clone)]
enum HeadState {
    Pending,
    Ready(Arc<SharedHead>),
    /// Fetch on your own.
    Released,
}

#[derive(Default)]
struct BodyState {
    chunks: Vec<Bytes>,
    /// The complete body as stored: read from here once set (`chunks` is then empty).
    whole: Option<Bytes>,
    done: bool,
    failed: bool,
    wakers: Vec<Waker>,
    /// What the buffer's memory is charged to; dropped with the buffer.
    guard: Option<Box<dyn Send>>,
}

/// What a reader finds next.
enum Next {
    Chunk(Bytes),
    Whole(Bytes),
    End,
    Failed,
    Wait,
}

/// One in-flight fetch.
pub struct Inflight {
    head: watch::Sender<HeadState>,
    body: Mutex<BodyState>,
}

impl std::fmt::Debug for Inflight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Inflight")
    }
}

/// How long a key whose response could not be shared skips coalescing (Varnish's default
/// for hit-for-miss objects).
pub const UNCACHEABLE_FOR: Duration = Duration::from_secs(120);

/// Keys whose last response could not be shared, remembered at most (more are not
/// remembered: those misses coalesce like any other).
const MAX_UNCACHEABLE: usize = 16 * 1024;

/// A key in the table.
#[derive(Debug)]
enum Slot {
    /// A fetch others may wait on.
    Fetching(Arc<Inflight>),
    /// The last response for the key could not be shared (not storable): misses until then
    /// fetch on their own at once instead of queueing behind each other (Varnish's
    /// hit-for-miss).
    Uncacheable(Instant),
}

#[derive(Debug, Default)]
struct Table {
    /// foldhash with a seed per process: keys are the clients' URLs, so the seed matters
    /// (flooding); SipHash would be a few hundred instructions a miss.
    slots: HashMap<CacheKey, Slot, foldhash::quality::RandomState>,
    /// How many slots are `Uncacheable`.
    uncacheable: usize,
}

/// The table of in-flight fetches (one per process, shared by workers).
#[derive(Debug, Default)]
pub struct Coalescer {
    table: Mutex<Table>,
}

/// What a miss becomes.
#[derive(Debug)]
pub enum Role {
    Leader(Leader),
    Waiter(Arc<Inflight>),
    /// The resource's last response could not be shared: fetch on your own, now.
    Alone,
}

impl Coalescer {
    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        // invariant: the lock is never held across an await or a panic-prone call.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn join(self: &Arc<Self>, key: &CacheKey) -> Role {
        let mut table = self.lock();
        match table.slots.get(key) {
            Some(Slot::Fetching(f)) => return Role::Waiter(f.clone()),
            Some(Slot::Uncacheable(until)) if Instant::now() < *until => return Role::Alone,
            Some(Slot::Uncacheable(_)) => table.uncacheable -= 1,
            None => {}
        }
        let (tx, _) = watch::channel(HeadState::Pending);
        let inflight = Arc::new(Inflight {
            head: tx,
            body: Mutex::new(BodyState::default()),
        });
        table
            .slots
            .insert(key.clone(), Slot::Fetching(inflight.clone()));
        Role::Leader(Leader {
            coalescer: self.clone(),
            key: key.clone(),
            inflight,
            published: false,
        })
    }

    /// Takes `inflight` off the table; `uncacheable`: remember until then that the key's
    /// response could not be shared.
    fn remove(&self, key: &CacheKey, inflight: &Arc<Inflight>, uncacheable: Option<Instant>) {
        let mut table = self.lock();
        if !matches!(table.slots.get(key), Some(Slot::Fetching(f)) if Arc::ptr_eq(f, inflight)) {
            return;
        }
        match uncacheable {
            Some(until) if table.uncacheable < MAX_UNCACHEABLE || table.sweep() => {
                table.slots.insert(key.clone(), Slot::Uncacheable(until));
                table.uncacheable += 1;
            }
            _ => {
                table.slots.remove(key);
            }
        }
    }

    /// Forgets that `key`'s response could not be shared (a response for it was stored).
    pub fn forget_uncacheable(&self, key: &CacheKey) {
        let mut table = self.lock();
        if matches!(table.slots.get(key), Some(Slot::Uncacheable(_))) {
            table.slots.remove(key);
            table.uncacheable -= 1;
        }
    }

    /// Fetches in flight.
    pub fn len(&self) -> usize {
        let table = self.lock();
        table.slots.len() - table.uncacheable
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Table {
    /// Drops the expired `Uncacheable` slots; whether there is room for another now.
    fn sweep(&mut self) -> bool {
        let now = Instant::now();
        let mut dropped = 0;
        self.slots.retain(|_, s| match s {
            Slot::Uncacheable(until) if *until <= now => {
                dropped += 1;
                false
            }
            _ => true,
        });
        self.uncacheable -= dropped;
        self.uncacheable < MAX_UNCACHEABLE
    }
}

impl Inflight {
    /// Waits (at most `timeout`) for the leader's decision. `None`: fetch on your own.
    pub async fn wait_head(&self, timeout: Duration) -> Option<Arc<SharedHead>> {
        let mut rx = self.head.subscribe();
        let decided = tokio::time::timeout(timeout, async {
            rx.wait_for(|s| !matches!(s, HeadState::Pending))
                .await
                .map(|s| s.clone())
        })
        .await;
        match decided {
            Ok(Ok(HeadState::Ready(h))) => Some(h),
            _ => None,
        }
    }

    fn with_body<R>(&self, f: impl FnOnce(&mut BodyState) -> R) -> R {
        let mut b = match self.body.lock() {
            Ok(b) => b,
            Err(p) => p.into_inner(),
        };
        f(&mut b)
    }

    fn push(&self, chunk: Bytes) {
        let wakers = self.with_body(|b| {
            b.chunks.push(chunk);
            std::mem::take(&mut b.wakers)
        });
        wakers.into_iter().for_each(Waker::wake);
    }

    fn finish(&self, failed: bool, whole: Option<Bytes>) {
        let (wakers, freed) = self.with_body(|b| {
            b.done = true;
            b.failed = failed;
            let freed = whole.is_some().then(|| {
                b.whole = whole;
                (std::mem::take(&mut b.chunks), b.guard.take())
            });
            (std::mem::take(&mut b.wakers), freed)
        });
        // The buffer is freed outside the lock.
        drop(freed);
        wakers.into_iter().for_each(Waker::wake);
    }
}

/// The leader's obligation: publish a head or release the waiters. Dropping it releases them.
#[derive(Debug)]
pub struct Leader {
    coalescer: Arc<Coalescer>,
    key: CacheKey,
    inflight: Arc<Inflight>,
    published: bool,
}

impl Leader {
    /// Publishes the head: waiters start reading. Returns the feed the body is written into
    /// (by the store's pump) and the leader's own reader.
    pub fn publish(mut self, head: SharedHead) -> (Feed, InflightBody) {
        self.published = true;
        let length = head.length;
        self.inflight
            .head
            .send_replace(HeadState::Ready(Arc::new(head)));
        let reader = InflightBody::new(self.inflight.clone(), length);
        let feed = Feed {
            coalescer: self.coalescer.clone(),
            key: self.key.clone(),
            inflight: self.inflight.clone(),
            done: false,
        };
        (feed, reader)
    }
}

impl Leader {
    /// The response cannot be shared (not storable): the waiters are released, and misses on
    /// the key for `period` fetch on their own at once ([`Role::Alone`]).
    pub fn uncacheable(mut self, period: Duration) {
        self.published = true;
        self.release(Some(Instant::now() + period));
    }

    /// Takes the fetch off the table, then releases its waiters, when there are any: with
    /// the fetch off the table nobody can join it any more, so a fetch nobody else holds has
    /// nobody to tell (waking a watch channel's receivers takes its locks: ~850 instructions a
    /// miss).
    fn release(&self, uncacheable: Option<Instant>) {
        self.coalescer
            .remove(&self.key, &self.inflight, uncacheable);
        // Every other holder cloned it from the table under the table's lock, which `remove`
        // took after them: their counts are seen.
        if Arc::strong_count(&self.inflight) > 1 {
            self.inflight.head.send_replace(HeadState::Released);
        }
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        if !self.published {
            self.release(None);
        }
    }
}

/// The writing end of a published fetch: chunks go to every reader; [`Feed::finish`] ends it
/// and takes it off the table. Dropped unfinished, it fails the readers.
#[derive(Debug)]
pub struct Feed {
    coalescer: Arc<Coalescer>,
    key: CacheKey,
    inflight: Arc<Inflight>,
    done: bool,
}

impl Feed {
    pub fn push(&self, chunk: Bytes) {
        self.inflight.push(chunk);
    }

    /// Charges the buffer's memory to `guard` (dropped when the buffer is freed).
    pub fn hold(&self, guard: Box<dyn Send>) {
        self.inflight.with_body(|b| b.guard = Some(guard));
    }

    /// The body ended (`failed`: before its end); later misses start a new fetch.
    pub fn finish(mut self, failed: bool) {
        self.end(failed, None);
    }

    /// The body ended and was stored as `whole`: readers read it from there, and the buffer
    /// is freed.
    pub fn complete(mut self, whole: Bytes) {
        self.end(false, Some(whole));
    }

    fn end(&mut self, failed: bool, whole: Option<Bytes>) {
        if !std::mem::replace(&mut self.done, true) {
            self.inflight.finish(failed, whole);
            self.coalescer.remove(&self.key, &self.inflight, None);
        }
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.end(true, None);
    }
}

/// A client's view of an in-flight body: every chunk from the start as it arrives, or the
/// bytes of one range of it (a range request answered from a whole-object fetch).
pub struct InflightBody {
    inflight: Arc<Inflight>,
    /// The next chunk to read.
    next: usize,
    /// The offset of chunk `next` in the body.
    pos: u64,
    /// The bytes sent: `start..end` (the whole body unless cut with [`InflightBody::range`]).
    start: u64,
    end: u64,
}

impl std::fmt::Debug for InflightBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InflightBody")
    }
}

/// The origin failed mid-body: the client's response must end with an error, not look whole.
#[derive(Debug, thiserror::Error)]
#[error("origin body failed mid-stream")]
pub struct TruncatedBody;

impl InflightBody {
    pub fn new(inflight: Arc<Inflight>, length: u64) -> Self {
        InflightBody {
            inflight,
            next: 0,
            pos: 0,
            start: 0,
            end: length,
        }
    }

    /// Only bytes `first..=last` of the body (a 206's content); the fetch itself goes on to
    /// the end for the store and the other readers.
    pub fn range(mut self, first: u64, last: u64) -> Self {
        self.start = first;
        self.end = last.saturating_add(1).min(self.end).max(first);
        self
    }

    fn remaining(&self) -> u64 {
        self.end.saturating_sub(self.pos.max(self.start))
    }
}

impl Body for InflightBody {
    type Data = Bytes;
    type Error = TruncatedBody;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, TruncatedBody>>> {
        loop {
            if self.pos >= self.end {
                return Poll::Ready(None);
            }
            let next = self.next;
            let polled = self.inflight.with_body(|b| {
                if let Some(w) = &b.whole {
                    Next::Whole(w.clone())
                } else if let Some(c) = b.chunks.get(next) {
                    Next::Chunk(c.clone())
                } else if b.done {
                    if b.failed {
                        Next::Failed
                    } else {
                        Next::End
                    }
                } else {
                    if !b.wakers.iter().any(|w| w.will_wake(cx.waker())) {
                        b.wakers.push(cx.waker().clone());
                    }
                    Next::Wait
                }
            });
            let chunk = match polled {
                Next::Chunk(c) => c,
                // The stored body: the rest of the range at once, sliced from it.
                Next::Whole(whole) => {
                    let len = whole.len() as u64;
                    let (from, to) = (self.pos.max(self.start).min(len), self.end.min(len));
                    self.pos = self.end;
                    if from >= to {
                        return Poll::Ready(None);
                    }
                    let piece = whole.slice(from as usize..to as usize);
                    return Poll::Ready(Some(Ok(Frame::data(piece))));
                }
                Next::Failed => return Poll::Ready(Some(Err(TruncatedBody))),
                // The origin sent less than it announced: hyper reports that to the client.
                Next::End => return Poll::Ready(None),
                Next::Wait => return Poll::Pending,
            };
            let at = self.pos;
            let len = chunk.len() as u64;
            self.next += 1;
            self.pos = at + len;
            // The part of this chunk inside start..end, if any.
            let from = self.start.max(at);
            let to = self.end.min(at + len);
            if from < to {
                let piece = if from == at && to == at + len {
                    chunk
                } else {
                    chunk.slice((from - at) as usize..(to - at) as usize)
                };
                return Poll::Ready(Some(Ok(Frame::data(piece))));
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.remaining() == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    fn lead(c: &Arc<Coalescer>, key: &CacheKey) -> Leader {
        match c.join(key) {
            Role::Leader(l) => l,
            other => panic!("not a leader: {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_dropped_leader_releases_its_waiters_at_once_and_leaves_no_slot() {
        let c = Arc::new(Coalescer::default());
        let key = CacheKey::new("a.example", "/x", false);
        // A waiter that joined before the leader went, and only waits afterwards.
        let leader = lead(&c, &key);
        let Role::Waiter(waiter) = c.join(&key) else {
            panic!("not a waiter")
        };
        drop(leader);
        let started = Instant::now();
        assert!(waiter.wait_head(Duration::from_secs(5)).await.is_none());
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "the waiter was not released"
        );
        assert!(c.is_empty());
        // A leader nobody waited on: the next miss leads again.
        drop(lead(&c, &key));
        assert!(c.is_empty());
        let again = lead(&c, &key);
        // Uncacheable with a waiter: released too, and the key is fetched alone for a while.
        let Role::Waiter(waiter) = c.join(&key) else {
            panic!("not a waiter")
        };
        again.uncacheable(Duration::from_secs(60));
        assert!(waiter.wait_head(Duration::from_secs(5)).await.is_none());
        assert!(matches!(c.join(&key), Role::Alone));
    }
}
