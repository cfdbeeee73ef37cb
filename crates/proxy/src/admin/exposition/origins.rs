//! The origins' families: health by rule, requests, errors by kind and response-head times by
//! address.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use prometheus_client::registry::Unit;

use crate::admin::state::Api;
use crate::telemetry::metrics::{self as m, HistSnap, Metrics, OriginErrorKind};

use super::Families;

pub(super) fn origins(m: &Metrics, view: &Api<'_>, f: &mut Families) {
    origin_health(view, f);
    origin_traffic(m, f);
}

/// Whether each rule's origins are in rotation.
fn origin_health(view: &Api<'_>, f: &mut Families) {
    let up = f.add(
        "rampart_origin_up",
        "1 when the origin is in rotation for the rule: passing its health checks (if any) and not refusing connections lately.",
        None,
    );
    for rule in view.router.rules() {
        let set = &rule.origins;
        for member in set.members() {
            let ok = set.in_rotation(member);
            up.gauge(
                vec![
                    ("rule", rule.config.domain_text.clone()),
                    ("origin", member.target.authority.as_str().to_owned()),
                ],
                if ok { 1.0 } else { 0.0 },
            );
        }
    }
}

/// Requests, errors, connections, bytes and response times per origin address.
fn origin_traffic(m: &Metrics, f: &mut Families) {
    let origins: Vec<(String, Arc<m::OriginStats>)> = {
        let o = m.origins.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<_> = o.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    let label = |name: &str| vec![("origin", name.to_owned())];
    type Sum = fn(&m::OriginShard) -> &std::sync::atomic::AtomicU64;
    let counters: [(&'static str, &'static str, Option<Unit>, Sum); 5] = [
        (
            "rampart_origin_requests",
            "Requests sent to each origin (a failover counts once per origin tried).",
            None,
            |s| &s.requests,
        ),
        (
            "rampart_origin_connections_opened",
            "Connections opened to each origin (the pool's misses).",
            None,
            |s| &s.opened,
        ),
        (
            "rampart_origin_connections_closed",
            "Connections to each origin that ended.",
            None,
            |s| &s.closed,
        ),
        (
            "rampart_origin_received",
            "Bytes read from each origin.",
            Some(Unit::Bytes),
            |s| &s.received,
        ),
        (
            "rampart_origin_sent",
            "Bytes written to each origin.",
            Some(Unit::Bytes),
            |s| &s.sent,
        ),
    ];
    for (name, help, unit, sum) in counters {
        let fam = f.add(name, help, unit);
        for (o, s) in &origins {
            fam.counter(label(o), s.sum(sum));
        }
    }
    let fam = f.add(
        "rampart_origin_connections_open",
        "Connections to each origin open now, pooled or busy.",
        None,
    );
    for (o, s) in &origins {
        let open = s.sum(|s| &s.opened).saturating_sub(s.sum(|s| &s.closed));
        fam.gauge(label(o), open as f64);
    }
    let fam = f.add(
        "rampart_origin_errors",
        "Requests to each origin that failed, by kind: connect (refused, unreachable), connect_timeout, timeout (no response head within proxy_timeout), tls, protocol.",
        None,
    );
    for (o, s) in &origins {
        for (i, kind) in OriginErrorKind::LABELS.iter().enumerate() {
            fam.counter(
                vec![("origin", o.clone()), ("kind", (*kind).to_owned())],
                s.shards.iter().map(|sh| sh.0.errors[i].load(Relaxed)).sum(),
            );
        }
    }
    let fam = f.add(
        "rampart_origin_response_duration",
        "Time from sending a request to an origin to its response head.",
        Some(Unit::Seconds),
    );
    for (o, s) in &origins {
        let mut h = HistSnap::default();
        for sh in s.shards.iter() {
            sh.0.head.add_to(&mut h);
        }
        fam.histogram(label(o), h);
    }
}
