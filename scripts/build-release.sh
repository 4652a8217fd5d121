#!/usr/bin/env bash
# The one release build command, shared by the Dockerfile and CI. It makes
# the shipped binary, ${CARGO_TARGET_DIR:-target}/dist/mtls-sidecar:
#   * static on Linux (glibc linked in; `files` and `dns` host lookups are
#     built into it), so the image needs no libc and a pod maps no shared
#     libraries (~1 MB less resident memory per sidecar);
#   * with the functions a sidecar executes packed together by the linker
#     (scripts/link-order/), so the resident code is what runs, not the 64 KiB
#     blocks around it (~5 MB less for the pair);
#   * with relative relocations packed (DT_RELR, glibc >= 2.36): the static
#     PIE relocates itself from 3 KiB of table instead of 316 KiB.
# The last two need LLD, Rust's default linker on x86_64 Linux; with any
# other linker the build goes on without them.
#
#   * with its dependency list embedded (cargo auditable: the `.dep-v0`
#     section, which image scanners read) when cargo-auditable is installed.
#
# Two builds of one commit give the same bytes: the link order is the
# committed list (scripts/link-order/symbols.txt) carried over to this
# binary's symbol names (refresh.py, deterministic):
#   1. cargo links the binary with the committed list, and LLD saves its
#      inputs (--reproduce);
#   2. refresh.py maps each listed name the binary no longer has (a hash
#      moved) to the binary's function of the same demangled name;
#   3. LLD links the saved inputs again with that list (seconds; rustc does
#      not run again).
# The list itself is derived once per release, not per build: deriving runs
# a pod's life under callgrind (derive.py), and what a run executes varies
# with thread interleaving, so a derived list is not reproducible.
# LINK_ORDER=derive derives it in this build instead (the maintainers'
# refresh, CONTRIBUTING.md "Link order"); scripts/link-order/current.py,
# which CI runs, fails when the committed list has fallen behind the code.
# Everything this needs: python3, nm and c++filt (binutils); derive also
# valgrind.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${TARGET:-$(rustc -vV | sed -n 's/^host: //p')}
out=${CARGO_TARGET_DIR:-target}
say() { echo "build-release.sh: $*" >&2; }

# Through RUSTFLAGS with an explicit --target, so build scripts and proc
# macros (host code) stay dynamic, as they must.
case $target in
*-linux-gnu*) export RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" ;;
esac

# cargo auditable embeds the dependency list when it is installed (.ci/run
# installs it); AUDITABLE=0 builds without.
cargo=(cargo)
if [[ ${AUDITABLE:-1} != 0 ]] && command -v cargo-auditable >/dev/null; then
    cargo=(cargo auditable)
else
    say "cargo-auditable not installed: the binary carries no dependency list"
fi
build() { # extra rustc flags for the binary's own crate (and its link) only
    "${cargo[@]}" rustc --release --locked --bin mtls-sidecar --target "$target" -- "$@"
}
binary=$out/$target/release/mtls-sidecar
order=scripts/link-order/symbols.txt
work=$out/link-order

# LLD on its saved inputs (step 3): the link cargo ran, with another list.
relink() {
    local list=$1 lld dir ordering output
    lld=$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin/rust-lld
    [[ -x $lld ]] || lld=$(command -v ld.lld) || return 1
    dir=$work/link
    rm -rf "$dir"
    tar -xf "$work/link.tar" -C "$work" || return 1
    ordering=$(sed -n 's/^--symbol-ordering-file[= ]//p' "$dir/response.txt")
    [[ -n $ordering && -f $dir/$ordering ]] || return 1
    cp "$list" "$dir/$ordering"
    output=$(realpath "$work")/mtls-sidecar
    sed -i "s|^-o .*|-o $output|" "$dir/response.txt"
    (cd "$dir" && "$lld" -flavor gnu @response.txt) || return 1
    rm -rf "$dir"
    install -m 0755 "$output" "$binary"
}

if [[ $target == x86_64-unknown-linux-* && -s $order ]]; then
    # The first link's list: a copy under a fixed name, so cargo does not
    # rebuild when only the list changed (the links below read the copy as
    # it is now; the order of the first link does not matter to them).
    copy=$work/symbols.txt
    install -D -m 0644 "$order" "$copy"
    ordered() {
        build -C "link-arg=-Wl,--symbol-ordering-file=$(realpath "$1")" -C link-arg=-Wl,--no-warn-symbol-ordering \
            -C link-arg=-Wl,-z,pack-relative-relocs -C "link-arg=-Wl,--reproduce=$(realpath "$work")/link.tar"
    }
    if ordered "$copy"; then
        derived=$work/derived.txt
        # Through cargo when LLD cannot relink the saved inputs: named by
        # content, as cargo does not track the file but rebuilds when the
        # flags change.
        again() {
            local named
            named=$work/derived-$(sha256sum "$derived" | cut -c1-16).txt
            cp "$derived" "$named"
            relink "$derived" || { say "relinking with LLD failed; linking again through cargo"; ordered "$named"; }
        }
        have() { command -v "$1" >/dev/null; }
        if ! have python3 || ! have nm || ! have c++filt; then
            say "WARNING: no python3, nm or c++filt: linked with the committed list as it is" \
                "(names whose hash moved are skipped, so memory grows; see docs/sizing.md)"
        elif [[ ${LINK_ORDER:-committed} == derive ]]; then
            counts=$(python3 scripts/link-order/derive.py "$binary" "$copy" "$derived")
            say "link order derived in this build (not reproducible): $counts"
            again
        else
            counts=$(python3 scripts/link-order/refresh.py "$binary" "$copy" "$derived")
            say "committed link order carried over: $counts"
            again
        fi
    else
        say "linking with $order failed (not LLD?); building without it"
        build
    fi
else
    build
fi
install -D -m 0755 "$binary" "$out/dist/mtls-sidecar"
say "$out/dist/mtls-sidecar"
