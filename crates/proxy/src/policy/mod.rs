//! What a request may do: its rule by host and path (routing), the path as rules match it
//! (normalisation), and screening (addresses, user agents, rates, sizes, SQL injection).

pub mod path;
pub mod route;
pub mod screening;
