//! The second cache tier (`redis_cache`): objects one instance stored, kept in Redis for the
//! others, and one origin fetch per resource for all instances.
//!
//! Each resource (host and URL, and the scheme when a rule's schemes reach different origins)
//! is one Redis hash, `PREFIX c:h:HOST URL` (`c:s:` for the HTTPS side), so that everything
//! about it lives in one Cluster slot and every step is one atomic script:
//! - `m`: the `Vary` field names the variants are keyed by (empty without `Vary`);
//! - `o` (no `Vary`) or `o:VARIANT`: the object, as `rampart_cache::portable` writes it;
//! - `l`: `EXPIRES_MS WHO`, the fetch lock: the instance fetching it from the origin, or `-`
//!   when a fetch found it could not be stored (then every instance fetches on its own until
//!   it expires: nobody waits for a response that will not come).
//!
//! The hash expires when its longest-lived object would be of no use any more (freshness plus
//! the stale allowances); a lock keeps it at least as long as the lock. Lock expiries are in
//! Redis's clock (`TIME`), so the instances' clocks do not matter for them; an object's age
//! is computed from the `Date`/response time it carries, as on the instance that fetched it.
//!
//! A purge empties the resource's hash for any scope (the sender does it before it tells the
//! other instances; see `purge.rs`): exact purges by key, tag purges by the tag's set, the
//! others by `SCAN`ning each master for the scope's pattern. The hash keeps one field for
//! [`PURGE_MARK_FOR`], `x`: when it was purged (Redis's clock). A write of an object whose
//! fetch began before that (an instance fetched the old version and its write arrives after
//! the purge) is refused, so a purge cannot be undone by a write in flight: the purge took
//! the fetch lock away, so a lock the writer holds was taken after the purge (and its fetch is
//! newer when it began after the lock); others are judged by their fetch time against the mark
//! (see [`CLOCK_SLACK`]).
//!
//! A tagged object's resource is also a member of each of its tags' sets, `PREFIX t:TAG` (the
//! tag's hash in hex), which live as long as their longest-lived member.

use std::sync::LazyLock;
use std::time::Duration;

use rampart_cache::key::CacheKey;
use rampart_cache::store::PurgeScope;
use redis::Value;

use crate::conn::Conn;
use crate::{Feature, Shared, SharedError, STATS};

/// How long a fetch lock holds when its holder never comes back (it died, or its origin
/// hangs): the others then take it over.
pub const LOCK_FOR: Duration = Duration::from_secs(15);
/// How long instances fetch on their own after a fetch found the response not storable.
pub const PASS_FOR: Duration = Duration::from_secs(5);

/// KEYS[1]: the resource. ARGV: the object field, this instance, the lock's length in ms (0:
/// no lock), and `1` when the field names a variant. Answers `{1, object}`, `{2, vary
/// names}` (ask again for the variant), `{3}` (another instance is fetching it), `{4}` (this
/// instance holds the lock now: fetch it), `{5}` (fetch it, nobody waits), `{0}` (nothing).
const LOOKUP: &str = r"
local key = KEYS[1]
local m = redis.call('HGET', key, 'm')
if m and m ~= '' and ARGV[4] == '0' then return {2, m} end
if m then
  local o = redis.call('HGET', key, ARGV[1])
  if o then return {1, o} end
end
local lock_ms = tonumber(ARGV[3])
if lock_ms == 0 then return {0} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local l = redis.call('HGET', key, 'l')
if l then
  local sp = string.find(l, ' ', 1, true)
  if sp and tonumber(string.sub(l, 1, sp - 1)) > now then
    local who = string.sub(l, sp + 1)
    if who == '-' then return {5} end
    if who == ARGV[2] then return {4} end
    return {3}
  end
end
redis.call('HSET', key, 'l', string.format('%d', now + lock_ms) .. ' ' .. ARGV[2])
if redis.call('PTTL', key) < lock_ms then redis.call('PEXPIRE', key, lock_ms) end
return {4}
";

