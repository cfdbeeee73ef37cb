//! rampart's shared HTTP cache (RFC 9111).
//!
//! - [`conditional`]: conditional requests (304), revalidation validators and 304 merging,
//!   single byte ranges with If-Range;
//! - [`cache_control`]: Cache-Control and Pragma directives;
//! - [`encoding`]: content codings and `Accept-Encoding` negotiation;
//! - [`freshness`]: freshness lifetime and age;
//! - [`vary`]: Vary and variant keys;
//! - [`key`]: cache keys (host + URL, never shared between hosts);
//! - [`storable`]: what may be stored, and when a stored response may be used;
//! - [`object`]: stored objects, their encoded and WebP copies, and what they are charged;
//! - [`store`]: the in-memory store with a hard byte budget;
//! - [`index`]: the sharded index under the store, with its admission and eviction policy;
//! - [`portable`]: stored objects as bytes, for the tier instances share through Redis and the
//!   disk tier's records;
//! - [`disk`]: the second tier, on disk: larger than memory, kept across restarts;
//! - [`extent`]: a body kept on disk, read a chunk at a time.

pub mod cache_control;
pub mod conditional;
pub mod disk;
pub mod encoding;
pub mod extent;
pub mod freshness;
pub mod index;
pub mod key;
pub mod object;
pub mod portable;
pub mod purge;
pub mod storable;
pub mod store;
mod tags;
pub mod targeted;
pub mod vary;

#[cfg(test)]
mod testutil;
