#!/usr/bin/env bash
# Mutation-tests the admission code (the files that decide who gets in) with
# cargo-mutants, each file with only the test targets that exercise it, so
# one file takes minutes rather than the whole suite per mutant.
#
#   scripts/mutants.sh [--in-place] [--stale] [--record] [--shard K/N | --in-diff]
#                      [FILE|DIR...]
#
# With no FILE: every admission file in the table below; with --stale, only
# the entries whose stamp in docs/mutants-runs.tsv is missing or "not run"
# or whose files changed (committed or not) since the commit it names; when
# MUTANTS_BASE=REV is set, those changed since REV (committed or not).
# A FILE must be in the table (a file under a DIR entry counts as that DIR).
#
# --record writes each entry's figures into docs/mutants-runs.tsv (one
# tab-separated line an entry: entry, commit, date, mutants, caught,
# missed, unviable, timeout; a header line first): the stamp
# --stale reads. An entry whose files differ from HEAD is not recorded (its
# stamp would name a commit that is not what was mutated). Commit the table
# with the tests that killed the survivors.
#
# --shard K/N (0 <= K < N) runs only the K-th of N slices of each entry's
# mutants (cargo-mutants --shard), to split a big entry over several runs.
# --record then writes the row as "COMMIT (shards K,... of N)" with the
# figures summed over the shards recorded at that commit: such a line is no
# stamp (--stale still runs the entry in full) until the last shard of the
# same commit completes it and the line becomes a plain stamp.
#
# --in-diff runs, for each entry, only the mutants on the lines that
# changed since its stamp (cargo-mutants --in-diff with `git diff STAMP
# HEAD` of its files): the check of a fix to a file already run in full,
# at a fraction of a full run's cost. An entry with no stamp is run in
# full instead. --record writes such a run to docs/mutants-diff-runs.tsv
# (entry, since, commit, date and the figures), not to the run table: it
# is no stamp, and --stale still names the entry until a full run.
#
# --in-place (or MUTANTS_IN_PLACE=1) mutates the working tree itself and
# reuses target/: fast, but do not edit the files while it runs. The files
# must be unmodified against HEAD when it starts, and are restored from HEAD
# if it is interrupted. Without it cargo-mutants works in a copy of the
# tree (safe while you edit, but it builds from scratch). CI, on a clean
# clone, uses --in-place.
#
# Prints caught / missed / unviable / timeout per entry and exits 1 if any
# entry has a missed mutant that docs/mutants.md does not list as
# equivalent (format: see the top of docs/mutants.md). MUTANTS_ARGS adds
# arguments to every cargo-mutants call (e.g. "--timeout 300").
set -euo pipefail
cd "$(dirname "$0")/.."

