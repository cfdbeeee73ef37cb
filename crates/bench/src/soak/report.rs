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

use serde::Serialize;

use super::faults::{FaultEvent, Sample, Schedule};
use super::tally::{ClassCount, Failure, Recorded, Wrong};
use super::SoakArgs;

mod markdown;

use markdown::markdown;

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
    totals: &'a Totals,
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
    fds: &'a FdCheck,
    latency: &'a [Window],
    samples: &'a [Sample],
}

/// The nearest-rank `p`th percentile of latencies in µs, in ms.
fn percentile(sorted: &[u32], p: f64) -> f64 {
    f64::from(crate::stats::percentile(sorted, p)) / 1000.0
}

fn mib(b: u64) -> f64 {
    b as f64 / f64::from(1u32 << 20)
}

/// Builds the report: (Markdown, JSON, stdout summary, passed).
pub fn build(mut i: Input<'_>) -> (String, String, String, bool) {
    let mut recorded = std::mem::take(&mut i.recorded);
    let rec = &mut recorded;
    classify(&mut rec.failures, &i.faults);
    let f = Figures::new(&i, rec);
    let reasons = verdict(&i, rec, &f);
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
        totals: &f.totals,
        classes: &rec.classes,
        failure_causes: &f.rows,
        wrong: &rec.wrong[..rec.wrong.len().min(100)],
        faults: &i.faults,
        fault_counts: &f.fault_counts,
        expected_faults: &f.expected,
        counters: &rec.counters,
        notes: &rec.notes,
        baseline_rss_bytes: i.baseline_rss,
        max_rss_bytes: f.max_rss,
        rss_bound_bytes: i.rss_bound,
        fds: &f.fds,
        latency: &f.windows,
        samples: &i.samples,
    };
    let json_text =
        serde_json::to_string_pretty(&json).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
    let md = markdown(&i, &json);
    let summary = summary(&i, &json);
    (md, json_text, summary, passed)
}

/// Says of each failure which fault explains it or, failing that, which known defect caused
/// it.
fn classify(failures: &mut [Failure], faults: &[FaultEvent]) {
    for f in failures {
        f.explained_by = explain(f, faults);
        if f.explained_by.is_none() {
            f.known_defect = KNOWN_DEFECTS
                .iter()
                .find(|d| (d.matches)(f, faults))
                .map(|d| d.name);
        }
    }
}

/// What the report computes from the run before its verdict.
struct Figures {
    totals: Totals,
    /// Failures by cause.
    rows: Vec<CauseRow>,
    /// Faults that went as planned, by kind (with the flaky path's cuts and the misbehaving
    /// clients' connections).
    fault_counts: BTreeMap<String, u64>,
    /// The kinds of fault the schedule and the clients should have brought.
    expected: Vec<String>,
    max_rss: u64,
    fds: FdCheck,
    windows: Vec<Window>,
}

impl Figures {
    fn new(i: &Input<'_>, rec: &mut Recorded) -> Figures {
        Figures {
            totals: totals(rec),
            rows: cause_rows(&rec.failures),
            fault_counts: fault_counts(i, rec),
            expected: expected_faults(i),
            max_rss: i.samples.iter().map(|x| x.rss_bytes).max().unwrap_or(0),
            fds: FdCheck::new(&i.samples, i.duration_s),
            windows: windows(rec, i.window_s),
        }
    }
}

