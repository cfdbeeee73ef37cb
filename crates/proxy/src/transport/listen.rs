//! Listening sockets: binding one address for every worker, refusing a port that another
//! process already serves, and taking over the sockets of the process being upgraded
//! ([`HANDOFF_ENV`]). TCP for HTTP and HTTPS; UDP for HTTP/3 beside an HTTPS address.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd as _, RawFd};

use rampart_config::{Config, RuntimeMode};
use socket2::{Domain, Protocol, Socket, Type};

/// Listen backlog when `max_backlog` is unset (Linux's default `somaxconn`).
const DEFAULT_BACKLOG: i32 = 4096;

/// The environment variable through which an upgrading rampart hands its listening sockets to
/// the new binary: `FD,CONFIGURED,ACTUAL,http|https|h3` entries separated by `;`. An `h3` entry
/// may go on with `,LINK,GENERATION`: the descriptor of the link over which the two processes
/// pass each other's QUIC datagrams while the old one drains, and the old one's generation
/// (see `quic::relay`).
pub const HANDOFF_ENV: &str = "RAMPART_LISTEN_FDS";

/// What an upgrade hands the new process: descriptors to leave open across `exec`, and the
/// [`HANDOFF_ENV`] value naming them. Holds this process's copies of the HTTP/3 links' far
/// ends until dropped (once the new process has started).
#[derive(Debug, Default)]
pub struct Handoff {
    pub fds: Vec<RawFd>,
    pub spec: String,
    pub links: Vec<std::os::fd::OwnedFd>,
}

/// What a listening socket serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Plain HTTP on TCP.
    Http,
    /// HTTPS on TCP.
    Https,
    /// HTTP/3 on UDP, beside the HTTPS listener of the same configured address.
    H3,
}

impl Kind {
    /// The name in a handoff entry.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Http => "http",
            Kind::Https => "https",
            Kind::H3 => "h3",
        }
    }

    fn parse(s: &str) -> Option<Kind> {
        [Kind::Http, Kind::Https, Kind::H3]
            .into_iter()
            .find(|k| k.as_str() == s)
    }

    fn socket_type(self) -> Type {
        match self {
            Kind::H3 => Type::DGRAM,
            Kind::Http | Kind::Https => Type::STREAM,
        }
    }
}

/// A listening socket inherited from the process being upgraded.
#[derive(Debug)]
pub struct Inherited {
    configured: SocketAddr,
    kind: Kind,
    socket: Socket,
}

/// Takes the sockets named in [`HANDOFF_ENV`] (and removes the variable, so no child of this
/// process sees it). Each is checked to be a listening TCP socket bound where the entry says;
/// anything else is skipped with a warning.
pub fn inherit() -> Vec<Inherited> {
    let Some(spec) = std::env::var_os(HANDOFF_ENV) else {
        return Vec::new();
    };
    std::env::remove_var(HANDOFF_ENV);
    let mut out = Vec::new();
    for entry in spec.to_string_lossy().split(';').filter(|e| !e.is_empty()) {
        match inherit_one(entry) {
            Some(i) => out.push(i),
            None => tracing::warn!(entry, "an inherited socket is not usable; skipped"),
        }
    }
    out
}

fn inherit_one(entry: &str) -> Option<Inherited> {
    let mut parts = entry.split(',');
    let fd: RawFd = parts.next()?.parse().ok()?;
    let configured: SocketAddr = parts.next()?.parse().ok()?;
    let actual: SocketAddr = parts.next()?.parse().ok()?;
    let kind = Kind::parse(parts.next()?)?;
    // An HTTP/3 socket's upgrade link, taken (and closed, if unused) whatever becomes of the
    // socket: never left open and inheritable.
    let link = match (kind, parts.next(), parts.next()) {
        (Kind::H3, Some(l), Some(g)) => {
            let link = l.parse::<RawFd>().ok().and_then(adopt_fd);
            match (link, g.parse::<u8>()) {
                (Some(l), Ok(g)) if l.r#type().ok() == Some(Type::SEQPACKET) => Some((l, g)),
                _ => {
                    tracing::warn!(
                        entry,
                        "the HTTP/3 upgrade link is not usable: connections of the old process may stall while it drains"
                    );
                    None
                }
            }
        }
        _ => None,
    };
    let socket = adopt_fd(fd)?;
    let listening = socket.r#type().ok() == Some(kind.socket_type())
        && (kind == Kind::H3 || socket.is_listener().unwrap_or(false))
        && socket.local_addr().ok().and_then(|a| a.as_socket()) == Some(actual);
    if !listening {
        return None;
    }
    socket.set_cloexec(true).ok()?;
    socket.set_nonblocking(true).ok()?;
    if let Some((link, generation)) = link {
        if let Err(e) = crate::transport::h3::relay::inherit(fd, link, generation) {
            tracing::warn!(entry, error = %e, "the HTTP/3 upgrade link is not usable: connections of the old process may stall while it drains");
        }
    }
    Some(Inherited {
        configured,
        kind,
        socket,
    })
}

