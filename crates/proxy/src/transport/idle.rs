//! A plaintext HTTP/1.1 keep-alive connection, served from its task.
//!
//! Serving a request takes a few KiB of future state (the HTTP/1.1 server's and the request's).
//! Held while a connection waits for its next request, it would cost that much for every
//! connection whose client asks once a second, thousands of them on a busy site. So that state
//! is an allocation made when a request's bytes arrive and freed when the connection waits
//! again. In between, the task holds
//! [`Kept`] (the socket, the connection's settings, its slots) and the small wait of [`keep`]:
//! for bytes, for the end of the keep-alive time, for a stop, or for the time to park
//! (`transport/park.rs`, after `client_idle_park_seconds`).
//!
//! When the state is given back depends on the client's pace. One that sends its next request
//! as soon as it has the answer (a benchmark, a page's assets, an API client's pool) would pay
//! for the allocation and the wait's timers every time, about 1,000 instructions on a cached
//! hit of 12,000; so a connection waits in `h1::serve` first, and only after `YIELD_AFTER`
//! without a request comes back here. A connection whose last wait was that long (a client
//! asking once a second) is "paced": after its next answer it comes back at once, without
//! waking for a timer first.

use bytes::BytesMut;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::http1::server::YIELD_AFTER;
use crate::transport::accept::Parkable;
use crate::transport::park::Kept;

/// A connection served again in a task of its own: one that could not be parked, or one
/// the parker woke.
fn keep_again(k: Box<Kept>) {
    tokio::spawn(keep(k));
}

/// How a wait between requests ended.
enum Wait {
    /// The first bytes of the next request.
    Read(BytesMut),
    /// Idle for `park_after`: the connection leaves its task.
    Park,
    /// The client closed or went quiet, or the worker stops.
    End,
}

/// Serves the connection's next requests, each time bytes arrive, until it closes or parks.
pub(crate) async fn keep(mut k: Box<Kept>) {
    // The client paces its requests: its last wait was longer than YIELD_AFTER. The last
    // `serve` gave the connection back at once (paced) or after waiting YIELD_AFTER itself;
    // the connection comes here first from a `serve` that waited, or from the parked table.
    let mut paced = false;
    loop {
        let Kept { conn, stop, .. } = &mut *k;
        let now = Instant::now();
        let park_at = conn.h1.limits.park_after.map(|d| now + d);
        let first = match wait(conn, park_at, stop).await {
            Wait::Read(b) => b,
            Wait::Park => return crate::transport::park::park(k, keep_again),
            Wait::End => return,
        };
        // Unpaced, `serve` waited YIELD_AFTER itself before giving the connection back; paced,
        // it gave it back at once, so the wait here was the whole gap.
        paced = !paced || now.elapsed() >= YIELD_AFTER;
        match boxed!(conn.h1.serve(&mut conn.io, first, paced, stop)).await {
            Some(idle) => conn.keepalive_until = idle.keepalive_until,
            None => return,
        }
    }
}

/// Waits for the next request's first bytes until the keep-alive time ends (or `park_at`). A
/// stop gives a short grace for a request the client may already have sent (it is then
/// answered with `Connection: close`), as `h1::serve` gives one. Empty lines before a request
/// (RFC 9112 §2.2) are dropped here: they neither start a request nor move the keep-alive
/// time, the park time or the grace.
async fn wait(
    conn: &mut Parkable,
    park_at: Option<Instant>,
    stop: &mut watch::Receiver<bool>,
) -> Wait {
    let (io, keepalive_until) = (&mut conn.io, conn.keepalive_until);
    let park_at = park_at.filter(|at| *at < keepalive_until);
    let mut closing: Option<Instant> = None;
    loop {
        let stopping = *stop.borrow();
        let deadline = match (stopping, park_at) {
            (true, _) => *closing.get_or_insert_with(|| {
                (Instant::now() + crate::http1::server::STOP_GRACE).min(keepalive_until)
            }),
            (false, Some(at)) => at,
            (false, None) => keepalive_until,
        };
        tokio::select! {
            biased;
            r = crate::net::read::read_some(io) => match r {
                Ok(b) if b.is_empty() => return Wait::End,
                Ok(b) if b.iter().all(|&c| c == b'\r' || c == b'\n') => {}
                Ok(b) => return Wait::Read(b),
                Err(_) => return Wait::End,
            },
            _ = tokio::time::sleep_until(deadline) => {
                return match park_at {
                    Some(_) if !stopping => Wait::Park,
                    _ => Wait::End,
                }
            }
            // A stop starts the grace above; a dropped sender (no one can stop us any more)
            // ends the connection at once.
            r = stop.changed(), if !stopping => {
                if r.is_err() {
                    return Wait::End;
                }
            }
        }
    }
}
