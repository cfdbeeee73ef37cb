//! Purges everywhere: every purge (any scope, soft or hard) and every RFC 9111 invalidation
//! made on one instance is appended to one Redis stream (`PREFIX purges`), and every instance
//! follows the stream (`XREAD BLOCK`), applying what the others sent within milliseconds.
//!
//! Nothing is lost while Redis or an instance is away:
//! - Sending never waits on the request path: purges go into an outbox that a task on the
//!   Redis thread drains in order. While Redis is down they wait there (at most
//!   [`OUTBOX_MAX`]; past that they are dropped and one "drop everything" message is sent in
//!   their place, so the others cannot keep what they should have purged).
//! - A follower that lost its connection reads on from the last entry it applied. If that
//!   entry is gone when it comes back (the stream was trimmed past it, or Redis lost its data)
//!   it may have missed purges, and drops its whole cache.
//! - At start a follower reads from a second before its process started (by Redis's clock),
//!   so a purge sent while it was connecting is not missed.
//!
//! The stream keeps about [`STREAM_MAX`] entries.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rampart_cache::store::PurgeScope;
use redis::streams::StreamReadReply;
use redis::Value;

use crate::conn::Conn;
use crate::{Feature, Shared, STATS};

/// Entries the stream keeps (approximately: Redis trims whole nodes).
pub const STREAM_MAX: usize = 100_000;
/// Purges waiting for Redis at most; past that they become one "drop everything".
pub const OUTBOX_MAX: usize = 10_000;
/// How long one `XREAD` waits for entries before asking again.
pub(crate) const BLOCK: Duration = Duration::from_secs(5);
/// Wait between tries while Redis does not answer.
const RETRY: Duration = Duration::from_millis(250);
/// Longest wait for a batch of purges to be taken.
const SEND_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest wait for a batch when purged objects leave the shared cache tier too (a scope
/// other than one URL scans the keys).
const TIER_PURGE_TIMEOUT: Duration = Duration::from_secs(30);
/// Purges sent in one pipeline at most.
const BATCH: usize = 256;

/// When this process first started sharing (the follower replays the stream from then).
static STARTED: OnceLock<Instant> = OnceLock::new();

/// A purge another instance made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    pub scope: PurgeScope,
    pub soft: bool,
}

/// Applies a purge from another instance to the local cache; returns how many entries it hit.
pub type Apply = Arc<dyn Fn(&Remote) -> usize + Send + Sync>;

/// Purges made here that Redis has not taken yet.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    queue: Mutex<Queue>,
    ready: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct Queue {
    /// Encoded scope and softness, oldest first.
    items: VecDeque<(Vec<u8>, bool)>,
    /// Purges were dropped: the others must drop everything.
    overflowed: bool,
    /// Counts overflows, so a batch sent while one happened is not taken off twice.
    generation: u64,
}

impl Outbox {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        match self.queue.lock() {
            Ok(q) => q,
            Err(p) => p.into_inner(),
        }
    }
}

impl Shared {
    /// Sends a purge made here to every other instance (never waits; see the module notes).
    pub fn publish_purge(&self, scope: &PurgeScope, soft: bool) {
        if !self.config().purge && !self.config().cache {
            return;
        }
        let outbox = &self.inner.outbox;
        {
            let mut q = outbox.lock();
            if q.items.len() >= OUTBOX_MAX {
                q.items.clear();
                q.generation += 1;
                if !q.overflowed {
                    tracing::warn!(
                        waiting = OUTBOX_MAX,
                        "Redis has been away for too many purges; the other instances will drop their caches when it is back"
                    );
                }
                q.overflowed = true;
                self.stats().fallback(Feature::Purge);
            }
            q.items.push_back((scope.encode(), soft));
        }
        outbox.ready.notify_one();
    }
}

/// Sends this instance's purges (a task on the Redis thread).
pub(crate) struct Sender {
    /// The stream (`redis_purge`).
    pub(crate) stream: Option<String>,
    /// The key prefix when the shared cache tier is on: purged objects leave it first.
    pub(crate) tier: Option<String>,
    pub(crate) instance: String,
    pub(crate) outbox: Arc<Outbox>,
}