/// KEYS[1]: the resource. ARGV: the `Vary` names, the object field, the object, its TTL in
/// ms, this instance, when its fetch began (Unix ms, this instance's clock). Objects of
/// another `Vary` go; a lock this instance held, or a pass marker, is lifted (the object is
/// here now), and the lock's length (ms). Answers 1, or 0 when the resource was purged since
/// the fetch began: a purge leaves a mark (`x`, when it was made) and takes the fetch lock
/// away, so a lock this instance holds was taken after the purge, and a fetch that began after
/// the lock was taken is newer than the purge; others are judged by their fetch time against
/// the mark. Both comparisons allow [`CLOCK_SLACK`] (the fetch time is this instance's clock).
const STORE: &str = r"
local key = KEYS[1]
local x = redis.call('HGET', key, 'x')
if x then
  local fetched = tonumber(ARGV[6])
  local slack = tonumber(ARGV[7])
  local ok = fetched >= tonumber(x) + slack
  local l = redis.call('HGET', key, 'l')
  local sp = l and string.find(l, ' ', 1, true)
  if not ok and sp and string.sub(l, sp + 1) == ARGV[5] then
    -- This instance's lock, taken after the purge: by this fetch if it began after the lock.
    local taken = tonumber(string.sub(l, 1, sp - 1)) - tonumber(ARGV[8])
    ok = fetched >= taken - slack
  end
  if not ok then return 0 end
end
local m = redis.call('HGET', key, 'm')
if m and m ~= ARGV[1] then
  redis.call('UNLINK', key)
  if x then redis.call('HSET', key, 'x', x) end
end
redis.call('HSET', key, 'm', ARGV[1], ARGV[2], ARGV[3])
local l = redis.call('HGET', key, 'l')
if l then
  local who = string.sub(l, (string.find(l, ' ', 1, true) or 0) + 1)
  if who == ARGV[5] or who == '-' then redis.call('HDEL', key, 'l') end
end
local ttl = tonumber(ARGV[4])
if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
return 1
";

/// KEYS[1]: a resource. ARGV: how long the purge's mark lasts (ms). Empties the resource and
/// leaves the mark, `x`: when it was purged, by Redis's clock. Answers 1 when it held
/// anything but a mark.
const PURGE: &str = r"
local key = KEYS[1]
local held = 0
local n = redis.call('HLEN', key)
if n > 1 or (n == 1 and redis.call('HEXISTS', key, 'x') == 0) then held = 1 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('UNLINK', key)
redis.call('HSET', key, 'x', string.format('%d', now))
redis.call('PEXPIRE', key, tonumber(ARGV[1]))
return held
";

/// How long a purge's mark refuses the writes of objects fetched before it: as long as a fetch
/// lock lasts (an instance hears of a purge within milliseconds, and then checks its own
/// writes), and no longer, since the mark keeps the resource's hash, and what a write puts in
/// it, at least that long.
pub const PURGE_MARK_FOR: Duration = LOCK_FOR;
/// How far an instance's clock may be behind Redis's for a write without the fetch lock to be
/// judged by its fetch time: such an object fetched up to this long after a purge is not
/// written either (the tier misses it until the next fetch); one fetched before is never
/// written after the purge unless the fetching instance's clock runs this far ahead.
pub const CLOCK_SLACK: Duration = Duration::from_secs(1);

/// KEYS[1]: the resource. ARGV: this instance, the pass marker's length in ms. When this
/// instance holds the lock, it becomes a pass marker: the others stop waiting.
const UNLOCK: &str = r"
local key = KEYS[1]
local l = redis.call('HGET', key, 'l')
if not l then return 0 end
local sp = string.find(l, ' ', 1, true)
if not sp or string.sub(l, sp + 1) ~= ARGV[1] then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local pass = tonumber(ARGV[2])
redis.call('HSET', key, 'l', string.format('%d', now + pass) .. ' -')
if redis.call('PTTL', key) < pass then redis.call('PEXPIRE', key, pass) end
return 1
";

