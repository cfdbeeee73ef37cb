#!/usr/bin/env bash
# User-space instructions per request under valgrind's callgrind, which repeat exactly on a
# noisy machine where CPU time moves by several percent: a check for a change to the hit or
# pass path, beside the benchmark suite's CPU µs (docs/benchmarks.md).
#
#   scripts/callgrind.sh target/release/rampart [/tmp/old/rampart ...]
#
# For each binary: rampart with one worker in front of the suite's origin (rampart-bench origin),
# under callgrind; warm-up requests, counters zeroed, N requests (h2load), counters dumped.
# Scenarios: hit (HTTP/1.1 keep-alive, cached 12 B /hello), pass (/template, no-store, to the
# origin over a pooled connection), h2-hit (h2c prior knowledge, /hello). Prints one line per
# binary and scenario. Needs valgrind and h2load (nghttp2-client); the tools are release builds.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n 2,12p "$0"; exit 2; }
N=${N:-20000}
WARM=${WARM:-2000}
bench=${BENCH:-target/release/rampart-bench}
for tool in valgrind callgrind_control h2load; do
  command -v "$tool" >/dev/null || { echo "$tool is not installed" >&2; exit 1; }
done
work=$(mktemp -d)
pids=()
# KEEP=DIR keeps the callgrind files (one per binary and scenario) for callgrind_annotate.
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$work"/cg.* "$KEEP"/ 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 1 600); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listens on $1" >&2; return 1
}
# Instructions counted since the last zeroing, from the newest dump of $1's output files.
instructions() { grep -h '^summary:' "$1".* 2>/dev/null | tail -1 | awk '{print $2}'; }

origin_port=$(free_port)
"$bench" origin --listen "127.0.0.1:$origin_port" >"$work/origin.log" 2>&1 &
pids+=($!)
wait_port "$origin_port"

for bin in "$@"; do
  port=$(free_port); h2_port=$(free_port)
  cat >"$work/rampart.toml" <<EOF
listen = ["127.0.0.1:$port", "127.0.0.1:$h2_port"]
workers = 1
add_logging = false
logging_level = "error"
add_caching = true
cache_memory = "256MiB"

[[proxy_rules]]
domain = "*"
max_age_seconds = 3600
forward_ipv4 = "127.0.0.1"
forward_port_http = $origin_port
rule_type = "Whitelist"
enable_logging = false
ignore_query_string = false
enable_sql_injection_protection = false
enable_compression = false
enable_minification = false
enable_webp_transformation = false
EOF
  out="$work/cg.$(basename "$bin").$$"
  valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" run --config "$work/rampart.toml" \
    >"$work/valgrind.log" 2>&1 &
  vg=$!
  pids+=($vg)
  wait_port "$port"
  for scenario in hit pass h2-hit; do
    case $scenario in
      hit) url="http://127.0.0.1:$port/hello"; proto=(--h1) ;;
      pass) url="http://127.0.0.1:$port/template"; proto=(--h1) ;;
      h2-hit) url="http://127.0.0.1:$h2_port/hello"; proto=() ;;
    esac
    h2load "${proto[@]}" -n "$WARM" -c 16 "$url" >/dev/null
    callgrind_control -z "$vg" >/dev/null 2>&1
    res=$(h2load "${proto[@]}" -n "$N" -c 16 "$url")
    ok=$(echo "$res" | awk '/^status codes:/ {print $3}')
    callgrind_control -d "$scenario" "$vg" >/dev/null 2>&1
    sleep 1
    ir=$(instructions "$out")
    printf '%-40s %-7s %8d instructions per request (%s of %s requests 2xx)\n' \
      "$bin" "$scenario" $((ir / N)) "$ok" "$N"
  done
  kill "$vg"; wait "$vg" 2>/dev/null || true
done
