//! Idle HTTP/1.1 connections parked outside any task.
//!
//! A keep-alive connection that waits for its next request in its task holds the wait's future,
//! a timer and its tokio registration (`transport/idle.rs`). After `client_idle_park_seconds`
//! without a request, a plaintext HTTP/1.1 connection therefore leaves its task. [`park`] keeps
//! its socket and the few things its task held (its connection slot, per-address slots, the
//! worker's drain count, its byte counters, its addresses, the end of its keep-alive time) in a
//! table, and puts the socket in an epoll set of the worker's own, one-shot. When the socket
//! becomes readable (a request, or the client closing), the connection gets a new task and its
//! tokio registration back and is served like any connection, with the configuration in force
//! by then ([`crate::transport::accept::H1Conn::resume`]).
//!
//! Parking costs two system calls (tokio's deregistration and the `epoll_ctl` here) and waking
//! two more, paid once per idle period of a second or more: a busy keep-alive connection never
//! parks. The table is swept once a second for connections whose keep-alive time ran out
//! (closed, as they would have been in their task). A stopping worker wakes every parked
//! connection, which then ends as any idle one does (a short grace for a request in flight).
//! TLS connections stay in their tasks (a TLS session is far larger than a parked socket), and
//! so does everything with the shared (multi-threaded) runtime.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::telemetry::metrics::{ConnStats, Counted, PARKED_CONNECTIONS as PARKED};
use crate::transport::accept::{H1Conn, Parkable};
use crate::transport::limits::{ConnPermit, PerIpSlot};

/// What a plaintext HTTP/1.1 connection's task keeps between requests (one allocation):
/// `transport/idle.rs` waits with it, and parking takes it apart.
pub(crate) struct Kept {
    /// Dropped first: the socket closes before the slots below are given back.
    pub(crate) conn: Parkable,
    pub(crate) held: Held,
    pub(crate) stop: watch::Receiver<bool>,
}

/// What a connection's task held besides the connection: given back when it closes (the
/// fields are never read: dropping them is their use).
#[allow(dead_code)]
pub(crate) struct Held {
    pub(crate) permit: ConnPermit,
    pub(crate) per_ip: Option<PerIpSlot>,
    /// The per-address slot of the client a PROXY header named.
    pub(crate) per_ip_behind: Option<PerIpSlot>,
    /// The worker waits for every sender to go before it finishes draining.
    pub(crate) open: mpsc::Sender<()>,
}

/// A parked connection.
struct Parked {
    socket: std::net::TcpStream,
    stats: ConnStats,
    peer: std::net::SocketAddr,
    local: std::net::SocketAddr,
    slot: Arc<crate::transport::in_force::Slot>,
    keepalive_until: Instant,
    held: Held,
}

/// The worker's parked connections: a table, and the epoll set their sockets wait in.
struct Parker {
    /// What serves a woken connection again in a task (`transport/idle.rs`).
    again: fn(Box<Kept>),
    epoll: AsyncFd<OwnedFd>,
    table: Mutex<Table>,
    /// Sweeps left that give memory back ([`give_back`]): set when a connection parks.
    give_back_sweeps: std::sync::atomic::AtomicU8,
}

/// What gives the memory freed by parked connections' tasks back to the system
/// ([`set_give_back`]).
static GIVE_BACK: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Sets what the sweep calls, on the worker's thread, in the two seconds after connections
/// parked: the allocator's collection (the binary's global allocator keeps freed pages for a
/// while before it gives them back, and a worker whose connections all parked allocates
/// nothing more that would make it look at them). Set once, by the binary.
pub fn set_give_back(f: fn()) {
    let _ = GIVE_BACK.set(f);
}

/// Calls the function [`set_give_back`] set, if any.
fn give_back() {
    if let Some(f) = GIVE_BACK.get() {
        f();
    }
}

#[derive(Default)]
struct Table {
    slots: Vec<Option<Parked>>,
    free: Vec<usize>,
}

thread_local! {
    /// This worker's parker, made at its first parked connection.
    static PARKER: std::cell::RefCell<Option<Arc<Parker>>> = const { std::cell::RefCell::new(None) };
}

