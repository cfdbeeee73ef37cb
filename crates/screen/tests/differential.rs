//! rampart's SQL-injection engine ([`Sqli`]) against the reference it implements
//! (`libinjectionrs`, the pure-Rust port of libinjection): the same verdict and the same
//! fingerprint for every line of the corpora in `testdata/` (as it stands, percent-decoded, and
//! after a `1` and a `'`), and for ~200,000 generated SQL-ish values, deterministic from a fixed
//! seed. The `sqli_diff` fuzz target runs the same comparison on what a fuzzer finds.

use rampart_screen::inspect::percent_decode;
use rampart_screen::sqli::{Detector, Libinjection, Sqli};

/// libinjectionrs's verdict: the fingerprint when the input is an injection.
fn reference(input: &[u8]) -> Option<String> {
    let r = libinjectionrs::detect_sqli(input);
    r.is_injection()
        .then(|| r.fingerprint.map(|f| f.to_string()).unwrap_or_default())
}

fn ours(input: &[u8]) -> Option<String> {
    Sqli::check(input).map(|f| f.to_string())
}

/// Compares the engines on every input; panics listing (up to 20 of) the differences.
fn compare<'a>(inputs: impl IntoIterator<Item = &'a [u8]>) -> usize {
    let mut n = 0;
    let mut differences = Vec::new();
    for input in inputs {
        n += 1;
        let (a, b) = (ours(input), reference(input));
        if a != b {
            differences.push(format!(
                "{:?}: rampart {a:?}, libinjectionrs {b:?}",
                String::from_utf8_lossy(input)
            ));
        }
    }
    assert!(
        differences.is_empty(),
        "{} of {n} inputs differ:\n{}",
        differences.len(),
        differences[..differences.len().min(20)].join("\n")
    );
    n
}

fn corpus_lines() -> Vec<Vec<u8>> {
    let dir = format!("{}/testdata", env!("CARGO_MANIFEST_DIR"));
    let mut lines = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .collect();
    files.sort();
    assert!(files.len() >= 4, "{files:?}");
    for path in files {
        let text = std::fs::read(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        lines.extend(
            text.split(|&b| b == b'\n')
                .map(|l| l.strip_suffix(b"\r").unwrap_or(l).to_vec())
                .filter(|l| !l.is_empty()),
        );
    }
    lines
}

#[test]
fn corpus_lines_get_libinjections_verdicts() {
    let mut inputs = Vec::new();
    for line in corpus_lines() {
        let decoded = percent_decode(&line, true).into_owned();
        for v in [line, decoded] {
            inputs.push([&b"1"[..], &v].concat());
            inputs.push([&b"'"[..], &v].concat());
            inputs.push(v);
        }
    }
    let n = compare(inputs.iter().map(Vec::as_slice));
    // The detectors with their front (the plain-words shortcut and the memo) agree too.
    for v in &inputs {
        assert_eq!(Sqli.detect(v), Libinjection.detect(v), "{v:?}");
    }
    println!("{n} corpus values: same verdicts and fingerprints");
    assert!(n > 15_000);
}

/// xorshift64*: a small deterministic generator, so every run checks the same inputs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() >> 33) as usize % n
    }

    fn pick<'a>(&mut self, items: &[&'a [u8]]) -> &'a [u8] {
        items[self.below(items.len())]
    }
}

const OPERATORS: &[&[u8]] = &[
    b"=", b"<>", b"!=", b"<=>", b"||", b"&&", b"::", b":=", b"+", b"-", b"*", b"/", b"%", b"^",
    b"|", b"&", b"~", b"!", b"<", b">", b">=", b"<=", b"!!", b"<<", b">>", b":", b"?", b"!<",
    b"@>", b"<@", b"|/", b"~*",
];
const QUOTES: &[&[u8]] = &[b"'", b"\"", b"`", b"''", b"\\'", b"\\\"", b"``", b"\"\""];
const COMMENTS: &[&[u8]] = &[
    b"/*",
    b"*/",
    b"--",
    b"-- ",
    b"#",
    b"/*!",
    b"/**/",
    b"/*!50000",
    b"--\n",
    b"#\n",
    b"-- x\n",
    b"/* /* */",
];
const NUMBERS: &[&[u8]] = &[
    b"1",
    b"0",
    b"42",
    b"0x1F",
    b"0X",
    b"0xg",
    b"0b101",
    b"0b",
    b"1e5",
    b"1e",
    b"1E+5",
    b"1e-",
    b".5",
    b"1.",
    b"1.5",
    b"1.5f",
    b"1d",
    b"2F",
    b"\\N",
    b"$1,000.00",
    b"$.",
    b"-1",
    b"+1",
    b"1fUNION",
    b"9999999999999999999999999999999999",
];
const VARIABLES: &[&[u8]] = &[
    b"@",
    b"@@",
    b"@a",
    b"@@version",
    b"@`x`",
    b"@'x'",
    b"@\"x\"",
    b"@@`user`",
    b"@user",
];
const DOLLARS: &[&[u8]] = &[b"$", b"$$", b"$a$", b"$tag$", b"$$x$$", b"$a", b"$1"];
const STRINGS: &[&[u8]] = &[
    b"N'x'", b"n'", b"X'1F'", b"x'zz'", b"B'01'", b"b'2'", b"E'x'", b"e'", b"U&'x'", b"u&'",
    b"q'[x]'", b"Q'<x>'", b"q'{", b"nq'(x)'", b"q'xax'", b"q' ", b"'x'", b"\"x\"", b"`x`", b"[x]",
    b"[",
];
const PUNCTUATION: &[&[u8]] = &[
    b"(", b"(", b")", b")", b",", b",", b"{", b"}", b"[", b"]", b";", b".", b"\\", b"((", b"))",
    b";;", b"{fn", b"),(", b")+(", b",(",
];
const WHITE: &[&[u8]] = &[
    b" ", b" ", b" ", b"", b"", b"\t", b"\n", b"\r", b"\x0b", b"\x0c", b"\xa0", b"\x00", b"  ",
];
const WORDS: &[&[u8]] = &[
    b"x",
    b"a",
    b"id",
    b"users",
    b"name",
    b"sp_password",
    b"into",
    b"INTO",
    b"outfile",
    b"dumpfile",
    b"user",
    b"USER",
    b"in",
    b"not",
    b"like",
    b"collate",
    b"utf8_bin",
    b"if",
    b"sexy",
    b"and",
    b"or",
    b"union",
    b"select",
    b"from",
    b"order",
    b"by",
    b"at",
    b"time",
    b"zone",
    b"a.b",
    b"db.tbl",
    b"select.1",
    b"dbms_lock.sleep",
    b"_x",
    b"x_y",
    b"O'Reilly",
];

