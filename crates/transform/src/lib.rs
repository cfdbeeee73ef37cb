//! rampart's response transforms: compression (this crate's codecs), more to come.
pub mod compress;
pub mod minify;
pub mod webp;
