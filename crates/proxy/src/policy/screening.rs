//! recv's screening stage: who the client is, and whether its request may go on.
//!
//! Order (cheapest and most specific first; docs/arc2.md, "Screening", names ARC2's layers, each
//! independent):
//! 1. client address allow/deny lists of the rule (`allow_ips`, `deny_ips`) → 403
//! 2. `disallowed_user_agents` → 403
//! 3. rate limits: the global per-client limiter, then the rule's → 429 (counted in Redis for
//!    all instances with `redis_rate_limits`; see `rampart_redis::ratelimit`)
//! 4. a declared `Content-Length` over the body limit → 413 (streamed bodies are cut at the
//!    limit as they arrive, see `body/mod.rs`)
//! 5. SQL-injection screening of path, query and cookies → 403; form and JSON bodies are read
//!    (up to the body limit) and screened before anything is sent to the origin. A request the
//!    origin could read otherwise than the screen (two `Content-Type` lines, a multipart
//!    `boundary` given twice) → 400.
//!
//! Every refusal is logged at `info` with the client, host and reason, and carries
//! `X-Arc2-Cache: Block`. Nothing refused reaches the origin.

use rampart_head::{Fields, Request};
use std::net::IpAddr;
use std::sync::Arc;

use http::header::{CONTENT_TYPE, COOKIE, USER_AGENT};
use http::{HeaderValue, StatusCode};
use rampart_config::{Cidr, Config, RateLimit};
use rampart_redis::ratelimit::{Gcra, Verdict};
use rampart_redis::{Feature, Shared};
use rampart_screen::inspect::{self, BodyKind, Finding};
use rampart_screen::ratelimit::{Limiter, Refused};
use rampart_screen::sqli::{Detector, Sqli};

use crate::error::{ProxyError, Screened};
use crate::policy::route::Rule;

/// Largest form or JSON body read into memory for SQL-injection screening (or the body limit,
/// when lower); larger ones are refused (413) while screening is on.
pub const MAX_INSPECTED_BODY: u64 = 16 << 20;

/// Memory for form and JSON bodies held for screening at once, across all connections.
pub const INSPECTION_BUDGET: u64 = 256 << 20;

/// Screening state shared by all workers.
#[derive(Debug)]
pub struct Screen {
    detector: Box<dyn Detector>,
    /// [`INSPECTION_BUDGET`] in KiB permits.
    inspection: Arc<tokio::sync::Semaphore>,
    limiter: Option<Arc<Limiter>>,
    /// The global `rate_limit_status` (a rule's own, when set, wins for its limiter).
    refusal: StatusCode,
    exempt: Vec<Cidr>,
    trusted: Vec<Cidr>,
    body_limit: Option<u64>,
    /// `rate_limit_max_clients` the limiter was made with.
    max_clients: usize,
    /// Where the limits are counted when several instances share them (`redis_rate_limits`).
    shared: Option<Shared>,
    gcra: Gcra,
}

/// The global limiter's name in Redis keys (a rule's is its `domain`; no domain is `@`).
const GLOBAL_LIMIT: &str = "@";

impl Screen {
    /// Screening; with `shared` (Redis, `redis_rate_limits` on) the rate limits are counted
    /// there, for all instances together.
    pub fn new(config: &Config, shared: Option<&Shared>) -> Screen {
        Screen::build(config, None, shared)
    }

    /// Screening for a reloaded configuration: the global limiter (when its settings are
    /// unchanged) and the inspection budget carry over, so a reload resets no client's count.
    pub fn reloaded(config: &Config, previous: &Screen, shared: Option<&Shared>) -> Screen {
        Screen::build(config, Some(previous), shared)
    }

    fn build(config: &Config, previous: Option<&Screen>, shared: Option<&Shared>) -> Screen {
        let s = &config.screen;
        let limiter = match previous.and_then(|p| p.limiter.as_ref().map(|l| (p, l))) {
            Some((p, l))
                if s.rate_limit
                    == Some(RateLimit {
                        per_second: l.per_second,
                        burst: l.burst,
                    })
                    && p.max_clients == s.rate_limit_max_clients =>
            {
                Some(l.clone())
            }
            _ => s.rate_limit.map(|r| {
                Arc::new(Limiter::new(
                    r.per_second,
                    r.burst,
                    s.rate_limit_max_clients,
                ))
            }),
        };
        Screen {
            detector: Box::new(Sqli),
            inspection: previous.map_or_else(
                || {
                    Arc::new(tokio::sync::Semaphore::new(
                        (INSPECTION_BUDGET >> 10) as usize,
                    ))
                },
                |p| p.inspection.clone(),
            ),
            max_clients: s.rate_limit_max_clients,
            limiter,
            refusal: StatusCode::from_u16(s.rate_limit_status)
                .unwrap_or(StatusCode::TOO_MANY_REQUESTS),
            exempt: s.rate_limit_exempt.clone(),
            trusted: s.trusted_proxies.clone(),
            body_limit: s.body_limit,
            shared: shared.filter(|s| s.config().rate_limits).cloned(),
            gcra: Gcra::default(),
        }
    }

