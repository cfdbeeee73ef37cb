//! The soak's Markdown report (`soak.md`): the verdict, requests per class, failures by cause
//! and what explains them, wrong bodies, the faults injected, the misbehaving clients, memory
//! and descriptors, latency per window, what was not covered, and the end of rampart's stderr.

use std::fmt::Write as _;

use super::{mib, Input, Json, KNOWN_DEFECTS};
use crate::soak::faults::Sample;

/// `soak.md`, from the figures `soak.json` also holds.
pub(super) fn markdown(i: &Input<'_>, j: &Json<'_>) -> String {
    let mut s = String::new();
    title(&mut s, i, j);
    requests(&mut s, j);
    failures(&mut s, i, j);
    wrong_bodies(&mut s, j);
    faults(&mut s, j);
    clients(&mut s, j);
    memory(&mut s, i, j);
    latency(&mut s, j);
    not_covered(&mut s, j);
    stderr(&mut s, i);
    s
}

/// The title, the verdict and what ran.
fn title(s: &mut String, i: &Input<'_>, j: &Json<'_>) {
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
}

/// Requests per class, and how answers were checked.
fn requests(s: &mut String, j: &Json<'_>) {
    let t = &j.totals;
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
    s.push_str("\nEvery answer is compared byte for byte with the bytes the origin generated for its URL (and its `x-soak-sum` with their checksum); `retried`: GETs sent again on a new connection after a reused one closed before any byte of the answer.\n\n");
}

/// Failures grouped by cause with what explains them, and the known defects that caused
/// some.
fn failures(s: &mut String, i: &Input<'_>, j: &Json<'_>) {
    s.push_str("## Failures by cause\n\n");
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
}

/// The first wrong bodies.
fn wrong_bodies(s: &mut String, j: &Json<'_>) {
    s.push_str("\n## Wrong bodies\n\n");
    if j.wrong.is_empty() {
        s.push_str("None.\n");
    } else {
        for w in j.wrong.iter().take(30) {
            let _ = writeln!(s, "- {:.1} s, {}: {}", w.at_s, w.class, w.what);
        }
    }
}

/// The faults: how many of each kind (and whether expected), then each one.
fn faults(s: &mut String, j: &Json<'_>) {
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
}

/// What the misbehaving clients counted and noted.
fn clients(s: &mut String, j: &Json<'_>) {
    s.push_str("\n## Misbehaving clients\n\n");
    for (k, v) in j.counters {
        let _ = writeln!(s, "- {k}: {v}");
    }
    for (at, n) in j.notes {
        let _ = writeln!(s, "- {at:.1} s: {n}");
    }
}

/// RSS and descriptors of the serving process: the bound, the leak check, and a row per
/// window.
fn memory(s: &mut String, i: &Input<'_>, j: &Json<'_>) {
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
    memory_rows(s, i, j);
}

/// One row per latency window: the pids, RSS, the cache's own account and descriptors seen.
fn memory_rows(s: &mut String, i: &Input<'_>, j: &Json<'_>) {
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
}

/// Latency percentiles per window.
fn latency(s: &mut String, j: &Json<'_>) {
    s.push_str("\n## Latency per window (answered requests, from the request's start, a new connection included, to its last byte)\n\n| seconds | answered | p50 ms | p90 ms | p99 ms | max ms | slowest |\n|---|---:|---:|---:|---:|---:|---|\n");
    for x in j.latency {
        let _ = writeln!(
            s,
            "| {}–{} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
            x.from_s, x.to_s, x.answered, x.p50_ms, x.p90_ms, x.p99_ms, x.max_ms, x.slowest
        );
    }
}

/// What the soak could not test here.
fn not_covered(s: &mut String, j: &Json<'_>) {
    s.push_str("\n## Not covered\n\n");
    for k in j.skipped {
        let _ = writeln!(s, "- {k}");
    }
}

/// The end of rampart's stderr, besides its usual lines.
fn stderr(s: &mut String, i: &Input<'_>) {
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
}
