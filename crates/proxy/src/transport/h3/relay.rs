//! HTTP/3 across a binary upgrade: each datagram to the process whose connection it belongs to.
//!
//! While an upgrade drains the old process, the old and the new process read the same UDP
//! sockets (the new one took them over), and the kernel gives each datagram to whichever reads
//! first. A QUIC connection's state lives in one process, so a datagram read by the other was
//! lost: in-flight responses stalled and half the new handshakes reached a process that no
//! longer accepts. So:
//!
//! - every connection ID rampart issues starts with its process's *generation* (a byte that goes
//!   up by one at each upgrade) and ends with a 16-bit check of the rest: a datagram's
//!   destination ID names its process ([`Cids`]);
//! - at an upgrade the old process hands the new one, beside each UDP socket, one end of a Unix
//!   socket pair (a *link*, [`offer`] / [`inherit`]);
//! - a process that reads a datagram for the other generation passes it over the link with its
//!   addresses, and the other handles it as if read from the socket itself; a process that no
//!   longer accepts connections passes on the first datagrams of new ones.
//!
//! With no link (no upgrade under way) nothing is parsed: one atomic load per read. A datagram
//! the link has no room for is dropped, as a full socket buffer drops one (QUIC recovers a lost
//! datagram); once the other process is gone, its datagrams are handled here (and answered with
//! a stateless reset the client ignores: its connection is over).
//!
//! Limits, each narrow and recovered by QUIC's retransmission (or documented in
//! docs/operations.md): a process refuses a second upgrade while its predecessor still drains
//! (links join neighbours only); a new process with more workers binds more sockets, which moves
//! the kernel's choice of socket for existing flows, and the old process's connections on a moved
//! flow stall (each socket's endpoint knows only its own); a draining process passes a client's
//! retransmitted first Initial (client-chosen ID) on to the new process, which then starts a
//! second handshake the client ignores. The links wake the endpoint through its runtime when a
//! datagram arrives; a link offered while the socket is idle is taken up at the next datagram
//! (both processes' readers are woken by every datagram on the shared socket).

use std::fmt;
use std::io::{self, IoSlice, IoSliceMut, Read as _};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::os::fd::{OwnedFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use quinn::udp::{EcnCodepoint, RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, ConnectionId, ConnectionIdGenerator, UdpPoller};
use socket2::{Domain, Socket, Type};
use tokio::io::unix::AsyncFd;

/// Length of the connection IDs rampart issues: generation, five random bytes, 16-bit check.
pub const CID_LEN: usize = 8;

/// This process's generation: its predecessor's plus one, 0 for a process not started by an
/// upgrade.
static GENERATION: AtomicU8 = AtomicU8::new(0);

/// Links and relays by UDP socket descriptor (a descriptor keeps its number across `exec`).
static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    inherited: Vec::new(),
    relays: Vec::new(),
});

struct Registry {
    /// Links to the predecessor, waiting for their socket's endpoint to start.
    inherited: Vec<(RawFd, Socket, u8)>,
    /// Each endpoint's relay, for a handoff.
    relays: Vec<(RawFd, Weak<Relay>)>,
}

fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// This process's generation, the first byte of every connection ID it issues.
pub fn generation() -> u8 {
    GENERATION.load(Ordering::Relaxed)
}

/// In a process started by an upgrade: the link beside the inherited UDP socket `udp`, and the
/// old process's generation (this process's is the next one).
pub fn inherit(udp: RawFd, link: Socket, predecessor: u8) -> io::Result<()> {
    link.set_nonblocking(true)?;
    link.set_cloexec(true)?;
    GENERATION.store(predecessor.wrapping_add(1), Ordering::Relaxed);
    registry().inherited.push((udp, link, predecessor));
    Ok(())
}

/// The inherited UDP socket `udp` will not be served (the configuration no longer has its
/// address, or HTTP/3 is off): its link is closed, and a later socket that gets the same
/// descriptor number does not take it up.
pub fn forget(udp: RawFd) {
    registry().inherited.retain(|(fd, ..)| *fd != udp);
}

/// Whether the process this one took over from still drains HTTP/3 connections through a link:
/// an upgrade of this process must wait until it has exited (links join neighbours only).
pub fn predecessor_draining() -> bool {
    let reg = registry();
    !reg.inherited.is_empty()
        || reg
            .relays
            .iter()
            .filter_map(|(_, r)| r.upgrade())
            .any(|r| r.links().predecessor.is_some())
}

