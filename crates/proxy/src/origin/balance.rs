//! A rule's origins in preference order with their shared health and balancing
//! ([`OriginSet`], one [`OriginMember`] per origin). The connections themselves are the
//! worker's [`crate::origin::client::OriginClient`]; the order a request tries them in, with
//! failover, is `failover.rs`.
//!
//! Health is shared by every worker: an origin that refused a connection is skipped for
//! [`DOWN_FOR`] (passive health checking), and one that failed its active health checks
//! (`server/probes.rs`) until it passes them again, unless no origin is left: then the
//! best-ranked one is used (fail open).
//!
//! `Performance` routing sends each request to the healthy origin with the lowest average
//! response-head time (an EWMA over requests, errors counted as [`ERROR_PENALTY`]); an origin
//! not chosen for [`RETRY_AFTER`] gets the next request, so one that became fast again is
//! seen.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http::uri::{Authority, Scheme};
use rampart_config::{RoutingMethod, RuleConfig, UpstreamTarget};

use crate::error::ProxyError;
use crate::origin::connect::proxied_key;

/// How long an origin that refused a connection is skipped.
const DOWN_FOR: Duration = Duration::from_secs(5);

/// What an error (no connection, timeout, 5xx) counts as in the `Performance` average.
pub const ERROR_PENALTY: Duration = Duration::from_secs(1);

/// `Performance`: an origin not chosen for this long gets the next request (one request, then
/// its average decides again).
pub const RETRY_AFTER: Duration = Duration::from_secs(2);

/// Weight of a new sample in the `Performance` average (1/4: about the last 8 requests count).
const EWMA_SHIFT: u32 = 2;

/// One origin and its shared health state.
#[derive(Debug)]
pub struct OriginMember {
    pub target: UpstreamTarget,
    /// The pool authority for TLS: `name@host:port` (see `connect.rs`); `None` without TLS.
    tls_key: Option<Authority>,
    /// Milliseconds since `epoch` until which this origin is considered down (0 = up).
    down_until_ms: AtomicU64,
    /// The active health checks' verdict (always true without them).
    healthy: AtomicBool,
    /// `Performance`: average response-head time in µs (0 = no sample yet).
    ewma_us: AtomicU64,
    /// `Performance`: when this origin was last chosen first (ms since `epoch`).
    picked_ms: AtomicU64,
    /// Requests, errors and response times at `target.authority`, and at `target.tls` (kept
    /// by address: shared by every rule that uses it, and across reloads).
    stats: std::sync::Arc<crate::telemetry::metrics::OriginStats>,
    tls_stats: Option<std::sync::Arc<crate::telemetry::metrics::OriginStats>>,
}

impl OriginMember {
    /// The active health checks' verdict.
    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// Sets the active health checks' verdict; returns the previous one.
    pub fn set_healthy(&self, healthy: bool) -> bool {
        self.healthy.swap(healthy, Ordering::Relaxed)
    }

    /// The counts of this origin's plain (`tls` false) or TLS address.
    pub fn stats(&self, tls: bool) -> &crate::telemetry::metrics::OriginStats {
        match (&self.tls_stats, tls) {
            (Some(s), true) => s,
            _ => &self.stats,
        }
    }

    /// The `Performance` average, `None` before the first sample.
    pub fn latency(&self) -> Option<Duration> {
        match self.ewma_us.load(Ordering::Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }

    /// Adds one response-head time (or [`ERROR_PENALTY`]) to the `Performance` average.
    pub fn record(&self, took: Duration) {
        let sample = (took.as_micros() as u64).max(1);
        let old = self.ewma_us.load(Ordering::Relaxed);
        let new = if old == 0 {
            sample
        } else {
            // old + (sample - old) / 4, in integers; racing updates lose a sample at worst.
            (old - (old >> EWMA_SHIFT) + (sample >> EWMA_SHIFT)).max(1)
        };
        self.ewma_us.store(new, Ordering::Relaxed);
    }
}

/// A rule's origins in preference order, with the selection state for its routing method.
#[derive(Debug)]
pub struct OriginSet {
    members: Vec<OriginMember>,
    method: RoutingMethod,
    /// For `Weighted`: indices into `members`, each repeated by weight.
    schedule: Vec<usize>,
    next: AtomicUsize,
    epoch: Instant,
}

impl OriginSet {
    pub fn new(rule: &RuleConfig) -> Self {
        let members: Vec<_> =
            rule.upstreams
                .iter()
                .map(|t| OriginMember {
                    tls_key: t.tls.as_ref().and_then(|a| {
                        std::str::FromStr::from_str(&format!("{}@{a}", t.tls_name)).ok()
                    }),
                    target: t.clone(),
                    down_until_ms: AtomicU64::new(0),
                    healthy: AtomicBool::new(true),
                    ewma_us: AtomicU64::new(0),
                    // As if chosen at startup: an origin never chosen is retried after
                    // RETRY_AFTER like any other.
                    picked_ms: AtomicU64::new(1),
                    stats: crate::telemetry::metrics::get().origin(t.authority.as_str()),
                    tls_stats: t
                        .tls
                        .as_ref()
                        .map(|a| crate::telemetry::metrics::get().origin(a.as_str())),
                })
                .collect();
        let mut schedule = Vec::new();
        if rule.routing_method == RoutingMethod::Weighted {
            // Interleave by weight so consecutive requests spread (1,2,1,2,2 rather than 1,2,2,2).
            let max = rule
                .upstreams
                .iter()
                .map(|t| t.weight)
                .max()
                .unwrap_or(1)
                .min(1000);
            for round in 0..max {
                for (i, t) in rule.upstreams.iter().enumerate() {
                    if t.weight.min(1000) > round {
                        schedule.push(i);
                    }
                }
            }
        }
        OriginSet {
            members,
            method: rule.routing_method,
            schedule,
            next: AtomicUsize::new(0),
            epoch: Instant::now(),
        }
    }

