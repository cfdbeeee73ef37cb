#!/usr/bin/env bash
# Interim benchmark (until the bench suite lands), 1 worker, 64 keep-alive connections,
# rampart vs NGINX (upstream keepalive, HTTP/1.1 to the origin):
#   MODE=pass (default): no caching, every request to the origin (2 KB page);
#   MODE=hit: a cached 12-byte "Hello World!" (NGINX proxy_cache; rampart's cache);
#   MODE=image: a cached 73,000-byte JPEG-sized object (bytes/s matter here). Method per shared/BENCHMARKING.md: servers (proxy + origin) pinned to CPU 0, wrk to
# CPU 1, interleaved rounds, medians; server CPU µs/request from /proc/PID/stat of the proxy.
#
# QUERY="?q=running+shoes&page=2" appends a query string to the URL; every rampart rule has
# enable_sql_injection_protection = true, so a variant with `add_sql_injection_protection = true`
# screens it (the default variant does not).
#
# UNIQUE=1 makes wrk send a different `q` value with every request (UNIQUE_VALUE + a counter), so screening
# cannot reuse a verdict; the rule then sets ignore_query_string = true so rampart still hits its
# cache (NGINX's cache key includes the query: its column is not comparable in that mode).
#
# usage: bench/proxy-vs-nginx.sh [ROUNDS] [SECONDS] [RAMPART_BIN]
set -euo pipefail
ROUNDS=${1:-3}
SECS=${2:-10}
BIN=${3:-target/dist/rampart}
CONNS=${CONNS:-64}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
EXTRA=${RAMPART_EXTRA:-}
command -v nginx >/dev/null || { echo "needs nginx (apt-get install nginx)"; exit 1; }
command -v wrk >/dev/null || { echo "needs wrk (apt-get install wrk)"; exit 1; }
W=$(mktemp -d); chmod 755 $W  # NGINX workers run unprivileged and write the cache here
trap 'kill $(cat $W/*.pid 2>/dev/null) 2>/dev/null; rm -rf $W' EXIT
CLK=$(getconf CLK_TCK)

ORIGIN_PORT=18981; NGINX_PORT=18982; RAMPART_PORT=18983
MODE=${MODE:-pass}
URL_PATH=/
if [ "$MODE" = image ]; then
  head -c 73000 /dev/urandom > $W/img.jpg; chmod 644 $W/img.jpg
  URL_PATH=/img.jpg
  BODY="unused"
  ORIGIN_CC='add_header Cache-Control "max-age=3600";'
  NGINX_CACHE="proxy_cache_path $W/nginx-cache keys_zone=mycache:60m; "
  NGINX_LOC_CACHE="proxy_cache mycache; proxy_cache_valid any 60m;"
  RAMPART_CACHE="add_caching = true"
elif [ "$MODE" = hit ]; then
  BODY="Hello World!"
  ORIGIN_CC='add_header Cache-Control "max-age=3600";'
  NGINX_CACHE="proxy_cache_path $W/nginx-cache keys_zone=mycache:60m; "
  NGINX_LOC_CACHE="proxy_cache mycache; proxy_cache_valid any 60m;"
  RAMPART_CACHE="add_caching = true"
else
  # A 2 KB page, like a rendered template.
  BODY=$(head -c 2048 /dev/zero | tr '\0' 'a')
  ORIGIN_CC=""; NGINX_CACHE=""; NGINX_LOC_CACHE=""
  RAMPART_CACHE="add_caching = false"
fi
URL_PATH=$URL_PATH${QUERY:-}
RULE_EXTRA=""
WRK_ARGS=()
if [ "${UNIQUE:-0}" = 1 ]; then
  RULE_EXTRA="ignore_query_string = true"
  cat > $W/unique.lua <<LUA
local n = 0
request = function()
  n = n + 1
  return wrk.format("GET", "/?q=${UNIQUE_VALUE:-running+shoes+size+}" .. n .. "&page=2&sort=price")
end
LUA
  WRK_ARGS=(-s $W/unique.lua)
fi
cat > $W/origin.conf <<CONF
worker_processes 1; daemon off; pid $W/origin.nginxpid; error_log stderr error;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 10000000;
  server { listen 127.0.0.1:$ORIGIN_PORT;
    location / { default_type text/html; $ORIGIN_CC return 200 "$BODY"; }
    location = /img.jpg { root $W; default_type image/jpeg; $ORIGIN_CC } } }
