//! The members of a sharded cache found through Redis (`cache_peers_from_redis`): each
//! instance announces its address with a lease in one sorted set, `PREFIX peers` (the score:
//! when the lease ends, by Redis's clock), renews it every [`RENEW_EVERY`] and reads the
//! others' from the same answer. An instance that stops renewing (it stopped, crashed or lost
//! Redis) drops out of every list within [`LEASE`] and a renewal.
//!
//! While Redis does not answer, each instance keeps the list it last read: members are not
//! dropped because Redis is away (a dead member is skipped by its peers' health checks
//! meanwhile), and nobody new joins until it answers again.

use std::sync::Arc;
use std::time::Duration;

use crate::Shared;

/// How long an announcement holds without renewal.
pub const LEASE: Duration = Duration::from_secs(3);
/// How often an instance renews its announcement and reads the others'.
pub const RENEW_EVERY: Duration = Duration::from_secs(1);
/// Longest wait for one renewal.
const RENEW_TIMEOUT: Duration = Duration::from_secs(2);

/// KEYS[1]: the members' set. ARGV: this instance's address, the lease in ms. Renews this
/// instance's lease, drops the expired ones, and answers the members now.
const ANNOUNCE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('PEXPIRE', KEYS[1], lease * 2)
return redis.call('ZRANGE', KEYS[1], 0, -1)
";

static SCRIPT: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(ANNOUNCE));

/// This instance's announcement; renewals stop when it is dropped (its lease then runs out).
#[derive(Debug)]
pub struct Announcement {
    stop: tokio::sync::watch::Sender<bool>,
}

impl Drop for Announcement {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}

impl Shared {
    /// Announces `me` (an address as `ip:port`) to the other instances under the lease, and
    /// calls `members` with every member's address (this one's included) after each renewal
    /// that Redis answered, on the Redis thread. Its second argument is set for a lease after
    /// Redis failed to answer: the others' leases may have run out meanwhile (the first
    /// renewal drops them) although they run, and renew within a lease, so a member missing
    /// from the list then is not dropped.
    pub fn announce(
        &self,
        me: String,
        members: Arc<dyn Fn(Vec<Vec<u8>>, bool) + Send + Sync>,
    ) -> Announcement {
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let key = self.key("peers");
        let this = self.clone();
        self.spawn(async move {
            let mut tick = tokio::time::interval(RENEW_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut failing = false;
            let mut answered_again: Option<tokio::time::Instant> = None;
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stopped.changed() => return,
                }
                if *stopped.borrow() {
                    return;
                }
                let (key, me) = (key.clone(), me.clone());
                let answer: Result<Vec<Vec<u8>>, _> = this
                    .call_with(RENEW_TIMEOUT, "cache peers", move |mut conn| async move {
                        SCRIPT
                            .key(key)
                            .arg(me)
                            .arg(LEASE.as_millis() as u64)
                            .invoke_async(&mut conn)
                            .await
                    })
                    .await;
                match answer {
                    Ok(list) => {
                        if failing {
                            tracing::info!("Redis answers: the fleet's members are read again");
                            failing = false;
                            answered_again = Some(tokio::time::Instant::now());
                        }
                        if *stopped.borrow() {
                            return;
                        }
                        let grow_only =
                            answered_again.is_some_and(|t| t.elapsed() < LEASE + RENEW_EVERY);
                        members(list, grow_only);
                    }
                    Err(e) if !failing => {
                        failing = true;
                        tracing::warn!(error = %e, "cannot renew this instance's place in the fleet; keeping the members last read");
                    }
                    Err(_) => {}
                }
            }
        });
        Announcement { stop }
    }
}
