//! `rampart-bench vus`: ARC2's published benchmark as its k6 script ran it. N virtual users, each
//! on its own keep-alive connection, loop `GET url` then `sleep(1 s)`; the users start over a ramp
//! (k6's `stages: [{duration: "5s", target: N}, {duration: "30s", target: N}]`) or all at once
//! (`--ramp-seconds 0`, the burst variant), and stop when the hold ends.
//!
//! One thread (the suite pins it to the load CPU) drives every user; the client side of an
//! exchange is a write of a fixed request and reads until the response's framing says it is
//! complete, so the generator costs a few microseconds per request and stays far from being the
//! ceiling at 20,000 users. Latency is k6's `http_req_duration`: from the request's first byte
//! written to the response's last byte read (connecting is not part of it; a failed connect is an
//! error). Prints one JSON object (see [`VusReport`]).

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

#[derive(clap::Args, Debug)]
pub struct VusArgs {
    /// `http://HOST:PORT/PATH` (IP literal).
    #[arg(long)]
    pub url: String,
    /// Virtual users (connections).
    #[arg(long)]
    pub users: u32,
    /// Seconds over which the users start (0: all at once).
    #[arg(long, default_value_t = 5)]
    pub ramp_seconds: u64,
    /// Seconds at full strength after the ramp.
    #[arg(long, default_value_t = 30)]
    pub hold_seconds: u64,
}

/// What a run measured. Latencies in microseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct VusReport {
    pub users: u32,
    pub seconds: f64,
    pub requests: u64,
    /// Failed connects, resets, timeouts (10 s), responses that are not 2xx/3xx.
    pub errors: u64,
    pub connect_errors: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p95_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    pub bytes: u64,
}

#[derive(Default)]
struct Tally {
    latencies_us: Vec<u32>,
    errors: u64,
    connect_errors: u64,
    bytes: u64,
}

const TIMEOUT: Duration = Duration::from_secs(10);

