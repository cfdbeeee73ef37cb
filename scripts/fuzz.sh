#!/usr/bin/env bash
# A short run of every cargo-fuzz target (CONVENTIONS §10): FUZZ_SECONDS each (default 20).
# Needs a nightly toolchain and cargo-fuzz; without them it says so and exits 0.
# A crash leaves its input in fuzz/artifacts/<target>/ and fails the run.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs=${FUZZ_SECONDS:-20}
if ! cargo +nightly --version >/dev/null 2>&1 || ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: skipped (needs a nightly toolchain and cargo-fuzz)"
  exit 0
fi
targets=(h1_framing request_head response_framing sqli sqli_diff cache_control config certificates transforms proxy_protocol grpc_trailers disk_records h2_connection trace_context)
echo "fuzz: building the targets"
cargo +nightly fuzz build 2>&1 | grep -E "^(error|warning: unused)" -A5 || true
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  if cargo +nightly fuzz run "$t" "corpus/$t" "seeds/$t" -- \
      -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 >"$log" 2>&1; then
    echo "fuzz: $t: $(grep -E '^Done' "$log" | tail -n 1)"
  else
    tail -n 40 "$log"
    echo "fuzz: $t FAILED (input saved under fuzz/artifacts/$t/)"
    exit 1
  fi
done
echo "fuzz: all targets ran without a crash"
