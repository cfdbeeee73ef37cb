//! Connection limits: all connections (`max_connections`) and per client address
//! (`max_connections_per_ip`). Both can change on a reload.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// `max_connections`: one permit per open client connection. At the limit, new connections
/// wait in the listen backlog.
#[derive(Debug)]
pub struct ConnLimit {
    sem: Arc<Semaphore>,
    max: AtomicUsize,
    /// Permits still to retire after a reload lowered the limit below the open connections:
    /// each is forgotten as a connection closes.
    owed: AtomicUsize,
    /// Set while the limit is reached, so the log line is written once per episode.
    at_limit: AtomicBool,
}

/// One counted connection.
#[derive(Debug)]
pub struct ConnPermit {
    permit: Option<OwnedSemaphorePermit>,
    limit: Arc<ConnLimit>,
}

impl Drop for ConnPermit {
    fn drop(&mut self) {
        let owed = &self.limit.owed;
        let retire = owed
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok();
        if let (true, Some(p)) = (retire, self.permit.take()) {
            p.forget();
        }
    }
}

impl ConnLimit {
    pub fn new(max: usize) -> Arc<ConnLimit> {
        Arc::new(ConnLimit {
            sem: Arc::new(Semaphore::new(max)),
            max: AtomicUsize::new(max),
            owed: AtomicUsize::new(0),
            at_limit: AtomicBool::new(false),
        })
    }

    pub fn max(&self) -> usize {
        self.max.load(Ordering::Relaxed)
    }

    /// A slot for one more connection; at the limit, waits (and says so once per episode).
    pub async fn acquire(self: &Arc<Self>) -> ConnPermit {
        let permit = match self.sem.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                if !self.at_limit.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        max_connections = self.max(),
                        "connection limit reached: new connections wait in the listen backlog until others close"
                    );
                }
                match self.sem.clone().acquire_owned().await {
                    Ok(p) => p,
                    // The semaphore is never closed.
                    Err(_) => std::future::pending().await,
                }
            }
        };
        if self.at_limit.swap(false, Ordering::Relaxed) {
            tracing::warn!("below the connection limit again");
        }
        ConnPermit {
            permit: Some(permit),
            limit: self.clone(),
        }
    }

    /// A slot for one more connection if one is free now (HTTP/3: a QUIC connection attempt
    /// has no backlog to wait in; it is refused at the limit).
    pub fn try_acquire(self: &Arc<Self>) -> Option<ConnPermit> {
        let permit = self.sem.clone().try_acquire_owned().ok()?;
        Some(ConnPermit {
            permit: Some(permit),
            limit: self.clone(),
        })
    }

    /// Applies a new `max_connections`. A lower limit retires free permits now and the rest
    /// as connections close; open connections are never cut.
    pub fn resize(&self, max: usize) {
        let old = self.max.swap(max, Ordering::AcqRel);
        if max > old {
            let mut more = max - old;
            // Cancel retirements still owed first.
            while more > 0 {
                let owed = self.owed.load(Ordering::Acquire);
                if owed == 0 {
                    break;
                }
                let take = owed.min(more);
                if self
                    .owed
                    .compare_exchange(owed, owed - take, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    more -= take;
                }
            }
            self.sem.add_permits(more);
        } else if max < old {
            let fewer = old - max;
            let gone = self.sem.forget_permits(fewer);
            self.owed.fetch_add(fewer - gone, Ordering::AcqRel);
        }
    }
}

/// Open connections per client address, when `max_connections_per_ip` is set.
#[derive(Debug)]
pub struct PerIp {
    max: AtomicUsize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One counted connection; uncounts itself when dropped.
#[derive(Debug)]
pub struct PerIpSlot {
    table: Arc<PerIp>,
    ip: IpAddr,
}

impl PerIp {
    pub fn new(max: usize) -> Arc<PerIp> {
        Arc::new(PerIp {
            max: AtomicUsize::new(max),
            open: Mutex::new(HashMap::new()),
        })
    }

    /// Applies a new limit (a reload); connections already open stay.
    pub fn set_max(&self, max: usize) {
        self.max.store(max, Ordering::Relaxed);
    }

    /// Counts a new connection from `ip`, or `None` when that address is at its limit.
    pub fn acquire(self: &Arc<Self>, ip: IpAddr) -> Option<PerIpSlot> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(ip).or_insert(0);
        if *n >= self.max.load(Ordering::Relaxed) {
            return None;
        }
        *n += 1;
        Some(PerIpSlot {
            table: self.clone(),
            ip,
        })
    }
}

impl Drop for PerIpSlot {
    fn drop(&mut self) {
        let mut open = self.table.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}