pub fn run(args: VusArgs) -> anyhow::Result<()> {
    let report = measure(&args)?;
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

pub fn measure(args: &VusArgs) -> anyhow::Result<VusReport> {
    let (addr, path) = parse_url(&args.url)?;
    raise_open_files();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let request: Rc<[u8]> = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: rampart-bench-vus\r\nAccept: */*\r\n\r\n"
    )
    .into_bytes()
    .into();
    let tally = Rc::new(RefCell::new(Tally::default()));
    let users = args.users.max(1);
    let ramp = Duration::from_secs(args.ramp_seconds);
    let started = std::time::Instant::now();
    rt.block_on(async {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let t0 = Instant::now();
                let end = t0 + ramp + Duration::from_secs(args.hold_seconds);
                let mut tasks = Vec::with_capacity(users as usize);
                for i in 0..users {
                    // k6 ramps linearly: user i starts at i/N of the ramp.
                    let start = t0 + ramp.mul_f64(f64::from(i) / f64::from(users));
                    tasks.push(tokio::task::spawn_local(user(
                        addr,
                        request.clone(),
                        start,
                        end,
                        tally.clone(),
                    )));
                }
                for t in tasks {
                    let _ = t.await;
                }
            })
            .await;
    });
    let seconds = started.elapsed().as_secs_f64();
    let mut t = tally.take();
    Ok(summarise(&mut t, users, seconds))
}

fn summarise(t: &mut Tally, users: u32, seconds: f64) -> VusReport {
    t.latencies_us.sort_unstable();
    let l = &t.latencies_us;
    let pct = |p: f64| f64::from(crate::stats::percentile(l, p));
    let n = l.len() as u64;
    VusReport {
        users,
        seconds,
        requests: n,
        errors: t.errors,
        connect_errors: t.connect_errors,
        mean_us: if n == 0 {
            0.0
        } else {
            l.iter().map(|v| u64::from(*v)).sum::<u64>() as f64 / n as f64
        },
        p50_us: pct(50.0),
        p90_us: pct(90.0),
        p95_us: pct(95.0),
        p99_us: pct(99.0),
        max_us: l.last().map_or(0.0, |v| f64::from(*v)),
        bytes: t.bytes,
    }
}

/// One virtual user: connect once, then request, sleep a second, repeat until `end`.
async fn user(
    addr: SocketAddr,
    request: Rc<[u8]>,
    start: Instant,
    end: Instant,
    tally: Rc<RefCell<Tally>>,
) {
    tokio::time::sleep_until(start).await;
    let mut conn: Option<TcpStream> = None;
    let mut buf = Vec::with_capacity(512);
    while Instant::now() < end {
        let stream = match &mut conn {
            Some(s) => s,
            None => match tokio::time::timeout(TIMEOUT, TcpStream::connect(addr)).await {
                Ok(Ok(s)) => {
                    let _ = s.set_nodelay(true);
                    conn.insert(s)
                }
                _ => {
                    {
                        let mut t = tally.borrow_mut();
                        t.errors += 1;
                        t.connect_errors += 1;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            },
        };
        let t0 = Instant::now();
        let outcome = tokio::time::timeout(TIMEOUT, exchange(stream, &request, &mut buf)).await;
        let took = t0.elapsed();
        {
            let mut t = tally.borrow_mut();
            match outcome {
                Ok(Ok(r)) => {
                    t.bytes += r.bytes as u64;
                    if (200..400).contains(&r.status) {
                        t.latencies_us
                            .push(u32::try_from(took.as_micros()).unwrap_or(u32::MAX));
                    } else {
                        t.errors += 1;
                    }
                    if r.close {
                        conn = None;
                    }
                }
                _ => {
                    t.errors += 1;
                    conn = None;
                }
            }
        }
        // k6's `sleep(1)` after each iteration.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

pub(crate) struct Exchanged {
    pub(crate) status: u16,
    pub(crate) bytes: usize,
    pub(crate) close: bool,
    /// Where the body starts in the buffer (the head is before it).
    pub(crate) head_end: usize,
}

/// Writes the request and reads one whole response (Content-Length or chunked framing).
pub(crate) async fn exchange(
    s: &mut TcpStream,
    request: &[u8],
    buf: &mut Vec<u8>,
) -> anyhow::Result<Exchanged> {
    s.write_all(request).await?;
    buf.clear();
    let head = loop {
        if let Some(h) = crate::http1::head(buf) {
            break h;
        }
        if buf.len() > 64 * 1024 {
            bail!("response head too long");
        }
        read_more(s, buf).await?;
    };
    let (status, head_end, close) = (head.status, head.end, head.close);
    let chunked = head.framing == crate::http1::Framing::Chunked;
    let length = match head.framing {
        crate::http1::Framing::Length(n) => Some(n),
        _ => None,
    };
    if chunked {
        // Enough for the suite's responses: read until the last chunk and the empty trailer.
        while !buf[head_end..].ends_with(b"0\r\n\r\n") {
            read_more(s, buf).await?;
        }
    } else if let Some(n) = length {
        while buf.len() < head_end + n {
            read_more(s, buf).await?;
        }
    } else {
        bail!("response without framing");
    }
    Ok(Exchanged {
        status,
        bytes: buf.len(),
        close,
        head_end,
    })
}

async fn read_more(s: &mut TcpStream, buf: &mut Vec<u8>) -> anyhow::Result<()> {
    if buf.capacity() - buf.len() < 256 {
        buf.reserve(buf.capacity().max(512));
    }
    if s.read_buf(buf).await? == 0 {
        bail!("connection closed mid-response");
    }
    Ok(())
}

fn parse_url(url: &str) -> anyhow::Result<(SocketAddr, String)> {
    let rest = url
        .strip_prefix("http://")
        .context("the vus generator speaks plain http:// only")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let addr = authority
        .parse()
        .with_context(|| format!("{authority}: expected an IP:port"))?;
    Ok((addr, path.to_owned()))
}

/// Each user holds a socket: lift the soft open-file limit to the hard one.
#[allow(unsafe_code)]
fn raise_open_files() {
    // SAFETY: plain getrlimit/setrlimit on this process with a valid struct.
    unsafe {
        let mut l = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 && l.rlim_cur < l.rlim_max {
            l.rlim_cur = l.rlim_max;
            let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut t = Tally {
            latencies_us: (1..=100).rev().collect(),
            ..Tally::default()
        };
        let r = summarise(&mut t, 10, 1.0);
        assert_eq!(
            (r.p50_us, r.p90_us, r.p99_us, r.max_us),
            (50.0, 90.0, 99.0, 100.0)
        );
        assert!((r.mean_us - 50.5).abs() < 1e-9);
    }

    #[test]
    fn urls() {
        let (a, p) = parse_url("http://127.0.0.1:8080/hello?x=1").unwrap();
        assert_eq!((a.port(), p.as_str()), (8080, "/hello?x=1"));
        assert!(parse_url("https://127.0.0.1/").is_err());
        assert!(parse_url("http://localhost:80/").is_err());
    }
}
