//! The soak's requests and how each answer is judged. A client draws an [`Op`] (what to ask
//! for), sends it over its protocol, and hands the answer to [`verify`], which knows from the
//! op alone the status and the exact bytes the origin sent: a wrong byte, a missing or extra
//! byte, a range that is not the asked range, an uncacheable answer served to another
//! request, an echo of a body the origin did not receive — each is a wrong body.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::body::{self, checksum, first_difference, obj_size, Kind, Pool};
use super::rampart::HOST;
use super::tally::{Outcome, Tally};

/// The longest a request may take, head and body (a 5 MiB body through a debug build on a
/// loaded machine takes well under a second; a stuck answer is a failure, not a wait).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// What every client shares.
pub struct Ctx {
    pub pool: Pool,
    pub seed: u64,
    pub objects: u64,
    pub tally: Tally,
    /// No request starts after this.
    pub end: Instant,
    pub http: SocketAddr,
    pub https: SocketAddr,
    pub h3: SocketAddr,
    /// TLS for new HTTPS connections (ALPN `http/1.1`) and for QUIC (ALPN `h3`).
    pub tls: Arc<rustls::ClientConfig>,
    pub quic: quinn::ClientConfig,
    pub think: Duration,
    pub header_timeout: Duration,
    sums: Mutex<HashMap<(Kind, u64, usize), u64>>,
}

impl Ctx {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        pool: Pool,
        seed: u64,
        objects: u64,
        tally: Tally,
        end: Instant,
        addrs: (SocketAddr, SocketAddr, SocketAddr),
        tls: Arc<rustls::ClientConfig>,
        quic: quinn::ClientConfig,
        think: Duration,
        header_timeout: Duration,
    ) -> Ctx {
        Ctx {
            pool,
            seed,
            objects: objects.max(10),
            tally,
            end,
            http: addrs.0,
            https: addrs.1,
            h3: addrs.2,
            tls,
            quic,
            think,
            header_timeout,
            sums: Mutex::new(HashMap::new()),
        }
    }

    pub fn running(&self) -> bool {
        Instant::now() < self.end
    }

    /// The checksum of a body the origin sends (memoised: large objects are asked often).
    fn sum(&self, kind: Kind, key: u64, b: &Bytes) -> u64 {
        let k = (kind, key, b.len());
        if let Some(s) = self.sums.lock().ok().and_then(|m| m.get(&k).copied()) {
            return s;
        }
        let s = checksum(b);
        if let Ok(mut m) = self.sums.lock() {
            if m.len() < 100_000 {
                m.insert(k, s);
            }
        }
        s
    }

    /// The id of a large object (1–5 MiB).
    pub fn large_id(&self, rng: &mut Rng) -> u64 {
        let n = (self.objects / 25).max(1);
        rng.below(n) * 25 + 7
    }
}

/// A small PRNG per client (splitmix64).
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        body::mix(self.0)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// One request.
#[derive(Debug, Clone)]
pub enum Op {
    /// A cacheable object: hits and misses.
    Get { id: u64 },
    /// Bytes `first..=last` of a cacheable object.
    Range { id: u64, first: usize, last: usize },
    /// An uncacheable answer keyed by a nonce header (not by the URL).
    Pass { id: u64, nonce: u64, size: usize },
    /// A POST whose body the origin sums.
    Post { nonce: u64, size: usize },
    /// An object whose answers the origin cuts every other time.
    Flaky { id: u64 },
    /// A purge of a cacheable object.
    Purge { id: u64 },
}