/// Parks a connection that went idle, or, when it cannot be parked (no epoll set, a socket
/// tokio will not give back, the worker stopping), keeps it in a task.
/// `again` serves a connection in a task: this one, when it cannot be parked, and every one
/// the parker wakes.
pub(crate) fn park(k: Box<Kept>, again: fn(Box<Kept>)) {
    let parker = match *k.stop.borrow() {
        true => None,
        false => parker(&k.stop, again),
    };
    let Some(parker) = parker else {
        return again(k);
    };
    let Kept { conn, held, stop } = *k;
    let Parkable {
        io,
        keepalive_until,
        h1,
    } = conn;
    let (peer, local, slot) = (h1.info.peer, h1.info.local, h1.slot);
    let (stream, stats) = io.into_parts();
    // Out of tokio's epoll set (its registration goes with it), into ours.
    let socket = match stream.into_std() {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(error = %e, "cannot park a connection; closed");
            return;
        }
    };
    let parked = Parked {
        socket,
        stats,
        peer,
        local,
        slot,
        keepalive_until,
        held,
    };
    if let Err(parked) = parker.add(parked) {
        // The epoll set refused it: back to a task of its own.
        wake(*parked, stop, parker.again);
    }
}

/// The worker's parker, started with its task on first use; `None` when no epoll set can be
/// made (the connection then stays in a task).
fn parker(stop: &watch::Receiver<bool>, again: fn(Box<Kept>)) -> Option<Arc<Parker>> {
    PARKER.with(|cell| {
        let mut cell = cell.borrow_mut();
        if let Some(p) = cell.as_ref() {
            return Some(p.clone());
        }
        let p = match Parker::new(again) {
            Ok(p) => Arc::new(p),
            Err(e) => {
                // Out of descriptors, typically: said once, not for every idle connection.
                static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
                if !SAID.swap(true, Relaxed) {
                    tracing::warn!(error = %e, "cannot make an epoll set for idle connections; they stay in their tasks");
                }
                return None;
            }
        };
        tokio::spawn(p.clone().run(stop.clone()));
        *cell = Some(p.clone());
        Some(p)
    })
}

impl Parker {
    #[allow(unsafe_code)]
    fn new(again: fn(Box<Kept>)) -> std::io::Result<Parker> {
        // SAFETY: epoll_create1 with a flag; a non-negative result is a new descriptor we own.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` was just made and is owned by nothing else.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: an `OwnedFd` stays open, and names the same epoll set, until it is dropped,
        // which happens only with the `AsyncFd`.
        let epoll = unsafe {
            AsyncFd::register_with_interest(owned, tokio::io::Interest::READABLE)
                .map_err(std::io::Error::from)?
        };
        Ok(Parker {
            again,
            epoll,
            table: Mutex::new(Table::default()),
            give_back_sweeps: std::sync::atomic::AtomicU8::new(0),
        })
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Puts a connection in the table and its socket in the epoll set (one-shot: it wakes
    /// once, readable or closed).
    #[allow(unsafe_code)]
    fn add(&self, parked: Parked) -> Result<(), Box<Parked>> {
        let fd = parked.socket.as_raw_fd();
        let mut table = self.table();
        let key = match table.free.pop() {
            Some(k) => {
                table.slots[k] = Some(parked);
                k
            }
            None => {
                table.slots.push(Some(parked));
                table.slots.len() - 1
            }
        };
        let mut event = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLONESHOT) as u32,
            u64: key as u64,
        };
        // SAFETY: both descriptors are open (the socket is in the table), `event` is valid.
        let r = unsafe {
            libc::epoll_ctl(
                self.epoll.get_ref().as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                fd,
                &mut event,
            )
        };
        if r != 0 {
            let parked = table.slots[key].take();
            table.free.push(key);
            return match parked {
                Some(p) => Err(Box::new(p)),
                None => Ok(()),
            };
        }
        PARKED.fetch_add(1, Relaxed);
        // This sweep and the next: what was freed just before a sweep may not be old enough
        // for the allocator to give back yet.
        self.give_back_sweeps.store(2, Relaxed);
        Ok(())
    }