/// Closes inherited sockets this configuration does not serve (and their HTTP/3 links).
pub fn discard(inherited: Vec<Inherited>) {
    if inherited.is_empty() {
        return;
    }
    tracing::warn!(
        sockets = inherited.len(),
        "inherited listening sockets for addresses this configuration no longer has: closed"
    );
    for i in inherited {
        if i.kind == Kind::H3 {
            crate::transport::h3::relay::forget(i.socket.as_raw_fd());
        }
    }
}

/// Takes ownership of a descriptor named by the upgrading parent.
#[allow(unsafe_code)]
fn adopt_fd(fd: RawFd) -> Option<Socket> {
    use std::os::fd::FromRawFd as _;
    // Only descriptors that exist and are sockets: fstat first.
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes into `st` and reads nothing else; an invalid fd gives an error.
    if fd < 3 || unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: fstat succeeded, so `st` is initialised.
    let mode = unsafe { st.assume_init() }.st_mode;
    if mode & libc::S_IFMT != libc::S_IFSOCK {
        return None;
    }
    // SAFETY: the descriptor is open, is a socket, and was handed to this process to own by
    // its parent (HANDOFF_ENV, read once and removed); nothing else in the process uses it.
    Some(unsafe { Socket::from_raw_fd(fd) })
}

/// Clears or sets close-on-exec on a listening socket (an upgrade hands the socket to a new
/// binary across exec).
#[allow(unsafe_code)]
pub fn set_inheritable(fd: RawFd, inheritable: bool) -> io::Result<()> {
    // SAFETY: fcntl with F_GETFD/F_SETFD on a descriptor the caller holds open.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags < 0 {
            return Err(io::Error::last_os_error());
        }
        let flags = if inheritable {
            flags & !libc::FD_CLOEXEC
        } else {
            flags | libc::FD_CLOEXEC
        };
        if libc::fcntl(fd, libc::F_SETFD, flags) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// One configured address, bound: the address as configured (port 0 stays 0, so a reload with
/// the same file keeps the socket), the address actually bound, and one socket per worker
/// group (`SO_REUSEPORT` siblings under `per-core`, a single socket under `shared`).
#[derive(Debug)]
pub struct Bound {
    pub configured: SocketAddr,
    pub actual: SocketAddr,
    pub kind: Kind,
    /// Socket `i` goes to worker `i % workers` (an upgrade may inherit more sockets than this
    /// process has workers; each is still accepted from). Listening TCP sockets, or UDP
    /// sockets for [`Kind::H3`].
    pub sockets: Vec<Socket>,
}

impl Bound {
    /// The descriptors, for a handoff.
    pub fn fds(&self) -> Vec<RawFd> {
        self.sockets.iter().map(|s| s.as_raw_fd()).collect()
    }
}

/// The addresses a configuration listens on, plain ones first, then HTTPS, then HTTP/3 (UDP
/// on every HTTPS address when `http3` is on, except those that read a PROXY protocol header:
/// the balancer in front speaks TCP).
pub fn wanted(config: &Config, tls: bool) -> Vec<(SocketAddr, Kind)> {
    let https = if tls {
        &config.tls.listen_https[..]
    } else {
        &[]
    };
    let h3 = https
        .iter()
        .filter(|_| config.tls.http3.is_some())
        .filter(|a| !config.proxy_protocol.expects(**a, true));
    config
        .listen_http
        .iter()
        .map(|a| (*a, Kind::Http))
        .chain(https.iter().map(|a| (*a, Kind::Https)))
        .chain(h3.map(|a| (*a, Kind::H3)))
        .collect()
}

/// Binds `addr` once per worker group. A port of 0 is resolved by the first socket and shared
/// by its siblings. For HTTP/3 on a port of 0, `https` (the HTTPS address bound for the same
/// configured one) names the port to try first, so both protocols share a port number.
pub fn bind(
    addr: SocketAddr,
    kind: Kind,
    config: &Config,
    groups: usize,
    https: Option<SocketAddr>,
) -> io::Result<Bound> {
    bind_or_inherit(addr, kind, config, groups, &mut Vec::new(), https)
}