/// Draws the next request: mostly objects from a hot set (hits), the rest spread over every
/// object (misses, evictions), and some of each other kind.
pub fn pick(ctx: &Ctx, rng: &mut Rng) -> Op {
    let r = rng.below(100);
    let object = |rng: &mut Rng| {
        if rng.below(10) < 7 {
            rng.below((ctx.objects / 5).max(1))
        } else {
            rng.below(ctx.objects)
        }
    };
    match r {
        0..55 => Op::Get { id: object(rng) },
        55..65 => {
            let id = object(rng);
            let size = obj_size(ctx.seed, id);
            let first = rng.below(size as u64) as usize;
            let len = rng.below((size - first).min(256 << 10) as u64) as usize;
            Op::Range {
                id,
                first,
                last: first + len,
            }
        }
        65..77 => Op::Pass {
            id: rng.below(16),
            nonce: rng.next(),
            size: 1 + rng.below(32 << 10) as usize,
        },
        77..87 => Op::Post {
            nonce: rng.next(),
            size: if rng.below(10) == 0 {
                1 + rng.below(1 << 20) as usize
            } else {
                1 + rng.below(64 << 10) as usize
            },
        },
        _ => {
            // Eight URLs per 10 s: each is asked several times, so a cut answer is asked again.
            let epoch = (ctx.tally.now_s() / 10.0) as u64;
            Op::Flaky {
                id: epoch * 8 + rng.below(8),
            }
        }
    }
}

/// The size of flaky object `id`.
pub fn flaky_size(seed: u64, id: u64) -> usize {
    2048 + (body::mix(seed ^ 0xF1A4 ^ id) % (256 << 10)) as usize
}

impl Op {
    pub fn name(&self) -> &'static str {
        match self {
            Op::Get { .. } => "get",
            Op::Range { .. } => "range",
            Op::Pass { .. } => "pass",
            Op::Post { .. } => "post",
            Op::Flaky { .. } => "flaky",
            Op::Purge { .. } => "purge",
        }
    }

    /// Whether it may be sent again after a connection closed before any byte of the answer.
    pub fn idempotent(&self) -> bool {
        !matches!(self, Op::Post { .. })
    }

    pub fn method(&self) -> &'static str {
        match self {
            Op::Post { .. } => "POST",
            Op::Purge { .. } => "PURGE",
            _ => "GET",
        }
    }

    pub fn path(&self, ctx: &Ctx) -> String {
        match self {
            Op::Get { id } | Op::Range { id, .. } | Op::Purge { id } => {
                format!("/obj/{id}?size={}", obj_size(ctx.seed, *id))
            }
            Op::Pass { id, size, .. } => format!("/pass/{id}?size={size}"),
            Op::Post { .. } => "/echo".to_owned(),
            Op::Flaky { id } => format!("/flaky/{id}?size={}", flaky_size(ctx.seed, *id)),
        }
    }

    /// Header fields beside `Host`.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        match self {
            Op::Range { first, last, .. } => vec![("range", format!("bytes={first}-{last}"))],
            Op::Pass { nonce, .. } => vec![("x-soak-nonce", nonce.to_string())],
            _ => Vec::new(),
        }
    }

    pub fn body(&self, ctx: &Ctx) -> Bytes {
        match self {
            Op::Post { nonce, size } => ctx.pool.body(Kind::Post, *nonce, *size),
            _ => Bytes::new(),
        }
    }

    /// The request as `http` types: with `scheme`, an absolute URI (HTTP/2 and HTTP/3 take
    /// `:scheme` and `:authority` from it); without, a path and a `Host` field (HTTP/1.1).
    pub fn request<B>(&self, ctx: &Ctx, scheme: Option<&str>, body: B) -> http::Request<B> {
        let mut b = http::Request::builder().method(self.method());
        b = match scheme {
            Some(scheme) => b.uri(format!("{scheme}://{HOST}{}", self.path(ctx))),
            None => b.uri(self.path(ctx)).header("host", HOST),
        };
        for (k, v) in self.headers() {
            b = b.header(k, v);
        }
        // invariant: the method, URI and header values are built above from valid parts.
        b.body(body).expect("a valid request")
    }

    /// The request as HTTP/1.1 bytes (the hand-written clients), `Connection: close`.
    pub fn request_bytes(&self, ctx: &Ctx) -> Vec<u8> {
        let body = self.body(ctx);
        let mut s = format!(
            "{} {} HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n",
            self.method(),
            self.path(ctx)
        );
        for (k, v) in self.headers() {
            s.push_str(&format!("{k}: {v}\r\n"));
        }
        if matches!(self, Op::Post { .. }) {
            s.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        s.push_str("\r\n");
        let mut v = s.into_bytes();
        v.extend_from_slice(&body);
        v
    }
}

