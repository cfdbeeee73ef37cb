//! The exporter: a thread's finished spans (already OTLP bytes) gather into a batch of its own
//! (a [`Slot`]); a full batch goes into a bounded queue at once, and every
//! `tracing_export_interval_ms` the exporter thread takes what has gathered in every slot. The
//! exporter thread sends them to the collector over OTLP (gRPC or HTTP/protobuf): a batch is
//! its spans' bytes after a head written once per export.
//!
//! Nothing on the request path waits for the collector, and a request's spans cross to the
//! exporter thread as bytes in a batch, not as allocations of their own: ending a sampled
//! request takes its thread's slot's lock (uncontended but once an interval) and copies its
//! spans in. When the queue is full (a slow or stopped collector) a batch is dropped and its
//! spans counted; an export that fails or times out is counted as failed and not retried, so
//! the queue never grows past its size.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rampart_config::TracingConfig;
use tokio::sync::{mpsc, watch, Notify};

use crate::clock::WallClock;
use crate::otlp::{Resource, Value};
use crate::transport::{Transport, GRPC_PREFIX};

/// The exporter's counters (spans), for the metrics and the dashboard.
#[derive(Debug, Default)]
pub struct Stats {
    /// Spans the collector accepted.
    pub exported: AtomicU64,
    /// Spans dropped because the queue was full.
    pub dropped: AtomicU64,
    /// Spans in exports that failed (the collector refused them, was unreachable, or did not
    /// answer in time).
    pub failed: AtomicU64,
    /// Spans waiting in the queue now (the batch being sent among them).
    pub queued: AtomicU64,
    /// Exports sent (batches), whatever their result.
    pub batches: AtomicU64,
}

/// The exporter thread and the queue to it.
#[derive(Debug)]
pub struct Exporter {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    /// Told when the thread has sent what it had and ended.
    done: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
}

/// What the threads that end requests share with the exporter thread.
#[derive(Debug)]
pub(crate) struct Shared {
    tx: mpsc::UnboundedSender<Chunk>,
    stats: Arc<Stats>,
    queue_size: u64,
    batch_size: u32,
    wake: Notify,
    /// Every thread's slot, for the exporter to take what has gathered each interval.
    slots: Mutex<Vec<Weak<Slot>>>,
    /// Batch buffers sent and kept for the next batches: a fresh buffer of a few hundred KiB
    /// per batch cost page faults on both threads (a third of the exporter's CPU, `perf`).
    pool: Mutex<Vec<Vec<u8>>>,
    /// The most buffers kept: as many as can be in the queue, and a few.
    pool_size: usize,
    /// Span times as Unix time (refreshed by the exporter thread each interval).
    pub(crate) wall: WallClock,
    /// The exporter thread has ended: spans still written (a request that outlived a reload
    /// that stopped or replaced tracing) are dropped and counted, and nothing is kept.
    closed: std::sync::atomic::AtomicBool,
}

/// Encoded spans (`ScopeSpans.spans` entries) and how many.
#[derive(Debug, Default)]
struct Chunk {
    bytes: Vec<u8>,
    spans: u32,
    /// Counted in `Stats::queued` (handed to the queue, not taken by a sweep) until it is sent.
    queued: bool,
}

/// One thread's spans gathering into a batch.
#[derive(Debug)]
pub(crate) struct Slot {
    chunk: Mutex<Chunk>,
    shared: Arc<Shared>,
}

thread_local! {
    /// This thread's slot (of the exporter it last recorded for).
    static SLOT: RefCell<Option<Arc<Slot>>> = const { RefCell::new(None) };
}

