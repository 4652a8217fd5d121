"""What one idle connection holds, by allocation site: a server and a client
sidecar (`--sandbox off`, so heaptrack can write its data) with N idle
connections, one side under heaptrack; that side is then killed while idle
(KILL=1: every live allocation shows as "leaked") or interrupted (drain).

    KILL=1 benches/idle_heap.py BINARY server|client N
    heaptrack_print -f /tmp/idle-heap-SIDE.zst --print-leaks 1 --print-peaks 0 ...

Divide each site's total by N.
"""
import os, sys, time, subprocess, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import baseline as b
binary, side, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
work = tempfile.mkdtemp()
run = lambda *a: subprocess.run([binary, *a], check=True, stdout=subprocess.DEVNULL)
run("certs", "ca", "--out", f"{work}/ca")
run("certs", "issue", "--ca", f"{work}/ca", "--out", f"{work}/server", "--dns", "replica-0.bench.svc", "--role", "server")
run("certs", "issue", "--ca", f"{work}/ca", "--out", f"{work}/client", "--dns", "controller.bench.svc", "--role", "client")
target = b.echo_target()
class H(b.Sidecar):
    def __init__(self, binary, args, log, wrap):
        self.log_path = log; self.log = open(log, "w")
        cmd = (["heaptrack", "-o", f"/tmp/idle-heap-{side}"] if wrap else []) + [binary] + args
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log, env=dict(os.environ, RUST_LOG="info"))
srv = H(binary, ["server", "--listen", "127.0.0.1:0", "--target", f"127.0.0.1:{target}", "--tls-dir", f"{work}/server",
    "--allow-san", "controller.bench.svc", "--max-connections", "5000", "--sandbox", "off"], f"{work}/s.log", side == "server")
cli = H(binary, ["client", "--listen", "127.0.0.1:0", "--target", "%s:%d" % srv.listen(), "--server-name",
    "replica-0.bench.svc", "--tls-dir", f"{work}/client", "--max-connections", "5000", "--sandbox", "off"], f"{work}/c.log", side == "client")
via = cli.listen()
held = [b.round_trip(via) for _ in range(n)]
time.sleep(1)
def kids(pid):
    out = []
    for t in os.listdir(f"/proc/{pid}/task"):
        try: out += [int(x) for x in open(f"/proc/{pid}/task/{t}/children").read().split()]
        except OSError: pass
    return out
def find(pid):
    for k in kids(pid):
        try:
            if os.readlink(f"/proc/{k}/exe") == os.path.realpath(binary): return k
        except OSError: pass
        f = find(k)
        if f: return f
w = srv if side == "server" else cli
sc = find(w.proc.pid)
print("sidecar pid", sc)
os.kill(sc, 9 if os.environ.get("KILL") else 2)
for s in held: s.close()
w.proc.wait(timeout=120)
for p in (srv, cli):
    try: p.stop()
    except Exception: pass
print("done", work)