/// Failures grouped by (class, cause, explanation): unexplained first, then known defects, then
/// what the faults explain.
fn cause_rows(failures: &[Failure]) -> Vec<CauseRow> {
    let mut rows: Vec<CauseRow> = Vec::new();
    for f in failures {
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
    let rank = |r: &CauseRow| (r.explained_by.is_some(), r.known_defect.is_some());
    rows.sort_by(|a, b| (rank(a), &a.cause, &a.class).cmp(&(rank(b), &b.cause, &b.class)));
    rows
}

/// The requests of every class added up, and the failures by what explains them.
fn totals(rec: &Recorded) -> Totals {
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
    Totals {
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
    }
}

fn counter(rec: &Recorded, name: &str) -> u64 {
    rec.counters.get(name).copied().unwrap_or(0)
}

/// What happened: the faults that went as planned, the flaky path's explained cuts, and the
/// misbehaving clients' connections.
fn fault_counts(i: &Input<'_>, rec: &Recorded) -> BTreeMap<String, u64> {
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
    fault_counts.insert(
        "slow-reader".into(),
        counter(rec, "slow readers: connections"),
    );
    fault_counts.insert("slowloris".into(), counter(rec, "slowloris: connections"));
    fault_counts
}

/// What was expected to happen: each kind of fault due at least once before the quiet tail,
/// and what the clients bring when there are any.
fn expected_faults(i: &Input<'_>) -> Vec<String> {
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
    expected
}

impl FdCheck {
    /// The most descriptors in the 10 s after the warm-up against the fewest in the last 10 s.
    fn new(samples: &[Sample], duration_s: f64) -> FdCheck {
        let warm_up_s = (duration_s * 0.15).max(10.0);
        let first_max = samples
            .iter()
            .filter(|x| x.t_s >= warm_up_s && x.t_s < warm_up_s + 10.0)
            .map(|x| x.fds)
            .max()
            .unwrap_or(0);
        let last_min = samples
            .iter()
            .filter(|x| x.t_s >= duration_s - 10.0 && x.t_s <= duration_s)
            .map(|x| x.fds)
            .min()
            .unwrap_or(0);
        // Open connections come and go; a leak is a floor that rose well above the early peak.
        let leak = first_max > 0 && last_min > first_max + (first_max / 4).max(32);
        FdCheck {
            warm_up_s,
            first_max,
            last_min,
            leak,
        }
    }
}

/// Latency percentiles per window, with the class of each window's slowest request.
fn windows(rec: &mut Recorded, window_s: u64) -> Vec<Window> {
    let slowest = std::mem::take(&mut rec.slowest);
    rec.latencies
        .iter_mut()
        .enumerate()
        .map(|(w, l)| {
            l.sort_unstable();
            Window {
                from_s: w as u64 * window_s,
                to_s: (w as u64 + 1) * window_s,
                answered: l.len(),
                p50_ms: percentile(l, 50.0),
                p90_ms: percentile(l, 90.0),
                p99_ms: percentile(l, 99.0),
                max_ms: percentile(l, 100.0),
                slowest: slowest.get(w).map(|(_, c)| c.clone()).unwrap_or_default(),
            }
        })
        .collect()
}

/// Why the run failed (nothing when it passed).
fn verdict(i: &Input<'_>, rec: &Recorded, f: &Figures) -> Vec<String> {
    let totals = &f.totals;
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
    for kind in &f.expected {
        if f.fault_counts.get(kind).copied().unwrap_or(0) == 0 {
            reasons.push(format!("the fault `{kind}` never happened"));
        }
    }
    if f.max_rss > i.rss_bound {
        reasons.push(format!(
            "RSS reached {:.1} MiB, over the bound of {:.1} MiB",
            mib(f.max_rss),
            mib(i.rss_bound)
        ));
    }
    if f.fds.leak {
        reasons.push(format!(
            "open descriptors kept growing: at least {} in the last 10 s, at most {} just after the warm-up",
            f.fds.last_min, f.fds.first_max
        ));
    }
    let held = counter(rec, "slowloris: held past the header timeout");
    if held > 0 {
        reasons.push(format!(
            "{held} slowloris connection(s) held more than 10 s past client_header_timeout_seconds"
        ));
    }
    let panics = i.rampart_log.matches("panicked at").count();
    if panics > 0 {
        reasons.push(format!("rampart's stderr has {panics} panic(s)"));
    }
    reasons
}

/// The line printed at the end of the run (and why it failed).
fn summary(i: &Input<'_>, j: &Json<'_>) -> String {
    let t = j.totals;
    format!(
        "soak {}: {:.0} s, {} requests sent, {} answered, {} verified, {} failed ({} explained by faults, {} by known rampart defects{}, {} by nothing), {} wrong bodies, {} retried; faults: {}; RSS max {:.1} MiB (bound {:.1}); fds {} → {}{}",
        if j.passed { "PASSED" } else { "FAILED" },
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
        j.fault_counts
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        mib(j.max_rss_bytes),
        mib(i.rss_bound),
        j.fds.first_max,
        j.fds.last_min,
        if j.passed {
            String::new()
        } else {
            format!("\n  why: {}", j.reasons.join("; "))
        }
    )
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
