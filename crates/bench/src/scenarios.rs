//! The suite's scenarios: what each one asks for (path, protocol, loads), how long and how often
//! it is measured, and which peers take part. Mostly a table; the `vus` steps follow this
//! machine's open-file limit.

use serde::Serialize;

use crate::load::Load;

/// One scenario of the suite.
#[derive(Debug, Clone, Serialize)]
pub struct Scenario {
    pub name: &'static str,
    pub description: &'static str,
    pub path: &'static str,
    /// Only caching peers; the origin must stay flat during measured runs.
    pub cached: bool,
    /// Over HTTP/2 cleartext (prior knowledge); only peers offering it.
    pub h2: bool,
    /// Over TLS (`https://127.0.0.1:PORT`: HTTP/1.1, or HTTP/2 by ALPN with `h2`); only peers
    /// terminating TLS.
    pub tls: bool,
    /// A cached scenario about connections (new per request, TLS, HTTP/2) in which peers
    /// without a cache that answer `/hello` from a fixed file take part, marked as such.
    pub fixed: bool,
    pub loads: Vec<Load>,
    /// Seconds per timed run for this scenario.
    pub seconds: u64,
    pub rounds: usize,
    /// Each peer is restarted before each run (peak RSS then belongs to that run alone).
    pub fresh: bool,
    /// Only these peers take part (None: every applicable peer).
    pub only: Option<&'static [&'static str]>,
}

/// The names `--scenarios` knows, in the order they run.
pub const NAMES: &str = "cached-hello, cached-image, compressed, compressed-plain, pass, pass-hello, close, https, https-close, h2, h2-tls, vus, burst, disk (the disk tier: `rampart-bench disk`)";

/// How long each timed run lasts and how many rounds each load gets.
#[derive(Debug, Clone, Copy)]
struct Timing {
    seconds: u64,
    rounds: usize,
}

/// Every scenario, in the order they run: `--quick` shortens them, `--seconds`, `--rounds` and
/// `--users` override their defaults.
pub fn all(
    quick: bool,
    seconds: Option<u64>,
    rounds: Option<usize>,
    users_steps: Option<&[u32]>,
) -> Vec<Scenario> {
    let timing = Timing {
        seconds: seconds.unwrap_or(if quick { 1 } else { 3 }),
        rounds: rounds.unwrap_or(if quick { 1 } else { 3 }),
    };
    let mut all = keep_alive(quick, timing);
    all.extend(connections(quick, timing));
    all.extend(users(quick, seconds, rounds, users_steps));
    all
}

/// A wrk closed loop on keep-alive connections, without Accept-Encoding.
fn wrk(connections: u32) -> Load {
    Load::Wrk {
        connections,
        close: false,
        accept_encoding: None,
    }
}

/// The settings most scenarios share: a cached path over cleartext HTTP/1.1, measured with the
/// suite's timing on processes that stay up, by every peer that applies.
fn closed_loop(
    name: &'static str,
    description: &'static str,
    path: &'static str,
    loads: Vec<Load>,
    timing: Timing,
) -> Scenario {
    Scenario {
        name,
        description,
        path,
        cached: true,
        h2: false,
        tls: false,
        fixed: false,
        loads,
        seconds: timing.seconds,
        rounds: timing.rounds,
        fresh: false,
        only: None,
    }
}

/// Cached hits, compression and passes over keep-alive HTTP/1.1.
fn keep_alive(quick: bool, t: Timing) -> Vec<Scenario> {
    const COMPRESSION_PEERS: &[&str] = &["rampart", "rampart-baseline", "nginx"];
    vec![
        closed_loop(
            "cached-hello",
            "12-byte cached response, keep-alive, closed loop (wrk) at several connection counts",
            "/hello",
            if quick { vec![wrk(16)] } else { vec![wrk(16), wrk(64), wrk(256)] },
            t,
        ),
        closed_loop(
            "cached-image",
            "the 73 KiB JPEG, cached: ab -c 10 (new connection per request, as in the Squid/Apache comparison) and a wrk closed loop at 64 connections",
            "/image.jpg",
            vec![
                Load::Ab {
                    concurrency: 10,
                    requests: if quick { 100 } else { 5_000 },
                },
                wrk(64),
            ],
            t,
        ),
        Scenario {
            only: Some(COMPRESSION_PEERS),
            ..closed_loop(
                "compressed",
                "a cached ~40 KB HTML page asked for as a browser does (Accept-Encoding: gzip, br), wrk at 64 connections: rampart sends the Brotli copy it stored, NGINX (gzip on) gzips each hit",
                "/page.html",
                vec![Load::Wrk {
                    connections: 64,
                    close: false,
                    accept_encoding: Some("gzip, br"),
                }],
                t,
            )
        },
        Scenario {
            only: Some(COMPRESSION_PEERS),
            ..closed_loop(
                "compressed-plain",
                "the yardstick for `compressed`: a cached uncompressed body of the size of the page's Brotli copy, wrk at 64 connections",
                "/page-sized",
                vec![wrk(64)],
                t,
            )
        },
        Scenario {
            cached: false,
            ..closed_loop(
                "pass",
                "no caching: every request goes to the origin (a ~2 KB rendered template, Cache-Control: no-store), keep-alive, wrk at 64 connections",
                "/template",
                vec![wrk(64)],
                t,
            )
        },
        Scenario {
            cached: false,
            ..closed_loop(
                "pass-hello",
                "the APISIX seed's single-core test: `/hello` (12 bytes) passed through to the origin on every request (Cache-Control: no-store), keep-alive, wrk at 64 connections",
                "/hello-pass",
                vec![wrk(64)],
                t,
            )
        },
    ]
}