# Entry -> the tests that judge it: `--lib` (the unit tests) and `--test
# AREA` for a test area, the file tests/PROGRAM/AREA.rs (tests/README.md):
# test_args turns the areas into their programs. A DIR entry ends in "/"
# and covers every .rs file below it. Keep the areas few: each mutant runs
# all of them. The owner of an entry keeps its line here right
# (docs/mutants.md: the method).
declare -A TARGETS=(
    [src/tls/verify.rs]="--lib --test client_reverify --test ca_hints --test rotation --test refusals --test eku --test crl --test identity_proof --test chain_memo --test workload_api_federation --test handoff"
    [src/tls/chain_memo.rs]="--test chain_memo --test client_reverify --test rotation"
    [src/tls/spiffe.rs]="--lib --test workload_api --test workload_api_federation"
    [src/identity/]="--lib --test patterns --test eku"
    [src/credentials/validate.rs]="--lib --test revision_validation --test store --test check --test certs"
    [src/credentials/trust.rs]="--lib --test trust_anchors --test store --test revocation_store --test workload_api_federation"
    [src/credentials/grace.rs]="--lib --test trust_anchors --test store --test revocation_store --test rotation --test workload_api_federation"
    [src/credentials/store/]="--test store --test store_signals --test revocation_store"
    [src/credentials/revocation/]="--lib --test crl --test revocation_judge --test revocation_store --test revocation_e2e"
    [src/proxy/transparent/mod.rs]="--lib --test transparent"
    [src/proxy/transparent/outbound.rs]="--lib --test transparent"
    [src/proxy/transparent/log.rs]="--lib --test transparent"
    [src/proxy/transparent/rules.rs]="--lib --test transparent"
    [src/proxy/transparent/lookup.rs]="--lib --test transparent"
    [src/proxy/transparent/tproxy.rs]="--lib --test transparent"
    [src/proxy/route/admission.rs]="--test admin --test client_reverify --test limits --test process --test refusals --test rotation --test resumption --test handoff"
    [src/proxy/proxy_protocol.rs]="--lib --test handoff"
    [src/identity/pin.rs]="--lib --test handoff --test refusals"
    [src/proxy/route/supervise.rs]="--test client_reverify --test limits --test process --test rotation --test admin --test client_side --test http_identity"
    [src/proxy/route/server.rs]="--test admin --test handoff --test limits --test process"
    [src/proxy/route/client.rs]="--test admin --test client_side --test limits --test process --test transparent"
    [src/proxy/route/verdict.rs]="--lib --test client_side --test client_reverify --test refusals --test admin"
    [src/proxy/route/mod.rs]="--lib --test admin --test limits --test process --test hostile --test logs --test transparent"
    [src/proxy/route/loops.rs]="--lib"
    [src/proxy/route/refusal.rs]="--test refusals --test hostile --test logs --test addresses --test client_side --test resumption"
    [src/proxy/pending.rs]="--lib --test limits --test hostile"
    [src/proxy/preauth.rs]="--lib --test hostile --test disconnect"
    [src/proxy/conn.rs]="--lib --test limits --test client_reverify --test rotation --test process --test crl"
    [src/tls/mod.rs]="--lib --test refusals --test eku --test ca_hints --test kx_groups --test resumption"
    [src/tls/resolve.rs]="--lib --test rotation --test interop"
    [src/tls/provider.rs]="--lib --test kx_groups"
    [src/config/route.rs]="--lib --test cli"
    [src/credentials/reload.rs]="--test rotation --test store --test settle --test process --test crl --test deny --test health"
    [src/credentials/source.rs]="--lib --test store --test settle"
    [src/admin/admission.rs]="--lib --test admin_load"
    [src/process/fdlimit.rs]="--lib --test hostile"
    [src/credentials/deny/]="--lib --test deny --test deny_tools"
    [src/tls/resumption.rs]="--lib --test resumption"
    [src/proxy/http/]="--lib --test http_identity --test http_identity_h2"
    [src/admin/connections.rs]="--lib --test connections --test preview"
    [src/admin/shared.rs]="--lib --test connections --test process"
    [src/proxy/route/access.rs]="--test connections"
    [src/proxy/route/http.rs]="--test http_identity --test http_identity_h2"
    [src/proxy/route/runtimes.rs]="--lib --test runtimes"
    [src/credentials/workload.rs]="--lib --test workload_api --test workload_api_lifecycle --test workload_api_federation"
    [src/sandbox/seccomp.rs]="--lib --test sandbox"
    [src/tls/stream/]="--lib --test forwarding --test hostile --test handoff"
    [src/sandbox/]="--lib --test sandbox"
)
# The order they run and are reported in (and docs/mutants.md lists them).
ORDER=(
    src/tls/verify.rs
    src/tls/chain_memo.rs
    src/tls/spiffe.rs
    src/identity/
    src/credentials/validate.rs
    src/credentials/trust.rs
    src/credentials/grace.rs
    src/credentials/store/
    src/credentials/revocation/
    src/proxy/transparent/mod.rs
    src/proxy/transparent/outbound.rs
    src/proxy/transparent/log.rs
    src/proxy/transparent/rules.rs
    src/proxy/transparent/lookup.rs
    src/proxy/transparent/tproxy.rs
    src/proxy/route/admission.rs
    src/proxy/proxy_protocol.rs
    src/identity/pin.rs
    src/proxy/route/supervise.rs
    src/proxy/route/server.rs
    src/proxy/route/client.rs
    src/proxy/route/verdict.rs
    src/proxy/route/mod.rs
    src/proxy/route/loops.rs
    src/proxy/route/refusal.rs
    src/proxy/pending.rs
    src/proxy/preauth.rs
    src/proxy/conn.rs
    src/tls/mod.rs
    src/tls/resolve.rs
    src/tls/provider.rs
    src/config/route.rs
    src/credentials/reload.rs
    src/credentials/source.rs
    src/admin/admission.rs
    src/process/fdlimit.rs
    src/credentials/deny/
    src/tls/resumption.rs
    src/proxy/http/
    src/admin/connections.rs
    src/admin/shared.rs
    src/proxy/route/access.rs
    src/proxy/route/http.rs
    src/proxy/route/runtimes.rs
    src/credentials/workload.rs
    src/sandbox/seccomp.rs
    src/tls/stream/
    src/sandbox/
)
DOC=docs/mutants.md
RUNS=docs/mutants-runs.tsv
DIFF_RUNS=docs/mutants-diff-runs.tsv