CONF
cat > $W/nginx.conf <<CONF
worker_processes 1; daemon off; pid $W/proxy.nginxpid; error_log stderr error;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 10000000; $NGINX_CACHE
  upstream origin { server 127.0.0.1:$ORIGIN_PORT; keepalive 32; }
  server { listen 127.0.0.1:$NGINX_PORT;
    location / { proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection ""; $NGINX_LOC_CACHE } } }
CONF
# Variants of rampart to compare, "name[:binary]=extra toml line" separated by ';'.
VARIANTS=${VARIANTS:-"rampart=$EXTRA"}
taskset -c $SERVER_CPU nginx -c $W/origin.conf -p $W & echo $! > $W/origin.pid
taskset -c $SERVER_CPU nginx -c $W/nginx.conf -p $W & echo $! > $W/nginx.pid
names=(); ports=(); port=$RAMPART_PORT
IFS=';' read -ra vs <<< "$VARIANTS"
for v in "${vs[@]}"; do
  name=${v%%=*}; extra=${v#*=}; bin=$BIN
  case $name in *:*) bin=${name#*:}; name=${name%%:*};; esac
  cat > $W/$name.toml <<CONF
listen = ["127.0.0.1:$port"]
workers = 1
add_logging = false
logging_level = "error"
$RAMPART_CACHE
$extra
[[proxy_rules]]
domain = "*"
max_age_seconds = 3600
forward_ipv4 = "127.0.0.1"
forward_port_http = $ORIGIN_PORT
enable_sql_injection_protection = true
$RULE_EXTRA
CONF
  taskset -c $SERVER_CPU $bin run --config $W/$name.toml > $W/$name.log 2>&1 & echo $! > $W/$name.pid
  names+=($name); ports+=($port); port=$((port+1))
done
sleep 1
# The process doing the work: nginx's worker (child of the master), rampart itself.
nginx_worker=$(pgrep -P $(cat $W/nginx.pid) | head -1)
cpu_ticks() { awk '{print $14+$15}' /proc/$1/stat; }

run() { # name pid port
  local t0=$(cpu_ticks $2)
  local out=$(taskset -c $LOAD_CPU wrk -t1 -c$CONNS -d${SECS}s --latency "${WRK_ARGS[@]}" http://127.0.0.1:$3$URL_PATH 2>&1)
  local t1=$(cpu_ticks $2)
  local reqs=$(echo "$out" | awk '/requests in/ {print $1}')
  local rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
  local p50=$(echo "$out" | awk '$1=="50%" {print $2}')
  local p99=$(echo "$out" | awk '$1=="99%" {print $2}')
  local errs=$(echo "$out" | awk '/Non-2xx|Socket errors/ {print}' | tr '\n' ' ')
  local xfer=$(echo "$out" | awk '/Transfer\/sec/ {print $2}')
  local us=$(awk -v t=$((t1-t0)) -v r=$reqs -v c=$CLK 'BEGIN {printf "%.2f", t/c*1e6/r}')
  echo "$1 $rps $us $p50 $p99 $xfer ${errs:-0}" | tee -a $W/results
}
for p in ${ports[@]} $NGINX_PORT; do curl -sf -o /dev/null http://127.0.0.1:$p$URL_PATH || { echo "port $p not serving"; curl -si http://127.0.0.1:$p/ | head -5; cat $W/*.log; exit 1; }; done
for p in ${ports[@]} $NGINX_PORT; do taskset -c $LOAD_CPU wrk -t1 -c$CONNS -d2s http://127.0.0.1:$p$URL_PATH >/dev/null; done
echo "name req/s cpu_us/req p50 p99 transfer/s errors"
for r in $(seq $ROUNDS); do
  run nginx $nginx_worker $NGINX_PORT
  for i in ${!names[@]}; do run ${names[$i]} $(cat $W/${names[$i]}.pid) ${ports[$i]}; done
done
echo "--- medians (req/s, server CPU µs/request)"
for n in $(awk "{print \$1}" $W/results | sort -u); do
  awk -v n=$n '$1==n {print $2, $3, $6}' $W/results | sort -g -k2 | awk -v n=$n '{a[NR]=$1; b[NR]=$2; c[NR]=$3} END {m=int((NR+1)/2); printf "%-8s %10s req/s  %6s µs/req (cpu min %s max %s)  %s/s\n", n, a[m], b[m], b[1], b[NR], c[m]}'
done