/// The cached 12-byte page over other connections: one per request, TLS, HTTP/2 (cleartext and
/// TLS). Peers without a cache that answer `/hello` from a fixed file take part.
fn connections(quick: bool, t: Timing) -> Vec<Scenario> {
    let closing = || {
        vec![Load::Wrk {
            connections: 32,
            close: true,
            accept_encoding: None,
        }]
    };
    let h2load = || {
        vec![Load::H2load {
            clients: 16,
            streams: 10,
            requests: if quick { 2_000 } else { 200_000 },
        }]
    };
    let fixed = |s: Scenario| Scenario { fixed: true, ..s };
    [
        closed_loop(
            "close",
            "a new connection per request (Connection: close), 32 connections, the cached 12-byte page: the keep-alive lesson (compare with cached-hello)",
            "/hello",
            closing(),
            t,
        ),
        Scenario {
            tls: true,
            ..closed_loop(
                "https",
                "the 12-byte cached page over TLS 1.3 (ECDSA P-256 certificate, keep-alive), wrk at 64 connections",
                "/hello",
                vec![wrk(64)],
                t,
            )
        },
        Scenario {
            tls: true,
            ..closed_loop(
                "https-close",
                "a new TLS 1.3 connection (full handshake, ECDSA P-256, X25519) per request, 32 connections, the cached 12-byte page: handshakes per second",
                "/hello",
                closing(),
                t,
            )
        },
        Scenario {
            h2: true,
            ..closed_loop(
                "h2",
                "cached 12-byte hits over HTTP/2 cleartext, h2load with 16 clients × 10 streams",
                "/hello",
                h2load(),
                t,
            )
        },
        Scenario {
            h2: true,
            tls: true,
            ..closed_loop(
                "h2-tls",
                "cached 12-byte hits over HTTP/2 on TLS 1.3 (ALPN h2, ECDSA P-256), h2load with 16 clients × 10 streams",
                "/hello",
                h2load(),
                t,
            )
        },
    ]
    .into_iter()
    .map(fixed)
    .collect()
}

/// ARC2's virtual users (`vus`, `burst`): many mostly idle connections, each peer restarted
/// before each run.
fn users(
    quick: bool,
    seconds: Option<u64>,
    rounds: Option<usize>,
    chosen: Option<&[u32]>,
) -> Vec<Scenario> {
    // ARC2's steps, as far as this machine's open-file limit allows: a cached hit costs a proxy
    // one file per connection; 1,000 are kept for everything else.
    let steps = match chosen {
        Some(c) => c.to_vec(),
        None => vus_steps(fd_limit()),
    };
    let loads = |ramp_seconds: u64| -> Vec<Load> {
        if quick {
            vec![Load::Vus {
                users: 20,
                ramp_seconds: ramp_seconds.min(1),
            }]
        } else {
            steps
                .iter()
                .map(|&users| Load::Vus {
                    users,
                    ramp_seconds,
                })
                .collect()
        }
    };
    // The seeds compared rampart with NGINX; the floor places both.
    const VUS_PEERS: &[&str] = &["rampart", "rampart-baseline", "nginx", "floor"];
    let timing = Timing {
        seconds: seconds.unwrap_or(if quick { 2 } else { 30 }),
        rounds: rounds.unwrap_or(1),
    };
    let fresh = |s: Scenario| Scenario {
        fresh: true,
        only: Some(VUS_PEERS),
        ..s
    };
    vec![
        fresh(closed_loop(
            "vus",
            "ARC2's published benchmark as its k6 script ran it: N virtual users, each on a keep-alive connection sending GET then sleeping 1 s; users start over a 5 s ramp, then hold for the run; cached 12 bytes; each peer restarted before each run",
            "/hello",
            loads(5),
            timing,
        )),
        fresh(closed_loop(
            "burst",
            "as vus, but all N users connect at once (no ramp): the arrival storm real traffic also brings",
            "/hello",
            loads(0),
            timing,
        )),
    ]
}

/// The hard limit on open files of this process.
fn fd_limit() -> u64 {
    crate::sh("ulimit -Hn").parse().unwrap_or(1024)
}

/// 100, 1,000, 5,000, 10,000, 15,000, then the highest thousand the open-file limit allows.
fn vus_steps(fd_limit: u64) -> Vec<u32> {
    let max = (fd_limit.saturating_sub(1_000) / 1_000 * 1_000).min(20_000) as u32;
    let mut steps: Vec<u32> = [100u32, 1_000, 5_000, 10_000, 15_000]
        .into_iter()
        .filter(|n| *n <= max)
        .collect();
    if steps.last().is_some_and(|l| *l < max) {
        steps.push(max);
    }
    steps
}