    /// A fleet's peer as the one origin of a set: HTTP/1.1 to its HTTP listener (counted in
    /// the origin metrics under its address).
    pub fn of_peer(addr: std::net::SocketAddr) -> Self {
        let authority: Authority = match addr.to_string().parse() {
            Ok(a) => a,
            // invariant: a socket address renders as a valid authority.
            Err(_) => Authority::from_static("0.0.0.0:0"),
        };
        let target = rampart_config::UpstreamTarget {
            authority: authority.clone(),
            tls: None,
            https_only: false,
            tls_name: String::new(),
            weight: 1,
            protocol: rampart_config::OriginProtocol::Http1,
        };
        OriginSet {
            members: vec![OriginMember {
                tls_key: None,
                stats: crate::telemetry::metrics::get().origin(authority.as_str()),
                tls_stats: None,
                target,
                down_until_ms: AtomicU64::new(0),
                healthy: AtomicBool::new(true),
                ewma_us: AtomicU64::new(0),
                picked_ms: AtomicU64::new(1),
            }],
            method: RoutingMethod::Priority,
            schedule: Vec::new(),
            next: AtomicUsize::new(0),
            epoch: Instant::now(),
        }
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Takes over, from the same rule before a reload, the health verdict and response-time
    /// average of each origin that is still listed.
    pub fn adopt(&self, old: &OriginSet) {
        for m in &self.members {
            if let Some(o) = old.members.iter().find(|o| o.target == m.target) {
                m.healthy.store(o.healthy(), Ordering::Relaxed);
                m.ewma_us
                    .store(o.ewma_us.load(Ordering::Relaxed), Ordering::Relaxed);
            }
        }
    }

    /// The origins in rank order.
    pub fn members(&self) -> &[OriginMember] {
        &self.members
    }

    /// The rule's routing method.
    pub fn method(&self) -> RoutingMethod {
        self.method
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// The order in which to try the origins for one request: the first healthy one by the
    /// routing method, then the others in rank order from there; origins that are down
    /// (refused a connection lately, or failed their health checks) go last, best-ranked first.
    pub fn order(&self) -> impl Iterator<Item = &OriginMember> + '_ {
        let n = self.members.len();
        let now = self.now_ms();
        let up = move |m: &OriginMember| {
            m.down_until_ms.load(Ordering::Relaxed) <= now && m.healthy.load(Ordering::Relaxed)
        };
        let start = match self.method {
            RoutingMethod::Weighted if !self.schedule.is_empty() => {
                let k = self.next.fetch_add(1, Ordering::Relaxed) % self.schedule.len();
                self.schedule[k]
            }
            RoutingMethod::Performance if n > 1 => self.fastest(now, up),
            _ => 0,
        };
        let rotated = (0..n).map(move |i| &self.members[(start + i) % n]);
        rotated
            .clone()
            .filter(move |m| up(m))
            .chain(rotated.filter(move |m| !up(m)))
    }

    /// `Performance`: the up origin not chosen for [`RETRY_AFTER`] (a retry), else the one
    /// with the lowest average (no sample yet counts as fastest). Rank order breaks ties.
    fn fastest(&self, now: u64, up: impl Fn(&OriginMember) -> bool) -> usize {
        let retry_ms = RETRY_AFTER.as_millis() as u64;
        let mut best: Option<(usize, u64)> = None;
        for (i, m) in self.members.iter().enumerate() {
            if !up(m) {
                continue;
            }
            if now.saturating_sub(m.picked_ms.load(Ordering::Relaxed)) >= retry_ms {
                best = Some((i, 0));
                break;
            }
            let score = m.ewma_us.load(Ordering::Relaxed);
            if best.is_none_or(|(_, b)| score < b) {
                best = Some((i, score));
            }
        }
        let Some((i, _)) = best else { return 0 };
        // Written once per millisecond at most: every worker reads this line.
        let picked = &self.members[i].picked_ms;
        if picked.load(Ordering::Relaxed) != now {
            picked.store(now, Ordering::Relaxed);
        }
        i
    }

    /// How a request reaches `member`: (authority for logs, authority for the pool, scheme).
    /// TLS when the origin is `https_only`, or when the client came over HTTPS and the origin
    /// has a `forward_port_https`. Fails closed: a TLS origin whose pool key cannot be built
    /// (a name the configuration check should have refused) is an error, never plain HTTP.
    pub fn route(
        member: &OriginMember,
        https: bool,
    ) -> Result<(&Authority, &Authority, Scheme), ProxyError> {
        match (&member.target.tls, &member.tls_key) {
            (Some(shown), key) if member.target.https_only || https => match key {
                Some(key) => Ok((shown, key, Scheme::HTTPS)),
                None => Err(ProxyError::OriginTls(
                    format!(
                        "cannot use {:?} as the origin's TLS name",
                        member.target.tls_name
                    )
                    .into(),
                )),
            },
            _ => Ok((
                &member.target.authority,
                &member.target.authority,
                Scheme::HTTP,
            )),
        }
    }

    /// [`OriginSet::route`] for a rule that sends a PROXY header (`header`) first: the pool
    /// key carries the header (see [`proxied_key`]), so each client's connections are its own.
    pub fn route_proxied<'m>(
        member: &'m OriginMember,
        https: bool,
        header: &[u8],
    ) -> Result<(&'m Authority, Authority, Scheme), ProxyError> {
        let (shown, key, scheme) = OriginSet::route(member, https)?;
        let key = proxied_key(key, header).ok_or_else(|| {
            ProxyError::OriginConnect(format!("cannot make a pool key for {key}").into())
        })?;
        Ok((shown, key, scheme))
    }

