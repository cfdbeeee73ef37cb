//! What the SQL-injection detector costs per value: `cargo run --release -p rampart-screen
//! --example sqli_cost [ROUNDS]`. Every value is new (a counter is appended), so the per-thread
//! memo never answers and each value goes through the engine; the figures are ns per value,
//! the median of the rounds.

use rampart_screen::sqli::{Detector, Libinjection};
use std::time::Instant;

const VALUES: &[&str] = &[
    "men's running-shoes size ",
    "O'Reilly & sons, ltd. ",
    "2024-01-01T10:00:00Z/",
    "{\"a\":1,\"b\":[2,3]} ",
    "1' OR '1'='1 ",
    "1 UNION SELECT username, password FROM users ",
];

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5);
    let per_round = 100_000;
    println!(
        "{:<50} {:>10} {:>8}",
        "value (+ a counter)", "ns/value", "flagged"
    );
    for v in VALUES {
        let mut samples = Vec::new();
        let mut flagged = 0;
        let mut n = 0u64;
        for _ in 0..rounds {
            let inputs: Vec<Vec<u8>> = (0..per_round)
                .map(|_| {
                    n += 1;
                    format!("{v}{n}").into_bytes()
                })
                .collect();
            let t = Instant::now();
            for i in &inputs {
                if Libinjection.detect(i).is_some() {
                    flagged += 1;
                }
            }
            samples.push(t.elapsed().as_nanos() as f64 / per_round as f64);
        }
        samples.sort_by(f64::total_cmp);
        println!(
            "{:<50} {:>10.0} {:>7.0}%",
            format!("{v:?}"),
            samples[samples.len() / 2],
            100.0 * f64::from(flagged) / (rounds * per_round) as f64
        );
    }
}
