#!/usr/bin/env bash
# A collector that stops answering under load: rampart traces every request
# (`tracing_sampler = "always_on"`) to a real Jaeger while wrk keeps it busy, and Jaeger is
# stopped (SIGSTOP: connections are accepted, never answered) for STOP seconds, then resumed.
# Each window of WINDOW seconds prints the requests per second, wrk's latency (p50, p99), the
# server CPU µs per request, rampart's RSS, and the exporter's counters (exported, dropped,
# failed, queued) from /_rampart/metrics: latency, CPU and memory should not move while the
# collector is away, the drops should be counted, and export should resume after.
#
# Method: rampart (1 worker) and the origin on SERVER_CPU, wrk and Jaeger on LOAD_CPU; a mix of
# cached hits (/hello) and passes (/hello-pass), 16 connections each.
#
# usage: bench/tracing-collector-stop.sh [RAMPART_BIN] [RAMPART_BENCH_BIN]
#   JAEGER_BIN (default: $(go env GOPATH)/bin/jaeger), WINDOW (10), STOP (60)
set -euo pipefail
BIN=${1:-target/dist/rampart}
BENCH=${2:-target/dist/rampart-bench}
JAEGER=${JAEGER_BIN:-$(go env GOPATH)/bin/jaeger}
WINDOW=${WINDOW:-10}
STOP=${STOP:-60}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
for t in wrk curl taskset; do command -v $t >/dev/null || { echo "needs $t"; exit 1; }; done
[ -x "$JAEGER" ] || { echo "needs Jaeger at $JAEGER (see .ci/run)"; exit 1; }
W=$(mktemp -d)
pids=()
trap 'kill -CONT "${pids[@]}" 2>/dev/null; kill "${pids[@]}" 2>/dev/null; rm -rf "$W"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
P_ORIGIN=$(free_port); P_PROXY=$(free_port); P_OTLP=$(free_port); P_GRPC=$(free_port)
P_QUERY=$(free_port); P_QGRPC=$(free_port); P_HEALTH=$(free_port)

cat > "$W/jaeger.yaml" <<EOF
service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces: {receivers: [otlp], exporters: [jaeger_storage_exporter]}
  telemetry: {metrics: {level: none}, logs: {level: warn}}
extensions:
  jaeger_storage: {backends: {memstore: {memory: {max_traces: 20000}}}}
  jaeger_query:
    storage: {traces: memstore}
    enable_tracing: false
    http: {endpoint: "127.0.0.1:$P_QUERY"}
    grpc: {endpoint: "127.0.0.1:$P_QGRPC"}
  healthcheckv2: {use_v2: true, http: {endpoint: "127.0.0.1:$P_HEALTH"}}
receivers:
  otlp: {protocols: {grpc: {endpoint: "127.0.0.1:$P_GRPC"}, http: {endpoint: "127.0.0.1:$P_OTLP"}}}
exporters:
  jaeger_storage_exporter: {trace_storage: memstore}
EOF
cat > "$W/rampart.toml" <<EOF
listening_address = "127.0.0.1"
listening_port_http = $P_PROXY
workers = 1
add_logging = false
logging_level = "error"
add_caching = true
metrics_allow = ["127.0.0.1"]
tracing_endpoint = "http://127.0.0.1:$P_OTLP"
tracing_sampler = "always_on"

[[proxy_rules]]
domain = "*"
max_age_seconds = 3600
forward_ipv4 = "127.0.0.1"
forward_port_http = $P_ORIGIN
rule_type = "Whitelist"
enable_logging = false
ignore_query_string = false
enable_sql_injection_protection = false
EOF

taskset -c "$LOAD_CPU" "$JAEGER" --config "$W/jaeger.yaml" > "$W/jaeger.log" 2>&1 & pids+=($!); JPID=$!
taskset -c "$SERVER_CPU" "$BENCH" origin --listen "127.0.0.1:$P_ORIGIN" > "$W/origin.log" 2>&1 & pids+=($!)
taskset -c "$SERVER_CPU" "$BIN" run --config "$W/rampart.toml" > "$W/rampart.log" 2>&1 & pids+=($!); RPID=$!
for _ in $(seq 100); do
  curl -sf "127.0.0.1:$P_HEALTH/status" >/dev/null && curl -sf -o /dev/null "127.0.0.1:$P_PROXY/hello" && break
  sleep 0.1
done

CLK=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' /proc/$RPID/stat; }
rss() { awk '/VmRSS/ {print $2}' /proc/$RPID/status; }
counter() { curl -s "127.0.0.1:$P_PROXY/_rampart/metrics" | awk -v n="$1" '$1 == n {print $2}'; }
# One window: both URLs under load at once; prints a table row.
window() {
  local label=$1 c0 c1
  c0=$(cpu)
  taskset -c "$LOAD_CPU" wrk -t1 -c16 -d"${WINDOW}s" --latency "http://127.0.0.1:$P_PROXY/hello" > "$W/hit.txt" &
  local hits=$!
  taskset -c "$LOAD_CPU" wrk -t1 -c16 -d"${WINDOW}s" --latency "http://127.0.0.1:$P_PROXY/hello-pass" > "$W/pass.txt"
  wait "$hits"
  c1=$(cpu)
  local n=0 rps p50 p99
  for f in hit pass; do
    n=$((n + $(awk '/requests in/ {print $1}' "$W/$f.txt")))
  done
  rps=$((n / WINDOW))
  p50=$(awk '$1 == "50%" {print $2}' "$W/pass.txt"); p99=$(awk '$1 == "99%" {print $2}' "$W/pass.txt")
  local us; us=$(awk -v a="$c0" -v b="$c1" -v n="$n" -v k="$CLK" 'BEGIN {printf "%.2f", (b - a) / k * 1e6 / n}')
  printf '| %s | %s | %s / %s | %s | %s | %s | %s | %s | %s |\n' "$label" "$rps" "$p50" "$p99" "$us" \
    "$(rss)" "$(counter rampart_trace_spans_exported_total)" "$(counter rampart_trace_spans_dropped_total)" \
    "$(counter rampart_trace_spans_failed_total)" "$(counter rampart_trace_spans_queued)"
}

echo "| window | requests/s | pass p50 / p99 | CPU µs/request | RSS KiB | exported | dropped | failed | queued |"
echo "|---|---|---|---|---|---|---|---|---|"
window "collector up"
window "collector up"
kill -STOP "$JPID"
for i in $(seq $((STOP / WINDOW))); do window "collector stopped ($((i * WINDOW)) s)"; done
kill -CONT "$JPID"
window "collector back"
window "collector back"