    /// Whether `member` is in rotation: passing its active checks and not refusing
    /// connections lately (what the metrics and the dashboard call up).
    pub fn in_rotation(&self, member: &OriginMember) -> bool {
        member.healthy() && !self.refused_lately(member)
    }

    /// Whether `member` refused a connection lately (passive health checking).
    pub fn refused_lately(&self, member: &OriginMember) -> bool {
        member.down_until_ms.load(Ordering::Relaxed) > self.now_ms()
    }

    pub fn mark_down(&self, member: &OriginMember) {
        member.down_until_ms.store(
            self.now_ms() + DOWN_FOR.as_millis() as u64,
            Ordering::Relaxed,
        );
    }

    /// Whether any member is up (a fleet's peer: not marked down after a failure).
    pub fn any_up(&self) -> bool {
        let now = self.now_ms();
        self.members.iter().any(|m| {
            m.down_until_ms.load(Ordering::Relaxed) <= now && m.healthy.load(Ordering::Relaxed)
        })
    }

    /// Marks every member down for a while (a fleet's peer that failed or answered garbage).
    pub fn mark_all_down(&self) {
        for m in &self.members {
            self.mark_down(m);
        }
    }

    pub fn mark_up(&self, member: &OriginMember) {
        if member.down_until_ms.load(Ordering::Relaxed) != 0 {
            member.down_until_ms.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(src: &str) -> OriginSet {
        let v = rampart_config::validate(src, 1);
        let c = v.config.unwrap_or_else(|| panic!("{:?}", v.diagnostics));
        OriginSet::new(&c.rules[0])
    }

    const LB: &str = r#"
[[proxy_rules]]
domain = "x"
[proxy_rules.routing_rules]
routing_method = "METHOD"
https_only = false
enable_health_checks = false
health_check_interval = 30
[[proxy_rules.routing_rules.routing_locations]]
priority = 1
forward_ipv4 = "127.0.0.1"
forward_port_http = 1
[[proxy_rules.routing_rules.routing_locations]]
priority = 3
forward_ipv4 = "127.0.0.1"
forward_port_http = 2
"#;

    fn first_port(s: &OriginSet) -> u16 {
        s.order()
            .next()
            .and_then(|m| m.target.authority.port_u16())
            .unwrap_or(0)
    }

    #[test]
    fn proxied_keys_carry_the_header_in_the_user_part() {
        let header = crate::net::proxy_protocol::encode(
            crate::net::proxy_protocol::Version::V2,
            Some((
                "[2001:db8::1]:4000".parse().expect("test value"),
                "10.0.0.1:443".parse().expect("test value"),
            )),
        );
        for (key, user) in [
            ("127.0.0.1:8080", ""),
            ("origin.test@[::1]:8443", "origin.test"),
        ] {
            let key: Authority = key.parse().expect("test value");
            let k = proxied_key(&key, &header).expect("test value");
            assert_eq!((k.host(), k.port_u16()), (key.host(), key.port_u16()));
            let (u, _) = k.as_str().rsplit_once('@').expect("test value");
            let (name, hex) = u
                .split_once(crate::origin::connect::PROXY_MARK)
                .expect("test value");
            assert_eq!(name, user);
            assert_eq!(hex.len(), header.len() * 2);
        }
    }

    #[test]
    fn priority_fails_over_and_recovers() {
        let s = set(&LB.replace("METHOD", "Priority"));
        assert_eq!(first_port(&s), 1);
        let first = s.order().next().expect("member");
        s.mark_down(first);
        assert_eq!(first_port(&s), 2);
        // The downed origin is still tried last.
        assert_eq!(s.order().count(), 2);
        let m = s.order().nth(1).expect("member");
        s.mark_up(m);
        assert_eq!(first_port(&s), 1);
    }

    #[test]
    fn tls_origins_get_a_pool_key_for_every_kind_of_name() {
        // IP-address origins in a catch-all rule are verified by the address itself, IPv6 too.
        let s = set("[[proxy_rules]]\ndomain = \"*\"\n\
             upstreams = [\"https://[::1]:8443\", \"https://127.0.0.1:8443\", \"https://origin.test:443\"]\n");
        let keys: Vec<String> = s
            .order()
            .map(|m| match OriginSet::route(m, false) {
                Ok((_, key, scheme)) => format!("{scheme}://{key}"),
                Err(e) => panic!("{e}"),
            })
            .collect();
        assert_eq!(
            keys,
            [
                "https://::1@[::1]:8443",
                "https://127.0.0.1@127.0.0.1:8443",
                "https://origin.test@origin.test:443"
            ]
        );
    }

    #[test]
    fn health_checks_take_origins_out_and_all_down_fails_open() {
        let s = set(&LB.replace("METHOD", "Priority"));
        s.members()[0].set_healthy(false);
        assert_eq!(first_port(&s), 2);
        s.members()[1].set_healthy(false);
        assert_eq!(first_port(&s), 1, "all down: the best-ranked one");
        s.members()[0].set_healthy(true);
        assert_eq!(first_port(&s), 1);
    }

    #[test]
    fn performance_prefers_the_fastest_and_retries_the_others() {
        let mut s = set(&LB.replace("METHOD", "Performance"));
        // No samples yet: rank order.
        assert_eq!(first_port(&s), 1);
        s.members()[0].record(Duration::from_millis(100));
        s.members()[1].record(Duration::from_millis(10));
        assert_eq!(first_port(&s), 2);
        // Errors count as a second each: the fast origin that fails falls behind.
        for _ in 0..3 {
            s.members()[1].record(ERROR_PENALTY);
        }
        assert_eq!(first_port(&s), 1);
        assert!(s.members()[1].latency() > s.members()[0].latency());
        // Both chosen lately: the average decides, again and again.
        for _ in 0..10 {
            assert_eq!(first_port(&s), 1);
        }
        // Seen from RETRY_AFTER later, the slow origin gets one request, then the average
        // decides again.
        s.epoch -= RETRY_AFTER + Duration::from_millis(10);
        s.members()[0]
            .picked_ms
            .store(s.now_ms(), Ordering::Relaxed);
        assert_eq!(first_port(&s), 2, "a retry");
        assert_eq!(first_port(&s), 1);
        // An origin that is down is never the fastest.
        s.members()[0].set_healthy(false);
        assert_eq!(first_port(&s), 2);
    }

    #[test]
    fn weighted_spreads_by_weight() {
        let s = set(&LB.replace("METHOD", "Weighted"));
        let mut counts = [0; 3];
        for _ in 0..400 {
            counts[first_port(&s) as usize] += 1;
        }
        assert_eq!(counts[1], 100);
        assert_eq!(counts[2], 300);
    }
}