impl Exporter {
    /// Starts the exporter thread for `config`, counting in `stats` (new counters when
    /// `None`).
    pub fn start(config: &TracingConfig, stats: Option<Arc<Stats>>) -> std::io::Result<Exporter> {
        let transport = Transport::new(config)?;
        let resource = resource(config);
        let (tx, rx) = mpsc::unbounded_channel();
        let stats = stats.unwrap_or_default();
        let shared = Arc::new(Shared {
            tx,
            stats,
            queue_size: config.queue_size as u64,
            batch_size: config.batch_size.clamp(1, u32::MAX as usize) as u32,
            wake: Notify::new(),
            slots: Mutex::new(Vec::new()),
            pool: Mutex::new(Vec::new()),
            pool_size: 4 + config.queue_size.div_ceil(config.batch_size.max(1)),
            wall: WallClock::new(),
            closed: std::sync::atomic::AtomicBool::new(false),
        });
        let (stop, stopped) = watch::channel(false);
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let run = Run {
            rx,
            shared: shared.clone(),
            transport,
            resource,
            stopped,
            interval: config.export_interval,
            timeout: config.timeout,
            warned: None,
        };
        std::thread::Builder::new()
            .name("rampart-otlp".into())
            .spawn(move || {
                match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt.block_on(run.run()),
                    Err(e) => tracing::error!(error = %e, "the trace exporter cannot start"),
                }
                let _ = done_tx.send(());
            })?;
        Ok(Exporter {
            shared,
            stop,
            done: Mutex::new(Some(done_rx)),
        })
    }

    pub fn stats(&self) -> &Arc<Stats> {
        &self.shared.stats
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// This thread's slot, made (and made known to the exporter thread) on its first use.
    pub(crate) fn slot(&self) -> Arc<Slot> {
        let made = || {
            let slot = Arc::new(Slot {
                chunk: Mutex::new(Chunk::default()),
                shared: self.shared.clone(),
            });
            let mut slots = self
                .shared
                .slots
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            slots.retain(|s| s.strong_count() > 0);
            slots.push(Arc::downgrade(&slot));
            slot
        };
        SLOT.try_with(|cell| {
            let mut cell = cell.borrow_mut();
            match &*cell {
                Some(s) if Arc::ptr_eq(&s.shared, &self.shared) => s.clone(),
                // The first, or a new exporter's (a reload): the old slot's spans go to its
                // exporter when it is dropped.
                _ => {
                    let slot = made();
                    *cell = Some(slot.clone());
                    slot
                }
            }
        })
        // A thread's end: a slot for this request alone.
        .unwrap_or_else(|_| made())
    }

    /// Sends what is queued and stops the thread, waiting for it at most `within`.
    pub fn shutdown(&self, within: Duration) {
        let _ = self.stop.send(true);
        let done = self.done.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(done) = done {
            let _ = done.recv_timeout(within);
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        // The thread sends what it has and ends.
        let _ = self.stop.send(true);
    }
}

impl Shared {
    /// An empty buffer for a batch: a kept one, or a new one with room for `room` bytes.
    fn buffer(&self, room: usize) -> Vec<u8> {
        let kept = self
            .pool
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        kept.unwrap_or_else(|| Vec::with_capacity(room))
    }

    /// Keeps a sent batch's buffer for another batch.
    fn keep(&self, mut buf: Vec<u8>) {
        if self.closed.load(Ordering::Relaxed) {
            return;
        }
        buf.clear();
        let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
        if pool.len() < self.pool_size {
            pool.push(buf);
        }
    }

    /// Queues a batch, or drops and counts it when the queue is full (a batch larger than the
    /// queue goes when the queue is empty).
    fn hand_off(&self, mut chunk: Chunk) {
        let n = u64::from(chunk.spans);
        chunk.queued = true;
        let before = self.stats.queued.fetch_add(n, Ordering::Relaxed);
        if before > 0 && before + n > self.queue_size {
            self.stats.queued.fetch_sub(n, Ordering::Relaxed);
            self.stats.dropped.fetch_add(n, Ordering::Relaxed);
            return;
        }
        if self.tx.send(chunk).is_err() {
            // The exporter thread has ended.
            self.stats.queued.fetch_sub(n, Ordering::Relaxed);
            self.stats.dropped.fetch_add(n, Ordering::Relaxed);
            return;
        }
        self.wake.notify_one();
    }
}

impl Slot {
    /// Adds a request's spans: `write` appends them and says how many. A full batch goes to
    /// the queue.
    pub(crate) fn write(&self, write: impl FnOnce(&mut Vec<u8>) -> u32) {
        let mut chunk = self.chunk.lock().unwrap_or_else(PoisonError::into_inner);
        chunk.spans += write(&mut chunk.bytes);
        if self.shared.closed.load(Ordering::Relaxed) {
            self.shared
                .stats
                .dropped
                .fetch_add(u64::from(chunk.spans), Ordering::Relaxed);
            *chunk = Chunk::default();
            return;
        }
        if chunk.spans < self.shared.batch_size {
            return;
        }
        let room = chunk.bytes.len();
        let full = std::mem::replace(
            &mut *chunk,
            Chunk {
                bytes: self.shared.buffer(room),
                ..Chunk::default()
            },
        );
        drop(chunk);
        self.shared.hand_off(full);
    }

    /// What has gathered and the buffer, for the exporter thread's last sweep (the slot keeps
    /// nothing of an exporter that has ended).
    fn take_all(&self) -> Option<Chunk> {
        let mut chunk = self.chunk.lock().unwrap_or_else(PoisonError::into_inner);
        let chunk = std::mem::take(&mut *chunk);
        (chunk.spans > 0).then_some(chunk)
    }

    /// What has gathered, for the exporter thread.
    fn take(&self) -> Option<Chunk> {
        let mut chunk = self.chunk.lock().unwrap_or_else(PoisonError::into_inner);
        if chunk.spans == 0 {
            return None;
        }
        let room = chunk.bytes.len();
        Some(std::mem::replace(
            &mut *chunk,
            Chunk {
                bytes: self.shared.buffer(room),
                ..Chunk::default()
            },
        ))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        // A thread that ended, or a slot of an exporter replaced: its spans go on.
        let chunk = std::mem::take(self.chunk.get_mut().unwrap_or_else(PoisonError::into_inner));
        if chunk.spans > 0 {
            self.shared.hand_off(chunk);
        }
    }
}

/// The resource every span is exported with: `service.name` and the configured attributes,
/// rampart's version and this process.
fn resource(config: &TracingConfig) -> Resource {
    let pid = i64::from(std::process::id());
    let host = host_name();
    let mut attrs: Vec<(&str, Value<'_>)> = vec![
        ("service.name", config.service_name.as_str().into()),
        ("service.version", env!("CARGO_PKG_VERSION").into()),
        ("telemetry.sdk.name", "rampart".into()),
        ("telemetry.sdk.language", "rust".into()),
        ("process.pid", pid.into()),
    ];
    if let Some(host) = &host {
        attrs.push(("host.name", host.as_str().into()));
    }
    for (k, v) in &config.resource {
        let v = Value::from(v.as_str());
        match attrs.iter_mut().find(|(have, _)| have == k) {
            Some(a) => a.1 = v,
            None => attrs.push((k.as_str(), v)),
        }
    }
    Resource::new(&attrs, "rampart", env!("CARGO_PKG_VERSION"))
}

fn host_name() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = name.trim();
    (!name.is_empty()).then(|| name.to_owned())
}

