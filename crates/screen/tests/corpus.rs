//! Detection and false-positive rates of the SQL-injection screen on the corpora in `testdata/`
//! (see the SOURCE files there): a public payload corpus and a benign corpus written for this
//! project. Each payload is sent the way a client would send it: percent-encoded as a query
//! parameter value, and inspected exactly as recv does. The figures are printed (and quoted in
//! docs/security.md); the assertions guard against regressions of the engine or the extractors.

use rampart_screen::inspect::{self, BodyKind};
use rampart_screen::sqli::Sqli;

fn lines(name: &str) -> Vec<String> {
    let path = format!("{}/testdata/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    // Payloads keep their leading and trailing spaces; only line breaks separate them.
    text.split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l).to_owned())
        .filter(|l| !l.is_empty())
        .collect()
}

fn encode(v: &str) -> String {
    let mut out = String::with_capacity(v.len() * 3);
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn flagged_as_query(value: &str) -> bool {
    inspect::query(&Sqli, &format!("q={}", encode(value))).is_some()
}

fn rate(hits: usize, total: usize) -> f64 {
    100.0 * hits as f64 / total as f64
}

/// Two figures: each payload alone as the parameter value, and as an attacker sends it after a
/// legitimate value (`1` + payload; most list entries such as ` UNION ALL SELECT …` or
/// ` ORDER BY 5--` are suffixes meant for that and are not SQL on their own).
#[test]
fn detection_rate_on_the_public_payload_corpus() {
    let payloads = lines("sqli-payloads.txt");
    assert!(payloads.len() > 500);
    let alone = payloads.iter().filter(|p| flagged_as_query(p)).count();
    let missed: Vec<&String> = payloads
        .iter()
        .filter(|p| !flagged_as_query(p) && !flagged_as_query(&format!("1{p}")))
        .collect();
    let sent = payloads.len() - missed.len();
    println!(
        "sqli-payloads.txt: alone {alone}/{n} detected ({:.1}%); alone or after a value {sent}/{n} ({:.1}%)",
        rate(alone, payloads.len()),
        rate(sent, payloads.len()),
        n = payloads.len(),
    );
    for m in &missed {
        println!("  missed: {m:?}");
    }
    // Measured 2026-11-22: 55.7% and 93.3% (docs/security.md). A drop means the engine or an
    // extractor regressed.
    assert!(rate(alone, payloads.len()) >= 50.0);
    assert!(rate(sent, payloads.len()) >= 90.0);
}

#[test]
fn false_positive_rate_on_the_benign_corpus() {
    let benign = lines("benign.txt");
    assert!(benign.len() > 1000);
    let flagged: Vec<&String> = benign.iter().filter(|b| flagged_as_query(b)).collect();
    println!(
        "benign.txt: {}/{} flagged ({:.2}%)",
        flagged.len(),
        benign.len(),
        rate(flagged.len(), benign.len())
    );
    for f in &flagged {
        println!("  false positive: {f:?}");
    }
    // Measured 2026-11-22: 3 of 1528 (0.20%).
    assert!(rate(flagged.len(), benign.len()) <= 0.5);
}

#[test]
fn json_bodies() {
    let d = &Sqli;
    let benign = lines("benign-json.txt");
    let fp: Vec<_> = benign
        .iter()
        .filter(|b| inspect::body(d, BodyKind::Json, b"", b.as_bytes()).is_some())
        .collect();
    let attacks = lines("sqli-json.txt");
    let detected = attacks
        .iter()
        .filter(|a| inspect::body(d, BodyKind::Json, b"", a.as_bytes()).is_some())
        .count();
    println!(
        "benign-json.txt: {}/{} flagged; sqli-json.txt: {detected}/{} detected",
        fp.len(),
        benign.len(),
        attacks.len()
    );
    for f in &fp {
        println!("  false positive: {f}");
    }
    assert!(fp.len() <= 1, "{fp:#?}");
    assert!(detected * 10 >= attacks.len() * 9);
}

/// The shortcut that skips the engine must never skip something the engine flags.
#[test]
fn skipped_values_are_never_injections() {
    let mut skipped = 0;
    for line in lines("benign.txt")
        .iter()
        .chain(lines("sqli-payloads.txt").iter())
    {
        let decoded = line.replace('+', " ");
        if rampart_screen::sqli::plain_words(decoded.as_bytes()) {
            skipped += 1;
            assert!(
                !libinjectionrs::detect_sqli(decoded.as_bytes()).is_injection()
                    && Sqli::check(decoded.as_bytes()).is_none(),
                "{decoded:?} was skipped but is flagged"
            );
        }
    }
    println!("{skipped} corpus values skip the engine");
    assert!(skipped > 100);
}
