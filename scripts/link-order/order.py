"""What the link-order scripts share: the list's parts, the binary's
functions and their mangling-independent keys, and the callgrind pass.

The list (symbols.txt, or the one scripts/build-release.sh derives in the
build) names functions, one a line, in nine parts, each under a `# PART`
line: the code that serves connections (`conn-`: what train.py's
`connections` workload runs once serving), then the rest of the serving
code (admin scrapes, refusals, a rotation), then start-up code (`start-`),
each split by role: functions both the server and the client ran, then
those only the server ran, then those only the client ran. Once serving, a
sidecar unmaps its code (src/process/resident.rs) and what it runs from then
on maps back in, so serving code packed first is what stays resident, and
the code every connection runs shares the fewest blocks.
"""

import glob
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "train.py")
ROLES = ("server", "client")
PHASES = ("serve", "start")
# The order the linker lays them out in: each role's serving code in one
# run (a server maps server, conn-server, conn-both, both; a client both,
# conn-both, conn-client, client), so a part one role never runs does not
# sit between two it does (the kernel maps 64 KiB around every page run).
PARTS = ("server", "conn-server", "conn-both", "both", "conn-client", "client",
         "start-server", "start-both", "start-client")
# The function whose entry ends start-up (src/process/resident.rs).
RELEASE = "release_startup_pages"
# Fewer functions than this in a role's phase: the workload did not run.
FLOOR = 300


def functions(binary, sort=False):
    """The binary's function symbols as (address, name), in address order
    when `sort`. Names as the linker sees them: with a `.llvm.N` suffix
    where ThinLTO promoted a local (perf's names would drop it)."""
    cmd = ["nm", "--defined-only"] + (["-n"] if sort else []) + [binary]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return [(int(p[0], 16), p[2]) for p in map(str.split, out.splitlines()) if len(p) == 3 and p[1] in "tTwW"]


def keys(names):
    """Each name's key: its demangled form without the hashes that move
    when a dependency or the code around it changes (Rust's crate
    disambiguators and legacy `::h…` hashes, ThinLTO's `.llvm.N`). C names
    are their own key, but for aws-lc's version prefix. One c++filt for all
    names."""
    names = list(names)
    out = subprocess.run(["c++filt", "--no-verbose"], input="\n".join(names) + "\n",
                         capture_output=True, text=True, check=True).stdout.splitlines()
    if len(out) != len(names):
        sys.exit(f"order.py: c++filt gave {len(out)} lines for {len(names)} names")
    return {n: AWS_LC.sub("aws_lc_", k) for n, k in zip(names, out)}


# aws-lc-sys prefixes its C symbols with its version (aws_lc_0_47_0_…).
AWS_LC = re.compile(r"aws_lc_\d+_\d+_\d+_")


def read_parts(path):
    """A list file, by part, names in their order."""
    parts = {p: [] for p in PARTS}
    part = "both"
    with open(path) as f:
        for line in f:
            line = line.strip()
            if m := re.match(r"^# (\S+)$", line):
                part = m.group(1) if m.group(1) in parts else part
            elif line and not line.startswith("#"):
                parts[part].append(line)
    return parts


def write_parts(path, parts, header):
    """A list file; a name already written in an earlier part is not
    repeated (the linker takes the first)."""
    written = set()
    with open(path, "w") as f:
        f.write(f"# {header}\n")
        for part in PARTS:
            f.write(f"# {part}\n")
            for n in parts.get(part, ()):
                if n not in written:
                    written.add(n)
                    f.write(f"{n}\n")
    return len(written)


def split(found, conn):
    """Parts from what each role executed per phase ({(role, phase): set})
    in the whole workload (`found`) and in the `connections` one (`conn`),
    sorted by name within a part. A function that runs in both phases is
    serving code; one that serves connections is in a `conn-` part only."""
    hot = {r: conn[r, "serve"] for r in ROLES}
    placed = hot["server"] | hot["client"]
    serve = {r: found[r, "serve"] - placed for r in ROLES}
    placed |= serve["server"] | serve["client"]
    start = {r: (found[r, "start"] | conn[r, "start"]) - placed for r in ROLES}
    parts = {}
    for prefix, by_role in (("conn-", hot), ("", serve), ("start-", start)):
        both = by_role["server"] & by_role["client"]
        parts[f"{prefix}both"] = sorted(both)
        for r in ROLES:
            parts[f"{prefix}{r}"] = sorted(by_role[r] - both)
    return parts


