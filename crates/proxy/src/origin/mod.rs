//! The origins: a rule's upstreams with their balancing and passive health, the per-worker
//! pool of keep-alive connections, the connector (TCP, TLS, PROXY header) and HTTP/2 to origins.

pub mod connect;
pub mod fields;
pub mod h1;
pub mod h2;
pub mod pool;