/// KEYS[1]: a tag's set. ARGV: the resource, its TTL in ms. The set lives as long as its
/// longest-lived member.
const TAG: &str = r"
redis.call('SADD', KEYS[1], ARGV[1])
local ttl = tonumber(ARGV[2])
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
";

static SCRIPTS: LazyLock<[redis::Script; 5]> = LazyLock::new(|| {
    [
        redis::Script::new(LOOKUP),
        redis::Script::new(STORE),
        redis::Script::new(UNLOCK),
        redis::Script::new(TAG),
        redis::Script::new(PURGE),
    ]
});

/// The Redis set of the resources a tag is on.
fn tag_key(prefix: &str, tag: u64) -> String {
    format!("{prefix}t:{tag:016x}")
}

/// What the shared tier holds for a request.
#[derive(Debug)]
pub enum SharedAnswer {
    /// An object (`rampart_cache::portable`); whether it may be used is the caller's decision.
    Object(Vec<u8>),
    /// The resource varies on these request fields (comma-separated): ask again with the
    /// request's variant.
    Vary(String),
    /// Another instance is fetching it: look again shortly.
    Locked,
    /// This instance holds the fetch lock: fetch, then [`Shared::cache_store`] or
    /// [`Shared::cache_unlock`].
    Lead,
    /// Fetch without waiting for anybody (a fetch found it not storable, or no lock was asked).
    Nothing,
}

/// The Redis hash of a resource.
pub fn resource_key(prefix: &str, key: &CacheKey) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + 6 + key.len());
    k.extend_from_slice(prefix.as_bytes());
    k.extend_from_slice(if key.is_https() { b"c:s:" } else { b"c:h:" });
    k.extend_from_slice(key.host());
    k.push(b' ');
    k.extend_from_slice(key.url());
    k
}

/// The field of an object: `o`, or `o:VARIANT`.
fn object_field(variant: Option<&[u8]>) -> Vec<u8> {
    match variant {
        None => b"o".to_vec(),
        Some(v) => {
            let mut f = Vec::with_capacity(2 + v.len());
            f.extend_from_slice(b"o:");
            f.extend_from_slice(v);
            f
        }
    }
}

impl Shared {
    /// Whether the shared cache tier is on (`redis_cache`).
    pub fn caches(&self) -> bool {
        self.config().cache
    }

    /// `redis_cache_max_object`.
    pub fn cache_max_object(&self) -> usize {
        usize::try_from(self.config().cache_max_object).unwrap_or(usize::MAX)
    }

    /// Looks `key` up (its `variant` when the caller knows the resource varies), taking the
    /// fetch lock when nothing is stored and `lock` is set. One round trip, within
    /// `redis_timeout_ms`.
    pub async fn cache_lookup(
        &self,
        key: &CacheKey,
        variant: Option<&[u8]>,
        lock: bool,
    ) -> Result<SharedAnswer, SharedError> {
        let rkey = resource_key(&self.config().key_prefix, key);
        let field = object_field(variant);
        let lock_ms = if lock { LOCK_FOR.as_millis() as u64 } else { 0 };
        let known = u8::from(variant.is_some());
        let instance = self.instance().to_owned();
        let answer: Vec<Value> = self
            .call("shared cache", move |mut conn| async move {
                SCRIPTS[0]
                    .key(rkey)
                    .arg(field)
                    .arg(instance)
                    .arg(lock_ms)
                    .arg(known)
                    .invoke_async(&mut conn)
                    .await
            })
            .await?;
        let code = match answer.first() {
            Some(Value::Int(c)) => *c,
            _ => {
                return Err(SharedError::Unexpected(
                    "a shared cache answer without a code",
                ))
            }
        };
        let payload = match answer.into_iter().nth(1) {
            Some(Value::BulkString(b)) => Some(b),
            _ => None,
        };
        Ok(match (code, payload) {
            (1, Some(o)) => SharedAnswer::Object(o),
            (2, Some(m)) => SharedAnswer::Vary(String::from_utf8_lossy(&m).into_owned()),
            (3, _) => SharedAnswer::Locked,
            (4, _) => SharedAnswer::Lead,
            (0 | 5, _) => SharedAnswer::Nothing,
            _ => return Err(SharedError::Unexpected("an unknown shared cache answer")),
        })
    }

