#!/usr/bin/env python3
"""A/B sanity check of bulk and echo throughput through two sidecar pairs
(an old and a new binary) started at once, repetitions interleaved
(alternating which pair goes first); not a benchmark (benches/sidecar is):
a Python sink/echo target in its own process, one connection per figure.

    benches/ab_bulk.py OLD_BINARY NEW_BINARY [REPS=5] [MB=400]

Per repetition and pair: MB/s of one connection sending MB one way to the
sink (until the sink's close comes back), and of one echoing MB/2 both
ways (bytes of both directions). Prints each repetition, then medians and
new/old ratios.
"""
import os, sys, time, socket, subprocess, tempfile, statistics, multiprocessing as mp
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import baseline as b

def sink(port_q):
    srv = socket.create_server(("127.0.0.1", 0), backlog=64)
    port_q.put(srv.getsockname()[1])
    buf = bytearray(1 << 20)
    while True:
        c, _ = srv.accept()
        first = c.recv(1)
        if first == b"E":   # echo mode
            while True:
                n = c.recv_into(buf)
                if not n: break
                c.sendall(memoryview(buf)[:n])
        else:
            while c.recv_into(buf):
                pass
        c.close()

def pair(binary, work, target, tag):
    srv = b.Sidecar(binary, ["server", "--listen", "127.0.0.1:0", "--target", f"127.0.0.1:{target}",
        "--tls-dir", f"{work}/server", "--allow-san", "controller.bench.svc"], f"{work}/{tag}-s.log")
    cli = b.Sidecar(binary, ["client", "--listen", "127.0.0.1:0", "--target", "%s:%d" % srv.listen(),
        "--server-name", "replica-0.bench.svc", "--tls-dir", f"{work}/client"], f"{work}/{tag}-c.log")
    return srv, cli, cli.listen()

def bulk(addr, total):
    s = socket.create_connection(addr)
    s.sendall(b"S")
    chunk = b"x" * (1 << 20)
    t = time.monotonic()
    sent = 0
    while sent < total:
        s.sendall(chunk); sent += len(chunk)
    s.shutdown(socket.SHUT_WR)
    s.recv(1)   # EOF once the target closed
    dt = time.monotonic() - t
    s.close()
    return total / dt / 1e6

def echo(addr, total):
    import threading
    s = socket.create_connection(addr)
    s.sendall(b"E")
    chunk = b"x" * (1 << 20)
    def send():
        sent = 0
        while sent < total:
            s.sendall(chunk); sent += len(chunk)
        s.shutdown(socket.SHUT_WR)
    t = time.monotonic()
    th = threading.Thread(target=send); th.start()
    buf = bytearray(1 << 20); got = 0
    while got < total:
        n = s.recv_into(buf)
        if not n: break
        got += n
    th.join()
    dt = time.monotonic() - t
    s.close()
    return 2 * got / dt / 1e6

def main():
    old, new = sys.argv[1], sys.argv[2]
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    mb = int(sys.argv[4]) if len(sys.argv) > 4 else 400
    work = tempfile.mkdtemp()
    run = lambda *a: subprocess.run([old, *a], check=True, stdout=subprocess.DEVNULL)
    run("certs", "ca", "--out", f"{work}/ca")
    run("certs", "issue", "--ca", f"{work}/ca", "--out", f"{work}/server", "--dns", "replica-0.bench.svc", "--role", "server")
    run("certs", "issue", "--ca", f"{work}/ca", "--out", f"{work}/client", "--dns", "controller.bench.svc", "--role", "client")
    q = mp.Queue(); p = mp.Process(target=sink, args=(q,), daemon=True); p.start(); target = q.get()
    pairs = {"old": pair(old, work, target, "old"), "new": pair(new, work, target, "new")}
    res = {(k, m): [] for k in pairs for m in ("bulk", "echo")}
    try:
        for r in range(reps):
            for k in (["old", "new"] if r % 2 == 0 else ["new", "old"]):
                addr = pairs[k][2]
                res[(k, "bulk")].append(bulk(addr, mb << 20))
                res[(k, "echo")].append(echo(addr, (mb // 2) << 20))
            print(f"rep {r+1}: " + ", ".join(f"{k}/{m} {v[-1]:.0f}" for (k, m), v in res.items()), flush=True)
    finally:
        for s, c, _ in pairs.values():
            c.stop(); s.stop()
    for m in ("bulk", "echo"):
        o, n = statistics.median(res[("old", m)]), statistics.median(res[("new", m)])
        print(f"{m} MB/s median: old {o:.0f}, new {n:.0f}, new/old {n/o:.3f}")

main()
