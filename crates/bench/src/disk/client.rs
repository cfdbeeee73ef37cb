//! The disk benchmark's client side: a keep-alive connection that reads answers and their
//! cache labels, a Zipf key generator, and the loads that drive the peers.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use super::HOST;

// The client: raw HTTP/1.1 keep-alive, bodies read and dropped.

pub(super) struct Conn {
    pub(super) s: TcpStream,
    pub(super) buf: Vec<u8>,
}

pub(super) struct Resp {
    pub(super) status: u16,
    pub(super) len: u64,
    /// A cache hit (rampart's `Cache-Status: …hit`, NGINX's `X-Cache-Status: HIT`).
    pub(super) hit: bool,
    /// rampart's `detail=disk`.
    pub(super) disk: bool,
    pub(super) body: Vec<u8>,
}

impl Conn {
    pub(super) async fn open(addr: SocketAddr) -> anyhow::Result<Conn> {
        let s = TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        Ok(Conn {
            s,
            buf: Vec::with_capacity(64 << 10),
        })
    }

    pub(super) async fn get(&mut self, path: &str, keep: bool) -> anyhow::Result<Resp> {
        let req = format!("GET {path} HTTP/1.1\r\nHost: {HOST}\r\n\r\n");
        self.request(&req, keep).await
    }

    /// Sends `req` and reads the answer (`Content-Length` framed); keeps the body if `keep`.
    pub(super) async fn request(&mut self, req: &str, keep: bool) -> anyhow::Result<Resp> {
        self.s.write_all(req.as_bytes()).await?;
        self.buf.clear();
        let mut chunk = vec![0u8; 256 << 10];
        let head = loop {
            let n = self.s.read(&mut chunk).await?;
            if n == 0 {
                bail!("closed before the answer's head");
            }
            self.buf.extend_from_slice(&chunk[..n]);
            if let Some(h) = crate::http1::head(&self.buf) {
                break h;
            }
        };
        let status = head.status;
        let crate::http1::Framing::Length(len) = head.framing else {
            bail!("no Content-Length");
        };
        let len = len as u64;
        let cs = head
            .field("cache-status")
            .unwrap_or_default()
            .to_ascii_lowercase();
        let xs = head
            .field("x-cache-status")
            .unwrap_or_default()
            .to_ascii_lowercase();
        let hit = cs.contains("; hit") || xs == "hit";
        let disk = cs.contains("detail=disk");
        let end = head.end;
        let mut got = (self.buf.len() - end) as u64;
        let mut body = if keep {
            self.buf[end..].to_vec()
        } else {
            Vec::new()
        };
        while got < len {
            let n = self.s.read(&mut chunk).await?;
            if n == 0 {
                bail!("closed after {got} of {len} bytes");
            }
            got += n as u64;
            if keep {
                body.extend_from_slice(&chunk[..n]);
            }
        }
        Ok(Resp {
            status,
            len,
            hit,
            disk,
            body,
        })
    }
}

/// Zipf-distributed ranks 0..n (exponent `s`), by inverse CDF.
pub(super) struct Zipf {
    pub(super) cdf: Vec<f64>,
}

impl Zipf {
    pub(super) fn new(n: usize, s: f64) -> Zipf {
        let mut cdf = Vec::with_capacity(n);
        let mut sum = 0.0;
        for k in 1..=n {
            sum += 1.0 / (k as f64).powf(s);
            cdf.push(sum);
        }
        for c in &mut cdf {
            *c /= sum;
        }
        Zipf { cdf }
    }

    pub(super) fn sample(&self, rng: &mut u64) -> usize {
        // xorshift64*
        *rng ^= *rng >> 12;
        *rng ^= *rng << 25;
        *rng ^= *rng >> 27;
        let u = (rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64;
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

pub(super) fn object_path(i: usize, size: usize) -> String {
    format!("/blob?size={size}&k={i}")
}

/// Fetches `paths` over `conns` keep-alive connections (each path once, in order).
pub(super) async fn fetch_all(
    addr: SocketAddr,
    paths: Arc<Vec<String>>,
    conns: usize,
) -> anyhow::Result<()> {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let (paths, next) = (paths.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut c = Conn::open(addr).await?;
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(p) = paths.get(i) else {
                    return anyhow::Ok(());
                };
                let r = c.get(p, false).await?;
                if r.status != 200 {
                    bail!("{p}: {}", r.status);
                }
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

/// What one Zipf run measured on the client side.
#[derive(Default)]
pub(super) struct Tally {
    pub(super) requests: u64,
    pub(super) hits: u64,
    pub(super) disk: u64,
    pub(super) latencies_us: Vec<u32>,
    /// Of the answers rampart served from disk.
    pub(super) disk_latencies_us: Vec<u32>,
    /// Object ranks answered from disk at least once.
    pub(super) from_disk: HashSet<usize>,
}

/// `conns` closed-loop clients asking Zipf-ranked objects for `secs` seconds (or `count`
/// requests in all).
pub(super) async fn zipf_load(
    addr: SocketAddr,
    zipf: Arc<Zipf>,
    size: usize,
    conns: usize,
    secs: Option<u64>,
    count: Option<u64>,
) -> anyhow::Result<Tally> {
    let deadline = secs.map(|s| Instant::now() + Duration::from_secs(s));
    let left = Arc::new(std::sync::atomic::AtomicU64::new(count.unwrap_or(u64::MAX)));
    let mut tasks = Vec::new();
    for c in 0..conns {
        let (zipf, left) = (zipf.clone(), left.clone());
        tasks.push(tokio::spawn(async move {
            let mut conn = Conn::open(addr).await?;
            let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ ((c as u64 + 1) * 0x1000_0001);
            let mut t = Tally::default();
            loop {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
                if left
                    .fetch_update(
                        std::sync::atomic::Ordering::Relaxed,
                        std::sync::atomic::Ordering::Relaxed,
                        |n| n.checked_sub(1),
                    )
                    .is_err()
                {
                    break;
                }
                let rank = zipf.sample(&mut rng);
                let start = Instant::now();
                let r = conn.get(&object_path(rank, size), false).await?;
                let took = start.elapsed().as_micros().min(u32::MAX as u128) as u32;
                t.latencies_us.push(took);
                if r.disk {
                    t.disk_latencies_us.push(took);
                }
                if r.status != 200 || r.len != size as u64 {
                    bail!("object {rank}: {} with {} bytes", r.status, r.len);
                }
                t.requests += 1;
                t.hits += u64::from(r.hit);
                if r.disk {
                    t.disk += 1;
                    t.from_disk.insert(rank);
                }
            }
            anyhow::Ok(t)
        }));
    }
    let mut all = Tally::default();
    for task in tasks {
        let t = task.await??;
        all.requests += t.requests;
        all.hits += t.hits;
        all.disk += t.disk;
        all.latencies_us.extend(t.latencies_us);
        all.disk_latencies_us.extend(t.disk_latencies_us);
        all.from_disk.extend(t.from_disk);
    }
    all.latencies_us.sort_unstable();
    all.disk_latencies_us.sort_unstable();
    Ok(all)
}

/// The `q` quantile (0–1, nearest rank) of latencies in µs, in ms.
pub(super) fn quantile(sorted: &[u32], q: f64) -> f64 {
    f64::from(crate::stats::percentile(sorted, q * 100.0)) / 1000.0
}