/// Whether `status` is one a proxy answers when its origin failed.
fn origin_failure(status: u16) -> bool {
    matches!(status, 500 | 502 | 503 | 504)
}

fn failed(cause: impl Into<String>, detail: impl Into<String>) -> Outcome {
    Outcome::Failed {
        cause: cause.into(),
        detail: detail.into(),
    }
}

/// Compares a body with the bytes it must be.
fn same(what: &str, got: &[u8], want: &[u8]) -> Outcome {
    match first_difference(got, want) {
        None => Outcome::Ok,
        Some(at) => Outcome::Wrong(format!(
            "{what}: {} bytes, expected {}; first difference at byte {at}",
            got.len(),
            want.len()
        )),
    }
}

/// Judges a complete answer (status, `x-soak-sum`, `Content-Range`, body) to `op`.
pub fn verify(
    ctx: &Ctx,
    op: &Op,
    status: u16,
    header: &dyn Fn(&str) -> Option<String>,
    got: &[u8],
) -> Outcome {
    let what = format!("{} {} → {status}", op.method(), op.path(ctx));
    if origin_failure(status) {
        return failed(format!("status {status}"), what);
    }
    let sum_matches = |kind: Kind, key: u64, want: &Bytes| match header("x-soak-sum") {
        Some(s) if s != format!("{:016x}", ctx.sum(kind, key, want)) => Some(Outcome::Wrong(
            format!("{what}: x-soak-sum {s} is not the object's"),
        )),
        _ => None,
    };
    match op {
        Op::Get { id } | Op::Flaky { id } => {
            let kind = if matches!(op, Op::Flaky { .. }) {
                Kind::Flaky
            } else {
                Kind::Obj
            };
            let size = if kind == Kind::Flaky {
                flaky_size(ctx.seed, *id)
            } else {
                obj_size(ctx.seed, *id)
            };
            if status != 200 {
                return failed(format!("unexpected status {status}"), what);
            }
            let want = ctx.pool.body(kind, *id, size);
            sum_matches(kind, *id, &want).unwrap_or_else(|| same(&what, got, &want))
        }
        Op::Range { id, first, last } => {
            let size = obj_size(ctx.seed, *id);
            let want = ctx.pool.body(Kind::Obj, *id, size);
            if let Some(w) = sum_matches(Kind::Obj, *id, &want) {
                return w;
            }
            match status {
                200 => same(&what, got, &want),
                206 => {
                    let expected = format!("bytes {first}-{last}/{size}");
                    match header("content-range") {
                        Some(cr) if cr == expected => same(&what, got, &want[*first..=*last]),
                        other => Outcome::Wrong(format!(
                            "{what}: Content-Range {other:?}, expected {expected:?}"
                        )),
                    }
                }
                _ => failed(format!("unexpected status {status}"), what),
            }
        }
        Op::Pass { nonce, size, .. } => {
            if status != 200 {
                return failed(format!("unexpected status {status}"), what);
            }
            same(&what, got, &ctx.pool.body(Kind::Pass, *nonce, *size))
        }
        Op::Post { nonce, size } => {
            if status != 200 {
                return failed(format!("unexpected status {status}"), what);
            }
            let sent = ctx.pool.body(Kind::Post, *nonce, *size);
            let want = format!("{} {:016x}", sent.len(), checksum(&sent));
            if got == want.as_bytes() {
                Outcome::Ok
            } else {
                Outcome::Wrong(format!(
                    "{what}: the origin received {:?}, the client sent {want:?}",
                    String::from_utf8_lossy(&got[..got.len().min(80)])
                ))
            }
        }
        Op::Purge { .. } => match status {
            200 | 404 => Outcome::Ok,
            _ => failed(format!("unexpected status {status}"), what),
        },
    }
}
