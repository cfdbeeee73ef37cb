//! Byte level, on both sides of the proxy: reading from a socket, the PROXY protocol header,
//! and the two-way byte copy of a switched (WebSocket) connection.

pub mod proxy_protocol;
pub mod read;
pub mod tunnel;
