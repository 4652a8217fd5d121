#!/usr/bin/env python3
"""A SPIFFE Workload API server for tests, written from the public
specification (the SPIFFE Workload API and X.509-SVID documents), not from
any SPIFFE implementation's code.

It serves one RPC, FetchX509SVID (service SpiffeWorkloadAPI, no package),
over a Unix socket, streaming X509SVIDResponse messages encoded by hand in
the protobuf wire format, with the spec's field numbers:

    X509SVIDRequest  {}
    X509SVIDResponse { repeated X509SVID svids = 1;
                       repeated bytes crl = 2;
                       map<string, bytes> federated_bundles = 3; }
    X509SVID         { string spiffe_id = 1; bytes x509_svid = 2;
                       bytes x509_svid_key = 3; bytes bundle = 4;
                       string hint = 5; }

x509_svid and bundle are concatenated DER certificates; x509_svid_key is a
PKCS#8 DER key. As the spec requires, a request without the
`workload.spiffe.io: true` metadata is refused (InvalidArgument).

A test drives it through a control socket: one JSON object a line, one
JSON answer a line.
    {"op": "push", "svids": [{"id": ID, "chain": [B64 DER...],
     "key": B64 DER, "bundle": [B64 DER...]}], "federated": {TD: [B64...]},
     "crl": [B64 DER...]}      the new context, sent to every open stream
    {"op": "push_raw", "b64": B64}  one message of arbitrary bytes
    {"op": "drop"}             ends every open stream (Unavailable)
    {"op": "stop"}             stops serving (the socket goes away)
    {"op": "start"}            serves again on the same socket
    {"op": "stats"}            requests, refused (no metadata), open streams

Usage: agent.py --socket PATH --control PATH   (prints "ready" when both
listen);  agent.py --selftest   (checks the metadata rule on itself).
"""

import argparse
import base64
import json
import os
import socketserver
import sys
import tempfile
import threading
from concurrent import futures

import grpc

SERVICE = "SpiffeWorkloadAPI"
METHOD = "FetchX509SVID"
HEADER = "workload.spiffe.io"


# --- protobuf wire format, by hand (proto3: length-delimited fields only) --

def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def delimited(number, payload):
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def x509_svid(spiffe_id, chain, key, bundle, hint=""):
    msg = delimited(1, spiffe_id.encode())
    msg += delimited(2, b"".join(chain))
    msg += delimited(3, key)
    msg += delimited(4, b"".join(bundle))
    if hint:
        msg += delimited(5, hint.encode())
    return msg


def x509_svid_response(svids, crls, federated):
    msg = b"".join(delimited(1, s) for s in svids)
    msg += b"".join(delimited(2, c) for c in crls)
    for td, bundle in sorted(federated.items()):
        entry = delimited(1, td.encode()) + delimited(2, b"".join(bundle))
        msg += delimited(3, entry)
    return msg


def b64(s):
    return base64.b64decode(s)


def encode_push(cmd):
    svids = [
        x509_svid(s["id"], [b64(c) for c in s["chain"]], b64(s["key"]),
                  [b64(c) for c in s["bundle"]], s.get("hint", ""))
        for s in cmd.get("svids", [])
    ]
    crls = [b64(c) for c in cmd.get("crl", [])]
    federated = {td: [b64(c) for c in certs]
                 for td, certs in cmd.get("federated", {}).items()}
    return x509_svid_response(svids, crls, federated)


# --- the agent ---------------------------------------------------------------