    /// Writes an object (`rampart_cache::portable`) for `key` and lifts this instance's fetch lock,
    /// in the background (the request path never waits for it). `vary` is the comma-separated
    /// `Vary` names (empty without `Vary`), `variant` the object's variant key, `fetched` when
    /// its fetch began: a purge made since then (see [`CLOCK_SLACK`]) keeps it out.
    #[allow(clippy::too_many_arguments)]
    pub fn cache_store(
        &self,
        key: &CacheKey,
        vary: String,
        variant: Option<&[u8]>,
        object: Vec<u8>,
        ttl: Duration,
        tags: &[u64],
        fetched: std::time::SystemTime,
    ) {
        // Writes in flight hold their object (and Redis's copy of the command) until Redis
        // takes it: bounded together, a write over the budget is skipped (a fallback), so a
        // slow or absent Redis cannot make them pile up beside the cache (the chaos soak:
        // RSS past cache_memory × 1.1 + 40 MiB with the tier on).
        let kib = (object.len().div_ceil(1024)).max(1) as u32;
        let Ok(held) = WRITES.try_acquire_many(kib) else {
            STATS.fallback(Feature::Cache);
            tracing::debug!(
                bytes = object.len(),
                "shared cache writes in flight at their budget; this one skipped"
            );
            return;
        };
        let rkey = resource_key(&self.config().key_prefix, key);
        let field = object_field(variant);
        let ttl_ms = ttl.as_millis().max(1) as u64;
        let fetched_ms = fetched
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let tag_keys: Vec<String> = tags
            .iter()
            .map(|t| tag_key(&self.config().key_prefix, *t))
            .collect();
        let this = self.clone();
        self.spawn_call(async move {
            let _held = held;
            let instance = this.instance().to_owned();
            let member = rkey.clone();
            let r: Result<i64, _> = this
                .call_with(
                    STORE_TIMEOUT,
                    "shared cache write",
                    move |mut conn| async move {
                        // The object goes straight into the command, once: a
                        // `ScriptInvocation` keeps a copy of every argument beside the
                        // command it builds of them (twice the object in flight).
                        let script = &SCRIPTS[1];
                        let mut cmd = redis::cmd("EVALSHA");
                        cmd.arg(script.get_hash())
                            .arg(1)
                            .arg(rkey)
                            .arg(vary)
                            .arg(field);
                        cmd.arg(&object[..])
                            .arg(ttl_ms)
                            .arg(instance)
                            .arg(fetched_ms)
                            .arg(CLOCK_SLACK.as_millis() as u64)
                            .arg(LOCK_FOR.as_millis() as u64);
                        drop(object);
                        match cmd.query_async(&mut conn).await {
                            Err(e)
                                if e.kind()
                                    == redis::ErrorKind::Server(
                                        redis::ServerErrorKind::NoScript,
                                    ) =>
                            {
                                script.prepare_invoke().load_async(&mut conn).await?;
                                cmd.query_async(&mut conn).await
                            }
                            r => r,
                        }
                    },
                )
                .await;
            match r {
                Ok(1) => STATS
                    .cache_writes
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                Ok(_) => {
                    // Its tags are not written either: the purge took them.
                    tracing::debug!("not written to the shared cache: purged since its fetch");
                    return;
                }
                Err(_) => {
                    STATS.fallback(Feature::Cache);
                    return;
                }
            };
            // Each tag's set names the resource, for a tag purge to find it.
            for tk in tag_keys {
                let member = member.clone();
                let _: Result<(), _> = this
                    .call_with(
                        STORE_TIMEOUT,
                        "shared cache tag",
                        move |mut conn| async move {
                            SCRIPTS[3]
                                .key(tk)
                                .arg(member)
                                .arg(ttl_ms)
                                .invoke_async(&mut conn)
                                .await
                        },
                    )
                    .await;
            }
        });
    }

