//! rampart configuration.
//!
//! Two layers: the raw, span-preserving TOML document (read through [`reader`]) and the typed
//! [`Config`] that [`validate`] produces from it. Runtime code only ever sees [`Config`].
//! ARC2 Proxy files are accepted unchanged (`docs/arc2.md` is the compatibility statement);
//! rampart's own keys are documented in `docs/configuration.md`.

mod diag;
pub mod edit;
mod effective;
mod matching;
mod model;
mod reader;
pub(crate) mod validate;

pub use diag::{Diagnostic, Severity};
pub use effective::effective;
pub use model::*;
pub use validate::{validate, validate_file, Validated};

/// The file names `rampart run` looks for, in order, when no `--config` is given.
pub const DEFAULT_PATHS: [&str; 2] = ["./rampart.toml", "/etc/rampart/rampart.toml"];

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_fixes;