# Whether $1 is a shard K/N with 0 <= K < N.
shard_ok() {
    [[ "$1" =~ ^([0-9]+)/([0-9]+)$ ]] && [ "${BASH_REMATCH[1]}" -lt "${BASH_REMATCH[2]}" ]
}

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
    exit 2
}

in_place=${MUTANTS_IN_PLACE:-0}
stale=0
record=0
in_diff=0
shard=
args=()
want_shard=0
for a in "$@"; do
    if [ "$want_shard" = 1 ]; then
        shard=$a
        want_shard=0
        continue
    fi
    case "$a" in
    --shard) want_shard=1 ;;
    --shard=*) shard=${a#--shard=} ;;
    --in-place) in_place=1 ;;
    --stale) stale=1 ;;
    --in-diff) in_diff=1 ;;
    --record) record=1 ;;
    -h | --help) usage ;;
    -*)
        echo "mutants.sh: unknown option $a" >&2
        usage
        ;;
    *) args+=("$a") ;;
    esac
done
if [ -n "$shard" ] && [ "$in_diff" = 1 ]; then
    echo "mutants.sh: --shard and --in-diff do not go together" >&2
    exit 2
fi
if [ "$want_shard" = 1 ] || { [ -n "$shard" ] && ! shard_ok "$shard"; }; then
    echo "mutants.sh: --shard takes K/N with 0 <= K < N, e.g. --shard 0/4" >&2
    exit 2
fi

# The table entry a path belongs to (empty: none).
entry_of() {
    local p=${1#./}
    if [ -n "${TARGETS[$p]+x}" ]; then
        echo "$p"
        return
    fi
    [ -n "${TARGETS[$p/]+x}" ] && { echo "$p/"; return; }
    local e
    for e in "${ORDER[@]}"; do
        case "$e" in */) [[ "$p" == "$e"* ]] && { echo "$e"; return; } ;; esac
    done
}

# The .rs files of an entry as they are in the tree now (none: absent).
files_of() {
    case "$1" in
    */)
        # A file with an entry of its own is mutated under that entry only.
        [ -d "$1" ] && find "$1" -name '*.rs' | sort | while IFS= read -r f; do
            [ -n "${TARGETS[$f]+x}" ] || echo "$f"
        done
        ;;
    *) [ -f "$1" ] && echo "$1" ;;
    esac
    return 0
}

