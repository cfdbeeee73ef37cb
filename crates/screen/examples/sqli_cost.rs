//! What the SQL-injection detector costs per value, rampart's engine ([`Sqli`]) beside the
//! libinjectionrs port it replaced ([`Libinjection`]):
//! `cargo run --release -p rampart-screen --example sqli_cost [ROUNDS] [VALUES] [ENGINE] [ROW]`.
//!
//! Every value is new (a counter is appended), so the per-thread memo never answers and each
//! value goes through the engine; the figures are ns per value, the median of ROUNDS rounds
//! (default 5) of VALUES values (default 100,000). ENGINE (`both`, `rampart` or `libinjection`)
//! and ROW (an index into the table) narrow the run, for counting instructions:
//! `valgrind --tool=callgrind --toggle-collect='*judge*' target/release/examples/sqli_cost 1
//! 10000 rampart 0` counts only the detector's work on 10,000 values of the first row.

use rampart_screen::sqli::{Detector, Libinjection, Sqli};
use std::time::Instant;

const VALUES: &[&str] = &[
    "men's running-shoes size ",
    "O'Reilly & sons, ltd. ",
    "2024-01-01T10:00:00Z/",
    "{\"a\":1,\"b\":[2,3]} ",
    "1' OR '1'='1 ",
    "1 UNION SELECT username, password FROM users ",
];

/// Runs `d` over `inputs`; the number flagged. Not inlined, so a profiler can count it alone.
#[inline(never)]
fn judge(d: &dyn Detector, inputs: &[Vec<u8>]) -> usize {
    inputs.iter().filter(|i| d.detect(i).is_some()).count()
}

/// Median ns per value of `d` on new values made from `v`, and the share flagged.
fn measure(d: &dyn Detector, v: &str, rounds: usize, per_round: usize, n: &mut u64) -> (f64, f64) {
    let mut samples = Vec::new();
    let mut flagged = 0;
    for _ in 0..rounds {
        let inputs: Vec<Vec<u8>> = (0..per_round)
            .map(|_| {
                *n += 1;
                format!("{v}{n}").into_bytes()
            })
            .collect();
        let t = Instant::now();
        flagged += judge(d, &inputs);
        samples.push(t.elapsed().as_nanos() as f64 / per_round as f64);
    }
    samples.sort_by(f64::total_cmp);
    let share = 100.0 * flagged as f64 / (rounds * per_round) as f64;
    (samples[samples.len() / 2], share)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let per_round: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let engine = args.next().unwrap_or_else(|| "both".into());
    let row: Option<usize> = args.next().and_then(|a| a.parse().ok());
    let (old, new) = match engine.as_str() {
        "rampart" => (false, true),
        "libinjection" => (true, false),
        _ => (true, true),
    };
    // Build the engines' tables before anything is measured.
    for d in [&Sqli as &dyn Detector, &Libinjection] {
        d.detect(b"warm-up' 1");
    }
    println!(
        "{:<50} {:>14} {:>14} {:>8}",
        "value (+ a counter)", "libinjectionrs", "rampart", "flagged"
    );
    let mut n = 0u64;
    for (i, v) in VALUES.iter().enumerate() {
        if row.is_some_and(|r| r != i) {
            continue;
        }
        let (mut before, mut after, mut flagged) = (f64::NAN, f64::NAN, f64::NAN);
        if old {
            (before, flagged) = measure(&Libinjection, v, rounds, per_round, &mut n);
        }
        if new {
            (after, flagged) = measure(&Sqli, v, rounds, per_round, &mut n);
        }
        println!(
            "{:<50} {:>11.0} ns {:>11.0} ns {:>7.0}%",
            format!("{v:?}"),
            before,
            after,
            flagged
        );
    }
}
