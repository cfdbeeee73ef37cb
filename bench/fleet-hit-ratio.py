#!/usr/bin/env python3
"""The fleet's hit ratio (issue 52): the same Zipf-distributed requests, sent round robin over
the instances, against
  - one instance with the fleet's memory (the target: 3 x cache_memory),
  - N instances sharding the cache (cache_peers, each cache_memory),
  - N instances each on its own (no sharding: today's fleet, each cache_memory).
The working set is WORKING x one instance's cache_memory. The hit ratio is 1 - origin
requests / requests (the origin's /__total), so every copy kept anywhere counts as it should.

usage: bench/fleet-hit-ratio.py [RAMPART_BIN] [RAMPART_BENCH_BIN]
  env: INSTANCES (3), KEYS (3000), SIZE (16384), REQUESTS (60000), ZIPF (0.9), WORKING (3),
       LOCAL_TTL (2), SEED (52)
"""
import http.client
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time

BIN = sys.argv[1] if len(sys.argv) > 1 else "target/dist/rampart"
BENCH = sys.argv[2] if len(sys.argv) > 2 else "target/dist/rampart-bench"
N = int(os.environ.get("INSTANCES", 3))
KEYS = int(os.environ.get("KEYS", 3000))
SIZE = int(os.environ.get("SIZE", 16384))
REQUESTS = int(os.environ.get("REQUESTS", 60000))
ZIPF = float(os.environ.get("ZIPF", 0.9))
WORKING = float(os.environ.get("WORKING", 3))
LOCAL_TTL = int(os.environ.get("LOCAL_TTL", 2))
SEED = int(os.environ.get("SEED", 52))
THREADS = 4
KEY = "0123456789abcdef0123456789abcdef"

# One instance's memory: the working set is WORKING of it (bodies, plus what each stored
# object costs beside its body: about 1 KiB).
MEMORY = int(KEYS * (SIZE + 1024) / WORKING)


def free_port(ip):
    s = socket.socket()
    s.bind((ip, 0))
    port = s.getsockname()[1]
    s.close()
    return port


def zipf_sequence():
    rng = random.Random(SEED)
    weights = [1.0 / (k + 1) ** ZIPF for k in range(KEYS)]
    return rng.choices(range(KEYS), weights=weights, k=REQUESTS)


def config(me, origin_port, memory, peers, local_ttl):
    lines = [
        f'listening_address = "{me[0]}"',
        f"listening_port_http = {me[1]}",
        "workers = 1",
        'logging_level = "error"',
        "add_logging = false",
        f"cache_memory = {memory}",
    ]
    if peers:
        members = ", ".join(f'"{ip}:{port}"' for ip, port in peers)
        lines += [
            f"cache_peers = [{members}]",
            f'cache_peer_key = "{KEY}"',
            f"cache_peer_local_ttl_seconds = {local_ttl}",
        ]
    lines += [
        "",
        "[[proxy_rules]]",
        'domain = "*"',
        "max_age_seconds = 3600",
        'forward_ipv4 = "127.0.0.1"',
        f"forward_port_http = {origin_port}",
        'rule_type = "Whitelist"',
        "enable_logging = false",
        "ignore_query_string = false",
        "enable_sql_injection_protection = false",
    ]
    return "\n".join(lines) + "\n"


def wait_listening(ip, port):
    for _ in range(200):
        try:
            socket.create_connection((ip, port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {ip}:{port}")


def origin_total(port):
    c = http.client.HTTPConnection("127.0.0.1", port)
    c.request("GET", "/__total")
    n = int(c.getresponse().read().decode().split()[0])
    c.close()
    return n


def run(name, instances, memory, sharded, seq, work, local_ttl=LOCAL_TTL):
    origin_port = free_port("127.0.0.1")
    origin = subprocess.Popen(
        [BENCH, "origin", "--listen", f"127.0.0.1:{origin_port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_listening("127.0.0.1", origin_port)
    addrs = [(f"127.0.0.{i + 2}", 0) for i in range(instances)]
    addrs = [(ip, free_port(ip)) for ip, _ in addrs]
    procs = []
    for a in addrs:
        path = os.path.join(work, f"{name}-{a[0]}.toml")
        with open(path, "w") as f:
            f.write(config(a, origin_port, memory, addrs if sharded else None, local_ttl))
        procs.append(
            subprocess.Popen(
                [BIN, "run", "--config", path],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    for ip, port in addrs:
        wait_listening(ip, port)
    before = origin_total(origin_port)
    errors = [0]

    def client(part):
        conns = [http.client.HTTPConnection(ip, port) for ip, port in addrs]
        for i in range(part, len(seq), THREADS):
            k = seq[i]
            c = conns[i % len(conns)]
            try:
                c.request("GET", f"/obj?k={k}&size={SIZE}", headers={"Host": "fleet.example"})
                r = c.getresponse()
                body = r.read()
                if r.status != 200 or len(body) != SIZE:
                    errors[0] += 1
            except (OSError, http.client.HTTPException):
                errors[0] += 1
                ip, port = addrs[i % len(addrs)]
                conns[i % len(conns)] = http.client.HTTPConnection(ip, port)

    started = time.time()
    threads = [threading.Thread(target=client, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.time() - started
    fetched = origin_total(origin_port) - before
    for p in procs + [origin]:
        p.terminate()
    for p in procs + [origin]:
        p.wait()
    ratio = 1 - fetched / len(seq)
    print(
        f"| {name} | {instances} | {memory / 2**20:.1f} MiB | {fetched} | {ratio:.3f} | {errors[0]} | {took:.0f} s |",
        flush=True,
    )
    return ratio


def main():
    seq = zipf_sequence()
    distinct = len(set(seq))
    print(
        f"{REQUESTS} requests, Zipf {ZIPF} over {KEYS} keys of {SIZE} B ({distinct} asked), "
        f"working set {WORKING:g}x one instance's cache_memory ({MEMORY / 2**20:.1f} MiB), "
        f"round robin over the instances, {THREADS} client threads\n"
    )
    print("| fleet | instances | cache_memory each | origin fetches | hit ratio | errors | time |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as work:
        one = run("one instance, the fleet's memory", 1, MEMORY * N, False, seq, work)
        sharded = run(f"sharded (cache_peers, local copies {LOCAL_TTL} s)", N, MEMORY, True, seq, work)
        run("sharded (cache_peers, no local copies)", N, MEMORY, True, seq, work, 0)
        alone = run("each on its own", N, MEMORY, False, seq, work)
    print(
        f"\nsharded / one instance: {sharded / one:.3f} (goal >= 0.95); "
        f"each on its own / one instance: {alone / one:.3f}"
    )


if __name__ == "__main__":
    main()