/// The exporter thread's state.
struct Run {
    rx: mpsc::UnboundedReceiver<Chunk>,
    shared: Arc<Shared>,
    transport: Transport,
    resource: Resource,
    stopped: watch::Receiver<bool>,
    interval: Duration,
    timeout: Duration,
    /// When a failed export was last reported (at most one warning a minute).
    warned: Option<Instant>,
}

impl Run {
    async fn run(mut self) {
        let mut pending: Vec<Chunk> = Vec::new();
        let mut last = false;
        let mut sweep_at = tokio::time::Instant::now() + self.interval;
        loop {
            if !last {
                tokio::select! {
                    _ = tokio::time::sleep_until(sweep_at) => {}
                    _ = self.shared.wake.notified() => {}
                    _ = self.stopped.changed() => last = true,
                }
            }
            if last {
                // What is sent or written from now on is dropped and counted by its sender.
                self.rx.close();
                self.shared.closed.store(true, Ordering::Relaxed);
            }
            // Every interval (and at the end): what every thread has gathered.
            let now = tokio::time::Instant::now();
            if last || now >= sweep_at {
                sweep_at = now + self.interval;
                self.shared.wall.refresh();
                let slots = self
                    .shared
                    .slots
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone();
                let slots = slots.iter().filter_map(Weak::upgrade);
                if last {
                    pending.extend(slots.filter_map(|s| s.take_all()));
                } else {
                    pending.extend(slots.filter_map(|s| s.take()));
                }
            }
            while let Ok(chunk) = self.rx.try_recv() {
                pending.push(chunk);
            }
            if last {
                // A new exporter (a reload) shares the counters: what this one still has to
                // send must not hold its queue full while this one waits on its collector.
                for c in &mut pending {
                    if std::mem::take(&mut c.queued) {
                        self.shared
                            .stats
                            .queued
                            .fetch_sub(u64::from(c.spans), Ordering::Relaxed);
                    }
                }
            }
            self.export(&mut pending).await;
            if last {
                self.shared
                    .pool
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clear();
                return;
            }
        }
    }

