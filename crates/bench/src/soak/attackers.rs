//! Clients that misbehave on purpose; their requests are not counted as traffic, what rampart
//! did with them is (counters and notes in the tally):
//!
//! - **Slow readers** ask for a 1–5 MiB object and then read 1 KiB a second (even-numbered) or
//!   nothing at all (odd-numbered), for at most `hold`; the bytes they do read are checked
//!   against the object (a wrong byte is a wrong body). rampart may close them (a send
//!   timeout) or not (then they hold what they pinned until the client's limit).
//! - **Slowloris** clients send a request head one byte every 2 s and never finish it; rampart
//!   must close each within `client_header_timeout_seconds` (a connection held 10 s longer is
//!   noted as held past the header timeout).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use super::body::{obj_size, Kind};
use super::rampart::HOST;
use super::tally::Outcome;
use super::traffic::{Ctx, Rng};

/// One slow reader, again and again until the end of the run.
pub async fn slow_reader(ctx: Arc<Ctx>, n: u64, hold: Duration) {
    let reads = n.is_multiple_of(2);
    let mut rng = Rng(ctx.seed ^ 0x51_0000 ^ n);
    while ctx.running() {
        let id = ctx.large_id(&mut rng);
        let size = obj_size(ctx.seed, id);
        let Ok(mut tcp) = TcpStream::connect(ctx.http).await else {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        };
        ctx.tally.count("slow readers: connections", 1);
        let req = format!("GET /obj/{id}?size={size} HTTP/1.1\r\nHost: {HOST}\r\n\r\n");
        if tcp.write_all(req.as_bytes()).await.is_err() {
            continue;
        }
        let opened = Instant::now();
        let until = (opened + hold).min(ctx.end);
        let want = ctx.pool.body(Kind::Obj, id, size);
        let mut got = Vec::new();
        let mut body_at: Option<usize> = None;
        let mut chunked = false;
        let mut closed = false;
        let mut buf = vec![0u8; 1024];
        while Instant::now() < until {
            if reads {
                match tokio::time::timeout(Duration::from_secs(1), tcp.read(&mut buf)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => {
                        closed = true;
                        break;
                    }
                    Ok(Ok(k)) => got.extend_from_slice(&buf[..k]),
                    Err(_) => {}
                }
                if body_at.is_none() {
                    if let Some(head) = crate::http1::head(&got) {
                        body_at = Some(head.end);
                        chunked = head.framing == crate::http1::Framing::Chunked;
                    }
                }
                if let (Some(at), false) = (body_at, chunked) {
                    let body = &got[at..];
                    let n = body.len().min(want.len());
                    if body[..n] != want[..n] {
                        ctx.tally.record(
                            "slow reader",
                            opened,
                            true,
                            Outcome::Wrong(format!(
                                "slow reader of /obj/{id}: the first {} bytes differ from the object",
                                body.len()
                            )),
                        );
                        break;
                    }
                    if body.len() >= want.len() {
                        ctx.tally.count("slow readers: read the whole object", 1);
                        break;
                    }
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            } else {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        if closed {
            ctx.tally.count("slow readers: closed by rampart", 1);
        } else if Instant::now() >= until {
            ctx.tally
                .count("slow readers: held to the client's limit", 1);
        }
    }
}

/// One slowloris client, again and again until the end of the run.
pub async fn slowloris(ctx: Arc<Ctx>, n: u64) {
    let limit = ctx.header_timeout + Duration::from_secs(10);
    while ctx.running() {
        let Ok(mut tcp) = TcpStream::connect(ctx.http).await else {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        };
        ctx.tally.count("slowloris: connections", 1);
        let opened = Instant::now();
        let head = format!("GET /obj/{n}?size=100 HTTP/1.1\r\nHost: {HOST}\r\nX-Slow: ");
        let mut closed = tcp.write_all(head.as_bytes()).await.is_err();
        let mut buf = [0u8; 512];
        while !closed && ctx.running() {
            tokio::select! {
                // An answer (408), a close or a reset: either way rampart let go of it.
                _ = tcp.read(&mut buf) => closed = true,
                () = tokio::time::sleep(Duration::from_secs(2)) => {
                    closed = tcp.write_all(b"a").await.is_err();
                }
            }
        }
        let held = opened.elapsed();
        if closed {
            ctx.tally.count("slowloris: closed by rampart", 1);
        }
        if held > limit {
            ctx.tally
                .count("slowloris: held past the header timeout", 1);
            ctx.tally.note(format!(
                "a slowloris connection was held {:.0} s (client_header_timeout_seconds {} s)",
                held.as_secs_f64(),
                ctx.header_timeout.as_secs()
            ));
        }
    }
}
