//! Shared rate limits: the GCRA state of each client (its theoretical arrival time, TAT) lives
//! in Redis, and one script reads, decides and writes it in one round trip, atomically, so any
//! number of instances together admit exactly the configured rate and burst per client.
//!
//! The script takes the time from Redis (`TIME`), so the instances' clocks do not matter. A
//! key expires when its TAT passes (an idle client and a client never seen are the same to
//! GCRA). The same GCRA as the local limiter (governor): `burst` requests at once, then one
//! every `1/rate` seconds.

use std::net::IpAddr;
use std::time::Duration;

use crate::{Shared, SharedError};

/// KEYS[1]: the client's key. ARGV[1]: the emission interval (µs, 1 s / rate). ARGV[2]: the
/// burst tolerance (µs, interval × (burst − 1)). Returns `{1, 0}` (admitted) or `{0, µs until
/// the next request would be admitted}`.
const GCRA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local allow_at = tat - tolerance
if now < allow_at then
  return {0, allow_at - now}
end
local new_tat = tat + interval
redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX', math.ceil((new_tat - now) / 1000) + 1)
return {1, 0}
";

/// What Redis decided for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Admitted,
    /// Refused; the client may come back after this long.
    Refused(Duration),
}

/// The script, compiled once (its SHA is sent; the source only when Redis lacks it).
#[derive(Debug)]
pub struct Gcra {
    script: std::sync::Arc<redis::Script>,
}

impl Default for Gcra {
    fn default() -> Self {
        Gcra {
            script: std::sync::Arc::new(redis::Script::new(GCRA)),
        }
    }
}

impl Gcra {
    /// Counts one request of `client` against the limit called `name` (`per_second`
    /// sustained, `burst` at once). `client` is the subscriber the limit counts (the caller
    /// masks IPv6 addresses to their /64, as the local limiter does).
    pub async fn check(
        &self,
        shared: &Shared,
        name: &str,
        client: IpAddr,
        per_second: u32,
        burst: u32,
    ) -> Result<Verdict, SharedError> {
        let key = client_key(shared, name, client);
        let interval = 1_000_000 / u64::from(per_second.max(1));
        let tolerance = interval * u64::from(burst.max(1) - 1);
        // On this worker's own connection: one decision per counted request.
        let script = &self.script;
        let (admitted, wait): (i64, i64) = shared
            .call_here("rate limit", |mut conn| async move {
                script
                    .key(&key)
                    .arg(interval)
                    .arg(tolerance)
                    .invoke_async(&mut conn)
                    .await
            })
            .await?;
        Ok(if admitted == 1 {
            Verdict::Admitted
        } else {
            Verdict::Refused(Duration::from_micros(wait.max(1) as u64))
        })
    }
}

/// `PREFIX rl:NAME:CLIENT`.
fn client_key(shared: &Shared, name: &str, client: IpAddr) -> String {
    shared.key(&format!("rl:{name}:{client}"))
}
