//! The soak's report: which failures the faults explain, the verdict, and the same figures as
//! Markdown (`soak.md`), JSON (`soak.json`, what the CI test reads) and a summary on stdout.
//!
//! A failure is explained only by a fault that can cause it, at the time it happened:
//! - an origin killed: an answer cut mid-body, or an origin-failure status (5xx) to a POST
//!   (a request with a body is not sent to the other origin), for a request in flight between
//!   the kill and 5 s after the origin is back (rampart's pooled connections to the dead
//!   process, and the 5 s it keeps a refusing origin marked down). A body-less request goes to
//!   the other origin when its origin's connection breaks before any of the answer, so a 5xx
//!   to a GET is not explained;
//! - the flaky path: a 5xx, a cut answer or a reset before the answer to a `/flaky/` request
//!   (the origin cut it on purpose: what matters is that it is never served as complete);
//! - an upgrade: a WebSocket closed, between SIGUSR2 and 1 s after the old process exited (the
//!   old process closes what is still open when its drain time is up); and a POST over HTTP/3
//!   left unanswered when the old process closed the connection gracefully after its GOAWAY
//!   (not processed; a GET is sent again instead, a POST is counted).
//!
//! Nothing explains a wrong body, a timeout, a refused connection to rampart, or any failure
//! during a reload or while Redis is down (rampart promises none).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::faults::{FaultEvent, Sample, Schedule};
use super::tally::{ClassCount, Failure, Recorded, Wrong};
use super::SoakArgs;

/// Everything the report is made from.
pub struct Input<'a> {
    pub started_utc: String,
    pub version: String,
    pub seed: u64,
    pub args: &'a SoakArgs,
    pub schedule: Schedule,
    pub skipped: Vec<String>,
    pub duration_s: f64,
    pub window_s: u64,
    pub cache_memory: u64,
    pub baseline_rss: u64,
    pub rss_bound: u64,
    pub recorded: Recorded,
    pub faults: Vec<FaultEvent>,
    pub samples: Vec<Sample>,
    pub rampart_log: String,
    pub redis: bool,
}

/// Grace after an origin is back during which failures are still its doing (seconds).
const ORIGIN_GRACE_S: f64 = 5.0;

fn is_5xx(cause: &str) -> bool {
    cause.starts_with("status 5")
}

/// The fault that explains `f`, if any (see the module header).
fn explain(f: &Failure, faults: &[FaultEvent]) -> Option<String> {
    let overlaps = |from: f64, to: f64| f.from_s <= to && f.to_s >= from;
    let origin_like = is_5xx(&f.cause) || f.cause == "body cut";
    // A cut answer may also reach the client as a reset stream before its head (HTTP/2 and
    // HTTP/3 may drop the head with the stream): a clean error too.
    let clean_error = origin_like
        || f.cause == "error before the answer"
        || f.cause == "connection closed before the answer";
    if f.class.ends_with(" flaky") && clean_error {
        return Some("the origin cut this URL's answer mid-body on purpose (flaky path)".into());
    }
    let origin_death = f.cause == "body cut" || (is_5xx(&f.cause) && f.class.ends_with(" post"));
    if origin_death {
        if let Some(ev) = faults
            .iter()
            .find(|e| e.kind == "origin-kill" && overlaps(e.start_s, e.end_s + ORIGIN_GRACE_S))
        {
            let name = ev.detail.split(' ').nth(1).unwrap_or("?");
            return Some(format!(
                "{} while origin {name} was down ({:.1}–{:.1} s, +{ORIGIN_GRACE_S} s)",
                f.cause, ev.start_s, ev.end_s
            ));
        }
    }
    if f.class.starts_with("h3 ") && f.cause == super::h3_client::GRACEFUL_CLOSE {
        if let Some(ev) = faults
            .iter()
            .find(|e| e.kind == "upgrade" && overlaps(e.start_s, e.end_s + 1.0))
        {
            return Some(format!(
                "sent as the old process sent GOAWAY after the upgrade at {:.1} s, and not processed (RFC 9114 §5.2: the client may send it again)",
                ev.start_s
            ));
        }
    }
    if f.class == "ws" && f.cause == "ws closed" {
        if let Some(ev) = faults
            .iter()
            .find(|e| e.kind == "upgrade" && overlaps(e.start_s, e.end_s + 1.0))
        {
            return Some(format!(
                "WebSocket closed by the old process at the end of its drain after the upgrade at {:.1} s",
                ev.start_s
            ));
        }
    }
    None
}

