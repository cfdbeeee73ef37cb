#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit and end-to-end tests (including a quick run of
# the benchmark harness against NGINX), then a short fuzz run of every target. Ends with one
# line: "tests: N passed, M failed".
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# Build every binary first: the benchmark harness test drives the rampart binary.
cargo build --workspace --locked
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
# No doc tests (the crates have none); unit, binary and integration tests.
cargo test --workspace --locked --no-fail-fast --lib --bins --tests 2>&1 | tee "$log" || status=$?
# A short run of every fuzz target (FUZZ_SECONDS each); a crash fails the suite.
./scripts/fuzz.sh || status=$?
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