    /// Gives up this instance's fetch lock on `key` (its response was not stored): the
    /// instances waiting for it fetch on their own for [`PASS_FOR`]. In the background.
    pub fn cache_unlock(&self, key: &CacheKey) {
        let rkey = resource_key(&self.config().key_prefix, key);
        let this = self.clone();
        self.spawn_call(async move {
            let instance = this.instance().to_owned();
            let _: Result<i64, _> = this
                .call_with(
                    STORE_TIMEOUT,
                    "shared cache unlock",
                    |mut conn| async move {
                        SCRIPTS[2]
                            .key(rkey)
                            .arg(instance)
                            .arg(PASS_FOR.as_millis() as u64)
                            .invoke_async(&mut conn)
                            .await
                    },
                )
                .await;
        });
    }

    /// Runs a background command on the Redis thread (it may outlive the request).
    fn spawn_call(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        self.inner.handle.spawn(task);
    }
}

/// Longest wait for a background write.
const STORE_TIMEOUT: Duration = Duration::from_secs(2);

/// Bytes of objects being written to the shared tier at once (KiB permits): each is held once,
/// in the command Redis's client sends (and, for as long as the command is being built, in the
/// caller's buffer too).
pub const WRITES_IN_FLIGHT: usize = 8 << 20;

static WRITES: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(WRITES_IN_FLIGHT >> 10);

/// Removes what `scope` addresses from the shared tier (on the Redis thread, before the purge
/// is sent to the others).
pub(crate) async fn purge(
    conn: &mut Conn,
    prefix: &str,
    scope: &PurgeScope,
) -> redis::RedisResult<u64> {
    let pattern = match scope {
        PurgeScope::Exact(k) => {
            let keys = [
                resource_key(prefix, &k.clone().for_https(false)),
                resource_key(prefix, &k.clone().for_https(true)),
            ];
            // Marked even when absent: an instance fetching it without the tier's lock (Redis
            // did not answer its look-up) must not write it back.
            let mut n = 0;
            for k in keys {
                n += mark_purged(conn, k).await?;
            }
            return Ok(n);
        }
        PurgeScope::Prefix { host, prefix: p } => pattern(prefix, Some(host), &[&glob(p), b"*"]),
        PurgeScope::Contains { host, needle } => {
            pattern(prefix, Some(host), &[b"*", &glob(needle), b"*"])
        }
        PurgeScope::Domain(host) => pattern(prefix, Some(host), &[b"*"]),
        PurgeScope::Everything => pattern(prefix, None, &[]),
        PurgeScope::Tag(t) => {
            // The resources the tag's set names (each whole: its variants carry the tags
            // of the same resource), then the set.
            let set = tag_key(prefix, *t);
            let members: Vec<Vec<u8>> = redis::cmd("SMEMBERS").arg(&set).query_async(conn).await?;
            let mut n = 0;
            for m in members {
                n += mark_purged(conn, m).await?;
            }
            redis::cmd("UNLINK")
                .arg(&set)
                .query_async::<u64>(conn)
                .await?;
            return Ok(n);
        }
    };
    let mut n = 0;
    for node in masters(conn).await? {
        let mut cursor = 0u64;
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000);
            let (next, keys): (u64, Vec<Vec<u8>>) = match (&node, &mut *conn) {
                (Some((host, port)), Conn::Cluster(c)) => {
                    let v = c
                        .route_command(
                            scan,
                            redis::cluster_routing::RoutingInfo::SingleNode(
                                redis::cluster_routing::SingleNodeRoutingInfo::ByAddress {
                                    host: host.clone(),
                                    port: *port,
                                },
                            ),
                        )
                        .await?;
                    redis::from_redis_value(v)?
                }
                _ => scan.query_async(&mut *conn).await?,
            };
            if !keys.is_empty() {
                // The script's text rather than its hash: a pipeline cannot load it on
                // demand (purges of a whole scope are rare; the bytes do not matter).
                let mut pipe = redis::pipe();
                for k in &keys {
                    pipe.cmd("EVAL")
                        .arg(PURGE)
                        .arg(1)
                        .arg(k)
                        .arg(PURGE_MARK_FOR.as_millis() as u64);
                }
                // On a Cluster, to the master the page came from (its keys are in its slots;
                // a pipeline of keys in several slots is refused by the client).
                let held: Vec<u64> = match (&node, &mut *conn) {
                    (Some((host, port)), Conn::Cluster(c)) => {
                        let v = c
                            .route_pipeline(
                                pipe,
                                0,
                                keys.len(),
                                redis::cluster_routing::SingleNodeRoutingInfo::ByAddress {
                                    host: host.clone(),
                                    port: *port,
                                },
                            )
                            .await?;
                        redis::from_redis_value(Value::Array(v))?
                    }
                    _ => pipe.query_async(&mut *conn).await?,
                };
                n += held.iter().sum::<u64>();
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
    }
    Ok(n)
}