/// As [`bind`], but first takes the sockets `inherited` has for this address (an upgrade):
/// the same sockets, so connections waiting in their queues are accepted here.
pub fn bind_or_inherit(
    addr: SocketAddr,
    kind: Kind,
    config: &Config,
    groups: usize,
    inherited: &mut Vec<Inherited>,
    https: Option<SocketAddr>,
) -> io::Result<Bound> {
    let mut taken = Vec::new();
    let mut i = 0;
    while i < inherited.len() {
        if inherited[i].configured == addr && inherited[i].kind == kind {
            taken.push(inherited.remove(i).socket);
        } else {
            i += 1;
        }
    }
    let per_core = config.runtime == RuntimeMode::PerCore;
    if let Some(first) = taken.first() {
        let actual = local_addr(first)?;
        if kind == Kind::H3 && per_core && taken.len() < groups {
            tracing::warn!(
                %addr,
                inherited = taken.len(),
                workers = groups,
                "more workers than the process this one took over from: new HTTP/3 sockets move some of its connections to sockets it does not read, and those stall until it exits"
            );
        }
        while taken.len() < groups && per_core {
            taken.push(bind_one(actual, kind, config, true)?);
        }
        return Ok(Bound {
            configured: addr,
            actual,
            kind,
            sockets: taken,
        });
    }
    // SO_REUSEPORT lets rampart's own workers share a port, but would also let a second
    // rampart (or anything else that sets it) join silently and take half the traffic to a
    // cache of its own: refuse a port another process already listens on.
    if per_core && addr.port() != 0 && listened_on_by_another(addr, kind) {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!(
                "cannot listen on {addr}{}: another process is already listening there \
                 (another rampart?); rampart does not share a port with another instance",
                if kind == Kind::H3 {
                    " (UDP, HTTP/3)"
                } else {
                    ""
                }
            ),
        ));
    }
    // HTTP/3 beside an HTTPS port chosen by the system: the same number when it is free.
    let same_port = https.filter(|_| kind == Kind::H3 && addr.port() == 0);
    let first = match same_port.map(|a| bind_one(a, kind, config, per_core)) {
        Some(Ok(s)) => s,
        _ => bind_one(addr, kind, config, per_core).map_err(|e| {
            let udp = if kind == Kind::H3 {
                " (UDP, HTTP/3)"
            } else {
                ""
            };
            io::Error::new(e.kind(), format!("cannot listen on {addr}{udp}: {e}"))
        })?,
    };
    let actual = local_addr(&first)?;
    let mut sockets = vec![first];
    for _ in 1..groups {
        sockets.push(bind_one(actual, kind, config, true)?);
    }
    Ok(Bound {
        configured: addr,
        actual,
        kind,
        sockets,
    })
}

fn local_addr(s: &Socket) -> io::Result<SocketAddr> {
    s.local_addr()?
        .as_socket()
        .ok_or_else(|| io::Error::other("not an IP socket"))
}

/// Whether another socket already listens on `addr`: a bind without `SO_REUSEPORT` is refused
/// then (the probe socket is closed at once).
fn listened_on_by_another(addr: SocketAddr, kind: Kind) -> bool {
    let Ok(probe) = Socket::new(Domain::for_address(addr), kind.socket_type(), None) else {
        return false;
    };
    if kind != Kind::H3 {
        let _ = probe.set_reuse_address(true);
    }
    if addr.is_ipv6() {
        let _ = probe.set_only_v6(true);
    }
    matches!(probe.bind(&addr.into()), Err(e) if e.kind() == io::ErrorKind::AddrInUse)
}

fn bind_one(addr: SocketAddr, kind: Kind, config: &Config, reuse_port: bool) -> io::Result<Socket> {
    if kind == Kind::H3 {
        return bind_udp(addr, config, reuse_port);
    }
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
    Ok(socket)
}

/// A UDP socket for QUIC. `recv_buffer_size`/`send_buffer_size` apply here too (QUIC receives
/// whole connections' traffic through one socket: a larger receive buffer drops fewer
/// datagrams under load). No `SO_REUSEADDR`: on UDP it would let another socket share the
/// port without the kernel's balancing.
fn bind_udp(addr: SocketAddr, config: &Config, reuse_port: bool) -> io::Result<Socket> {
    let d = &config.downstream;
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    if let Some(n) = d.recv_buffer_size {
        socket.set_recv_buffer_size(n)?;
    }
    if let Some(n) = d.send_buffer_size {
        socket.set_send_buffer_size(n)?;
    }
    socket.bind(&addr.into())?;
    socket.set_nonblocking(true)?;
    Ok(socket)
}
