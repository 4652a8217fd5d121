#!/usr/bin/env python3
"""Baseline and idle memory of the shipped pair, without the bench build.

The bench's memory figures (benches/sidecar, "baseline RSS" and "KiB per
idle connection") need the ~40-minute bench build; this drives the binary
that scripts/build-release.sh made the same way, in seconds:

  * a server and a client sidecar (the bench's flags: --max-connections,
    --reload-interval 100ms; no admin listener), an echo target in this
    process, identities from the binary's own `certs` subcommand;
  * 5 connections through the pair with one 64-byte round trip each, 300 ms,
    then VmRSS of both processes summed: the baseline;
  * then IDLE more connections, each with one round trip, held open; 500 ms;
    (VmRSS after - VmRSS before) / IDLE, per side: KiB per idle connection.

Each run starts a fresh pair; the figures printed last are medians.

    benches/baseline.py [--runs 5] [--idle 500] [BINARY]   # default target/dist/mtls-sidecar
"""

import argparse
import os
import re
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MSG = 64
DEADLINE = 60


def vm_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    sys.exit(f"baseline.py: no VmRSS for {pid}")


def echo_target():
    srv = socket.create_server(("127.0.0.1", 0), backlog=1024)

    def serve(conn):
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def accept():
        while True:
            conn, _ = srv.accept()
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return srv.getsockname()[1]


class Sidecar:
    def __init__(self, binary, args, log_path):
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen([binary] + args, stdout=self.log, stderr=self.log,
                                     env=dict(os.environ, RUST_LOG="info"))

    def listen(self):
        end = time.monotonic() + DEADLINE
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                sys.exit(f"baseline.py: sidecar exited early, see {self.log_path}")
            with open(self.log_path) as f:
                if m := re.search(r"route=\w+ .*listen=(\S+)", f.read()):
                    host, port = m.group(1).rsplit(":", 1)
                    return host, int(port)
            time.sleep(0.02)
        sys.exit(f"baseline.py: no listen address in {self.log_path}")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=DEADLINE)


def round_trip(addr):
    s = socket.create_connection(addr, timeout=DEADLINE)
    s.sendall(b"x" * MSG)
    got = b""
    while len(got) < MSG:
        chunk = s.recv(MSG - len(got))
        if not chunk:
            sys.exit("baseline.py: the pair closed a connection")
        got += chunk
    return s


def one_run(binary, work, idle):
    run = lambda *a: subprocess.run([binary, *a], check=True, stdout=subprocess.DEVNULL)
    ca, srv, cli = (os.path.join(work, d) for d in ("ca", "server", "client"))
    if not os.path.exists(ca):
        run("certs", "ca", "--out", ca)
        run("certs", "issue", "--ca", ca, "--out", srv, "--dns", "replica-0.bench.svc", "--role", "server")
        run("certs", "issue", "--ca", ca, "--out", cli, "--dns", "controller.bench.svc", "--role", "client")
    target = echo_target()
    most = str(idle * 2 + 1000)
    server = Sidecar(binary, ["server", "--listen", "127.0.0.1:0", "--target", f"127.0.0.1:{target}",
                              "--tls-dir", srv, "--allow-san", "controller.bench.svc",
                              "--max-connections", most, "--reload-interval", "100ms"],
                     os.path.join(work, "server.log"))
    try:
        client = Sidecar(binary, ["client", "--listen", "127.0.0.1:0", "--target",
                                  "%s:%d" % server.listen(), "--server-name", "replica-0.bench.svc",
                                  "--tls-dir", cli, "--max-connections", most],
                         os.path.join(work, "client.log"))
        try:
            via = client.listen()
            for _ in range(5):
                round_trip(via).close()
            time.sleep(0.3)
            pids = (server.proc.pid, client.proc.pid)
            before = [vm_rss_kib(p) for p in pids]
            held = [round_trip(via) for _ in range(idle)]
            time.sleep(0.5)
            after = [vm_rss_kib(p) for p in pids]
            for s in held:
                s.close()
            per = [(a - b) / idle if idle else 0.0 for a, b in zip(after, before)]
            return sum(before) / 1024, per
        finally:
            client.stop()
    finally:
        server.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--idle", type=int, default=500)
    ap.add_argument("binary", nargs="?", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "dist", "mtls-sidecar"))
    args = ap.parse_args()
    if args.runs < 1 or args.idle < 0:
        sys.exit("baseline.py: --runs >= 1 and --idle >= 0")
    # This process holds both ends' sockets: the client's and the target's.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 2 * args.idle + 100
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want if hard == resource.RLIM_INFINITY else min(want, hard), hard))
    base, server, client = [], [], []
    with tempfile.TemporaryDirectory() as work:
        for i in range(args.runs):
            mib, (s, c) = one_run(args.binary, work, args.idle)
            base.append(mib)
            server.append(s)
            client.append(c)
            print(f"run {i + 1}: baseline {mib:.2f} MiB, idle KiB per connection server {s:.1f} / client {c:.1f}",
                  flush=True)
    print(f"median of {args.runs}: baseline {statistics.median(base):.2f} MiB "
          f"({' / '.join(f'{b:.2f}' for b in base)}), idle KiB per connection server "
          f"{statistics.median(server):.1f} / client {statistics.median(client):.1f}")


if __name__ == "__main__":
    main()