    /// Takes a connection out of the table and its socket out of the epoll set.
    #[allow(unsafe_code)]
    fn take(&self, key: usize) -> Option<Parked> {
        let parked = {
            let mut table = self.table();
            let parked = table.slots.get_mut(key)?.take()?;
            table.free.push(key);
            parked
        };
        // SAFETY: both descriptors are open; a null event is allowed for EPOLL_CTL_DEL.
        unsafe {
            libc::epoll_ctl(
                self.epoll.get_ref().as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                parked.socket.as_raw_fd(),
                std::ptr::null_mut(),
            );
        }
        PARKED.fetch_sub(1, Relaxed);
        Some(parked)
    }

    /// Wakes connections whose sockets became readable, closes those whose keep-alive time
    /// ran out, and wakes them all when the worker stops.
    #[allow(unsafe_code)]
    async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut sweep = tokio::time::interval(Duration::from_secs(1));
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        const BATCH: usize = 256;
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; BATCH];
        loop {
            tokio::select! {
                ready = self.epoll.readable() => {
                    let Ok(mut guard) = ready else { break };
                    // SAFETY: `events` has room for BATCH entries; timeout 0 never blocks.
                    let n = unsafe {
                        libc::epoll_wait(
                            self.epoll.get_ref().as_raw_fd(),
                            events.as_mut_ptr(),
                            BATCH as i32,
                            0,
                        )
                    };
                    if n < 0 {
                        let e = std::io::Error::last_os_error();
                        if e.kind() != std::io::ErrorKind::Interrupted {
                            tracing::warn!(error = %e, "epoll_wait on parked connections failed");
                            guard.clear_ready();
                        }
                        continue;
                    }
                    let n = n as usize;
                    if n < BATCH {
                        guard.clear_ready();
                    }
                    for e in &events[..n] {
                        if let Some(p) = self.take(e.u64 as usize) {
                            wake(p, stop.clone(), self.again);
                        }
                    }
                }
                _ = sweep.tick() => {
                    let now = Instant::now();
                    let expired: Vec<usize> = self
                        .table()
                        .slots
                        .iter()
                        .enumerate()
                        .filter(|(_, s)| s.as_ref().is_some_and(|p| p.keepalive_until <= now))
                        .map(|(k, _)| k)
                        .collect();
                    // Closed as in their tasks: the socket, then what the task held.
                    for k in expired {
                        drop(self.take(k));
                    }
                    self.table().trim();
                    if self.give_back_sweeps.load(Relaxed) > 0 {
                        self.give_back_sweeps.fetch_sub(1, Relaxed);
                        give_back();
                    }
                }
                r = stop.changed(), if !*stop.borrow() => {
                    // Stopping (or no one can stop this worker any more): every parked
                    // connection gets its task back and ends as an idle one does. Nothing parks
                    // on a stopping worker (`park` serves it in a task instead).
                    if r.is_err() || *stop.borrow() {
                        let all = self.table().slots.len();
                        for k in 0..all {
                            if let Some(p) = self.take(k) {
                                wake(p, stop.clone(), self.again);
                            }
                        }
                        PARKER.with(|cell| cell.borrow_mut().take());
                        break;
                    }
                }
            }
        }
    }
}

impl Table {
    /// Gives back the room a burst of parked connections left: empty slots at the end go, and
    /// the table shrinks when a quarter of it or less is in use (keys of live entries never
    /// move: they are in the epoll set).
    fn trim(&mut self) {
        while matches!(self.slots.last(), Some(None)) {
            self.slots.pop();
        }
        let len = self.slots.len();
        self.free.retain(|&k| k < len);
        if self.slots.capacity() > 64 && len <= self.slots.capacity() / 4 {
            self.slots.shrink_to(len * 2);
            self.free.shrink_to(self.free.len() * 2);
        }
    }
}

/// A parked connection becomes a task again.
fn wake(p: Parked, stop: watch::Receiver<bool>, again: fn(Box<Kept>)) {
    let Parked {
        socket,
        stats,
        peer,
        local,
        slot,
        keepalive_until,
        held,
    } = p;
    match tokio::net::TcpStream::from_std(socket) {
        Ok(s) => {
            // Served again, with the configuration in force now, until it closes or parks
            // again.
            let conn = Parkable {
                io: Counted::new(s, stats),
                keepalive_until,
                h1: H1Conn::resume(slot, peer, local),
            };
            again(Box::new(Kept { conn, held, stop }));
        }
        Err(e) => tracing::debug!(error = %e, "cannot serve a parked connection again; closed"),
    }
}
