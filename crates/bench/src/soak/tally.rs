//! What the clients saw, shared by every client task: per traffic class the requests sent,
//! answered and verified, every failure with its cause and time (explained or not later, once
//! the fault windows are known), every wrong body with what was wrong, and latencies per time
//! window. One mutex; a client holds it only to add one record.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

use serde::Serialize;

/// Counts of one traffic class.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ClassCount {
    pub sent: u64,
    /// Answered with a status line (whatever the status).
    pub answered: u64,
    /// Answered and verified: the right status and the exact bytes.
    pub ok: u64,
    pub failed: u64,
    pub wrong: u64,
    /// GETs sent again on a new connection because the reused one was closed before any byte
    /// of the answer came back (what browsers and HTTP libraries do; RFC 9112 §9.3.1).
    pub retried: u64,
    /// Answered, but only after a second or more.
    pub over_1s: u64,
}

/// One failed request.
#[derive(Debug, Clone, Serialize)]
pub struct Failure {
    pub class: String,
    /// Short, stable: `status 502`, `connect failed`, `body cut`, `timeout`, ...
    pub cause: String,
    pub detail: String,
    /// Seconds since the start: when the request started and when it failed.
    pub from_s: f64,
    pub to_s: f64,
    /// The scheduled fault that explains it (filled in at the end).
    pub explained_by: Option<String>,
    /// Or the known rampart defect that caused it (filled in at the end).
    pub known_defect: Option<&'static str>,
}

/// One response whose bytes were not the origin's.
#[derive(Debug, Clone, Serialize)]
pub struct Wrong {
    pub class: String,
    pub at_s: f64,
    pub what: String,
}

/// Whatever a soak client adds.
#[derive(Debug, Default)]
struct Inner {
    classes: BTreeMap<String, ClassCount>,
    failures: Vec<Failure>,
    wrong: Vec<Wrong>,
    /// Latency (µs) of each answered request, per window.
    latencies: Vec<Vec<u32>>,
    /// The slowest answered request of each window: (µs, class).
    slowest: Vec<(u32, String)>,
    /// Free-form counters (slow readers, slowloris, flaky cuts, ...).
    counters: BTreeMap<String, u64>,
    /// Free-form observations with their time (e.g. a slowloris connection held too long).
    notes: Vec<(f64, String)>,
}

#[derive(Debug)]
pub struct Tally {
    start: Instant,
    window_s: f64,
    inner: Mutex<Inner>,
}

/// How one request ended.
#[derive(Debug)]
pub enum Outcome {
    Ok,
    Failed { cause: String, detail: String },
    Wrong(String),
}

impl Tally {
    pub fn new(start: Instant, window_s: u64) -> Tally {
        Tally {
            start,
            window_s: window_s.max(1) as f64,
            inner: Mutex::new(Inner::default()),
        }
    }

    pub fn now_s(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    pub fn secs(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.start).as_secs_f64()
    }

    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        let mut g = match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        f(&mut g)
    }

    /// Records one request of `class` that started at `started`; `answered` when a status line
    /// came back.
    pub fn record(&self, class: &str, started: Instant, answered: bool, outcome: Outcome) {
        let (from_s, to_s) = (self.secs(started), self.now_s());
        let us = (started.elapsed().as_micros()).min(u128::from(u32::MAX)) as u32;
        let window = (from_s / self.window_s) as usize;
        self.with(|i| {
            let c = i.classes.entry(class.to_owned()).or_default();
            c.sent += 1;
            if answered {
                c.answered += 1;
                if us >= 1_000_000 {
                    c.over_1s += 1;
                }
            }
            match outcome {
                Outcome::Ok => c.ok += 1,
                Outcome::Failed { cause, detail } => {
                    c.failed += 1;
                    i.failures.push(Failure {
                        class: class.to_owned(),
                        cause,
                        detail,
                        from_s,
                        to_s,
                        explained_by: None,
                        known_defect: None,
                    });
                }
                Outcome::Wrong(what) => {
                    c.wrong += 1;
                    i.wrong.push(Wrong {
                        class: class.to_owned(),
                        at_s: to_s,
                        what,
                    });
                }
            }
            if answered {
                if i.latencies.len() <= window {
                    i.latencies.resize_with(window + 1, Vec::new);
                    i.slowest.resize_with(window + 1, Default::default);
                }
                i.latencies[window].push(us);
                if us > i.slowest[window].0 {
                    i.slowest[window] = (us, class.to_owned());
                }
            }
        });
    }

    pub fn retried(&self, class: &str) {
        self.with(|i| i.classes.entry(class.to_owned()).or_default().retried += 1);
    }

    /// Whether a request that got no answer goes once more on a new connection: when `safe`
    /// (it was not processed, or may be repeated) and it has not gone again already
    /// (`retried`, set here). Counted in `class`.
    pub fn retry_once(&self, class: &str, retried: &mut bool, safe: bool) -> bool {
        if !safe || *retried {
            return false;
        }
        *retried = true;
        self.retried(class);
        true
    }

    pub fn count(&self, name: &str, n: u64) {
        self.with(|i| *i.counters.entry(name.to_owned()).or_default() += n);
    }

    pub fn note(&self, text: String) {
        let at = self.now_s();
        self.with(|i| {
            if i.notes.len() < 1000 {
                i.notes.push((at, text));
            }
        });
    }

    /// Everything recorded, taken out.
    pub fn take(&self) -> Recorded {
        self.with(|i| {
            let i = std::mem::take(i);
            Recorded {
                classes: i.classes,
                failures: i.failures,
                wrong: i.wrong,
                latencies: i.latencies,
                slowest: i.slowest,
                counters: i.counters,
                notes: i.notes,
            }
        })
    }
}

/// The tally's content at the end.
#[derive(Debug, Default)]
pub struct Recorded {
    pub classes: BTreeMap<String, ClassCount>,
    pub failures: Vec<Failure>,
    pub wrong: Vec<Wrong>,
    pub latencies: Vec<Vec<u32>>,
    pub slowest: Vec<(u32, String)>,
    pub counters: BTreeMap<String, u64>,
    pub notes: Vec<(f64, String)>,
}
