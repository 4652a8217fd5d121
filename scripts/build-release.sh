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
# The link order is derived in this build, from this binary, so it does not
# decay as the code and its dependencies change:
#   1. cargo links the binary with the committed list
#      (scripts/link-order/symbols.txt), and LLD saves its inputs
#      (--reproduce);
#   2. scripts/link-order/derive.py runs a pod's life (train.py) on it under
#      callgrind: every function each role executes, by instruction count,
#      so the same on a loaded machine; what callgrind cannot see (code
#      picked by CPU dispatch, paths only native timing reaches) is carried
#      over from the committed list;
#   3. LLD links the saved inputs again with that list (seconds; rustc does
#      not run again).
# Step 2 adds ~30 s (~25 s on a loaded 2-core box). Without valgrind it
# falls back, loudly, to the committed list carried over to this binary's
# symbol names (refresh.py): that list decays as the code changes (+1 to
# +4 MB for the pair). LINK_ORDER=committed asks for that fallback.
# Everything step 2 needs: valgrind, python3, nm and c++filt (binutils).
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

build() { # extra rustc flags for the binary's own crate (and its link) only
    cargo rustc --release --locked --bin mtls-sidecar --target "$target" -- "$@"
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
            say "WARNING: no python3, nm or c++filt: linked with the committed list as it is;" \
                "it decays as the code changes, so memory grows (see benches/README.md)"
        elif [[ ${LINK_ORDER:-derive} != committed ]] && have valgrind &&
            counts=$(python3 scripts/link-order/derive.py "$binary" "$copy" "$derived"); then
            say "link order derived in this build: $counts"
            again
        else
            [[ ${LINK_ORDER:-derive} == committed ]] ||
                say "WARNING: link order NOT derived in this build (valgrind missing or derive.py failed):" \
                    "falling back to the committed list carried over to this binary's names;" \
                    "it decays as the code changes, so memory grows (see benches/README.md)"
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
