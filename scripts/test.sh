#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit and end-to-end tests (including a quick run of
# the benchmark harness against NGINX).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# Build every binary first: the benchmark harness test drives the rampart binary.
cargo build --workspace --locked
cargo test --workspace --locked
