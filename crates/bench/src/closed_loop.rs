//! Closed-loop HTTP/1.1 load over keep-alive connections from a chosen source address, with
//! the answers' `Cache-Status` checked (the `cluster` command's two parts use it).

use std::net::SocketAddr;
use std::time::Instant;

use tokio::net::TcpSocket;

pub(crate) struct Loaded {
    /// Answers read (whatever their status).
    pub(crate) requests: usize,
    /// Answers with a status of 400 or more, and exchanges that broke.
    pub(crate) errors: usize,
    /// Exchanges that broke (no answer).
    pub(crate) broken: usize,
    pub(crate) expected: usize,
    pub(crate) seconds: f64,
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
}

/// Sends `requests` GETs (`path(i)`, `Host: bench.test`) over `connections` keep-alive
/// connections from `from`; counts the answers whose `Cache-Status` is `expect` (a 429 when
/// `expect` is empty).
pub(crate) async fn load(
    addr: SocketAddr,
    from: [u8; 4],
    connections: usize,
    requests: usize,
    path: impl Fn(usize) -> String + Clone + 'static,
    expect: &'static str,
) -> anyhow::Result<Loaded> {
    load_host(
        addr,
        "bench.test",
        &[from],
        connections,
        requests,
        path,
        expect,
    )
    .await
}

/// [`load`] with `Host: host`, connection `c` from `from[c % from.len()]` (several clients).
pub(crate) async fn load_host(
    addr: SocketAddr,
    host: &'static str,
    from: &[[u8; 4]],
    connections: usize,
    requests: usize,
    path: impl Fn(usize) -> String + Clone + 'static,
    expect: &'static str,
) -> anyhow::Result<Loaded> {
    let next = std::rc::Rc::new(std::cell::Cell::new(0usize));
    let started = Instant::now();
    let local = tokio::task::LocalSet::new();
    let mut handles = Vec::new();
    for c in 0..connections.max(1) {
        let (next, path) = (next.clone(), path.clone());
        let from = from
            .get(c % from.len().max(1))
            .copied()
            .unwrap_or([127, 0, 0, 1]);
        handles.push(local.spawn_local(async move {
            let mut latencies = Vec::new();
            let (mut errors, mut expected, mut broken) = (0usize, 0usize, 0usize);
            let mut stream = None;
            let mut buf = Vec::with_capacity(4096);
            loop {
                let i = next.get();
                if i >= requests {
                    break;
                }
                next.set(i + 1);
                if stream.is_none() {
                    let socket = TcpSocket::new_v4()?;
                    socket.bind(SocketAddr::from((from, 0)))?;
                    stream = Some(socket.connect(addr).await?);
                }
                let Some(s) = stream.as_mut() else { continue };
                let req = format!("GET {} HTTP/1.1\r\nHost: {host}\r\n\r\n", path(i));
                let t = Instant::now();
                match crate::vus::exchange(s, req.as_bytes(), &mut buf).await {
                    Ok(x) => {
                        latencies.push(t.elapsed().as_micros() as u32);
                        let head = String::from_utf8_lossy(&buf[..x.head_end]).to_ascii_lowercase();
                        let status = head
                            .lines()
                            .find_map(|l| l.strip_prefix("cache-status: "))
                            .unwrap_or("");
                        if (expect.is_empty() && x.status == 429)
                            || (!expect.is_empty() && status == expect)
                        {
                            expected += 1;
                        }
                        if x.status >= 400 && !expect.is_empty() {
                            errors += 1;
                        }
                        if x.close {
                            stream = None;
                        }
                    }
                    Err(_) => {
                        errors += 1;
                        broken += 1;
                        stream = None;
                    }
                }
            }
            anyhow::Ok((latencies, errors, expected, broken))
        }));
    }
    let joined = local
        .run_until(async {
            let mut all = Vec::new();
            for h in handles {
                all.push(h.await);
            }
            all
        })
        .await;
    let seconds = started.elapsed().as_secs_f64();
    let (mut latencies, mut errors, mut expected, mut broken) = (Vec::new(), 0, 0, 0);
    for j in joined {
        let (l, e, x, b) = j??;
        latencies.extend(l);
        errors += e;
        expected += x;
        broken += b;
    }
    latencies.sort_unstable();
    let pct = |p: f64| -> f64 {
        if latencies.is_empty() {
            return 0.0;
        }
        let i = ((p / 100.0) * latencies.len() as f64).ceil() as usize;
        f64::from(latencies[i.clamp(1, latencies.len()) - 1])
    };
    Ok(Loaded {
        requests: latencies.len(),
        errors,
        broken,
        expected,
        seconds,
        p50_us: pct(50.0),
        p99_us: pct(99.0),
    })
}
