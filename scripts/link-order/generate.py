#!/usr/bin/env python3
"""Regenerate scripts/link-order/symbols.txt, the linker's symbol-ordering file.

Why: the kernel maps a binary's code in 64 KiB blocks around each page a
process touches. The ~1.5 MB a sidecar executes is spread over 7 MB of text,
so nearly all of it ends up resident in every pod. scripts/build-release.sh
hands this list to the linker (LLD), which puts these functions first, in
this order; then only the executed part is resident.

What a sidecar executes is taken from the workload in train.py (start-up,
admin scrapes, handshakes, forwarding, refusals, a rotation, the drain), from
two sources, because neither sees everything:
  1. callgrind: every function executed, but on valgrind's CPU, which has no
     AVX-512 or ADX, so routines picked by CPU dispatch (aws-lc's AES-GCM,
     curve25519, glibc's string functions) are missed;
  2. native runs under `perf record -e page-faults`: the functions whose
     code faults in on this machine. Fault-around hides all but the first
     page of each 64 KiB block, so this repeats on a binary relinked with
     what was found, until nothing new faults (or --passes runs out; each
     pass still finds some: code reached only under native timing).
Native finds of earlier runs are kept (stale names are skipped by the
linker: a stale list costs memory, never correctness).

Once serving, a sidecar unmaps its code (src/process/resident.rs), and what it runs
from then on maps back in, a whole folio of the page cache at a time; so the
list puts the code that serves first and start-up code after it. Each part is
split by role: functions both the server and the client ran, then those only
the server ran, then those only the client ran, so each process maps the
shared part and its own. What ran after `release_startup_pages` is serving
code (callgrind dumps its counts on entering that function; the native pass
sees its madvise), the rest is start-up code:
    both, server, client, start-both, start-server, start-client

Run it on a quiet machine: under load (a compile on the other core) each
native pass found ~50 functions outside the list instead of 3-5, code
reached only under that timing, and the shipped pair's baseline came out
~0.9 MB higher (2026-12-01: 8.0 vs 7.1 MB).

Needs valgrind and perf (Debian: valgrind, linux-perf). Run it after
dependency or toolchain updates, then rebuild:
    python3 scripts/link-order/generate.py && bash scripts/build-release.sh
"""

import argparse
import bisect
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ORDER = os.path.join(ROOT, "scripts", "link-order", "symbols.txt")
TRAIN = os.path.join(ROOT, "scripts", "link-order", "train.py")
BINARY = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "dist", "mtls-sidecar")
ROLES = ("server", "client")
PHASES = ("serve", "start")
PARTS = ("both", "server", "client", "start-both", "start-server", "start-client")
# The function whose entry ends start-up (src/process/resident.rs).
RELEASE = "release_startup_pages"


def log(msg):
    print(f"generate.py: {msg}", file=sys.stderr, flush=True)


