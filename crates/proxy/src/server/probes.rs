//! Active health checks (`routing_rules.enable_health_checks`): each origin of such a rule is
//! sent `GET health_check_path` every `health_check_interval` seconds, with the rule's host
//! name, from one background thread. An answer of 2xx or 3xx within the probe timeout is a
//! success. [`DOWN_AFTER`] failures in a row take the origin out of rotation, [`UP_AFTER`]
//! successes in a row bring it back; every change is logged, and `/_rampart/status` shows the
//! verdicts. Routing (`origin/balance.rs`) skips origins that are down unless all are (fail open).

use rampart_head::Request;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use http::header::{HeaderValue, HOST, USER_AGENT};
use http::StatusCode;
use rampart_config::{DomainPattern, HealthCheck};
use tokio::sync::watch;

use crate::body::RequestBody;
use crate::error::{Chain, ProxyError};
use crate::origin::balance::{OriginMember, OriginSet};
use crate::origin::client::OriginClient;
use crate::origin::fields::{OriginFields, Outgoing};
use crate::policy::route::{Router, Rule};

/// Failed probes in a row that take an origin out of rotation.
pub const DOWN_AFTER: u32 = 3;
/// Successful probes in a row that bring it back.
pub const UP_AFTER: u32 = 2;
/// The longest a probe waits for an answer (less when the interval or `proxy_timeout` is
/// shorter; at least one second).
const MAX_PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Starts the health-check thread when a rule asks for checks; it stops when `shutdown` turns
/// true.
pub fn start(
    router: &Arc<Router>,
    upstream: OriginClient,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<Option<JoinHandle<()>>> {
    if !router
        .rules()
        .iter()
        .any(|r| r.config.health_check.is_some())
    {
        return Ok(None);
    }
    let router = router.clone();
    let thread = std::thread::Builder::new()
        .name("rampart-health".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => return tracing::error!(error = %e, "cannot start the health checks"),
            };
            rt.block_on(run(router, upstream, shutdown));
        })?;
    Ok(Some(thread))
}

async fn run(router: Arc<Router>, upstream: OriginClient, shutdown: watch::Receiver<bool>) {
    let upstream = Arc::new(upstream);
    let mut probes = Vec::new();
    for rule in router.rules() {
        let Some(check) = &rule.config.health_check else {
            continue;
        };
        for i in 0..rule.origins.len() {
            probes.push(tokio::spawn(probe_loop(
                rule.clone(),
                i,
                check.clone(),
                upstream.clone(),
                shutdown.clone(),
            )));
        }
    }
    for p in probes {
        let _ = p.await;
    }
}

/// The `Host` a probe sends: the rule's domain, or for a wildcard rule the origin's own name.
fn probe_host(rule: &Rule, member: &OriginMember) -> HeaderValue {
    let name = match &rule.config.domain {
        DomainPattern::Exact(d) => d.as_str(),
        _ => member.target.tls_name.as_str(),
    };
    HeaderValue::from_str(name).unwrap_or_else(|_| HeaderValue::from_static("localhost"))
}

async fn probe_loop(
    rule: Arc<Rule>,
    index: usize,
    check: HealthCheck,
    upstream: Arc<OriginClient>,
    mut shutdown: watch::Receiver<bool>,
) {
    let member = &rule.origins.members()[index];
    let host = probe_host(&rule, member);
    let timeout = check
        .interval
        .min(upstream.timeout().unwrap_or(MAX_PROBE_TIMEOUT))
        .min(MAX_PROBE_TIMEOUT)
        .max(Duration::from_secs(1));
    let mut tick = tokio::time::interval(check.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut failures, mut successes) = (0u32, 0u32);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        if *shutdown.borrow() {
            return;
        }
        // A probe in flight does not hold up a shutdown.
        let result = tokio::select! {
            r = probe(&upstream, member, &check.path, &host, timeout, rule.config.send_proxy_protocol) => r,
            _ = shutdown.changed() => return,
        };
        let origin = &member.target.authority;
        match result {
            Ok(status) => {
                failures = 0;
                successes = successes.saturating_add(1);
                if !member.healthy() && successes >= UP_AFTER {
                    member.set_healthy(true);
                    tracing::warn!(domain = rule.config.domain_text, %origin, status = status.as_u16(),
                        "origin passed {UP_AFTER} health checks in a row: back in rotation");
                }
            }
            Err(failure) => {
                successes = 0;
                failures = failures.saturating_add(1);
                if member.healthy() && failures >= DOWN_AFTER {
                    member.set_healthy(false);
                    let reason = Chain(&failure);
                    tracing::warn!(domain = rule.config.domain_text, %origin, %reason,
                        "origin failed {DOWN_AFTER} health checks in a row: out of rotation");
                }
            }
        }
    }
}

/// Why a probe failed.
#[derive(Debug, thiserror::Error)]
enum ProbeFailure {
    #[error(transparent)]
    Origin(#[from] ProxyError),
    #[error("no answer within {}s", .0.as_secs_f64())]
    NoAnswer(Duration),
    #[error("answered {0}")]
    Status(StatusCode),
}

/// One probe: `Ok(status)` for 2xx/3xx, else why it failed.
async fn probe(
    upstream: &OriginClient,
    member: &OriginMember,
    path: &str,
    host: &HeaderValue,
    timeout: Duration,
    proxy: Option<crate::net::proxy_protocol::Version>,
) -> Result<StatusCode, ProbeFailure> {
    // A rule that sends PROXY headers sends one on its probes too: `LOCAL` (v2) or `UNKNOWN`
    // (v1), a connection of rampart's own.
    let (key, scheme) = match proxy {
        None => {
            let (_, key, scheme) = OriginSet::route(member, false)?;
            (key.clone(), scheme)
        }
        Some(v) => {
            let header = crate::net::proxy_protocol::encode(v, None);
            let (_, key, scheme) = OriginSet::route_proxied(member, false, &header)?;
            (key, scheme)
        }
    };
    let (mut head, ()) = Request::new(()).into_parts();
    head.uri = path
        .parse()
        .map_err(|_| ProxyError::BadRequest("health_check_path"))?;
    head.headers.insert(HOST, host.clone());
    head.headers.insert(
        USER_AGENT,
        HeaderValue::from_static(concat!("rampart-health-check/", env!("CARGO_PKG_VERSION"))),
    );
    let fields = OriginFields::default();
    let req = Outgoing {
        head: &head,
        fields: &fields,
        body: RequestBody::Empty,
    };
    match tokio::time::timeout(
        timeout,
        upstream.send(req, &key, scheme, member.target.protocol, None, false),
    )
    .await
    {
        Err(_) => Err(ProbeFailure::NoAnswer(timeout)),
        Ok(Err(e)) => Err(e.into()),
        Ok(Ok(res)) => {
            let status = res.status();
            // The body is dropped unread: a probe's answer is its status.
            if status.is_success() || status.is_redirection() {
                Ok(status)
            } else {
                Err(ProbeFailure::Status(status))
            }
        }
    }
}