/// A rampart defect the soak found (reported, not fixed here) and the failures it causes.
pub struct KnownDefect {
    pub name: &'static str,
    pub what: &'static str,
    /// Whether a failure is this defect's doing.
    matches: fn(&Failure, &[FaultEvent]) -> bool,
}

/// The defects found so far and not yet fixed. Each must go once rampart is fixed (the soak
/// then fails on it again if it comes back). Gone: `upgrade-drops-tls-handshakes` (c7d8dda) and
/// `upgrade-splits-http3-datagrams` (HTTP/3 datagrams read by the process that did not own
/// their connection while an upgrade drained the old one; fixed by `quic::relay`).
pub const KNOWN_DEFECTS: &[KnownDefect] = &[];

/// Failures grouped by (class, cause, explanation).
#[derive(Debug, Serialize)]
struct CauseRow {
    class: String,
    cause: String,
    explained_by: Option<String>,
    known_defect: Option<&'static str>,
    count: u64,
    first_s: f64,
    example: String,
}

#[derive(Debug, Serialize)]
struct Totals {
    sent: u64,
    answered: u64,
    ok: u64,
    failed: u64,
    failed_explained: u64,
    /// Failures a known rampart defect caused (see [`KNOWN_DEFECTS`]).
    failed_known_defect: u64,
    failed_unexplained: u64,
    wrong_bodies: u64,
    retried: u64,
    over_1s: u64,
}

#[derive(Debug, Serialize)]
struct Window {
    from_s: u64,
    to_s: u64,
    answered: usize,
    p50_ms: f64,
    p90_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    /// The class of the slowest request.
    slowest: String,
}

#[derive(Debug, Serialize)]
struct FdCheck {
    /// Samples after the warm-up's end are compared with the last ones.
    warm_up_s: f64,
    first_max: usize,
    last_min: usize,
    leak: bool,
}

#[derive(Debug, Serialize)]
struct Json<'a> {
    started_utc: &'a str,
    rampart: &'a str,
    seed: u64,
    duration_s: f64,
    clients: usize,
    ws_clients: usize,
    slow_readers: usize,
    slowloris: usize,
    tolerate_known_defects: bool,
    objects: u64,
    cache_memory_bytes: u64,
    schedule: Schedule,
    skipped: &'a [String],
    passed: bool,
    reasons: &'a [String],
    totals: Totals,
    classes: &'a BTreeMap<String, ClassCount>,
    failure_causes: &'a [CauseRow],
    wrong: &'a [Wrong],
    faults: &'a [FaultEvent],
    fault_counts: &'a BTreeMap<String, u64>,
    expected_faults: &'a [String],
    counters: &'a BTreeMap<String, u64>,
    notes: &'a [(f64, String)],
    baseline_rss_bytes: u64,
    max_rss_bytes: u64,
    rss_bound_bytes: u64,
    fds: FdCheck,
    latency: &'a [Window],
    samples: &'a [Sample],
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    f64::from(sorted[i.clamp(1, sorted.len()) - 1]) / 1000.0
}

fn mib(b: u64) -> f64 {
    b as f64 / f64::from(1u32 << 20)
}

