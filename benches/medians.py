#!/usr/bin/env python3
"""Medians over interleaved rounds of benches/peers.sh rows.

    benches/medians.py 2=ROWS.jsonl [1=ROWS.jsonl ...]

Each argument is WORKERS=FILE: the rows (`OUT`) of one or more peers.sh runs
made with that many workers per peer process. A peer's rows are named
SYSTEM×WORKERS (HAProxy and nginx take the setting; stunnel, the sidecar at
its defaults and the plaintext ceilings do not, so they keep their names).
Prints one markdown table: each metric's median with every round's figure
in brackets, then the added latencies (system − its own run's direct).
"""
import json
import statistics
import sys

UNTHREADED = ("mtls-sidecar", "stunnel", "plain-rust", "socat-plaintext")
METRICS = [
    ("bulk MB/s", "bulk.sys"), ("echo MB/s", "echo.sys"),
    ("16-conn rt/s", "rt16.sys"), ("new conn/s", "newconn.sys"),
    ("resumed conn/s", "newconn_resumed.sys"), ("KiB per idle conn", "idle_kib"),
    ("baseline MiB", "baseline_mb"), ("CPU-s/GiB bulk", "cpu.bulk_s_per_gib"),
    ("CPU-s/GiB echo", "cpu.echo_s_per_gib"), ("CPU µs/round trip", "cpu.rt16_us"),
    ("CPU µs/new conn", "cpu.newconn_us"), ("CPU µs/resumed conn", "cpu.resumed_us"),
]


def get(row, path):
    for part in path.split("."):
        if not isinstance(row, dict):
            return None
        row = row.get(part)
    return row if isinstance(row, (int, float)) else None


def fmt(v):
    return "%.1f" % v if abs(v) < 100 else "{:,.0f}".format(v)


def main(args):
    rows = {}
    for arg in args:
        workers, _, path = arg.partition("=")
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                name = r["system"]
                if name not in UNTHREADED:
                    name = f"{name}×{workers}"
                rows.setdefault(name, []).append(r)
    names = sorted(rows, key=lambda n: (n != "mtls-sidecar", n))
    print("| metric | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for label, path in METRICS:
        cells = []
        for n in names:
            vals = [v for v in (get(r, path) for r in rows[n]) if v is not None]
            cells.append(f"{fmt(statistics.median(vals))} ({' / '.join(fmt(v) for v in vals)})" if vals else "-")
        print(f"| {label} | " + " | ".join(cells) + " |")
    for label, key in (("added p50 µs", "p50"), ("added p99 µs", "p99"), ("added p99.9 µs", "p999")):
        cells = []
        for n in names:
            vals = [get(r, key + ".sys") - get(r, key + ".direct") for r in rows[n]
                    if get(r, key + ".sys") is not None and get(r, key + ".direct") is not None]
            cells.append("+" + fmt(statistics.median(vals)) if vals else "-")
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