/// For an upgrade: a new link beside UDP socket `udp`, whose other end (returned) the new
/// process inherits. `None` when no endpoint serves that socket. The caller closes its copy of
/// the returned end once the new process has started.
pub fn offer(udp: RawFd) -> Option<OwnedFd> {
    let relay = {
        let mut reg = registry();
        reg.relays.retain(|(_, r)| r.strong_count() > 0);
        reg.relays
            .iter()
            .find(|(fd, _)| *fd == udp)
            .and_then(|(_, r)| r.upgrade())?
    };
    let (here, there) = match Socket::pair(Domain::UNIX, Type::SEQPACKET, None) {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(error = %e, "cannot create the HTTP/3 upgrade link; connections may stall during the upgrade");
            return None;
        }
    };
    if let Err(e) = here.set_nonblocking(true) {
        tracing::warn!(error = %e, "cannot set up the HTTP/3 upgrade link");
        return None;
    }
    // Room for bursts of datagrams in both directions (the kernel caps it at its maximum).
    for end in [&here, &there] {
        let _ = end.set_send_buffer_size(LINK_BUFFER);
        let _ = end.set_recv_buffer_size(LINK_BUFFER);
    }
    let mut links = relay.links();
    links.successor = None;
    links.pending = Some(here);
    relay.linked.store(true, Ordering::Release);
    Some(there.into())
}

/// Socket buffer asked for on each end of a link.
const LINK_BUFFER: usize = 4 << 20;

/// The shortest short-header packet: first byte, connection ID, packet number and the sample
/// header protection needs (RFC 9001 §5.4.2); anything shorter is not passed on.
const SHORT_MIN: usize = 1 + CID_LEN + 4 + 16;

/// What an endpoint's socket and the handoff share.
pub struct Relay {
    /// Whether the endpoint still accepts connections (a draining one passes new ones on).
    accepting: AtomicBool,
    /// Whether a link is, or is about to be, in place; without one, reads are not looked at.
    linked: AtomicBool,
    links: Mutex<Links>,
}

impl Relay {
    /// The relay for the endpoint on UDP socket `udp`, with the link to the predecessor
    /// inherited for it, if any. Called in the endpoint's runtime.
    pub fn register(udp: RawFd) -> Arc<Relay> {
        let mut reg = registry();
        let predecessor = match reg.inherited.iter().position(|(fd, ..)| *fd == udp) {
            Some(i) => {
                let (_, socket, generation) = reg.inherited.swap_remove(i);
                Link::new(socket, generation)
            }
            None => None,
        };
        let relay = Arc::new(Relay {
            accepting: AtomicBool::new(true),
            linked: AtomicBool::new(predecessor.is_some()),
            links: Mutex::new(Links {
                predecessor,
                successor: None,
                pending: None,
            }),
        });
        reg.relays
            .retain(|(fd, r)| *fd != udp && r.strong_count() > 0);
        reg.relays.push((udp, Arc::downgrade(&relay)));
        relay
    }

    /// The endpoint no longer accepts connections: the first datagrams of new ones go to the
    /// successor, when there is one.
    pub fn stop_accepting(&self) {
        self.accepting.store(false, Ordering::Relaxed);
    }

    fn links(&self) -> MutexGuard<'_, Links> {
        self.links.lock().unwrap_or_else(|p| p.into_inner())
    }
}

struct Links {
    /// To the process this one took the socket over from, while it drains.
    predecessor: Option<Link>,
    /// To the process this one handed the socket to.
    successor: Option<Link>,
    /// The successor's link, offered by the upgrade's thread, until the endpoint's task
    /// registers it with its runtime.
    pending: Option<Socket>,
}

#[derive(Clone, Copy)]
enum Side {
    Predecessor,
    Successor,
}

impl Links {
    fn get(&self, side: Side) -> Option<&Link> {
        match side {
            Side::Predecessor => self.predecessor.as_ref(),
            Side::Successor => self.successor.as_ref(),
        }
    }

    fn drop_link(&mut self, side: Side, why: &dyn fmt::Display) {
        let gone = match side {
            Side::Predecessor => self.predecessor.take(),
            Side::Successor => self.successor.take(),
        };
        if let Some(l) = gone {
            tracing::debug!(generation = l.generation, %why, "HTTP/3 upgrade link closed");
        }
    }

