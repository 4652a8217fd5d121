#!/usr/bin/env python3
"""Drive a server + client sidecar pair through what a pod does in its life.

Used by scripts/link-order/derive.py (in the release build) and
generate.py, which run both sidecars under `valgrind --tool=callgrind` (the
WRAP environment variable) and turn the functions they executed into the
linker's symbol-ordering file. The workload
is what the resident code of a real sidecar consists of: start-up, admin
scrapes, full handshakes, forwarding small frames (one connection at a
time, and several at once, which places some on another runtime) and a
bulk stream with a half-close, refused peers (wrong identity, plaintext probe), a credential
rotation through a kubelet-style `..data` swap, and the SIGTERM drain.

With `connections`, only what a serving pod does all the time: start-up,
the connections (the same round trips and bulk stream), the drain; no
admin scrape, refusal or rotation. The list puts what this runs first, so
the code every connection runs shares the fewest blocks.

    WRAP="valgrind --tool=callgrind ..." train.py BINARY WORKDIR [connections]
"""

import os
import re
import shlex
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request

DEADLINE = 300  # valgrind runs the binary ~50x slower


def run(*args):
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)


def wait_for(what, pred, timeout=DEADLINE):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        time.sleep(0.05)
    sys.exit(f"train.py: timed out waiting for {what}")


class Sidecar:
    """One sidecar process whose log announces its listen and admin addresses."""

    def __init__(self, binary, args, log_path):
        wrap = shlex.split(os.environ.get("WRAP", ""))
        self.log_path = log_path
        self.log = open(log_path, "w")
        env = dict(os.environ, RUST_LOG="info")
        self.proc = subprocess.Popen(wrap + [binary] + args, stdout=self.log, stderr=self.log, env=env)

    def addr(self, pattern):
        def found():
            if self.proc.poll() is not None:
                sys.exit(f"train.py: sidecar exited early, see {self.log_path}")
            m = re.search(pattern, open(self.log_path).read())
            return m and m.group(1)

        host, port = wait_for(pattern, found).rsplit(":", 1)
        return host, int(port)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=DEADLINE)


def echo_target():
    srv = socket.create_server(("127.0.0.1", 0))

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


def publish(root, n, files):
    """A kubelet-style revision: files in a timestamped dir, `..data` swapped atomically."""
    rev = f"..rev_{n}"
    os.makedirs(os.path.join(root, rev))
    for name, src in files.items():
        with open(src, "rb") as f, open(os.path.join(root, rev, name), "wb") as out:
            out.write(f.read())
    tmp = os.path.join(root, "..data_tmp")
    os.symlink(rev, tmp)
    os.replace(tmp, os.path.join(root, "..data"))
    for name in files:
        link = os.path.join(root, name)
        if not os.path.islink(link):
            os.symlink(os.path.join("..data", name), link)


def roundtrip(addr, payload):
    with socket.create_connection(addr) as s:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    if got != payload:
        sys.exit(f"train.py: {len(payload)} bytes sent, {len(got)} came back")


def held_roundtrips(addr, n):
    """`n` connections open at once, a round trip on each: with several
    runtimes per sidecar (`--runtime per-core`), a connection accepted while
    others are live is placed on a less loaded runtime, so this runs the
    code that moves a socket to another runtime and starts its task there,
    which one connection at a time never reaches."""
    held = [socket.create_connection(addr) for _ in range(n)]
    try:
        for s in held:
            s.sendall(b"z" * 64)
        for s in held:
            got = b""
            while len(got) < 64 and (chunk := s.recv(64 - len(got))):
                got += chunk
            if got != b"z" * 64:
                sys.exit(f"train.py: a held connection returned {len(got)} bytes of 64")
    finally:
        for s in held:
            s.close()


def scrape(admin, path):
    url = f"http://{admin[0]}:{admin[1]}{path}"
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.read().decode()
    except urllib.error.HTTPError as e:  # /readyz may say 503 early on
        return e.read().decode()