def keep_serving(parts, committed):
    """Moves into its committed serving part each function this build's
    callgrind runs placed among the start-up parts but the committed list
    has as serving code. Whether a periodic task (the process metrics'
    refresh, a log line's channel) runs inside train.py's short serving
    window under callgrind's slowness is a matter of timing, so a function
    that serves could land in a start-up part in one build and a serving
    part in the next; each one a sidecar then runs after it let go of its
    start-up code (src/process/resident.rs) faults in a 64 KiB block of
    start-up code (+0.3-0.5 MiB for the pair, seen between two builds of
    one tree). What the committed list saw serve stays serving. Returns
    how many moved."""
    serving = {}
    for part in PARTS:
        if not part.startswith("start-"):
            for n in committed[part]:
                serving.setdefault(n, part)
    moved = 0
    for part in PARTS:
        if not part.startswith("start-"):
            continue
        stay = []
        for n in parts[part]:
            if n in serving:
                parts[serving[n]].append(n)
                moved += 1
            else:
                stay.append(n)
        parts[part] = stay
    return moved


def role_of(cmdline):
    m = re.search(r"(?:^|\s)(server|client) --listen ", cmdline)
    if not m:
        sys.exit(f"order.py: cannot tell the role of {cmdline!r}")
    return m.group(1)


def train(binary, work, wrap, connections=False):
    """train.py's workload on `binary`, each sidecar run under `wrap`;
    with `connections`, only the connections."""
    os.makedirs(work)
    subprocess.run([sys.executable, TRAIN, binary, work] + (["connections"] if connections else []),
                   check=True, env=dict(os.environ, WRAP=wrap), stdout=subprocess.DEVNULL)


def callgrind(binary, work, connections=False):
    """Functions each role executed per phase, as valgrind's CPU runs them:
    instruction by instruction, so the same whatever the machine's load.
    callgrind dumps its counts on entering RELEASE: what ran before is
    start-up, what ran after is serving. Routines picked by CPU dispatch
    for a CPU valgrind does not emulate (AVX-512, ADX: aws-lc's AES-GCM and
    curve25519, glibc's string functions) are missed: see generate.py."""
    train(binary, work, f"valgrind --tool=callgrind --demangle=no --dump-before=*{RELEASE}* "
                        f"--callgrind-out-file={work}/callgrind.%p", connections)
    defined = {n for _, n in functions(binary)}
    found = {(r, p): set() for r in ROLES for p in PHASES}
    released = set()
    for path in glob.glob(f"{work}/callgrind.*"):
        with open(path) as f:
            text = f.read()
        role = role_of(re.search(r"^cmd: (.*)$", text, re.M).group(1))
        trigger = re.search(r"^desc: Trigger: (.*)$", text, re.M)
        phase = "start" if trigger and "dump-before" in trigger.group(1) else "serve"
        if phase == "start":
            released.add(role)
        found[role, phase] |= {m for m in re.findall(r"^c?fn=\(\d+\) (.+)$", text, re.M) if m in defined}
    for r in ROLES:
        if r not in released:
            sys.exit(f"order.py: the {r} never entered {RELEASE}; did train.py work?")
        for p in PHASES:
            if len(found[r, p]) < FLOOR:
                sys.exit(f"order.py: the {r} executed only {len(found[r, p])} functions to {p}; "
                         "did train.py work?")
    return found


# A name whose key has more instances in the binary than this is dropped
# when carried over: packing many cold instances among the hot functions
# spreads the hot part over more blocks.
AMBIGUOUS = 3


def carry(parts, binary):
    """The list carried over to `binary`'s names: a name the binary has is
    kept; one it lacks (a hash moved) is mapped to the binary's functions
    with the same key, at the end of its part when there are up to
    AMBIGUOUS of them, else dropped. Returns the parts and the counts
    (kept, remapped, gone)."""
    names = [n for _, n in functions(binary)]
    present = set(names)
    listed = [n for p in PARTS for n in parts[p]]
    key = keys(set(names) | {n for n in listed if n not in present})
    by_key = {}
    for n in names:
        by_key.setdefault(key[n], []).append(n)
    kept = remapped = gone = 0
    out = {}
    for part in PARTS:
        head, tail = [], []
        for name in parts[part]:
            if name in present:
                kept += 1
                head.append(name)
            elif 1 <= len(found := by_key.get(key[name], [])) <= AMBIGUOUS:
                remapped += 1
                (head if len(found) == 1 else tail).extend(found)
            else:
                gone += 1
        out[part] = head + tail
    return out, (kept, remapped, gone)