    /// Sends `pending` (gathered chunks put together up to `tracing_batch_size` spans; a
    /// chunk is never split) and empties it. Queued spans stay counted in `queued` until their
    /// export is over, so the queue's bound counts the batch being sent.
    async fn export(&mut self, pending: &mut Vec<Chunk>) {
        let batch_size = self.shared.batch_size;
        let mut chunks = pending.drain(..).peekable();
        while chunks.peek().is_some() {
            let mut group = Vec::new();
            let (mut spans, mut len, mut queued) = (0u32, 0usize, 0u64);
            while let Some(c) =
                chunks.next_if(|c| group.is_empty() || spans + c.spans <= batch_size)
            {
                spans += c.spans;
                len += c.bytes.len();
                if c.queued {
                    queued += u64::from(c.spans);
                }
                group.push(c);
            }
            // The head, then the chunks as they are (each goes back to the pool when the
            // client is done with it).
            let mut head = Vec::with_capacity(GRPC_PREFIX + 32 + self.resource.encoded_len());
            head.resize(GRPC_PREFIX, 0);
            self.resource.request_head(len, &mut head);
            let mut frames = Vec::with_capacity(group.len() + 1);
            frames.push(Bytes::from(head));
            for c in group {
                frames.push(Bytes::from_owner(Kept {
                    buf: c.bytes,
                    shared: self.shared.clone(),
                }));
            }
            let n = u64::from(spans);
            self.shared.stats.batches.fetch_add(1, Ordering::Relaxed);
            let sent = tokio::time::timeout(self.timeout, self.transport.send(frames)).await;
            match sent {
                Ok(Ok(())) => {
                    self.shared.stats.exported.fetch_add(n, Ordering::Relaxed);
                }
                Ok(Err(e)) => self.failed(n, &e),
                Err(_) => self.failed(n, &format!("no answer within {:?}", self.timeout)),
            }
            self.shared
                .stats
                .queued
                .fetch_sub(queued, Ordering::Relaxed);
        }
    }

    fn failed(&mut self, n: u64, why: &str) {
        self.shared.stats.failed.fetch_add(n, Ordering::Relaxed);
        let now = Instant::now();
        if self
            .warned
            .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(60))
        {
            self.warned = Some(now);
            tracing::warn!(
                collector = %self.transport.uri,
                error = why,
                spans = n,
                "spans could not be exported (counted in rampart_trace_spans_failed_total; at most one warning a minute)"
            );
        }
    }
}

/// A batch's buffer while the client sends it; back to the pool when it is dropped.
struct Kept {
    buf: Vec<u8>,
    shared: Arc<Shared>,
}

impl AsRef<[u8]> for Kept {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        self.shared.keep(std::mem::take(&mut self.buf));
    }
}