impl Sender {
    pub(crate) async fn run(self, conn: Conn) {
        send(Arc::new(self), conn).await
    }
}

/// What the follower needs (no handle to [`Shared`]: the Redis thread ends when the last
/// one goes).
struct Follower {
    stream: String,
    instance: String,
    apply: Apply,
}

impl Shared {
    /// Applies the other instances' purges to the local cache (through `apply`) from now on.
    pub fn follow_purges(&self, apply: Apply) {
        if !self.config().purge {
            return;
        }
        STARTED.get_or_init(Instant::now);
        let follower = Follower {
            stream: self.key("purges"),
            instance: self.instance().to_owned(),
            apply,
        };
        let (endpoint, conn) = (self.inner.endpoint.clone(), self.inner.conn.clone());
        self.spawn(async move {
            // A connection of its own: XREAD blocks it.
            match endpoint.connect_with(BLOCK + Duration::from_secs(2)) {
                Ok(reader) => follow(follower, conn, reader).await,
                Err(e) => tracing::error!(error = %e, "cannot follow purges through Redis"),
            }
        });
    }
}

/// Drains the outbox into the stream, in order, retrying while Redis is away.
async fn send(bg: Arc<Sender>, mut conn: Conn) {
    loop {
        let (batch, overflowed, generation) = {
            let q = bg.outbox.lock();
            let batch: Vec<(Vec<u8>, bool)> = q.items.iter().take(BATCH).cloned().collect();
            (batch, q.overflowed, q.generation)
        };
        if batch.is_empty() && !overflowed {
            bg.outbox.ready.notified().await;
            continue;
        }
        let everything = overflowed.then(|| PurgeScope::Everything.encode());
        let scopes: Vec<(&Vec<u8>, bool)> = everything
            .iter()
            .map(|s| (s, false))
            .chain(batch.iter().map(|(s, soft)| (s, *soft)))
            .collect();
        let mut pipe = redis::pipe();
        if let Some(stream) = &bg.stream {
            for (scope, soft) in &scopes {
                pipe.cmd("XADD")
                    .arg(stream)
                    .arg("MAXLEN")
                    .arg("~")
                    .arg(STREAM_MAX)
                    .arg("*")
                    .arg("i")
                    .arg(&bg.instance)
                    .arg("s")
                    .arg(scope.as_slice())
                    .arg("h")
                    .arg(u8::from(!soft))
                    .ignore();
            }
        }
        // The shared tier first: an instance told of the purge must not load the object
        // back from it.
        let deliver = async {
            if let Some(prefix) = &bg.tier {
                for (scope, _) in &scopes {
                    if let Some(scope) = PurgeScope::decode(scope) {
                        crate::cache_tier::purge(&mut conn, prefix, &scope).await?;
                    }
                }
            }
            if bg.stream.is_some() {
                pipe.query_async::<()>(&mut conn).await?;
            }
            redis::RedisResult::Ok(())
        };
        let timeout = if bg.tier.is_some() {
            TIER_PURGE_TIMEOUT
        } else {
            SEND_TIMEOUT
        };
        match tokio::time::timeout(timeout, deliver).await {
            Ok(Ok(())) => {
                let mut q = bg.outbox.lock();
                if q.generation == generation {
                    let n = batch.len().min(q.items.len());
                    q.items.drain(..n);
                    q.overflowed = false;
                }
                for _ in &batch {
                    STATS.used(Feature::Purge);
                }
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, waiting = batch.len(), "purges not sent yet");
                tokio::time::sleep(RETRY).await;
            }
            Err(_) => tokio::time::sleep(RETRY).await,
        }
    }
}

/// Where the follower is in the stream.
#[derive(Debug)]
struct Position {
    /// Read entries after this ID.
    last: String,
    /// `last` is an entry this follower read (not its starting point).
    read_one: bool,
    /// The connection failed since the last read: check that nothing was missed.
    broken: bool,
}