const OPENINGS: &[&[u8]] = &[
    b"1 or ",
    b"1' or ",
    b"1\" or ",
    b"1 union select ",
    b"' union all select ",
    b"1) or (",
    b"1 and ",
    b"' and '",
    b"-1 ",
    b"1; ",
    b"'; ",
    b"admin'",
    b"1' ",
    b"x' ",
    b"1 order by ",
    b"') or ('",
    b"1 and sleep(",
    b"{",
    b"(",
    b"@@",
    b"1,",
];

/// One piece of a generated value.
fn piece(rng: &mut Rng, out: &mut Vec<u8>, keywords: &[&[u8]]) {
    match rng.below(32) {
        0..=4 => {
            // A word from libinjection's list, in mixed case.
            let w = keywords[rng.below(keywords.len())];
            let mode = rng.below(3);
            for &c in w {
                out.push(match mode {
                    0 => c,
                    1 => c.to_ascii_lowercase(),
                    _ if rng.below(2) == 0 => c.to_ascii_lowercase(),
                    _ => c,
                });
            }
        }
        5..=8 => out.extend_from_slice(rng.pick(WORDS)),
        9..=12 => out.extend_from_slice(rng.pick(NUMBERS)),
        13..=17 => out.extend_from_slice(rng.pick(PUNCTUATION)),
        18..=20 => out.extend_from_slice(rng.pick(OPERATORS)),
        21..=23 => out.extend_from_slice(rng.pick(QUOTES)),
        24 | 25 => out.extend_from_slice(rng.pick(COMMENTS)),
        26 => out.extend_from_slice(rng.pick(VARIABLES)),
        27 => out.extend_from_slice(rng.pick(DOLLARS)),
        28 => out.extend_from_slice(rng.pick(STRINGS)),
        29 | 30 => {
            // Random bytes: NUL, control bytes, non-UTF-8.
            for _ in 0..1 + rng.below(3) {
                out.push(rng.next() as u8);
            }
        }
        _ => out.extend_from_slice(b"\xc3\xa9"),
    }
}

#[test]
fn generated_values_get_libinjections_verdicts() {
    // About three seconds in a debug build.
    let count = 200_000;
    let keywords: Vec<&[u8]> = libinjectionrs::sqli::sqli_data::SQL_KEYWORDS
        .iter()
        .filter(|k| k.token_type != b'F')
        .map(|k| k.word.as_bytes())
        .collect();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut flagged = 0;
    let mut inputs = Vec::with_capacity(1024);
    let mut done = 0;
    while done < count {
        inputs.clear();
        for _ in 0..1024.min(count - done) {
            let mut v = Vec::new();
            // Most attacks start after a value or a quote, many the classic way.
            match rng.below(4) {
                0 => v.push(b'1'),
                1 => v.push(b'\''),
                2 => v.extend_from_slice(rng.pick(OPENINGS)),
                _ => {}
            }
            for _ in 0..1 + rng.below(10) {
                piece(&mut rng, &mut v, &keywords);
                v.extend_from_slice(rng.pick(WHITE));
            }
            inputs.push(v);
        }
        flagged += inputs.iter().filter(|v| reference(v).is_some()).count();
        done += compare(inputs.iter().map(Vec::as_slice));
    }
    println!("{done} generated values, {flagged} injections: same verdicts and fingerprints");
    // The generator must produce both kinds in quantity, or the comparison says little.
    assert!(
        flagged * 10 > done && flagged * 10 < done * 9,
        "{flagged} of {done}"
    );
}
