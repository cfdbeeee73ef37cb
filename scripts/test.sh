#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit and end-to-end tests.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