    fn any(&self) -> bool {
        self.predecessor.is_some() || self.successor.is_some() || self.pending.is_some()
    }

    /// The link to the process that issued connection ID `cid`, if another one did.
    fn owner(&self, cid: &[u8]) -> Option<Side> {
        if !issued(cid) {
            return None;
        }
        let generation = cid[0];
        [Side::Predecessor, Side::Successor]
            .into_iter()
            .find(|&s| self.get(s).is_some_and(|l| l.generation == generation))
    }

    /// Where datagram `d` goes: `None` to this process's endpoint.
    fn destination(&self, d: &[u8], accepting: bool) -> Option<Side> {
        let first = *d.first()?;
        if first & 0x80 == 0 {
            // Short header: the destination ID follows the first byte.
            if d.len() < SHORT_MIN {
                return None;
            }
            return self.owner(&d[1..1 + CID_LEN]);
        }
        // Long header: version, destination ID length, destination ID.
        if d.get(1..5)? == [0; 4] {
            return None; // Version Negotiation, which only servers send
        }
        let len = usize::from(*d.get(5)?);
        let dcid = d.get(6..6 + len)?;
        if let Some(side) = self.owner(dcid) {
            return Some(side);
        }
        // Initial or 0-RTT (QUIC v1): a connection's first datagrams, named by an ID the client
        // chose; a process that no longer accepts passes them on unless they are its own.
        let first_flight = matches!((first >> 4) & 0b11, 0 | 1);
        let own = issued(dcid) && dcid[0] == generation();
        (first_flight && !accepting && !own && self.successor.is_some()).then_some(Side::Successor)
    }

    /// Passes datagram `d` (one segment of what `meta` describes) over the link to `side`;
    /// `false` when it could not (it is then handled here).
    fn pass(&mut self, side: Side, meta: &RecvMeta, d: &[u8]) -> bool {
        let Some(link) = self.get(side) else {
            return false;
        };
        let header = encode(meta);
        let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
        match link
            .io
            .get_ref()
            .send_vectored_with_flags(&[IoSlice::new(&header), IoSlice::new(d)], flags)
        {
            Ok(_) => true,
            // The other process is gone: its datagrams are handled here from now on.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EPIPE | libc::ECONNRESET | libc::ENOTCONN | libc::ECONNREFUSED)
                ) =>
            {
                self.drop_link(side, &e);
                false
            }
            // The other process is behind (a full buffer) or the system is short of memory:
            // the datagram is lost, as on a full socket buffer.
            Err(_) => true,
        }
    }

    /// A datagram passed over a link, into `buf` and `meta`.
    fn poll_passed(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut [u8],
        meta: &mut RecvMeta,
    ) -> Poll<()> {
        for side in [Side::Predecessor, Side::Successor] {
            let Some(link) = self.get(side) else {
                continue;
            };
            match link.poll_recv(cx, buf, meta) {
                Poll::Ready(Ok(())) => return Poll::Ready(()),
                Poll::Ready(Err(e)) => self.drop_link(side, &e),
                Poll::Pending => {}
            }
        }
        Poll::Pending
    }
}

/// One end of a link, registered with the endpoint's runtime.
struct Link {
    io: AsyncFd<Socket>,
    /// The other process's generation.
    generation: u8,
}

impl Link {
    /// Registers `socket` with the current runtime (the endpoint's).
    #[allow(unsafe_code)]
    fn new(socket: Socket, generation: u8) -> Option<Link> {
        // SAFETY: the `Socket` owns its descriptor, and the `AsyncFd` owns the `Socket`: the
        // descriptor stays open, and the same, for as long as the `AsyncFd` lives.
        match unsafe { AsyncFd::register(socket) } {
            Ok(io) => Some(Link { io, generation }),
            Err(e) => {
                tracing::warn!(error = %e.into_parts().1, "cannot use the HTTP/3 upgrade link");
                None
            }
        }
    }

    fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        buf: &mut [u8],
        meta: &mut RecvMeta,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = match self.io.poll_read_ready(cx) {
                Poll::Ready(g) => g?,
                Poll::Pending => return Poll::Pending,
            };
            let mut header = [0u8; HEADER];
            let read = guard.try_io(|io| {
                let mut parts = [IoSliceMut::new(&mut header), IoSliceMut::new(buf)];
                (&mut io.get_ref()).read_vectored(&mut parts)
            });
            match read {
                Ok(Ok(0)) => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the other process closed its end",
                    )))
                }
                Ok(Ok(n)) if n > HEADER => {
                    if decode(&header, n - HEADER, meta) {
                        return Poll::Ready(Ok(()));
                    }
                }
                Ok(Ok(_)) => {} // too short to be one: skipped
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => {}
            }
        }
    }
}

/// A passed datagram's header: flags (IPv4 source, destination address known, ECN bits), source
/// address and port, destination address, the source's IPv6 scope (a link-local client).
const HEADER: usize = 40;

fn encode(meta: &RecvMeta) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    let v6 = |ip: IpAddr| match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    };
    h[0] = u8::from(meta.addr.is_ipv4())
        | u8::from(meta.dst_ip.is_some()) << 1
        | meta.ecn.map_or(0, |e| e as u8) << 2;
    h[1..17].copy_from_slice(&v6(meta.addr.ip()).octets());
    h[17..19].copy_from_slice(&meta.addr.port().to_be_bytes());
    if let Some(ip) = meta.dst_ip {
        h[19..35].copy_from_slice(&v6(ip).octets());
    }
    if let SocketAddr::V6(a) = meta.addr {
        h[36..40].copy_from_slice(&a.scope_id().to_be_bytes());
    }
    h
}

fn decode(h: &[u8; HEADER], len: usize, meta: &mut RecvMeta) -> bool {
    let ip = |b: &[u8]| -> Option<IpAddr> {
        let a = Ipv6Addr::from(<[u8; 16]>::try_from(b).ok()?);
        Some(match (h[0] & 1 == 1, a.to_ipv4_mapped()) {
            (true, Some(v4)) => IpAddr::V4(v4),
            (true, None) => return None,
            (false, _) => IpAddr::V6(a),
        })
    };
    let Some(src) = ip(&h[1..17]) else {
        return false;
    };
    let port = u16::from_be_bytes([h[17], h[18]]);
    meta.addr = match src {
        IpAddr::V6(a) => {
            let scope = u32::from_be_bytes([h[36], h[37], h[38], h[39]]);
            SocketAddr::V6(std::net::SocketAddrV6::new(a, port, 0, scope))
        }
        IpAddr::V4(_) => SocketAddr::new(src, port),
    };
    meta.dst_ip = if h[0] & 2 != 0 { ip(&h[19..35]) } else { None };
    meta.ecn = EcnCodepoint::from_bits(h[0] >> 2);
    meta.len = len;
    meta.stride = len;
    true
}

/// The 16-bit check that ends an issued connection ID (FNV-1a of the first six bytes, folded):
/// it tells rampart's IDs from those clients choose for their first datagrams, but for one in
/// 65,536.
fn check(b: &[u8]) -> [u8; 2] {
    let mut h: u32 = 0x811c_9dc5;
    for &x in b {
        h ^= u32::from(x);
        h = h.wrapping_mul(0x0100_0193);
    }
    (((h >> 16) ^ h) as u16).to_be_bytes()
}

/// Whether `cid` has the shape of an ID rampart issued.
fn issued(cid: &[u8]) -> bool {
    cid.len() == CID_LEN && cid[6..8] == check(&cid[..6])
}

/// Issues connection IDs that name this process's generation.
pub struct Cids {
    random: &'static dyn rustls::crypto::SecureRandom,
}

impl Default for Cids {
    fn default() -> Cids {
        Cids {
            random: rustls::crypto::aws_lc_rs::default_provider().secure_random,
        }
    }
}

impl ConnectionIdGenerator for Cids {
    fn generate_cid(&mut self) -> ConnectionId {
        let mut b = [0u8; CID_LEN];
        b[0] = generation();
        if self.random.fill(&mut b[1..6]).is_err() {
            // Not expected: the system's random source failed. A keyed hash of a counter is
            // still unpredictable to an observer.
            use std::hash::{BuildHasher as _, Hasher as _};
            static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(COUNT.fetch_add(1, Ordering::Relaxed));
            b[1..6].copy_from_slice(&h.finish().to_be_bytes()[..5]);
        }
        let c = check(&b[..6]);
        b[6..8].copy_from_slice(&c);
        ConnectionId::new(&b)
    }