/// Builds the report: (Markdown, JSON, stdout summary, passed).
pub fn build(mut i: Input<'_>) -> (String, String, String, bool) {
    let mut recorded = std::mem::take(&mut i.recorded);
    let rec = &mut recorded;
    for f in &mut rec.failures {
        f.explained_by = explain(f, &i.faults);
        if f.explained_by.is_none() {
            f.known_defect = KNOWN_DEFECTS
                .iter()
                .find(|d| (d.matches)(f, &i.faults))
                .map(|d| d.name);
        }
    }
    // Failures by cause.
    let mut rows: Vec<CauseRow> = Vec::new();
    for f in &rec.failures {
        match rows.iter_mut().find(|r| {
            r.class == f.class
                && r.cause == f.cause
                && r.explained_by == f.explained_by
                && r.known_defect == f.known_defect
        }) {
            Some(r) => r.count += 1,
            None => rows.push(CauseRow {
                class: f.class.clone(),
                cause: f.cause.clone(),
                explained_by: f.explained_by.clone(),
                known_defect: f.known_defect,
                count: 1,
                first_s: f.from_s,
                example: f.detail.chars().take(300).collect(),
            }),
        }
    }
    // Unexplained first, then known defects, then what the faults explain.
    let rank = |r: &CauseRow| (r.explained_by.is_some(), r.known_defect.is_some());
    rows.sort_by(|a, b| (rank(a), &a.cause, &a.class).cmp(&(rank(b), &b.cause, &b.class)));
    let sum = |f: fn(&ClassCount) -> u64| rec.classes.values().map(f).sum::<u64>();
    let explained = rec
        .failures
        .iter()
        .filter(|f| f.explained_by.is_some())
        .count() as u64;
    let defects = rec
        .failures
        .iter()
        .filter(|f| f.known_defect.is_some())
        .count() as u64;
    let totals = Totals {
        sent: sum(|c| c.sent),
        answered: sum(|c| c.answered),
        ok: sum(|c| c.ok),
        failed: sum(|c| c.failed),
        failed_explained: explained,
        failed_known_defect: defects,
        failed_unexplained: rec.failures.len() as u64 - explained - defects,
        wrong_bodies: sum(|c| c.wrong),
        retried: sum(|c| c.retried),
        over_1s: sum(|c| c.over_1s),
    };

    // Faults: what happened, and what was expected to.
    let mut fault_counts: BTreeMap<String, u64> = BTreeMap::new();
    for ev in i.faults.iter().filter(|e| e.ok) {
        *fault_counts.entry(ev.kind.to_owned()).or_default() += 1;
    }
    let cuts = rec
        .failures
        .iter()
        .filter(|f| f.class.ends_with(" flaky") && f.explained_by.is_some())
        .count() as u64;
    fault_counts.insert("flaky-cut".into(), cuts);
    let counter = |name: &str| rec.counters.get(name).copied().unwrap_or(0);
    fault_counts.insert("slow-reader".into(), counter("slow readers: connections"));
    fault_counts.insert("slowloris".into(), counter("slowloris: connections"));
    let s = &i.schedule;
    let last = i.args.duration.saturating_sub(s.quiet_tail_s);
    let due = |every: u64| every > 0 && every < last;
    let mut expected: Vec<String> = Vec::new();
    for (kind, yes) in [
        ("reload", due(s.reload_every_s)),
        ("upgrade", due(s.upgrade_every_s)),
        ("origin-kill", due(s.origin_kill_every_s)),
        ("redis-kill", i.redis && due(s.redis_kill_every_s)),
        ("flaky-cut", i.args.clients > 0),
        ("slow-reader", i.args.slow_readers > 0),
        ("slowloris", i.args.slowloris > 0),
    ] {
        if yes {
            expected.push(kind.to_owned());
        }
    }

    // RSS and descriptors.
    let max_rss = i.samples.iter().map(|x| x.rss_bytes).max().unwrap_or(0);
    let warm_up_s = (i.duration_s * 0.15).max(10.0);
    let first_max = i
        .samples
        .iter()
        .filter(|x| x.t_s >= warm_up_s && x.t_s < warm_up_s + 10.0)
        .map(|x| x.fds)
        .max()
        .unwrap_or(0);
    let last_min = i
        .samples
        .iter()
        .filter(|x| x.t_s >= i.duration_s - 10.0 && x.t_s <= i.duration_s)
        .map(|x| x.fds)
        .min()
        .unwrap_or(0);
    // Open connections come and go; a leak is a floor that rose well above the early peak.
    let fd_leak = first_max > 0 && last_min > first_max + (first_max / 4).max(32);

    // Latency per window.
    let slowest = std::mem::take(&mut rec.slowest);
    let windows: Vec<Window> = rec
        .latencies
        .iter_mut()
        .enumerate()
        .map(|(w, l)| {
            l.sort_unstable();
            Window {
                from_s: w as u64 * i.window_s,
                to_s: (w as u64 + 1) * i.window_s,
                answered: l.len(),
                p50_ms: percentile(l, 50.0),
                p90_ms: percentile(l, 90.0),
                p99_ms: percentile(l, 99.0),
                max_ms: percentile(l, 100.0),
                slowest: slowest.get(w).map(|(_, c)| c.clone()).unwrap_or_default(),
            }
        })
        .collect();

    // The verdict.
    let mut reasons = Vec::new();
    if totals.wrong_bodies > 0 {
        reasons.push(format!("{} wrong bodies", totals.wrong_bodies));
    }
    if totals.failed_unexplained > 0 {
        reasons.push(format!(
            "{} failed requests that no fault explains",
            totals.failed_unexplained
        ));
    }
    if totals.failed_known_defect > 0 && !i.args.tolerate_known_defects {
        reasons.push(format!(
            "{} failed requests caused by known rampart defects",
            totals.failed_known_defect
        ));
    }
    if totals.answered == 0 {
        reasons.push("no request was answered".into());
    }
    for ev in i.faults.iter().filter(|e| !e.ok) {
        reasons.push(format!(
            "{} at {:.1} s did not go as planned: {}",
            ev.kind, ev.start_s, ev.detail
        ));
    }
    for kind in &expected {
        if fault_counts.get(kind).copied().unwrap_or(0) == 0 {
            reasons.push(format!("the fault `{kind}` never happened"));
        }
    }
    if max_rss > i.rss_bound {
        reasons.push(format!(
            "RSS reached {:.1} MiB, over the bound of {:.1} MiB",
            mib(max_rss),
            mib(i.rss_bound)
        ));
    }
    if fd_leak {
        reasons.push(format!(
            "open descriptors kept growing: at least {last_min} in the last 10 s, at most {first_max} just after the warm-up"
        ));
    }
    let held = counter("slowloris: held past the header timeout");
    if held > 0 {
        reasons.push(format!(
            "{held} slowloris connection(s) held more than 10 s past client_header_timeout_seconds"
        ));
    }
    let panics = i.rampart_log.matches("panicked at").count();
    if panics > 0 {
        reasons.push(format!("rampart's stderr has {panics} panic(s)"));
    }
    let passed = reasons.is_empty();

    let json = Json {
        started_utc: &i.started_utc,
        rampart: &i.version,
        seed: i.seed,
        duration_s: i.duration_s,
        clients: i.args.clients,
        ws_clients: i.args.ws_clients,
        slow_readers: i.args.slow_readers,
        slowloris: i.args.slowloris,
        tolerate_known_defects: i.args.tolerate_known_defects,
        objects: i.args.objects,
        cache_memory_bytes: i.cache_memory,
        schedule: i.schedule,
        skipped: &i.skipped,
        passed,
        reasons: &reasons,
        totals,
        classes: &rec.classes,
        failure_causes: &rows,
        wrong: &rec.wrong[..rec.wrong.len().min(100)],
        faults: &i.faults,
        fault_counts: &fault_counts,
        expected_faults: &expected,
        counters: &rec.counters,
        notes: &rec.notes,
        baseline_rss_bytes: i.baseline_rss,
        max_rss_bytes: max_rss,
        rss_bound_bytes: i.rss_bound,
        fds: FdCheck {
            warm_up_s,
            first_max,
            last_min,
            leak: fd_leak,
        },
        latency: &windows,
        samples: &i.samples,
    };
    let json_text =
        serde_json::to_string_pretty(&json).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
    let md = markdown(&i, &json);
    let t = &json.totals;
    let summary = format!(
        "soak {}: {:.0} s, {} requests sent, {} answered, {} verified, {} failed ({} explained by faults, {} by known rampart defects{}, {} by nothing), {} wrong bodies, {} retried; faults: {}; RSS max {:.1} MiB (bound {:.1}); fds {} → {}{}",
        if passed { "PASSED" } else { "FAILED" },
        i.duration_s,
        t.sent,
        t.answered,
        t.ok,
        t.failed,
        t.failed_explained,
        t.failed_known_defect,
        if i.args.tolerate_known_defects {
            " (tolerated)"
        } else {
            ""
        },
        t.failed_unexplained,
        t.wrong_bodies,
        t.retried,
        fault_counts
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        mib(max_rss),
        mib(i.rss_bound),
        first_max,
        last_min,
        if passed {
            String::new()
        } else {
            format!("\n  why: {}", reasons.join("; "))
        }
    );
    (md, json_text, summary, passed)
}