class Agent:
    def __init__(self, path):
        self.path = path
        self.cond = threading.Condition()
        self.message = None
        self.generation = 0
        self.epoch = 0
        self.requests = 0
        self.refused = 0
        self.streams = 0
        self.server = None

    def fetch(self, request, context):
        with self.cond:
            self.requests += 1
        metadata = dict(context.invocation_metadata())
        if metadata.get(HEADER) != "true":
            with self.cond:
                self.refused += 1
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          "security header missing from request")
        context.add_callback(self.wake)
        with self.cond:
            epoch = self.epoch
            self.streams += 1
        sent = -1
        try:
            while True:
                with self.cond:
                    self.cond.wait_for(lambda: self.epoch != epoch
                                       or not context.is_active()
                                       or (self.message is not None
                                           and self.generation != sent))
                    if not context.is_active():
                        return
                    if self.epoch != epoch:
                        context.abort(grpc.StatusCode.UNAVAILABLE,
                                      "stream dropped by the test")
                    message, sent = self.message, self.generation
                yield message
        finally:
            with self.cond:
                self.streams -= 1

    def wake(self):
        with self.cond:
            self.cond.notify_all()

    def push(self, message):
        with self.cond:
            self.message = message
            self.generation += 1
            self.cond.notify_all()

    def drop(self):
        with self.cond:
            self.epoch += 1
            self.cond.notify_all()

    def start(self):
        handler = grpc.method_handlers_generic_handler(SERVICE, {
            METHOD: grpc.unary_stream_rpc_method_handler(self.fetch),
        })
        # Pings as often as the client likes: the tests set a keepalive of
        # a second, which a default gRPC server would answer with GOAWAY
        # too_many_pings (it wants five minutes between pings).
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=32), options=[
            ("grpc.http2.min_recv_ping_interval_without_data_ms", 0),
            ("grpc.http2.min_ping_interval_without_data_ms", 0),
            ("grpc.http2.max_ping_strikes", 0),
            ("grpc.keepalive_permit_without_calls", 1),
        ])
        server.add_generic_rpc_handlers((handler,))
        server.add_insecure_port("unix:" + self.path)
        server.start()
        self.server = server

    def stop(self):
        if self.server is not None:
            self.drop()
            self.server.stop(0).wait()
            self.server = None
        if os.path.exists(self.path):
            os.unlink(self.path)

    def stats(self):
        with self.cond:
            return {"requests": self.requests, "refused": self.refused,
                    "streams": self.streams}


def control(agent, cmd):
    op = cmd.get("op")
    if op == "push":
        agent.push(encode_push(cmd))
    elif op == "push_raw":
        agent.push(b64(cmd["b64"]))
    elif op == "drop":
        agent.drop()
    elif op == "stop":
        agent.stop()
    elif op == "start":
        agent.start()
    elif op == "stats":
        return dict(ok=True, **agent.stats())
    else:
        return {"ok": False, "error": "unknown op %r" % op}
    return {"ok": True}


def serve_control(agent, path):
    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            for line in self.rfile:
                try:
                    answer = control(agent, json.loads(line))
                except Exception as e:  # a bad command is answered, not fatal
                    answer = {"ok": False, "error": repr(e)}
                self.wfile.write((json.dumps(answer) + "\n").encode())
                self.wfile.flush()

    server = socketserver.ThreadingUnixStreamServer(path, Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def selftest():
    """The metadata rule, checked against this server with grpcio's own
    client: refused without the header, served with it."""
    with tempfile.TemporaryDirectory() as d:
        agent = Agent(os.path.join(d, "agent.sock"))
        agent.start()
        agent.push(x509_svid_response([x509_svid("spiffe://t.test/w", [b"x"], b"k", [b"b"])], [], {}))
        channel = grpc.insecure_channel("unix:" + agent.path)
        call = channel.unary_stream("/%s/%s" % (SERVICE, METHOD))
        try:
            next(iter(call(b"")))
            print("FAIL: served a request without the metadata")
            return 1
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.INVALID_ARGUMENT:
                print("FAIL: refused with", e.code())
                return 1
        first = next(iter(call(b"", metadata=((HEADER, "true"),))))
        if not first.startswith(delimited(1, b"")[:1]):
            print("FAIL: unexpected first message")
            return 1
        agent.stop()
        print("selftest ok: refused without %s metadata, served with it" % HEADER)
        return 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--socket")
    parser.add_argument("--control")
    parser.add_argument("--no-start", action="store_true",
                        help="listen on the control socket only (agent down)")
    parser.add_argument("--selftest", action="store_true")
    args = parser.parse_args()
    if args.selftest:
        return selftest()
    agent = Agent(args.socket)
    if not args.no_start:
        agent.start()
    serve_control(agent, args.control)
    print("ready", flush=True)
    # Ends with its parent: the test closes our stdin.
    sys.stdin.read()
    agent.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