def build():
    subprocess.run(["bash", os.path.join(ROOT, "scripts", "build-release.sh")], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def train(work, wrap, binary=BINARY):
    os.makedirs(work)
    subprocess.run([sys.executable, TRAIN, binary, work], check=True, env=dict(os.environ, WRAP=wrap),
                   stdout=subprocess.DEVNULL)


def role_of(cmdline):
    m = re.search(r"mtls-sidecar (server|client) ", cmdline)
    if not m:
        sys.exit(f"generate.py: cannot tell the role of {cmdline!r}")
    return m.group(1)


def empty():
    return {(r, p): set() for r in ROLES for p in PHASES}


def callgrind_pass(work):
    """Functions executed per role and phase, as valgrind's CPU runs them."""
    train(work, f"valgrind --tool=callgrind --demangle=no --dump-before=*{RELEASE}* "
                f"--callgrind-out-file={work}/callgrind.%p")
    defined = set(symbol_table()[1])
    found = empty()
    released = set()
    for path in glob.glob(f"{work}/callgrind.*"):
        text = open(path).read()
        role = role_of(re.search(r"^cmd: (.*)$", text, re.M).group(1))
        trigger = re.search(r"^desc: Trigger: (.*)$", text, re.M)
        phase = "start" if trigger and "dump-before" in trigger.group(1) else "serve"
        if phase == "start":
            released.add(role)
        found[role, phase] |= {m for m in re.findall(r"^c?fn=\(\d+\) (.+)$", text, re.M) if m in defined}
    for r in ROLES:
        if r not in released:
            sys.exit(f"generate.py: the {r} never entered {RELEASE}; did train.py work?")
        for p in PHASES:
            if len(found[r, p]) < 300:
                sys.exit(f"generate.py: the {r} executed only {len(found[r, p])} functions to {p}; "
                         "did train.py work?")
    return found


def symbol_table():
    """Addresses and names of the binary's functions, sorted; perf's own names
    would not do: it strips the `.llvm.NNN` suffix of ThinLTO's promoted
    locals, which is part of the name the linker matches."""
    out = subprocess.run(["nm", "-n", "--defined-only", BINARY], capture_output=True, text=True, check=True).stdout
    table = [(int(p[0], 16), p[2]) for p in map(str.split, out.splitlines())
             if len(p) == 3 and p[1] in "tTwW"]
    return [a for a, _ in table], [n for _, n in table]


def fault_pass(work):
    """Functions whose pages faulted in natively, per role and phase: by an
    instruction fetch, or a read of the constants aws-lc's assembly keeps in
    .text. Faults after the sidecar's own MADV_DONTNEED of its code are the
    serving phase's. (Ordering .rodata tables the same way was tried: it
    made the read-only data resident grow, not shrink.)"""
    addrs, names = symbol_table()
    mapping = re.compile(r"PERF_RECORD_MMAP2 .*\[0x([0-9a-f]+)\(0x([0-9a-f]+)\) @ (?:0x)?0 .*\s(\S+)$")
    release = re.compile(r"sys_enter_madvise: start: 0x([0-9a-f]+), len_in: 0x[0-9a-f]+, behavior: 0x0*4\b")
    # A copy on tmpfs: its page cache is made of single pages, so a fault
    # maps a 64 KiB fault-around block, not a whole large folio of a disk
    # file's cache (hundreds of KiB here), and each pass sees more.
    shm = tempfile.mkdtemp(dir="/dev/shm") if os.path.isdir("/dev/shm") else tempfile.mkdtemp()
    binary = shutil.copy(BINARY, os.path.join(shm, "mtls-sidecar"))
    try:
        train(work, "sh -c 'exec perf record -q -e page-faults -c 1 -d -e syscalls:sys_enter_madvise "
                    f"-o {work}/perf.$$ \"$0\" \"$@\"'", binary)
    finally:
        shutil.rmtree(shm)
    found = empty()
    for path in glob.glob(f"{work}/perf.*"):
        header = subprocess.run(["perf", "script", "-i", path, "--header-only"], capture_output=True, text=True).stdout
        role = role_of(re.search(r"^# cmdline : (.*)$", header, re.M).group(1))
        faults = subprocess.run(["perf", "script", "-i", path, "-F", "event,addr,ip", "--show-mmap-events"],
                                capture_output=True, text=True).stdout
        calls = subprocess.run(["perf", "script", "-i", path, "-F", "event,ip,trace"],
                               capture_output=True, text=True).stdout
        calls = iter([m.group(1) if (m := release.search(l)) else None
                      for l in calls.splitlines() if "sys_enter_madvise" in l])
        base = size = None
        phase = "start"
        for line in faults.splitlines():
            if base is None:
                m = mapping.search(line)
                if m and os.path.basename(m.group(3)) == "mtls-sidecar":
                    base, size = int(m.group(1), 16), int(m.group(2), 16)
                continue
            if "sys_enter_madvise" in line:
                start = next(calls, None)
                if start is not None and 0 <= int(start, 16) - base < 1 << 30:
                    phase = "serve"
                continue
            fields = line.split()
            if len(fields) == 3 and fields[0] == "page-faults:":
                addr = int(fields[1], 16) - base
                if 0 <= addr < size:
                    i = bisect.bisect_right(addrs, addr) - 1
                    if i >= 0:
                        found[role, phase].add(names[i])
        if base is None:
            sys.exit(f"generate.py: no mapping of mtls-sidecar in {path}")
        if phase != "serve":
            sys.exit(f"generate.py: the {role} in {path} never released its start-up pages")
    return found


def read_order():
    """The previous list, by part (see PARTS)."""
    parts = {p: set() for p in PARTS}
    part = "both"
    if os.path.exists(ORDER):
        for line in open(ORDER):
            line = line.strip()
            if m := re.match(r"^# (\S+)$", line):
                part = m.group(1) if m.group(1) in parts else part
            elif line and not line.startswith("#"):
                parts[part].add(line)
    return parts


def write_order(found):
    """Serving code first, by role, then start-up code by role. A function
    that runs in both phases is serving code."""
    serve = {r: found[r, "serve"] for r in ROLES}
    start = {r: found[r, "start"] - serve["server"] - serve["client"] for r in ROLES}
    with open(ORDER, "w") as f:
        f.write("# Generated by scripts/link-order/generate.py; read by scripts/build-release.sh.\n")
        for prefix, by_role in (("", serve), ("start-", start)):
            both = by_role["server"] & by_role["client"]
            for part, names in (("both", both), ("server", by_role["server"] - both),
                                ("client", by_role["client"] - both)):
                f.write(f"# {prefix}{part}\n")
                f.writelines(f"{n}\n" for n in sorted(names))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--passes", type=int, default=12, help="native page-fault passes at most")
    args = ap.parse_args()
    for tool in ("valgrind", "perf", "nm"):
        if not shutil.which(tool):
            sys.exit(f"generate.py: needs {tool}")

    previous = read_order()
    build()
    with tempfile.TemporaryDirectory() as tmp:
        found = callgrind_pass(os.path.join(tmp, "callgrind"))
        log("callgrind: " + ", ".join(f"{r} {p} {len(found[r, p])}" for r in ROLES for p in PHASES)
            + " functions")
        # Earlier native finds callgrind cannot see stay in their part.
        seen = set().union(*found.values())
        for r in ROLES:
            found[r, "serve"] |= (previous["both"] | previous[r]) - seen
            found[r, "start"] |= (previous["start-both"] | previous[f"start-{r}"]) - seen
        write_order(found)
        for n in range(1, args.passes + 1):
            build()
            faulted = fault_pass(os.path.join(tmp, f"faults-{n}"))
            listed = {r: found[r, "serve"] | found[r, "start"] for r in ROLES}
            new = sum(len(faulted[r, p] - listed[r]) for r in ROLES for p in PHASES)
            moved = sum(len(faulted[r, "serve"] & found[r, "start"] - found[r, "serve"]) for r in ROLES)
            log(f"native pass {n}: {new} functions faulted outside the list, "
                f"{moved} start-up ones faulted while serving")
            if not new and not moved:
                break
            for key in found:
                found[key] |= faulted[key]
            write_order(found)
    log(f"{ORDER}: {sum(1 for l in open(ORDER) if not l.startswith('#'))} functions; "
        "now run scripts/build-release.sh")


if __name__ == "__main__":
    main()
