//! Byte level, on both sides of the proxy: reading from a socket, the PROXY protocol header,
//! the two-way byte copy of a switched (WebSocket) connection, connections to origins and
//! the idle ones kept for reuse, and the numbers of HTTP/1.1 framing.

pub mod idle;
pub mod origin_stream;
pub mod proxy_protocol;
pub mod read;
pub mod tunnel;