    /// Whether `peer` is one of the `trusted_proxies`.
    pub fn trusts(&self, peer: IpAddr) -> bool {
        self.trusted.iter().any(|c| c.contains(peer))
    }

    /// The client behind `peer`: when `peer` is a trusted proxy, the right-most address in
    /// `X-Forwarded-For` that is not itself a trusted proxy.
    pub fn client_ip(&self, peer: IpAddr, headers: &Fields) -> IpAddr {
        if self.trusted.is_empty() || !self.trusted.iter().any(|c| c.contains(peer)) {
            return peer;
        }
        let mut client = peer;
        let hops: Vec<&str> = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .collect();
        for hop in hops.iter().rev() {
            let Some(ip) = parse_hop(hop.trim()) else {
                break;
            };
            let ip = ip.to_canonical();
            client = ip;
            if !self.trusted.iter().any(|c| c.contains(ip)) {
                break;
            }
        }
        client
    }

    /// The body limit for a rule.
    pub fn body_limit(&self, rule: &Rule) -> Option<u64> {
        rule.config.body_limit.unwrap_or(self.body_limit)
    }

    /// Steps 1–5 on the request head. `Ok(Some(kind))` asks the caller to read the body and
    /// pass it to [`Screen::check_body`].
    pub async fn check_head<B>(
        &self,
        rule: &Rule,
        client: IpAddr,
        req: &Request<B>,
    ) -> Result<Option<BodyKind>, ProxyError> {
        self.check_client(rule, client, req)?;
        self.check_rate(rule, client).await?;
        self.check_request(rule, client, req)
    }

    /// Steps 1 and 2: the client's address and user agent.
    fn check_client<B>(
        &self,
        rule: &Rule,
        client: IpAddr,
        req: &Request<B>,
    ) -> Result<(), ProxyError> {
        let c = &rule.config;
        let refuse = |why: Screened| {
            tracing::info!(%client, domain = c.domain_text, path = req.uri().path(), reason = why.message(), "request blocked");
            ProxyError::Blocked(why)
        };
        if !c.allow_ips.is_empty() && !c.allow_ips.iter().any(|n| n.contains(client)) {
            return Err(refuse(Screened::NotInAllowIps));
        }
        if c.deny_ips.iter().any(|n| n.contains(client)) {
            return Err(refuse(Screened::InDenyIps));
        }
        if !c.disallowed_user_agents.is_empty() {
            // `User-Agent` is one field (RFC 9110 §10.1.5): a second line would let a client
            // show the screen one agent and the origin another.
            let mut lines = req.headers().get_all(USER_AGENT).iter();
            let ua = lines.next().map_or(&b""[..], HeaderValue::as_bytes);
            if lines.next().is_some() {
                return Err(refuse(Screened::SeveralUserAgents));
            }
            // Matched on the bytes: a value with non-ASCII bytes is still the agent it names.
            if c.disallowed_user_agents
                .iter()
                .any(|(m, pattern)| m.matches_bytes(pattern.as_bytes(), ua))
            {
                return Err(refuse(Screened::UserAgent));
            }
        }
        Ok(())
    }

    /// Step 3: the global limit, then the rule's. Exempt clients never reach a limiter (nor
    /// Redis).
    async fn check_rate(&self, rule: &Rule, client: IpAddr) -> Result<(), ProxyError> {
        let limiters = [
            (self.limiter.as_ref(), GLOBAL_LIMIT, self.refusal),
            (
                rule.limiter.as_ref(),
                rule.config.domain_text.as_str(),
                rule.config
                    .rate_limit_status
                    .and_then(|s| StatusCode::from_u16(s).ok())
                    .unwrap_or(self.refusal),
            ),
        ];
        if limiters.iter().all(|(l, _, _)| l.is_none())
            || self.exempt.iter().any(|n| n.contains(client))
        {
            return Ok(());
        }
        for (l, name, status) in limiters {
            let Some(l) = l else { continue };
            let verdict = match &self.shared {
                None => l.check(client),
                // Boxed: only with Redis, and its round trip would grow every request's future.
                Some(shared) => boxed!(self.check_shared(shared, l, name, client)).await,
            };
            if let Err(Refused { retry_after }) = verdict {
                tracing::info!(%client, domain = rule.config.domain_text, ?retry_after, "request rate limited");
                return Err(ProxyError::RateLimited {
                    retry_after,
                    limit: l.burst,
                    status,
                });
            }
        }
        Ok(())
    }

    /// One limit counted in Redis for all instances. A refusal Redis gave stands here until it
    /// runs out (no round trip for a client already refused); while Redis is slow or away the
    /// local limiter decides (it counts every request, so it is current when needed).
    async fn check_shared(
        &self,
        shared: &Shared,
        l: &Limiter,
        name: &str,
        client: IpAddr,
    ) -> Result<(), Refused> {
        if let Some(refused) = l.refused(client) {
            return Err(refused);
        }
        let local = l.check(client);
        match self
            .gcra
            .check(
                shared,
                name,
                rampart_screen::ratelimit::per_subscriber(client),
                l.per_second,
                l.burst,
            )
            .await
        {
            Ok(Verdict::Admitted) => {
                shared.stats().used(Feature::RateLimit);
                Ok(())
            }
            Ok(Verdict::Refused(retry_after)) => {
                shared.stats().used(Feature::RateLimit);
                l.remember_refusal(client, retry_after);
                Err(Refused { retry_after })
            }
            Err(e) => {
                shared.stats().fallback(Feature::RateLimit);
                tracing::debug!(%client, error = %e, "rate limit decided locally");
                local
            }
        }
    }

