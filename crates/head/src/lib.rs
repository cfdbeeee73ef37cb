//! The head of an HTTP message as rampart's pipeline carries it, from the parse that made it to
//! the write that sends it.
//!
//! - [`Fields`]: the field lines in the order they arrived, in one vector. A head has a handful
//!   of fields and the pipeline asks for a few of them by name, so a scan over the lines costs
//!   less than the hashing, index and bucket list of `http::HeaderMap`, and building it is one
//!   push per line. The API is the subset of `HeaderMap`'s rampart uses, with the same meaning
//!   (`insert` replaces every line of the name, `get` is the first, `get_all` all in order).
//! - [`Request`] and [`Response`]: method, target, version, fields, extensions and a body, as in
//!   the `http` crate, but over [`Fields`]. Libraries that need `http`'s types (hyper for
//!   HTTP/2 to origins, h3) are given them at their edge ([`Request::into_http`],
//!   [`Response::from_http`] and their mirrors).

mod fields;
pub mod request;
pub mod response;

pub use fields::{FieldKey, Fields, GetAll, IntoFieldName, Iter};
pub use request::Request;
pub use response::Response;