def main():
    binary, work = sys.argv[1], sys.argv[2]
    connections_only = sys.argv[3:] == ["connections"]
    ca, s_id, c_id, s_id2, intruder = (os.path.join(work, d) for d in ("ca", "s", "c", "s2", "x"))
    run(binary, "certs", "ca", "--out", ca)
    run(binary, "certs", "issue", "--ca", ca, "--out", s_id, "--dns", "replica-0.train.svc", "--role", "server")
    run(binary, "certs", "issue", "--ca", ca, "--out", s_id2, "--dns", "replica-0.train.svc", "--role", "server")
    run(binary, "certs", "issue", "--ca", ca, "--out", c_id, "--dns", "controller.train.svc", "--role", "client")
    run(binary, "certs", "issue", "--ca", ca, "--out", intruder, "--dns", "intruder.train.svc", "--role", "client")
    files = lambda d: {n: os.path.join(d, n) for n in ("tls.crt", "tls.key", "ca.crt")}
    s_dir = os.path.join(work, "server-secret")
    publish(s_dir, 1, files(s_id))

    target = echo_target()
    # Two runtimes each, whatever the build machine's CPUs (the default is
    # one per CPU, up to 4): on a one-CPU builder a sidecar would run one,
    # never place a connection on another, and the derived order would
    # leave that path among cold code (held_roundtrips).
    two = ["--worker-threads", "2"]
    server = Sidecar(binary, ["server", "--listen", "127.0.0.1:0", "--target", f"127.0.0.1:{target}",
                              "--tls-dir", s_dir, "--allow-san", "controller.train.svc",
                              "--admin", "127.0.0.1:0", "--reload-interval", "200ms", *two],
                     os.path.join(work, "server.log"))
    s_addr = server.addr(r"route=server .*listen=(\S+)")
    s_admin = server.addr(r"admin=(\S+)")
    client = Sidecar(binary, ["client", "--listen", "127.0.0.1:0", "--target", f"127.0.0.1:{s_addr[1]}",
                              "--server-name", "replica-0.train.svc", "--tls-dir", c_id,
                              "--admin", "127.0.0.1:0", *two],
                     os.path.join(work, "client.log"))
    c_addr = client.addr(r"route=client .*listen=(\S+)")
    c_admin = client.addr(r"admin=(\S+)")

    for _ in range(5):
        roundtrip(c_addr, b"x" * 64)
    held_roundtrips(c_addr, 6)
    roundtrip(c_addr, os.urandom(4 << 20))
    if connections_only:
        client.stop()
        server.stop()
        return

    for admin in (s_admin, c_admin):
        for path in ("/livez", "/readyz", "/status", "/metrics"):
            scrape(admin, path)

    # Refused peers: another identity from the same CA, and a plaintext probe.
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(os.path.join(ca, "ca.crt"))
    ctx.load_cert_chain(os.path.join(intruder, "tls.crt"), os.path.join(intruder, "tls.key"))
    try:
        with socket.create_connection(s_addr) as raw, \
                ctx.wrap_socket(raw, server_hostname="replica-0.train.svc") as tls:
            tls.sendall(b"x")
            tls.recv(1)
    except (ssl.SSLError, OSError):
        pass
    with socket.create_connection(s_addr) as probe:
        probe.sendall(b"GET / HTTP/1.0\r\n\r\n")
        try:
            probe.recv(100)
        except OSError:
            pass

    publish(s_dir, 2, files(s_id2))
    applied = 'mtls_sidecar_credential_reloads_total{result="applied"} 1'
    wait_for("the rotation", lambda: applied in scrape(s_admin, "/metrics"))
    roundtrip(c_addr, b"y" * 64)
    for admin in (s_admin, c_admin):
        scrape(admin, "/metrics")
        scrape(admin, "/status")

    client.stop()
    server.stop()


if __name__ == "__main__":
    main()