    /// Steps 4 and 5: the declared body size and SQL injection in the head.
    fn check_request<B>(
        &self,
        rule: &Rule,
        client: IpAddr,
        req: &Request<B>,
    ) -> Result<Option<BodyKind>, ProxyError> {
        let c = &rule.config;
        let refuse = |why: Screened| {
            tracing::info!(%client, domain = c.domain_text, path = req.uri().path(), reason = why.message(), "request blocked");
            ProxyError::Blocked(why)
        };
        if let Some(limit) = self.body_limit(rule) {
            let declared = crate::headers::content_length(req.headers());
            if declared.is_some_and(|n| n > limit) {
                tracing::info!(%client, domain = c.domain_text, limit, "request body over the limit");
                return Err(ProxyError::ClientBody(crate::error::BodyFault::TooLarge));
            }
        }
        if !c.sql_injection {
            return Ok(None);
        }
        let d = &*self.detector;
        let uri = req.uri();
        let finding = inspect::path(d, uri.path())
            .or_else(|| uri.query().and_then(|q| inspect::query(d, q)))
            .or_else(|| {
                req.headers()
                    .get_all(COOKIE)
                    .iter()
                    .find_map(|v| inspect::cookies(d, v.as_bytes()))
            });
        if let Some(f) = finding {
            return Err(sqli_block(client, &c.domain_text, uri.path(), &f));
        }
        // What the origin's parsers could read two ways is refused, not screened one way:
        // two `Content-Type` lines (one could be screened, the other read), or a body type
        // with a parameter given twice (a multipart `boundary`).
        let mut types = req.headers().get_all(CONTENT_TYPE).iter();
        let content_type = types.next();
        let ambiguous = match types.next() {
            Some(_) => Some("more than one Content-Type field"),
            None => content_type
                .filter(|v| BodyKind::from_content_type(v.as_bytes()).is_some())
                .and_then(|v| inspect::ambiguous_content_type(v.as_bytes())),
        };
        if let Some(why) = ambiguous {
            tracing::info!(%client, domain = c.domain_text, path = req.uri().path(), reason = why, "request refused: it cannot be screened one way");
            return Err(ProxyError::BadRequest(why));
        }
        let kind = content_type.and_then(|v| BodyKind::from_content_type(v.as_bytes()));
        if kind.is_some() {
            // A compressed form or JSON body cannot be screened; an origin that inflates it
            // would see what the screen did not.
            let encoded = req
                .headers()
                .get_all(http::header::CONTENT_ENCODING)
                .iter()
                .any(|v| !v.as_bytes().trim_ascii().eq_ignore_ascii_case(b"identity"));
            if encoded {
                return Err(refuse(Screened::EncodedBody));
            }
        }
        Ok(kind)
    }

    /// Reserves `bytes` of the inspection budget, waiting at most `within` for others to finish;
    /// 503 when the budget stays exhausted (many large bodies being screened at once).
    pub async fn reserve_inspection(
        &self,
        bytes: u64,
        within: std::time::Duration,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, ProxyError> {
        let kib = bytes.div_ceil(1024).clamp(1, INSPECTION_BUDGET >> 10) as u32;
        match tokio::time::timeout(within, self.inspection.clone().acquire_many_owned(kib)).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => {
                tracing::warn!(
                    bytes,
                    "request body screening memory exhausted; refusing with 503"
                );
                Err(ProxyError::Busy)
            }
        }
    }

    /// Step 5 for a form, JSON or multipart body read in full (`content_type` is the
    /// request's).
    pub fn check_body(
        &self,
        rule: &Rule,
        client: IpAddr,
        path: &str,
        kind: BodyKind,
        content_type: &[u8],
        body: &[u8],
    ) -> Result<(), ProxyError> {
        match inspect::body(&*self.detector, kind, content_type, body) {
            Some(f) => Err(sqli_block(client, &rule.config.domain_text, path, &f)),
            None => Ok(()),
        }
    }
}

/// An `X-Forwarded-For` hop: `IP`, `IP:port` or `[IPv6]:port`.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    if let Ok(ip) = hop.parse() {
        return Some(ip);
    }
    if let Some(rest) = hop.strip_prefix('[') {
        return rest.split(']').next()?.parse().ok();
    }
    let (ip, port) = hop.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    ip.parse().ok()
}

fn sqli_block(client: IpAddr, domain: &str, path: &str, f: &Finding) -> ProxyError {
    tracing::info!(
        %client,
        domain,
        path,
        location = f.location.as_str(),
        parameter = f.name,
        fingerprint = f.fingerprint,
        "request blocked: SQL injection"
    );
    ProxyError::Blocked(Screened::SqlInjection)
}
