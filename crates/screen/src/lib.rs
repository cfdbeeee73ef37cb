//! Request screening for rampart's recv stage, kept free of I/O so each part can be tested and
//! fuzzed on its own:
//!
//! - [`sqli`]: the SQL-injection detector behind a small trait, and [`inspect`], which finds the
//!   values a request carries (decoded path, query names and values, cookies, form and JSON
//!   bodies) and runs the detector over them.
//! - [`ratelimit`]: per-client GCRA limiters (governor) over a key table of bounded size.
//! - [`h1`]: the request-head checks that refuse every request an origin could frame
//!   differently (RFC 9112); rampart's HTTP/1.1 server applies them to each head it parses.

pub mod h1;
pub mod inspect;
pub mod ratelimit;
pub mod sqli;