    fn cid_len(&self) -> usize {
        CID_LEN
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

/// An endpoint's UDP socket, with datagrams passed to and from the other process of an upgrade.
pub struct RelaySocket {
    inner: Arc<dyn AsyncUdpSocket>,
    relay: Arc<Relay>,
}

impl RelaySocket {
    pub fn new(inner: Arc<dyn AsyncUdpSocket>, relay: Arc<Relay>) -> RelaySocket {
        RelaySocket { inner, relay }
    }
}

impl fmt::Debug for RelaySocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RelaySocket")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl AsyncUdpSocket for RelaySocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        self.inner.try_send(transmit)
    }

    fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        if !self.relay.linked.load(Ordering::Acquire) {
            return self.inner.poll_recv(cx, bufs, meta);
        }
        {
            let mut links = self.relay.links();
            if let Some(socket) = links.pending.take() {
                links.successor = Link::new(socket, generation().wrapping_add(1));
            }
            if let (Some(buf), Some(m)) = (bufs.first_mut(), meta.first_mut()) {
                if links.poll_passed(cx, buf, m).is_ready() {
                    return Poll::Ready(Ok(1));
                }
            }
            if !links.any() {
                self.relay.linked.store(false, Ordering::Release);
            }
        }
        let n = match self.inner.poll_recv(cx, bufs, meta) {
            Poll::Ready(Ok(n)) => n,
            other => return other,
        };
        let accepting = self.relay.accepting.load(Ordering::Relaxed);
        let mut links = self.relay.links();
        for (buf, m) in bufs.iter_mut().zip(meta.iter_mut()).take(n) {
            route(&mut links, accepting, buf, m);
        }
        Poll::Ready(Ok(n))
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.inner.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

/// Passes on the datagrams of one read (several when the kernel coalesced them, `stride` bytes
/// apart) that belong to the other process, and closes up the rest.
fn route(links: &mut Links, accepting: bool, buf: &mut [u8], meta: &mut RecvMeta) {
    let len = meta.len.min(buf.len());
    let stride = if meta.stride == 0 { len } else { meta.stride };
    let (mut read, mut kept) = (0, 0);
    while read < len {
        let end = (read + stride).min(len);
        let passed = match links.destination(&buf[read..end], accepting) {
            Some(side) => links.pass(side, meta, &buf[read..end]),
            None => false,
        };
        if !passed {
            // Every datagram but the last is `stride` long, so those kept stay `stride` apart.
            if kept != read {
                buf.copy_within(read..end, kept);
            }
            kept += end - read;
        }
        read = end;
    }
    meta.len = kept;
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// An ID as generation `generation` issues them (without touching this process's).
    fn cid(generation: u8) -> [u8; CID_LEN] {
        let mut b = [generation, 1, 2, 3, 4, generation, 0, 0];
        let c = check(&b[..6]);
        b[6..].copy_from_slice(&c);
        b
    }

    #[test]
    fn issued_ids_name_their_generation_and_pass_the_check() {
        let id = Cids::default().generate_cid();
        let a: [u8; CID_LEN] = id[..].try_into().unwrap();
        assert_eq!(a[0], generation());
        assert!(issued(&a));
        assert_ne!(a[1..6], Cids::default().generate_cid()[1..6], "random");
        let mut b = a;
        b[3] ^= 1;
        assert!(!issued(&b), "a changed byte fails the check");
        assert!(!issued(&a[..7]));
        // Random client-chosen IDs pass the check about once in 65,536.
        let mut passed = 0;
        let mut x = [0u8; CID_LEN];
        for i in 0..65_536u32 {
            x[..4].copy_from_slice(&i.to_be_bytes());
            x[4..].copy_from_slice(&i.wrapping_mul(2_654_435_761).to_le_bytes());
            passed += u32::from(issued(&x));
        }
        assert!(passed < 8, "{passed}");
    }

    #[test]
    fn the_header_keeps_the_addresses_and_ecn() {
        for (src, dst) in [
            ("127.0.0.1:4433", Some("127.0.0.2")),
            ("[::1]:9", None),
            ("[2001:db8::1]:65535", Some("2001:db8::2")),
            ("[fe80::1%3]:443", Some("fe80::2")),
        ] {
            let meta = RecvMeta {
                addr: src.parse().unwrap(),
                len: 10,
                stride: 10,
                ecn: Some(EcnCodepoint::Ce),
                dst_ip: dst.map(|d| d.parse().unwrap()),
            };
            let mut back = RecvMeta::default();
            assert!(decode(&encode(&meta), 33, &mut back));
            assert_eq!(back.addr, meta.addr);
            assert_eq!(back.dst_ip, meta.dst_ip);
            assert_eq!(back.ecn, meta.ecn);
            assert_eq!((back.len, back.stride), (33, 33));
        }
    }

    /// A short-header datagram for connection ID `cid`, `len` bytes long.
    fn short(cid: &[u8; CID_LEN], len: usize, fill: u8) -> Vec<u8> {
        let mut d = vec![fill; len];
        d[0] = 0x40;
        d[1..1 + CID_LEN].copy_from_slice(cid);
        d
    }

    /// A client's first Initial, with a destination ID it chose.
    fn initial(len: usize) -> Vec<u8> {
        let mut d = vec![0u8; len];
        d[0] = 0xc0;
        d[1..5].copy_from_slice(&1u32.to_be_bytes());
        d[5] = 8;
        d[6..14].copy_from_slice(b"client!!");
        d
    }

    #[tokio::test]
    async fn coalesced_datagrams_are_split_between_the_processes() {
        let mine = cid(3);
        let theirs = cid(4);
        let (here, there) = Socket::pair(Domain::UNIX, Type::SEQPACKET, None).unwrap();
        here.set_nonblocking(true).unwrap();
        there.set_nonblocking(true).unwrap();
        let mut links = Links {
            predecessor: None,
            successor: Link::new(here, 4),
            pending: None,
        };
        // Five datagrams 100 bytes apart, the last one short: 2nd and 4th are the successor's.
        let parts = [
            short(&mine, 100, 1),
            short(&theirs, 100, 2),
            short(&mine, 100, 3),
            short(&theirs, 100, 4),
            short(&mine, 60, 5),
        ];
        let mut buf = parts.concat();
        let mut meta = RecvMeta {
            addr: "127.0.0.1:5000".parse().unwrap(),
            len: buf.len(),
            stride: 100,
            ecn: None,
            dst_ip: None,
        };
        route(&mut links, true, &mut buf, &mut meta);
        assert_eq!(meta.len, 260);
        assert_eq!(&buf[..260], [&parts[0][..], &parts[2], &parts[4]].concat());
        let mut got = [0u8; 200];
        for expected in [&parts[1], &parts[3]] {
            let n = (&there).read(&mut got).unwrap();
            assert_eq!(n, HEADER + 100);
            assert_eq!(&got[HEADER..n], &expected[..]);
        }
        // A client's first Initial stays while accepting, goes on while draining.
        let first = initial(1200);
        let mut buf = first.clone();
        meta.len = buf.len();
        meta.stride = buf.len();
        route(&mut links, true, &mut buf, &mut meta);
        assert_eq!(meta.len, 1200);
        route(&mut links, false, &mut buf, &mut meta);
        assert_eq!(meta.len, 0);
        let mut big = [0u8; 1400];
        let n = (&there).read(&mut big).unwrap();
        assert_eq!(&big[HEADER..n], &first[..]);
        // A Handshake packet (long header) for the successor's ID goes on; a short packet too
        // small to be one stays.
        let mut hs = initial(300);
        hs[0] = 0xe0;
        hs[6..14].copy_from_slice(&theirs);
        let mut buf = hs.clone();
        meta.len = buf.len();
        meta.stride = buf.len();
        route(&mut links, true, &mut buf, &mut meta);
        assert_eq!(meta.len, 0);
        let n = (&there).read(&mut big).unwrap();
        assert_eq!(&big[HEADER..n], &hs[..]);
        let mut buf = short(&theirs, SHORT_MIN - 1, 7);
        meta.len = buf.len();
        meta.stride = buf.len();
        route(&mut links, true, &mut buf, &mut meta);
        assert_eq!(meta.len, SHORT_MIN - 1);
        // The successor gone: its datagrams are handled here.
        drop(there);
        let mut buf = short(&theirs, 80, 9);
        meta.len = 80;
        meta.stride = 80;
        route(&mut links, true, &mut buf, &mut meta);
        assert_eq!(meta.len, 80);
        assert!(links.successor.is_none());
    }
}
