//! HTTP/2 streams polled in their connection's task.
//!
//! hyper's HTTP/2 server hands each request stream to an executor. With tokio's, every stream
//! is a task of its own: allocated, moved into the task's cell, scheduled through the runtime's
//! queue, woken and torn down — about a tenth of the instructions of a cached hit over HTTP/2
//! (`rampart-bench instructions`, h2-hit). [`StreamExec`] instead gives each stream to the
//! connection that received it: the connection's task polls the connection and, in the same
//! task, the streams it started ([`Streams::poll_conn`]), each woken on its own. A connection's
//! streams then share its worker thread, as every connection does with the per-core runtime.
//!
//! The hand-over goes through a thread-local set only while [`Streams::poll_conn`] polls the
//! connection, which is where hyper starts streams; a stream started anywhere else (no
//! connection being polled on this thread) becomes a task of its own on tokio.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::stream::{FuturesUnordered, StreamExt as _};

/// A stream's future, as hyper hands it over.
type StreamFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

thread_local! {
    /// The streams the connection being polled on this thread has just started.
    static STARTED: RefCell<Option<Vec<StreamFuture>>> = const { RefCell::new(None) };
}

/// hyper's executor for HTTP/2 server streams: the stream goes to the connection being polled
/// on this thread ([`Streams::poll_conn`]), or becomes a task when there is none.
#[derive(Debug, Clone, Copy, Default)]
pub struct StreamExec;

impl<F> hyper::rt::Executor<F> for StreamExec
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, fut: F) {
        let unclaimed = STARTED.with(|s| match s.borrow_mut().as_mut() {
            Some(started) => {
                started.push(Box::pin(fut));
                None
            }
            None => Some(fut),
        });
        if let Some(fut) = unclaimed {
            tokio::spawn(fut);
        }
    }
}

/// The streams one connection started and has not finished.
#[derive(Default)]
pub struct Streams {
    running: FuturesUnordered<StreamFuture>,
}

impl Streams {
    /// Polls `conn`, taking the streams it starts, then every stream that was woken.
    pub fn poll_conn<C: Future + Unpin>(
        &mut self,
        conn: &mut C,
        cx: &mut Context<'_>,
    ) -> Poll<C::Output> {
        /// Takes the hand-over back even when polling the connection panics, so that no
        /// stream started later on this thread is left in a set nobody reads.
        struct Taken<'a>(&'a mut FuturesUnordered<StreamFuture>);
        impl Drop for Taken<'_> {
            fn drop(&mut self) {
                let started = STARTED.with(|s| s.borrow_mut().take()).unwrap_or_default();
                self.0.extend(started);
            }
        }
        STARTED.with(|s| *s.borrow_mut() = Some(Vec::new()));
        let taken = Taken(&mut self.running);
        let polled = Pin::new(&mut *conn).poll(cx);
        drop(taken);
        self.poll_streams(cx);
        polled
    }

    /// Runs every stream that can make progress, until all wait (or none is left).
    pub fn poll_streams(&mut self, cx: &mut Context<'_>) {
        while let Poll::Ready(Some(())) = self.running.poll_next_unpin(cx) {}
    }

    /// Streams left when their connection's task ends (a connection cut off, a stopping
    /// worker) go on as a task of their own, as they would have as tasks: they end as soon as
    /// they find their connection gone.
    pub fn detach(self) {
        if self.running.is_empty() {
            return;
        }
        let mut rest = self.running;
        tokio::spawn(async move { while rest.next().await.is_some() {} });
    }
}