/// Empties a resource and marks it purged ([`PURGE`]); 1 when it held anything.
async fn mark_purged(conn: &mut Conn, resource: Vec<u8>) -> redis::RedisResult<u64> {
    SCRIPTS[4]
        .key(resource)
        .arg(PURGE_MARK_FOR.as_millis() as u64)
        .invoke_async(conn)
        .await
}

/// `PREFIX c:?:HOST ` followed by `rest` (already a pattern), or every resource.
fn pattern(prefix: &str, host: Option<&Vec<u8>>, rest: &[&[u8]]) -> Vec<u8> {
    let mut p = glob(prefix.as_bytes());
    p.extend_from_slice(b"c:?:");
    match host {
        Some(h) => {
            p.extend_from_slice(&glob(h));
            p.push(b' ');
            for r in rest {
                p.extend_from_slice(r);
            }
        }
        None => p.push(b'*'),
    }
    p
}

/// `bytes` matched literally by a `SCAN MATCH` pattern.
fn glob(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    for &b in bytes {
        if matches!(b, b'*' | b'?' | b'[' | b']' | b'\\') {
            out.push(b'\\');
        }
        out.push(b);
    }
    out
}

/// The masters to scan: `None` for the one server, else each master's address.
async fn masters(conn: &mut Conn) -> redis::RedisResult<Vec<Option<(String, u16)>>> {
    let Conn::Cluster(c) = conn else {
        return Ok(vec![None]);
    };
    let v = c
        .route_command(
            redis::cmd("CLUSTER").arg("NODES").clone(),
            redis::cluster_routing::RoutingInfo::SingleNode(
                redis::cluster_routing::SingleNodeRoutingInfo::Random,
            ),
        )
        .await?;
    let text: String = redis::from_redis_value(v)?;
    Ok(text
        .lines()
        .filter_map(|line| {
            let mut parts = line.split(' ');
            let addr = parts.nth(1)?;
            let flags = parts.next()?;
            if !flags.split(',').any(|f| f == "master") || flags.contains("fail") {
                return None;
            }
            // ip:port@cport[,hostname]
            let hostport = addr.split('@').next()?;
            let (host, port) = hostport.rsplit_once(':')?;
            Some(Some((host.to_owned(), port.parse().ok()?)))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn purge_patterns_match_only_their_scope() {
        assert_eq!(
            pattern("r:", Some(&b"a.example".to_vec()), &[&glob(b"/img*"), b"*"]),
            b"r:c:?:a.example /img\\**".to_vec()
        );
        assert_eq!(pattern("r[1]:", None, &[]), b"r\\[1\\]:c:?:*".to_vec());
        let k = CacheKey::new("A.example:8080", "/x?y", false);
        assert_eq!(resource_key("r:", &k), b"r:c:h:a.example /x?y".to_vec());
        assert_eq!(
            resource_key("r:", &k.for_https(true)),
            b"r:c:s:a.example /x?y".to_vec()
        );
    }
}
