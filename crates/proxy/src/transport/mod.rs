//! Socket → request: listening sockets, the accepted connection (PROXY header, TLS, ALPN),
//! connection limits, and the HTTP/1.1, HTTP/2 and HTTP/3 servers that turn bytes into
//! requests for the pipeline and its responses back into bytes.

pub mod accept;
pub mod h3;
pub(crate) mod idle;
pub mod in_force;
pub mod limits;
pub mod linger;
pub mod listen;
pub mod malformed;
pub mod park;
pub mod send_timeout;