/// Follows the stream and applies the other instances' purges.
async fn follow(bg: Follower, mut conn: Conn, mut reader: Conn) {
    let apply = bg.apply.clone();
    let mut pos = loop {
        match start_position(&mut conn).await {
            Some(last) => {
                break Position {
                    last,
                    read_one: false,
                    broken: false,
                }
            }
            None => tokio::time::sleep(RETRY).await,
        }
    };
    loop {
        if pos.broken && pos.read_one {
            match catch_up(&bg, &apply, &mut conn, &mut pos).await {
                Ok(()) => pos.broken = false,
                Err(()) => {
                    tokio::time::sleep(RETRY).await;
                    continue;
                }
            }
        }
        let read = redis::cmd("XREAD")
            .arg("COUNT")
            .arg(BATCH)
            .arg("BLOCK")
            .arg(BLOCK.as_millis() as u64)
            .arg("STREAMS")
            .arg(&bg.stream)
            .arg(&pos.last)
            .query_async::<Option<StreamReadReply>>(&mut reader)
            .await;
        match read {
            Ok(reply) => {
                if pos.broken && !pos.read_one {
                    pos.broken = false;
                }
                for entry in reply.into_iter().flat_map(|r| r.keys).flat_map(|k| k.ids) {
                    pos.last = entry.id.clone();
                    pos.read_one = true;
                    received(&bg, &apply, &entry.map);
                }
            }
            Err(e) => {
                if !pos.broken {
                    tracing::warn!(error = %e, "lost the purge stream; reading on from the last purge applied when Redis is back");
                }
                pos.broken = true;
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

/// A second before this process started sharing, by Redis's clock.
async fn start_position(conn: &mut Conn) -> Option<String> {
    let (secs, micros): (u64, u64) =
        tokio::time::timeout(SEND_TIMEOUT, redis::cmd("TIME").query_async(conn))
            .await
            .ok()?
            .ok()?;
    let now_ms = secs * 1000 + micros / 1000;
    let since = STARTED.get().map_or(0, |s| s.elapsed().as_millis() as u64);
    Some(format!("{}-0", now_ms.saturating_sub(since + 1000)))
}

/// After a lost connection: if the last entry read is gone, purges may have been missed and
/// the whole cache goes; reading goes on from the stream's end then.
async fn catch_up(
    bg: &Follower,
    apply: &Apply,
    conn: &mut Conn,
    pos: &mut Position,
) -> Result<(), ()> {
    let still: Vec<Value> = redis::cmd("XRANGE")
        .arg(&bg.stream)
        .arg(&pos.last)
        .arg(&pos.last)
        .query_async(conn)
        .await
        .map_err(|_| ())?;
    if !still.is_empty() {
        tracing::info!("purge stream back; catching up");
        return Ok(());
    }
    let end: Vec<(String, Value)> = redis::cmd("XREVRANGE")
        .arg(&bg.stream)
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(1)
        .query_async(conn)
        .await
        .map_err(|_| ())?;
    let n = apply(&Remote {
        scope: PurgeScope::Everything,
        soft: false,
    });
    STATS
        .purge_resyncs
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    tracing::warn!(
        dropped = n,
        "purges may have been missed while Redis was away (the stream no longer holds the last one applied here); the cache was emptied"
    );
    if let Some((id, _)) = end.into_iter().next() {
        pos.last = id;
    }
    Ok(())
}

/// Applies one stream entry unless this instance sent it.
fn received(bg: &Follower, apply: &Apply, fields: &std::collections::HashMap<String, Value>) {
    let bytes = |name: &str| match fields.get(name) {
        Some(Value::BulkString(b)) => Some(b.as_slice()),
        _ => None,
    };
    if bytes("i") == Some(bg.instance.as_bytes()) {
        return;
    }
    let Some(scope) = bytes("s").and_then(PurgeScope::decode) else {
        tracing::debug!("ignored a purge stream entry rampart did not write");
        return;
    };
    let remote = Remote {
        soft: bytes("h") == Some(b"0"),
        scope,
    };
    let n = apply(&remote);
    STATS
        .purges_received
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    tracing::debug!(scope = ?remote.scope, soft = remote.soft, purged = n, "purge from another instance");
}
