//! Listening sockets: binding one address for every worker, and refusing a port that another
//! process already serves.

use std::io;
use std::net::SocketAddr;

use rampart_config::{Config, RuntimeMode};
use socket2::{Domain, Protocol, Socket, Type};

/// Listen backlog when `max_backlog` is unset (Linux's default `somaxconn`).
const DEFAULT_BACKLOG: i32 = 4096;

/// One configured address, bound: the address as configured (port 0 stays 0, so a reload with
/// the same file keeps the socket), the address actually bound, and one socket per worker
/// group (`SO_REUSEPORT` siblings under `per-core`, a single socket under `shared`).
#[derive(Debug)]
pub struct Bound {
    pub configured: SocketAddr,
    pub actual: SocketAddr,
    pub tls: bool,
    pub sockets: Vec<std::net::TcpListener>,
}

/// The addresses a configuration listens on: (address, HTTPS?), plain ones first.
pub fn wanted(config: &Config, tls: bool) -> Vec<(SocketAddr, bool)> {
    let https = if tls {
        &config.tls.listen_https[..]
    } else {
        &[]
    };
    config
        .listen_http
        .iter()
        .map(|a| (*a, false))
        .chain(https.iter().map(|a| (*a, true)))
        .collect()
}

/// Binds `addr` once per worker group. A port of 0 is resolved by the first socket and shared
/// by its siblings.
pub fn bind(addr: SocketAddr, tls: bool, config: &Config, groups: usize) -> io::Result<Bound> {
    let per_core = config.runtime == RuntimeMode::PerCore;
    // SO_REUSEPORT lets rampart's own workers share a port, but would also let a second
    // rampart (or anything else that sets it) join silently and take half the traffic to a
    // cache of its own: refuse a port another process already listens on.
    if per_core && addr.port() != 0 && listened_on_by_another(addr) {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!(
                "cannot listen on {addr}: another process is already listening there \
                 (another rampart?); rampart does not share a port with another instance"
            ),
        ));
    }
    let first = bind_one(addr, config, per_core)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
    let actual = first.local_addr()?;
    let mut sockets = vec![first];
    for _ in 1..groups {
        sockets.push(bind_one(actual, config, true)?);
    }
    Ok(Bound {
        configured: addr,
        actual,
        tls,
        sockets,
    })
}

/// Whether another socket already listens on `addr`: a bind without `SO_REUSEPORT` is refused
/// then (the probe socket is closed at once).
fn listened_on_by_another(addr: SocketAddr) -> bool {
    let Ok(probe) = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
    else {
        return false;
    };
    let _ = probe.set_reuse_address(true);
    if addr.is_ipv6() {
        let _ = probe.set_only_v6(true);
    }
    matches!(probe.bind(&addr.into()), Err(e) if e.kind() == io::ErrorKind::AddrInUse)
}

fn bind_one(
    addr: SocketAddr,
    config: &Config,
    reuse_port: bool,
) -> io::Result<std::net::TcpListener> {
    let d = &config.downstream;
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    // Set on the listener so accepted sockets inherit them (buffer sizes must precede listen()).
    if let Some(n) = d.recv_buffer_size {
        socket.set_recv_buffer_size(n)?;
    }
    if let Some(n) = d.send_buffer_size {
        socket.set_send_buffer_size(n)?;
    }
    if let Some(ttl) = d.ip_ttl {
        if addr.is_ipv4() {
            socket.set_ttl_v4(ttl)?;
        } else {
            socket.set_unicast_hops_v6(ttl)?;
        }
    }
    socket.set_tcp_nodelay(d.nodelay)?;
    socket.bind(&addr.into())?;
    socket.listen(d.max_backlog.unwrap_or(DEFAULT_BACKLOG))?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}