# The run table, docs/mutants-runs.tsv: a header line, then one line an
# entry, tab-separated:
#   ENTRY COMMIT DATE MUTANTS CAUGHT MISSED UNVIABLE TIMEOUT
# with COMMIT "not run" for an entry never run at all, or
# "COMMIT (shards K,... of N)" for an incomplete sharded run: neither is a
# stamp.
stamp_of() { # $1: entry -> its commit, or nothing
    [ -f "$RUNS" ] || return 0
    awk -F '\t' -v e="$1" '$1 == e && $2 ~ /^[0-9a-f]+$/ && length($2) >= 7 && length($2) <= 40 { print $2; exit }' "$RUNS"
}

# Whether an entry needs a run: never run, a stamp this clone does not
# know, or a file of it changed (committed or not) since the stamp.
is_stale() {
    local c files
    c=$(stamp_of "$1")
    [ -z "$c" ] && return 0
    git cat-file -e "$c^{commit}" 2>/dev/null || return 0
    mapfile -t files < <(files_of "$1")
    [ ${#files[@]} -eq 0 ] && return 1
    ! git diff --quiet "$c" -- "${files[@]}" || [ -n "$(git ls-files --others --exclude-standard -- "${files[@]}")" ]
}

# Writes an entry's line of the run table (added at the end when the entry
# has none). With SHARD=K/N set, the figures are one shard's: they are
# added to the line's when it holds other shards of the same commit and N.
# With SINCE=STAMP set, the line goes to the table of --in-diff runs,
# docs/mutants-diff-runs.tsv, whose lines (the last such run an entry) read
#   ENTRY SINCE COMMIT DATE MUTANTS CAUGHT MISSED UNVIABLE TIMEOUT
# SINCE being the stamp the diff starts from, COMMIT the tree mutated.
record_row() { # entry commit date mutants caught missed unviable timeout
    local table=$RUNS
    [ -n "${SINCE:-}" ] && table=$DIFF_RUNS
    ENTRY=$1 SHARD=${SHARD:-} SINCE=${SINCE:-} python3 - "$table" "$@" <<'PY'
import os, re, sys
path, cells = sys.argv[1], sys.argv[2:]
entry, shard, since = os.environ["ENTRY"], os.environ["SHARD"], os.environ["SINCE"]
HEADER = "entry\tcommit\tdate\tmutants\tcaught\tmissed\tunviable\ttimeout"
if since:
    HEADER = HEADER.replace("entry\t", "entry\tsince\t")
try:
    lines = [l for l in open(path).read().split("\n") if l]
except FileNotFoundError:
    lines = [HEADER]
if not lines or lines[0] != HEADER:
    sys.exit("mutants.sh: %s does not start with the header line" % path)
at = [i for i, l in enumerate(lines) if l.split("\t")[0] == entry]
commit, date, figures = cells[1], cells[2], cells[3:]
if shard:
    k, n = (int(x) for x in shard.split("/"))
    figures = [int(c) for c in figures]
    done = {k}
    if at:
        old = lines[at[0]].split("\t")
        m = re.fullmatch(r"([0-9a-f]+) \(shards ([0-9,]+) of ([0-9]+)\)", old[1])
        if m and m.group(1) == commit and int(m.group(3)) == n and k not in {
            int(x) for x in m.group(2).split(",")
        }:
            done |= {int(x) for x in m.group(2).split(",")}
            figures = [a + int(b) for a, b in zip(figures, old[3:])]
    if len(done) < n:
        commit += " (shards %s of %d)" % (",".join(str(x) for x in sorted(done)), n)
row = "\t".join([entry] + [since] * bool(since) + [commit, date] + [str(f) for f in figures])
if at:
    lines[at[0]] = row
else:
    lines.append(row)
open(path, "w").write("\n".join(lines) + "\n")
PY
}

entries=()
add_entry() {
    local e
    for e in "${entries[@]+"${entries[@]}"}"; do [ "$e" = "$1" ] && return; done
    entries+=("$1")
}
if [ ${#args[@]} -gt 0 ]; then
    for p in "${args[@]}"; do
        e=$(entry_of "$p")
        if [ -z "$e" ]; then
            echo "mutants.sh: $p is not an admission file known to this script;" \
                "add it to TARGETS with the test targets that exercise it" >&2
            exit 2
        fi
        add_entry "$e"
    done
elif [ -n "${MUTANTS_BASE:-}" ]; then
    base=$(git merge-base "$MUTANTS_BASE" HEAD) || {
        echo "mutants.sh: MUTANTS_BASE=$MUTANTS_BASE is not a revision here" >&2
        exit 2
    }
    # Committed since the base, plus uncommitted changes.
    while IFS= read -r p; do
        e=$(entry_of "$p")
        [ -n "$e" ] && add_entry "$e"
    done < <(git diff --name-only "$base" -- src)
    if [ ${#entries[@]} -eq 0 ]; then
        echo "mutants: no admission file changed since $MUTANTS_BASE"
        exit 0
    fi
else
    entries=("${ORDER[@]}")
fi
if [ "$stale" = 1 ]; then
    all=("${entries[@]}")
    entries=()
    for e in "${all[@]}"; do
        if is_stale "$e"; then
            entries+=("$e")
        else
            echo "== $e: unchanged since its stamp $(stamp_of "$e"), skipped"
        fi
    done
    if [ ${#entries[@]} -eq 0 ]; then
        echo "mutants: every entry is unchanged since its stamp in $RUNS"
        exit 0
    fi
fi

command -v cargo-mutants >/dev/null 2>&1 || {
    echo "mutants.sh: cargo-mutants is not installed (cargo install --locked cargo-mutants)" >&2
    exit 2
}

# The equivalent mutants docs/mutants.md lists: the backticked name that
# starts a list item, as cargo-mutants prints it ("FILE: replace ..."),
# optionally with ":LINE:COL" after FILE to single out one of several
# mutants of the same name. Fenced code blocks (the format's example) are
# passed over.
equivalents=$(awk '/^[[:space:]]*```/ { fenced = !fenced; next } !fenced' "$DOC" 2>/dev/null |
    sed -nE 's/^[[:space:]]*[-*][[:space:]]+`(src\/[^`]+\.rs(:[0-9]+:[0-9]+)?: [^`]+)`.*/\1/p' || true)
is_equivalent() { # $1: "FILE:LINE:COL: name"
    local short
    short=$(sed -E 's/^([^:]+):[0-9]+:[0-9]+: /\1: /' <<<"$1")
    grep -Fxq -e "$1" -e "$short" <<<"$equivalents"
}

# How many mutants a cargo-mutants list file names (0 when it is absent).
count() {
    if [ -f "$1" ]; then grep -c . "$1" || true; else echo 0; fi
}

# An entry's "--lib --test AREA ..." as cargo-mutants arguments: cargo_args
# gets "-C --lib" and "-C --test=PROGRAM" once for each program holding one
# of the areas (as cargo arguments, -C reaches the build of each mutant too,
# which otherwise builds every test program of the crate to run a few).
# filters gets "::AREA::" for each area, which every test binary takes as
# name filters (a test runs when its name holds one), so that only the
# entry's areas of those programs run. With --lib the unit tests must pass
# them too: every one of them lives in a `tests` module (unit_tests_ok
# checks it before the first run), so filters also gets "tests::", which
# no test program's area matches. (A filter per top-level module, as
# before, also matched the programs' areas of the same name, e2e::admin::
# or e2e::process:: say: tens of seconds of unrelated tests a mutant.)
test_args() {
    cargo_args=() filters=()
    local lib=0 programs=() words area found m
    read -r -a words <<<"$1"
    local i=0
    while [ $i -lt ${#words[@]} ]; do
        case ${words[$i]} in
        --lib) lib=1 ;;
        --test)
            i=$((i + 1))
            area=${words[$i]}
            found=$(find tests -mindepth 2 -maxdepth 2 -name "$area.rs" -not -path 'tests/common/*')
            if [ "$(wc -w <<<"$found")" != 1 ]; then
                echo "mutants.sh: no single test area $area (tests/PROGRAM/$area.rs): ${found:-none}" >&2
                exit 2
            fi
            found=${found#tests/}
            found=${found%%/*}
            [[ " ${programs[*]} " == *" $found "* ]] || programs+=("$found")
            filters+=("::$area::")
            ;;
        *)
            echo "mutants.sh: unknown word ${words[$i]} in \"$1\"" >&2
            exit 2
            ;;
        esac
        i=$((i + 1))
    done
    [ $lib = 1 ] && cargo_args+=(-C --lib)
    if [ $lib = 1 ] && [ ${#programs[@]} -gt 0 ]; then
        filters+=("tests::")
        unit_filter=1
    fi
    for p in "${programs[@]}"; do cargo_args+=(-C "--test=$p"); done
}

# Whether every unit test's name holds "tests::", the filter test_args
# gives them: a unit test outside a `tests` module would otherwise be left
# out of every mutant's run without a word.
unit_tests_ok() {
    local names outside
    names=$(cargo test --quiet --profile mutate --lib -- --list 2>/dev/null | sed -n 's/: test$//p') || return 1
    [ -n "$names" ] || return 1
    outside=$(grep -v 'tests::' <<<"$names" || true)
    if [ -n "$outside" ]; then
        echo "mutants.sh: unit tests outside a \`tests\` module (put them in one):" >&2
        echo "$outside" >&2
        return 1
    fi
}

restore=()
restore_files() {
    if [ ${#restore[@]} -gt 0 ] && ! git diff --quiet -- "${restore[@]}"; then
        echo "mutants.sh: restoring ${restore[*]} from HEAD (interrupted run)" >&2
        git checkout -q -- "${restore[@]}"
    fi
}
trap restore_files EXIT
trap 'exit 130' INT TERM

out_root=target/mutants
mkdir -p "$out_root"
failed=0
summary=()
for e in "${entries[@]}"; do
    mapfile -t files < <(files_of "$e")
    if [ ${#files[@]} -eq 0 ]; then
        echo "== $e: not in this tree, skipped"
        continue
    fi
    unit_filter=0
    test_args "${TARGETS[$e]}"
    if [ "$unit_filter" = 1 ] && [ "${unit_checked:-0}" = 0 ]; then
        unit_tests_ok || { echo "mutants.sh: cannot list the unit tests" >&2; exit 2; }
        unit_checked=1
    fi
    mode=()
    if [ "$in_place" = 1 ]; then
        if ! git diff --quiet HEAD -- "${files[@]}"; then
            echo "mutants.sh: ${files[*]} has uncommitted changes; commit them or run without --in-place" >&2
            exit 2
        fi
        mode=(--in-place)
        restore=("${files[@]}")
    fi
    file_args=()
    for f in "${files[@]}"; do file_args+=(--file "$f"); done
    out="$out_root/$(tr '/.' '__' <<<"${e%/}")"
    since=
    if [ "$in_diff" = 1 ]; then
        since=$(stamp_of "$e")
        if [ -z "$since" ] || ! git cat-file -e "$since^{commit}" 2>/dev/null; then
            echo "== $e: no stamp to diff from; run in full"
            since=
        else
            mkdir -p "$out"
            git diff "$since" HEAD -- "${files[@]}" >"$out/since.diff"
            n=$(cargo mutants --list --in-diff "$out/since.diff" "${file_args[@]}" 2>/dev/null | grep -c . || true)
            if [ "$n" = 0 ]; then
                echo "== $e: no mutant on the lines changed since its stamp $since"
                if [ "$record" = 1 ]; then
                    SINCE=$since record_row "$e" "$(git rev-parse --short HEAD)" "$(date -u +%F)" 0 0 0 0 0
                fi
                summary+=("$e: no mutant on the lines changed since $since")
                continue
            fi
            file_args+=(--in-diff "$out/since.diff")
        fi
    fi
    # As cargo arguments (-C), not test arguments (after --): -C reaches the
    # build of each mutant as well, which otherwise builds every test target
    # of the crate (minutes a mutant) to run a few.
    [ -n "$shard" ] && cargo_args+=(--shard "$shard")
    rm -rf "$out/mutants.out" "$out/mutants.out.old"
    mkdir -p "$out"
    echo "== $e: cargo mutants ${file_args[*]} ${cargo_args[*]}${filters[*]+ -- -- ${filters[*]}}"
    started=$(date +%s)
    rc=0
    # The test timeout is at least a minute: cargo-mutants' own floor (20 s)
    # is the tests' DEADLINE, so a mutant whose test waits that long and
    # then fails was reported a timeout rather than caught.
    # shellcheck disable=SC2086 # MUTANTS_ARGS is a word list
    # The mutate profile (Cargo.toml) is dev without debug information: a
    # mutant builds in a third of the time, in target/mutate/ (apart from
    # dev's target/debug/, so neither build undoes the other).
    cargo mutants "${mode[@]+"${mode[@]}"}" --no-shuffle --colors never -o "$out" \
        --profile mutate --minimum-test-timeout 60 \
        "${file_args[@]}" "${cargo_args[@]}" ${MUTANTS_ARGS:-} \
        ${filters[@]+-- -- "${filters[@]}"} || rc=$?
    restore=()
    mo="$out/mutants.out"
    # 0: all caught; 2: some missed; 3: some timed out. Anything else (1
    # usage, 4 the unmutated tree fails its tests) means no figures.
    case $rc in 0 | 2 | 3) ;; *)
        echo "== $e: cargo-mutants failed (exit $rc); see $mo/debug.log" >&2
        failed=1
        summary+=("$e: cargo-mutants failed (exit $rc)")
        continue
        ;;
    esac
    caught=$(count "$mo/caught.txt") missed=$(count "$mo/missed.txt")
    unviable=$(count "$mo/unviable.txt") timeout=$(count "$mo/timeout.txt")
    unexplained=()
    equivalent=0
    if [ -f "$mo/missed.txt" ]; then
        while IFS= read -r m; do
            [ -z "$m" ] && continue
            if is_equivalent "$m"; then
                equivalent=$((equivalent + 1))
            else
                unexplained+=("$m")
            fi
        done <"$mo/missed.txt"
    fi
    line="$e${since:+ (lines changed since $since)}: caught $caught, missed $missed ($equivalent listed equivalent), unviable $unviable, timeout $timeout ($(($(date +%s) - started))s)"
    echo "== $line"
    if [ "$record" = 1 ]; then
        if git diff --quiet HEAD -- "${files[@]}"; then
            SHARD=$shard SINCE=$since record_row "$e" "$(git rev-parse --short HEAD)" "$(date -u +%F)" \
                $((caught + missed + unviable + timeout)) "$caught" "$missed" "$unviable" "$timeout"
        else
            echo "   not recorded: ${files[*]} differ from HEAD"
        fi
    fi
    summary+=("$line")
    if [ ${#unexplained[@]} -gt 0 ]; then
        failed=1
        echo "   missed, and not listed as equivalent in $DOC:"
        printf '     %s\n' "${unexplained[@]}"
    fi
    [ -s "$mo/timeout.txt" ] && { echo "   timed out:"; sed 's/^/     /' "$mo/timeout.txt"; }
done

echo
echo "mutants at $(git rev-parse --short HEAD), $(date -u +%F):"
printf '  %s\n' "${summary[@]+"${summary[@]}"}"
if [ "$failed" != 0 ]; then
    echo "mutants: survivors above need a test (or a line in $DOC saying why they are equivalent)" >&2
    exit 1
fi
