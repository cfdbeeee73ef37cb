//! What a request may do: its rule by host and path (routing), the path as rules match it
//! (normalisation), screening (addresses, user agents, rates, sizes, SQL injection), and what a
//! rule does to requests and answers on their way (rewrites, redirects, field rules, error
//! pages).

pub mod path;
pub mod rewrite;
pub mod route;
pub mod screening;
