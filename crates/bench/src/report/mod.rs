//! The report: `report.md` (tables per scenario with ratios against rampart), `results.json`
//! (every run, for machines) and SVG charts (throughput, CPU per request and latency per proxy;
//! latency against connections for `vus`).

use std::fmt::Write as _;
use std::path::Path;

mod charts;

use crate::scenarios::Scenario;
use crate::suite::results::{summarise, Results, Summary};
use charts::{bars, latency_bars, lines};

fn us(v: f64) -> String {
    if v <= 0.0 {
        // Not reported by this load generator (h2load has no percentiles).
        "–".to_owned()
    } else if v >= 1e6 {
        format!("{:.2} s", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.2} ms", v / 1e3)
    } else {
        format!("{v:.0} µs")
    }
}

fn rate(v: f64) -> String {
    if v >= 1e9 {
        format!("{:.2} GB/s", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.1} MB/s", v / 1e6)
    } else {
        format!("{:.0} kB/s", v / 1e3)
    }
}

fn count(v: f64) -> String {
    if v >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

fn mib(b: u64) -> String {
    format!("{:.0} MiB", b as f64 / (1u64 << 20) as f64)
}

fn label_of<'a>(r: &'a Results, peer: &'a str) -> &'a str {
    r.peers
        .iter()
        .find(|(n, _)| n == peer)
        .map_or(peer, |(_, l)| l.as_str())
}

/// Each peer's summary of one load of one scenario, in peer order.
fn rows(r: &Results, scenario: &str, load_index: usize) -> Vec<(String, Summary)> {
    r.peers
        .iter()
        .filter_map(|(p, _)| summarise(&r.runs, scenario, load_index, p).map(|m| (p.clone(), m)))
        .collect()
}

/// The one-screen summary printed at the end of a run.
pub fn summary(r: &Results) -> String {
    let mut s = String::from("\nsummary (median server CPU µs per request; lower is better)\n");
    for sc in &r.scenarios {
        for (li, load) in sc.loads.iter().enumerate() {
            let mut row: Vec<(String, f64, f64)> = r
                .peers
                .iter()
                .filter_map(|(p, _)| {
                    summarise(&r.runs, sc.name, li, p).map(|m| {
                        let name = if m.fixed_file {
                            format!("{p}(fixed-file)")
                        } else {
                            p.clone()
                        };
                        (name, m.cpu_us.0, m.rps.0)
                    })
                })
                .collect();
            if row.is_empty() {
                continue;
            }
            row.sort_by(|a, b| a.1.total_cmp(&b.1));
            let _ = write!(s, "  {:<13} {:<40}", sc.name, load.describe(sc.seconds));
            for (p, cpu, rps) in row {
                let _ = write!(s, " {p} {cpu:.1}µs/{}rps", count(rps));
            }
            s.push('\n');
        }
    }
    s
}

pub fn write(out: &Path, r: &Results) -> anyhow::Result<()> {
    std::fs::write(out.join("results.json"), serde_json::to_string_pretty(r)?)?;
    let charts = out.join("charts");
    std::fs::create_dir_all(&charts)?;
    let mut md = String::new();
    header(&mut md, r);
    against_best(&mut md, r);
    single_core(&mut md, r);
    for sc in &r.scenarios {
        let _ = writeln!(
            md,
            "## `{}`\n\n{}. Path `{}`.\n",
            sc.name, sc.description, sc.path
        );
        if sc.fresh {
            users_section(&mut md, r, sc, &charts)?;
            continue;
        }
        for li in 0..sc.loads.len() {
            load_section(&mut md, r, sc, li, &charts)?;
        }
    }
    md.push_str("## Caveats\n\n- One machine: the servers and the origin share the server CPU set; the load generator runs on the other. Absolute numbers depend on this machine; ratios and CPU per request travel better.\n- Peers run with their packaged versions and the configs in `configs/`; NGINX appears twice (default proxy settings, and tuned upstream keepalive) as shared/BENCHMARKING.md asks.\n- A cached scenario whose check says *not cached* compares different work.\n");
    std::fs::write(out.join("report.md"), md)?;
    Ok(())
}

/// The report's title, machine, method, peers and what was skipped.
fn header(md: &mut String, r: &Results) {
    let _ = writeln!(md, "# rampart benchmark report — {}\n", r.started);
    if r.quick {
        md.push_str("> **Quick run** (`--quick`): seconds-long smoke test of the harness. The figures are not meaningful.\n\n");
    }
    let _ = writeln!(md, "**Machine:** {}\n", r.machine);
    let _ = writeln!(md, "**Method:** {} (see shared/BENCHMARKING.md and docs/benchmarks.md). Configs used: `configs/`. Raw runs: `results.json`.\n", r.method);
    md.push_str("| peer | what runs |\n|---|---|\n");
    for (n, l) in &r.peers {
        let _ = writeln!(md, "| `{n}` | {l} |");
    }
    if !r.skipped.is_empty() {
        md.push_str("\nSkipped:\n");
        for s in &r.skipped {
            let _ = writeln!(md, "- {s}");
        }
    }
    md.push('\n');
}

/// One table of every closed-loop load: rampart's CPU per request beside the best (lowest) of
/// every other peer in that row, whoever it is, and the ratio; a peer answering from a fixed
/// file is marked, and so is the best proxy when that differs.
fn against_best(md: &mut String, r: &Results) {
    let mut table = String::new();
    for sc in r.scenarios.iter().filter(|s| !s.fresh) {
        for li in 0..sc.loads.len() {
            let rows = rows(r, sc.name, li);
            let Some((_, mine)) = rows.iter().find(|(p, _)| p == "rampart") else {
                continue;
            };
            let others = |fixed: bool| {
                rows.iter()
                    .filter(|(p, m)| {
                        !matches!(p.as_str(), "rampart" | "rampart-baseline" | "floor")
                            && (fixed || !m.fixed_file)
                    })
                    .min_by(|a, b| a.1.cpu_us.0.total_cmp(&b.1.cpu_us.0))
            };
            let cell = |best: Option<&(String, Summary)>| match best {
                Some((p, m)) => (
                    format!(
                        "{} {:.1}{}",
                        p,
                        m.cpu_us.0,
                        if m.fixed_file { " (fixed file)" } else { "" }
                    ),
                    format!("{:.2}×", mine.cpu_us.0 / m.cpu_us.0.max(1e-9)),
                ),
                None => ("–".to_owned(), "–".to_owned()),
            };
            let best = others(true);
            let (best_cell, ratio) = cell(best);
            // The best proxy differs only when the best of all answered from a fixed file.
            let (best_proxy, proxy_ratio) = match best {
                Some((_, m)) if m.fixed_file => cell(others(false)),
                _ => ("same".to_owned(), ratio.clone()),
            };
            let floor = floor_cpu(&rows).map_or("–".to_owned(), |f| format!("{f:.1}"));
            let _ = writeln!(
                table,
                "| `{}` {} | {} | {:.1} | {} | {} | {} | {} |",
                sc.name,
                sc.loads[li].describe(sc.seconds),
                floor,
                mine.cpu_us.0,
                best_cell,
                ratio,
                best_proxy,
                proxy_ratio
            );
        }
    }
    if table.is_empty() {
        return;
    }
    md.push_str("## rampart against the best peer of each row\n\n");
    md.push_str("Server CPU µs per request, medians. The best peer is the lowest of every other program in the row, whoever it is; where that one answered from a fixed file (no proxying, no cache), the best proxy is given too. A ratio below 1 means rampart used less CPU.\n\n");
    md.push_str("| scenario · load | floor | rampart | best peer | rampart ÷ best | best proxy | rampart ÷ best proxy |\n|---|---|---|---|---|---|---|\n");
    md.push_str(&table);
    md.push('\n');
}

/// The APISIX seed's headline (shared/BENCHMARKING.md, comparison 4): pass-through of `/hello`
/// on one core, as requests per second at 100 % of that core (10⁶ ÷ server CPU µs per request),
/// for each peer that proxies it, against NGINX with and without upstream keep-alive. The seed
/// reports APISIX at 1.56× NGINX.
fn single_core(md: &mut String, r: &Results) {
    let Some(sc) = r.scenarios.iter().find(|s| s.name == "pass-hello") else {
        return;
    };
    let rows = rows(r, sc.name, 0);
    if rows.is_empty() {
        return;
    }
    let qps = |m: &Summary| 1e6 / m.cpu_us.0.max(f64::MIN_POSITIVE);
    let of = |name: &str| rows.iter().find(|(p, _)| p == name).map(|(_, m)| qps(m));
    let (tuned, default) = (of("nginx"), of("nginx-default"));
    md.push_str("## Single-core QPS (the APISIX seed's shape)\n\n");
    let _ = writeln!(
        md,
        "`{}` passed through to the origin on every request, keep-alive, {}: requests per second \
         one core would serve at 100 % (10⁶ ÷ the server's CPU µs per request, median of the \
         rounds), beside the measured rate (the load generator and the origin share the \
         machine). rampart and both NGINX peers run with their cache on, so every request is \
         also a cache miss (the origin says `no-store`); HAProxy runs without one. The seed \
         reports APISIX at 1.56× NGINX.\n",
        sc.path,
        sc.loads[0].describe(sc.seconds)
    );
    md.push_str(
        "| Program | QPS on one core | server CPU µs/req | measured req/s | vs NGINX (upstream \
         keepalive) | vs NGINX (default settings) |\n|---|---|---|---|---|---|\n",
    );
    let mut sorted: Vec<&(String, Summary)> = rows.iter().collect();
    sorted.sort_by(|a, b| qps(&b.1).total_cmp(&qps(&a.1)));
    let ratio =
        |v: f64, base: Option<f64>| base.map_or("–".to_owned(), |b| format!("{:.2}×", v / b));
    for (p, m) in sorted {
        let v = qps(m);
        let _ = writeln!(
            md,
            "| {} | {} | {:.1} | {} | {} | {} |",
            label_of(r, p),
            count(v),
            m.cpu_us.0,
            count(m.rps.0),
            ratio(v, tuned),
            ratio(v, default)
        );
    }
    md.push('\n');
}

/// One load of a closed-loop scenario: a table of every peer (CPU against rampart and the
/// floor, the cache check), a note for each peer the load generator did not saturate, and
/// charts of throughput, CPU and latency.
fn load_section(
    md: &mut String,
    r: &Results,
    sc: &Scenario,
    li: usize,
    charts: &Path,
) -> anyhow::Result<()> {
    let rows = rows(r, sc.name, li);
    if rows.is_empty() {
        return Ok(());
    }
    let desc = sc.loads[li].describe(sc.seconds);
    let base = rows
        .iter()
        .find(|(p, _)| p == "rampart")
        .map(|(_, m)| m.clone());
    let floor = floor_cpu(&rows);
    let _ = writeln!(md, "### {desc}\n");
    md.push_str("| Program | req/s (median, min–max) | server CPU µs/req (min–max) | CPU vs rampart | × floor | p50 | p99 | max | errors | transfer | peak RSS | cache check |\n");
    md.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    let mut notes = Vec::new();
    for (p, m) in &rows {
        let ratio = base.as_ref().map_or("–".to_owned(), |b| {
            format!("{:.2}×", m.cpu_us.0 / b.cpu_us.0.max(1e-9))
        });
        let name = if m.fixed_file {
            format!("{} — *fixed file, no cache*", label_of(r, p))
        } else {
            label_of(r, p).to_owned()
        };
        let _ = writeln!(
            md,
            "| {} | {} ({}–{}) | {:.1} ({:.1}–{:.1}) | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            name,
            count(m.rps.0),
            count(m.rps.1),
            count(m.rps.2),
            m.cpu_us.0,
            m.cpu_us.1,
            m.cpu_us.2,
            ratio,
            times_floor(m, floor),
            us(m.p50_us),
            us(m.p99_us),
            us(m.max_us),
            m.errors,
            rate(m.bytes_per_sec),
            mib(m.peak_rss),
            cache_check(sc, m)
        );
        if m.utilisation < 0.85 {
            notes.push(format!(
                "{}: the server CPUs (proxy + origin) were busy only {:.0}% of the time — the load generator was the ceiling, so req/s does not rank it; compare CPU µs/request.",
                label_of(r, p),
                m.utilisation * 100.0
            ));
        }
    }
    md.push('\n');
    for n in notes {
        let _ = writeln!(md, "- {n}");
    }
    let images = load_charts(charts, &format!("{}-{}", sc.name, li), &desc, &rows)?;
    let _ = writeln!(md, "\n{images}\n");
    Ok(())
}

/// Whether a cached scenario really hit (the origin saw next to nothing), or what the origin
/// saw of a pass.
fn cache_check(sc: &Scenario, m: &Summary) -> String {
    if m.fixed_file {
        format!("fixed file (origin saw {})", m.origin_requests)
    } else if sc.cached {
        // Each measured run may let through a handful of requests (expiry races, a worker's
        // first miss); anything more means the peer did not cache.
        if m.origin_requests <= 5 * m.rounds as u64 {
            format!("hit ✓ (origin saw {})", m.origin_requests)
        } else {
            format!("**not cached** (origin saw {})", m.origin_requests)
        }
    } else {
        format!("origin saw {}", count(m.origin_requests as f64))
    }
}

/// Draws one load's throughput, CPU and (when the load generator reports percentiles) latency
/// charts as `charts/<stem>-*.svg`; returns the Markdown that shows them.
fn load_charts(
    charts: &Path,
    stem: &str,
    desc: &str,
    rows: &[(String, Summary)],
) -> anyhow::Result<String> {
    let names: Vec<String> = rows.iter().map(|(p, _)| p.clone()).collect();
    bars(
        &charts.join(format!("{stem}-throughput.svg")),
        &format!("{desc} — requests/s (median)"),
        &names,
        &rows.iter().map(|(_, m)| m.rps.0).collect::<Vec<_>>(),
        "req/s",
    )?;
    bars(
        &charts.join(format!("{stem}-cpu.svg")),
        &format!("{desc} — server CPU µs per request (lower is better)"),
        &names,
        &rows.iter().map(|(_, m)| m.cpu_us.0).collect::<Vec<_>>(),
        "µs",
    )?;
    let has_percentiles = rows.iter().any(|(_, m)| m.p99_us > 0.0);
    if has_percentiles {
        latency_bars(
            &charts.join(format!("{stem}-latency.svg")),
            &format!("{desc} — latency p50 / p99 (ms)"),
            &names,
            &rows
                .iter()
                .map(|(_, m)| (m.p50_us / 1e3, m.p99_us / 1e3))
                .collect::<Vec<_>>(),
        )?;
    }
    let latency = if has_percentiles {
        format!(" ![latency](charts/{stem}-latency.svg)")
    } else {
        String::new()
    };
    Ok(format!(
        "![throughput](charts/{stem}-throughput.svg) ![cpu](charts/{stem}-cpu.svg){latency}"
    ))
}

/// The floor's median CPU per request in these rows, if it took part.
fn floor_cpu(rows: &[(String, Summary)]) -> Option<f64> {
    rows.iter()
        .find(|(p, _)| p == "floor")
        .map(|(_, m)| m.cpu_us.0)
        .filter(|c| *c > 0.0)
}

fn times_floor(m: &Summary, floor: Option<f64>) -> String {
    floor.map_or("–".to_owned(), |f| format!("{:.2}×", m.cpu_us.0 / f))
}

/// `vus` and `burst`: one table per N in the seeds' format (mean latency and its delta against
/// rampart first), with the percentiles, errors, peak RSS of that run's fresh process (and what
/// the run added to it, per connection) and CPU per request against the floor; then charts of
/// mean and p99 against N.
fn users_section(md: &mut String, r: &Results, sc: &Scenario, charts: &Path) -> anyhow::Result<()> {
    let mut mean: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    let mut p99: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for (li, load) in sc.loads.iter().enumerate() {
        let n = match load {
            crate::load::Load::Vus { users, .. } => f64::from(*users),
            _ => 0.0,
        };
        let rows = rows(r, sc.name, li);
        if rows.is_empty() {
            continue;
        }
        let base = rows
            .iter()
            .find(|(p, _)| p == "rampart")
            .map(|(_, m)| m.mean_us);
        let floor = floor_cpu(&rows);
        let _ = writeln!(md, "### N = {n} ({})\n", load.describe(sc.seconds));
        md.push_str("| Program | Request Latency (mean) | Delta vs rampart | p50 | p90 | p95 | p99 | max | Total Requests | errors | peak RSS | RSS per connection | CPU µs/req | × floor |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        for (p, m) in &rows {
            let delta = base.map_or("–".to_owned(), |b| {
                format!("{:+.1}%", (m.mean_us / b.max(1e-9) - 1.0) * 100.0)
            });
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} KiB | {:.1} | {} |",
                label_of(r, p),
                us(m.mean_us),
                delta,
                us(m.p50_us),
                us(m.p90_us),
                us(m.p95_us),
                us(m.p99_us),
                us(m.max_us),
                m.requests,
                m.errors,
                mib(m.peak_rss),
                m.rss_growth as f64 / 1024.0 / n.max(1.0),
                m.cpu_us.0,
                times_floor(m, floor),
            );
            for (series, v) in [(&mut mean, m.mean_us), (&mut p99, m.p99_us)] {
                match series.iter_mut().find(|(name, _)| name == p) {
                    Some((_, pts)) => pts.push((n, v / 1e3)),
                    None => series.push((p.clone(), vec![(n, v / 1e3)])),
                }
            }
        }
        md.push('\n');
    }
    if !mean.is_empty() {
        let stem = sc.name;
        lines(
            &charts.join(format!("{stem}-mean.svg")),
            &format!("{stem}: mean latency vs users (each sends 1 request/s)"),
            "mean latency (ms)",
            &mean,
        )?;
        lines(
            &charts.join(format!("{stem}-p99.svg")),
            &format!("{stem}: p99 latency vs users"),
            "p99 latency (ms)",
            &p99,
        )?;
        let _ = writeln!(
            md,
            "![mean latency vs users](charts/{stem}-mean.svg) ![p99 latency vs users](charts/{stem}-p99.svg)\n"
        );
    }
    Ok(())
}
