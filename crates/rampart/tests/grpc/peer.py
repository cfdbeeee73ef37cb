#!/usr/bin/env python3
"""A real gRPC server and client (Python grpcio) for rampart's end-to-end tests.

No generated code: the methods of `echo.Echo` take and return raw bytes.

  peer.py serve [CHAIN KEY]     serve on 127.0.0.1 (TLS with CHAIN/KEY), print the port, stop
                                when stdin closes
  peer.py call PORT AUTHORITY   call every method through 127.0.0.1:PORT (HTTP/2 without TLS,
                                `:authority` AUTHORITY), print one JSON line of what came back
"""
import itertools
import json
import queue
import sys
from concurrent import futures

import grpc

SERVICE = "echo.Echo"
CALLS = itertools.count(1)


def unary(request, context):
    md = dict(context.invocation_metadata())
    if request == b"seq":
        return str(next(CALLS)).encode()
    if request == b"fail":
        context.set_trailing_metadata((("x-why", "asked to"),))
        context.abort(grpc.StatusCode.NOT_FOUND, "nothing here")
    context.set_trailing_metadata((("x-trailer", "kept"),))
    if len(request) > 1024:
        return b"%d bytes" % len(request)
    seen = "|".join(f"{k}={md.get(k, '')}" for k in ("via", "x-forwarded-for"))
    return request + b"|" + seen.encode()


def count(request, context):
    for i in range(int(request)):
        yield str(i).encode()


def total(requests, context):
    return str(sum(len(r) for r in requests)).encode()


def chat(requests, context):
    for r in requests:
        yield b"echo:" + r


def greet(requests, context):
    # Speaks first: the client sends nothing until it has this.
    yield b"hi"
    for r in requests:
        yield b"echo:" + r


def serve(tls):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    handlers = {
        "Unary": grpc.unary_unary_rpc_method_handler(unary),
        "Count": grpc.unary_stream_rpc_method_handler(count),
        "Total": grpc.stream_unary_rpc_method_handler(total),
        "Chat": grpc.stream_stream_rpc_method_handler(chat),
        "Greet": grpc.stream_stream_rpc_method_handler(greet),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    if tls:
        chain, key = (open(p, "rb").read() for p in tls)
        port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([(key, chain)]))
    else:
        port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    sys.stdin.read()
    server.stop(0)


def call(port, authority):
    channel = grpc.insecure_channel(
        f"127.0.0.1:{port}", options=[("grpc.default_authority", authority)]
    )
    path = lambda m: f"/{SERVICE}/{m}"
    out = {}
    unary_call = channel.unary_unary(path("Unary"))
    reply, call = unary_call.with_call(b"hello", timeout=20)
    out["unary"] = reply.decode()
    out["trailers"] = dict(call.trailing_metadata())
    try:
        unary_call(b"fail", timeout=20)
        out["fail"] = "succeeded"
    except grpc.RpcError as e:
        out["fail"] = {
            "code": e.code().name,
            "details": e.details(),
            "trailers": dict(e.trailing_metadata() or ()),
        }
    out["seq"] = [unary_call(b"seq", timeout=20).decode() for _ in range(2)]
    out["large"] = unary_call(b"x" * (3 * 1024 * 1024), timeout=20).decode()
    out["count"] = [r.decode() for r in channel.unary_stream(path("Count"))(b"5", timeout=20)]
    out["total"] = channel.stream_unary(path("Total"))(
        iter([b"a" * 10, b"b" * 20, b"c" * 30]), timeout=20
    ).decode()
    # Ping-pong: each message is sent only after the answer to the one before arrived, so the
    # call finishes only if both directions stream through the proxy.
    outbox = queue.Queue()

    def messages():
        while (m := outbox.get()) is not None:
            yield m

    outbox.put(b"0")
    got = []
    for r in channel.stream_stream(path("Chat"))(messages(), timeout=20):
        got.append(r.decode())
        outbox.put(None if len(got) == 5 else str(len(got)).encode())
    out["chat"] = got
    # The server speaks first: rampart must not wait for the client's first message.
    outbox = queue.Queue()
    got = []
    for r in channel.stream_stream(path("Greet"))(messages(), timeout=20):
        got.append(r.decode())
        outbox.put(None if len(got) == 2 else b"after-hi")
    out["greet"] = got
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2:4] if len(sys.argv) > 3 else None)
    else:
        call(int(sys.argv[2]), sys.argv[3])
