//! `rampart-bench floor`: the suite's yardstick. A minimal fixed-response HTTP/1.1 server — one
//! thread, level-triggered epoll, and per request one `read` and one `write` of a prepared
//! response — so each report states every program's CPU per request as a multiple of what the
//! kernel and a trivial server cost on this machine in the same run.
//!
//! It answers every request with the 12-byte `Hello World!` the origin serves at `/hello`
//! (heads are not parsed beyond finding their end and a `Connection: close`), so it only takes
//! part in scenarios for that path. Pipelined requests read together are answered in one write.
//!
//! Raw epoll through `libc` on purpose: any runtime between the socket and the response would be
//! part of what the floor is meant to leave out.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, RawFd};

const RESPONSE: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 12\r\n\r\nHello World!";
const CLOSING: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 12\r\nConnection: close\r\n\r\nHello World!";

/// What a connection has read of a head not yet complete, and what it still has to write.
#[derive(Default)]
struct Partial {
    head: Vec<u8>,
    out: Vec<u8>,
    close: bool,
}

pub fn run(listen: SocketAddr) -> anyhow::Result<()> {
    let listener = TcpListener::bind(listen)?;
    listener.set_nonblocking(true)?;
    let lfd = listener.as_raw_fd();
    // SAFETY: epoll and socket calls on descriptors this function owns; buffers outlive calls.
    unsafe {
        let ep = libc::epoll_create1(libc::EPOLL_CLOEXEC);
        if ep < 0 {
            return Err(io::Error::last_os_error().into());
        }
        ctl(ep, libc::EPOLL_CTL_ADD, lfd, libc::EPOLLIN as u32)?;
        let mut events: Vec<libc::epoll_event> = vec![libc::epoll_event { events: 0, u64: 0 }; 512];
        let mut conns = Conns {
            ep,
            buf: vec![0u8; 16 * 1024],
            out: Vec::with_capacity(16 * 1024),
            partial: HashMap::new(),
        };
        loop {
            let n = libc::epoll_wait(ep, events.as_mut_ptr(), events.len() as i32, -1);
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e.into());
            }
            for ev in &events[..n as usize] {
                let fd = ev.u64 as RawFd;
                if fd == lfd {
                    accept_all(ep, lfd);
                } else if ev.events & libc::EPOLLOUT as u32 != 0 {
                    flush_pending(ep, fd, &mut conns.partial);
                } else {
                    conns.serve(fd);
                }
            }
        }
    }
}

/// Accepts every connection waiting on `lfd` (Nagle off) and watches it for reading.
unsafe fn accept_all(ep: RawFd, lfd: RawFd) {
    loop {
        let c = libc::accept4(
            lfd,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        );
        if c < 0 {
            break;
        }
        let one: libc::c_int = 1;
        libc::setsockopt(
            c,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as u32,
        );
        if ctl(ep, libc::EPOLL_CTL_ADD, c, libc::EPOLLIN as u32).is_err() {
            libc::close(c);
        }
    }
}

/// The connections' shared buffers and what each one has left over.
struct Conns {
    ep: RawFd,
    /// What one `read` brings in.
    buf: Vec<u8>,
    /// The answers to one read's heads, written in one go.
    out: Vec<u8>,
    partial: HashMap<RawFd, Partial>,
}

impl Conns {
    /// Reads what `fd` sent and answers every complete head in it with one write; what the
    /// socket does not take waits for EPOLLOUT.
    unsafe fn serve(&mut self, fd: RawFd) {
        let r = libc::read(fd, self.buf.as_mut_ptr().cast(), self.buf.len());
        if r <= 0 {
            if r == 0 || io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock {
                self.close(fd);
            }
            return;
        }
        let data = &self.buf[..r as usize];
        let out = &mut self.out;
        out.clear();
        let close = match self.partial.get_mut(&fd) {
            // The rare slow path: a head split across reads.
            Some(p) => {
                p.head.extend_from_slice(data);
                let head = std::mem::take(&mut p.head);
                let (close, rest) = answer(&head, out);
                p.head = rest.to_vec();
                close
            }
            None => {
                let (close, rest) = answer(data, out);
                if !rest.is_empty() {
                    self.partial.entry(fd).or_default().head = rest.to_vec();
                }
                close
            }
        };
        if self.out.is_empty() {
            return;
        }
        let w = libc::write(fd, self.out.as_ptr().cast(), self.out.len());
        let written = if w < 0 { 0 } else { w as usize };
        if written < self.out.len() {
            if w < 0 && io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock {
                self.close(fd);
                return;
            }
            let p = self.partial.entry(fd).or_default();
            p.out.extend_from_slice(&self.out[written..]);
            p.close = close;
            let _ = ctl(self.ep, libc::EPOLL_CTL_MOD, fd, libc::EPOLLOUT as u32);
        } else if close {
            self.close(fd);
        }
    }

