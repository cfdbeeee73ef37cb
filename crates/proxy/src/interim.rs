//! Interim (1xx) responses on their way from an origin to the client: the origin client puts
//! each one here as it reads it, the client's HTTP/1.1 connection writes them out ahead of the
//! final response. One per connection, made when the connection starts speaking HTTP/1.1.
//!
//! `100 Continue` never passes: rampart answers a client's `Expect: 100-continue` itself
//! when the pipeline starts reading the body. Interim responses are never stored.

use rampart_head::Fields;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};

use http::StatusCode;

/// Interim responses held at once (an origin sending more before the connection writes them
/// loses the rest: they are hints).
const MAX_QUEUED: usize = 8;

#[derive(Debug, Default)]
struct State {
    queue: Vec<(StatusCode, Fields)>,
    waker: Option<Waker>,
}

/// The interim responses of a connection's current request.
#[derive(Debug, Default)]
pub struct Interim {
    state: Mutex<State>,
    /// Something is queued (read without the lock after each request: nearly always false).
    queued: AtomicBool,
}

impl Interim {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An interim response for the client (dropped past [`MAX_QUEUED`]).
    pub fn push(&self, status: StatusCode, headers: Fields) {
        let mut s = self.lock();
        if s.queue.len() < MAX_QUEUED {
            s.queue.push((status, headers));
            self.queued.store(true, Ordering::Release);
        }
        if let Some(w) = s.waker.take() {
            w.wake();
        }
    }

    /// The interim responses waiting, once there are some.
    pub fn poll_take(&self, cx: &mut Context<'_>) -> Poll<Vec<(StatusCode, Fields)>> {
        let mut s = self.lock();
        if s.queue.is_empty() {
            s.waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        self.queued.store(false, Ordering::Release);
        Poll::Ready(std::mem::take(&mut s.queue))
    }

    /// The interim responses waiting now (the final response is ready: they go first).
    pub fn take(&self) -> Vec<(StatusCode, Fields)> {
        if !self.queued.load(Ordering::Acquire) {
            return Vec::new();
        }
        let mut s = self.lock();
        s.waker = None;
        self.queued.store(false, Ordering::Release);
        std::mem::take(&mut s.queue)
    }

    /// Drops what is left once the final response is on its way.
    pub fn clear(&self) {
        let mut s = self.lock();
        s.queue.clear();
        s.waker = None;
        self.queued.store(false, Ordering::Release);
    }
}
