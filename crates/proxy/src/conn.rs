//! The per-client-address connection table.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Open connections per client address, when `max_connections_per_ip` is set.
#[derive(Debug)]
pub struct PerIp {
    max: usize,
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
            max,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// Counts a new connection from `ip`, or `None` when that address is at its limit.
    pub fn acquire(self: &Arc<Self>, ip: IpAddr) -> Option<PerIpSlot> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(ip).or_insert(0);
        if *n >= self.max {
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