fn markdown(i: &Input<'_>, j: &Json<'_>) -> String {
    let mut s = String::new();
    let t = &j.totals;
    let _ = writeln!(
        s,
        "# rampart chaos soak, {}\n\n**{}** — {}\n\n{} for {:.0} s, seed {}; {} request clients (HTTP/1.1 keep-alive, HTTP/2 cleartext, HTTP/3, a new TLS connection per request, in turn), {} WebSocket clients, {} slow readers, {} slowloris clients, a purge every 2 s; {} objects (1 B–5 MiB); `cache_memory` {:.0} MiB; Redis: {}.\n",
        i.started_utc,
        if j.passed { "PASSED" } else { "FAILED" },
        if j.passed {
            "no wrong body, every failure explained by a fault, RSS within its bound, no descriptor leak".to_owned()
        } else {
            j.reasons.join("; ")
        },
        i.version,
        i.duration_s,
        i.seed,
        i.args.clients,
        i.args.ws_clients,
        i.args.slow_readers,
        i.args.slowloris,
        i.args.objects,
        mib(i.cache_memory),
        match (i.redis, i.args.no_redis_cache) {
            (false, _) => "none",
            (true, false) => "one redis-server (rate limits, purges, cache tier)",
            (true, true) => "one redis-server (rate limits, purges; no cache tier)",
        }
    );
    let _ = writeln!(
        s,
        "## Requests\n\n| | sent | answered | verified | failed | wrong bodies | retried | answered after ≥ 1 s |\n|---|---:|---:|---:|---:|---:|---:|---:|\n| **all** | {} | {} | {} | {} ({} explained by faults, {} by known defects) | **{}** | {} | {} |",
        t.sent, t.answered, t.ok, t.failed, t.failed_explained, t.failed_known_defect, t.wrong_bodies, t.retried, t.over_1s
    );
    for (class, c) in j.classes {
        let _ = writeln!(
            s,
            "| {class} | {} | {} | {} | {} | {} | {} | {} |",
            c.sent, c.answered, c.ok, c.failed, c.wrong, c.retried, c.over_1s
        );
    }
    s.push_str("\nEvery answer is compared byte for byte with the bytes the origin generated for its URL (and its `x-soak-sum` with their checksum); `retried`: GETs sent again on a new connection after a reused one closed before any byte of the answer.\n\n## Failures by cause\n\n");
    if j.failure_causes.is_empty() {
        s.push_str("None.\n");
    } else {
        s.push_str("| class | cause | count | first at | explained by | example |\n|---|---|---:|---:|---|---|\n");
        for r in j.failure_causes {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.1} s | {} | {} |",
                r.class,
                r.cause,
                r.count,
                r.first_s,
                match (&r.explained_by, r.known_defect) {
                    (Some(e), _) => e.clone(),
                    (None, Some(d)) => format!("**known rampart defect** `{d}`"),
                    (None, None) => "**nothing**".to_owned(),
                },
                r.example.replace('|', "\\|")
            );
        }
    }
    for d in KNOWN_DEFECTS {
        if j.failure_causes
            .iter()
            .any(|r| r.known_defect == Some(d.name))
        {
            let _ = writeln!(
                s,
                "\nKnown rampart defect `{}`{}: {}.",
                d.name,
                if i.args.tolerate_known_defects {
                    " (tolerated by --tolerate-known-defects)"
                } else {
                    ""
                },
                d.what
            );
        }
    }
    s.push_str("\n## Wrong bodies\n\n");
    if j.wrong.is_empty() {
        s.push_str("None.\n");
    } else {
        for w in j.wrong.iter().take(30) {
            let _ = writeln!(s, "- {:.1} s, {}: {}", w.at_s, w.class, w.what);
        }
    }
    s.push_str("\n## Faults injected\n\n| fault | count | expected |\n|---|---:|---|\n");
    for (k, v) in j.fault_counts {
        let _ = writeln!(
            s,
            "| {k} | {v} | {} |",
            if j.expected_faults.contains(k) {
                "yes"
            } else {
                "no"
            }
        );
    }
    s.push_str("\n| at | until | fault | as planned | detail |\n|---:|---:|---|---|---|\n");
    for e in j.faults {
        let _ = writeln!(
            s,
            "| {:.1} s | {:.1} s | {} | {} | {} |",
            e.start_s,
            e.end_s,
            e.kind,
            if e.ok { "yes" } else { "**no**" },
            e.detail.replace('|', "\\|")
        );
    }
    s.push_str("\n## Misbehaving clients\n\n");
    for (k, v) in j.counters {
        let _ = writeln!(s, "- {k}: {v}");
    }
    for (at, n) in j.notes {
        let _ = writeln!(s, "- {at:.1} s: {n}");
    }
    let _ = writeln!(
        s,
        "\n## Memory and descriptors of the serving process\n\nRSS before any traffic {:.1} MiB; largest {:.1} MiB; bound {:.1} MiB (`cache_memory` × 1.1 + 40 MiB + the RSS before traffic, or `--max-rss-mib`); the cache's own account is `rampart_cache_size_bytes` + `_reserved_bytes` + `_pinned_bytes` from `/_rampart/metrics`. Descriptors: at most {} just after the warm-up ({:.0} s), at least {} in the last 10 s. The pid changes at each upgrade.\n\n| seconds | pid(s) | RSS min–max MiB | cache's own account max MiB | fds min–max |\n|---|---|---|---:|---|",
        mib(j.baseline_rss_bytes),
        mib(j.max_rss_bytes),
        mib(j.rss_bound_bytes),
        j.fds.first_max,
        j.fds.warm_up_s,
        j.fds.last_min
    );
    let w = i.window_s as f64;
    let mut at = 0.0;
    while at < i.duration_s + 1.0 {
        let in_w: Vec<&Sample> = j
            .samples
            .iter()
            .filter(|x| x.t_s >= at && x.t_s < at + w)
            .collect();
        if !in_w.is_empty() {
            let mut pids: Vec<u32> = in_w.iter().map(|x| x.pid).collect();
            pids.dedup();
            let r = |f: fn(&Sample) -> u64| {
                let v: Vec<u64> = in_w.iter().map(|x| f(x)).collect();
                (
                    v.iter().copied().min().unwrap_or(0),
                    v.iter().copied().max().unwrap_or(0),
                )
            };
            let (r0, r1) = r(|x| x.rss_bytes);
            let (f0, f1) = r(|x| x.fds as u64);
            let cache = in_w
                .iter()
                .filter_map(|x| x.cache_bytes)
                .max()
                .map_or("–".to_owned(), |c| format!("{:.1}", mib(c)));
            let _ = writeln!(
                s,
                "| {:.0}–{:.0} | {} | {:.1}–{:.1} | {cache} | {f0}–{f1} |",
                at,
                at + w,
                pids.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                mib(r0),
                mib(r1)
            );
        }
        at += w;
    }
    s.push_str("\n## Latency per window (answered requests, from the request's start, a new connection included, to its last byte)\n\n| seconds | answered | p50 ms | p90 ms | p99 ms | max ms | slowest |\n|---|---:|---:|---:|---:|---:|---|\n");
    for x in j.latency {
        let _ = writeln!(
            s,
            "| {}–{} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
            x.from_s, x.to_s, x.answered, x.p50_ms, x.p90_ms, x.p99_ms, x.max_ms, x.slowest
        );
    }
    s.push_str("\n## Not covered\n\n");
    for k in j.skipped {
        let _ = writeln!(s, "- {k}");
    }
    let errors: Vec<&str> = i
        .rampart_log
        .lines()
        .filter(|l| !l.contains("listening") && !l.starts_with("rampart: "))
        .collect();
    let _ = writeln!(
        s,
        "\n## rampart's stderr\n\n{} line(s) besides its listening, reload and upgrade lines; the last ones:\n\n```\n{}\n```",
        errors.len(),
        errors[errors.len().saturating_sub(15)..].join("\n")
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(class: &str, cause: &str, from_s: f64) -> Failure {
        Failure {
            class: class.into(),
            cause: cause.into(),
            detail: String::new(),
            from_s,
            to_s: from_s + 0.1,
            explained_by: None,
            known_defect: None,
        }
    }

    fn fault(kind: &'static str, start_s: f64, end_s: f64, detail: &str) -> FaultEvent {
        FaultEvent {
            kind,
            start_s,
            end_s,
            detail: detail.into(),
            ok: true,
        }
    }

    #[test]
    fn only_a_fault_that_can_cause_a_failure_explains_it() {
        let faults = [
            fault("origin-kill", 15.0, 18.0, "origin b (127.0.0.1:1) killed"),
            fault("upgrade", 40.0, 45.0, "process 1 → 2"),
            fault("reload", 50.0, 50.1, "variant 1"),
        ];
        let e = |f: Failure| explain(&f, &faults);
        assert!(e(failure("h1 post", "status 502", 16.0))
            .is_some_and(|x| x.contains("origin b was down")));
        // A GET goes to the other origin: its 502 is not the dead origin's doing.
        assert!(e(failure("h1 get", "status 502", 16.0)).is_none());
        // Within the grace after the origin is back, not after it.
        assert!(e(failure("h2c get", "body cut", 22.0)).is_some());
        assert!(e(failure("h2c get", "body cut", 24.0)).is_none());
        // A timeout or a wrong status is never the origin's death.
        assert!(e(failure("h1 get", "timeout", 16.0)).is_none());
        assert!(e(failure("h1 get", "unexpected status 404", 16.0)).is_none());
        // The flaky path explains its own cuts at any time, nothing else.
        assert!(e(failure("h3 flaky", "error before the answer", 5.0)).is_some());
        assert!(e(failure("h3 get", "error before the answer", 5.0)).is_none());
        // An upgrade explains closed WebSockets, a reload nothing.
        assert!(e(failure("ws", "ws closed", 44.0)).is_some());
        assert!(e(failure("ws", "ws closed", 50.0)).is_none());
        assert!(e(failure("h1 get", "status 502", 50.0)).is_none());
    }

    #[test]
    fn fixed_defects_are_no_longer_known() {
        let faults = [fault("upgrade", 40.0, 45.0, "process 1 → 2")];
        let d = |f: Failure| {
            KNOWN_DEFECTS
                .iter()
                .find(|d| (d.matches)(&f, &faults))
                .map(|d| d.name)
        };
        // A TLS request dropped or an HTTP/3 request stalled at an upgrade fails the run.
        assert_eq!(
            d(failure(
                "tls get",
                "connection closed before the answer",
                40.1
            )),
            None
        );
        assert_eq!(d(failure("h3 post", "timeout", 42.0)), None);
        assert_eq!(d(failure("h3 get", "h3 connect failed", 41.0)), None);
    }
}
