//! The origins: a rule's origins with their balancing and shared health (`balance.rs`), the
//! order a request tries them in with failover, health marking and the latency average
//! (`failover.rs`), a worker's client to them (`client.rs`: HTTP/1.1 in `h1/`, HTTP/2 in
//! `h2.rs`), the connector (TCP, TLS, PROXY header: `connect.rs`), and the request as it goes
//! out (`fields.rs`).

pub mod balance;
pub mod client;
pub mod connect;
pub mod failover;
pub mod fields;
pub mod fleet;
pub mod h2;