    unsafe fn close(&mut self, fd: RawFd) {
        self.partial.remove(&fd);
        libc::close(fd);
    }
}

/// Appends one response per complete head in `data`; returns whether a head asked to close and
/// the bytes after the last complete head.
fn answer<'a>(data: &'a [u8], out: &mut Vec<u8>) -> (bool, &'a [u8]) {
    let mut rest = data;
    while let Some(end) = find(rest, b"\r\n\r\n") {
        let head = &rest[..end];
        if wants_close(head) {
            out.extend_from_slice(CLOSING);
            return (true, &[]);
        }
        out.extend_from_slice(RESPONSE);
        rest = &rest[end + 4..];
    }
    (false, rest)
}

fn wants_close(head: &[u8]) -> bool {
    head.split(|b| *b == b'\n').skip(1).any(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        line.len() >= 11
            && line[..11].eq_ignore_ascii_case(b"connection:")
            && line[11..].trim_ascii().eq_ignore_ascii_case(b"close")
    })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Writes what an earlier short write left; back to reading once it is all out.
unsafe fn flush_pending(ep: RawFd, fd: RawFd, partial: &mut HashMap<RawFd, Partial>) {
    let Some(p) = partial.get_mut(&fd) else {
        let _ = ctl(ep, libc::EPOLL_CTL_MOD, fd, libc::EPOLLIN as u32);
        return;
    };
    let w = libc::write(fd, p.out.as_ptr().cast(), p.out.len());
    if w < 0 {
        if io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock {
            partial.remove(&fd);
            libc::close(fd);
        }
        return;
    }
    p.out.drain(..w as usize);
    if p.out.is_empty() {
        if p.close {
            partial.remove(&fd);
            libc::close(fd);
            return;
        }
        let _ = ctl(ep, libc::EPOLL_CTL_MOD, fd, libc::EPOLLIN as u32);
    }
}

unsafe fn ctl(ep: RawFd, op: libc::c_int, fd: RawFd, events: u32) -> io::Result<()> {
    let mut ev = libc::epoll_event {
        events,
        u64: fd as u64,
    };
    if libc::epoll_ctl(ep, op, fd, &mut ev) < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn heads_and_close() {
        let mut out = Vec::new();
        let (close, rest) = answer(
            b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\nHo",
            &mut out,
        );
        assert_eq!((close, rest), (false, &b"GET / HTTP/1.1\r\nHo"[..]));
        assert_eq!(out, RESPONSE);
        out.clear();
        let (close, _) = answer(b"GET / HTTP/1.1\r\nConnection: Close\r\n\r\n", &mut out);
        assert!(close);
        assert_eq!(out, CLOSING);
    }

    #[test]
    fn serves_keep_alive_and_pipelined_requests() {
        let port = crate::procs::free_port().unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        std::thread::spawn(move || run(addr));
        assert!(crate::procs::wait_listening(
            addr,
            std::time::Duration::from_secs(5)
        ));
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(
            b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\nGET /hello HTTP/1.1\r\nHost: x\r\n\r\n",
        )
        .unwrap();
        let mut got = vec![0u8; RESPONSE.len() * 2];
        s.read_exact(&mut got).unwrap();
        assert_eq!(got, [RESPONSE, RESPONSE].concat());
        s.write_all(b"GET /hello HTTP/1.1\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).unwrap();
        assert_eq!(rest, CLOSING);
    }
}
