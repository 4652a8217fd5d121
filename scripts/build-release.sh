#!/usr/bin/env bash
# The one release build command, shared by the Dockerfile and CI. It makes
# the shipped binary, ${CARGO_TARGET_DIR:-target}/dist/mtls-sidecar:
#   * static on Linux (glibc linked in; `files` and `dns` host lookups are
#     built into it), so the image needs no libc and a pod maps no shared
#     libraries (~1 MB less resident memory per sidecar);
#   * with the functions a sidecar executes packed together by the linker
#     (scripts/link-order/), so the resident code is what runs, not the 64 KiB
#     blocks around it (~3 MB less per sidecar);
#   * with relative relocations packed (DT_RELR, glibc >= 2.36): the static
#     PIE relocates itself from 3 KiB of table instead of 316 KiB.
# The last two need LLD, Rust's default linker on x86_64 Linux; with any
# other linker the build goes on without them.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${TARGET:-$(rustc -vV | sed -n 's/^host: //p')}
out=${CARGO_TARGET_DIR:-target}

# Through RUSTFLAGS with an explicit --target, so build scripts and proc
# macros (host code) stay dynamic, as they must.
case $target in
*-linux-gnu*) export RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" ;;
esac

build() { # extra rustc flags for the binary's own crate (and its link) only
    cargo rustc --release --locked --bin mtls-sidecar --target "$target" -- "$@"
}
order=scripts/link-order/symbols.txt
if [[ $target == x86_64-unknown-linux-* && -s $order ]]; then
    # Named by content: cargo does not track the file, but it does rebuild
    # when the flags change.
    copy=$out/link-order/symbols-$(sha256sum "$order" | cut -c1-16).txt
    install -D -m 0644 "$order" "$copy"
    ordered() {
        build -C "link-arg=-Wl,--symbol-ordering-file=$(realpath "$1")" -C link-arg=-Wl,--no-warn-symbol-ordering \
            -C link-arg=-Wl,-z,pack-relative-relocs
    }
    if ordered "$copy"; then
        # Names whose hash moved since the list was generated (a dependency
        # changed) are carried over to this binary's names, and the binary is
        # linked again with them: see scripts/link-order/refresh.py.
        if command -v python3 >/dev/null && command -v nm >/dev/null; then
            fresh=$out/link-order/refreshed-$(sha256sum "$copy" | cut -c1-16).txt
            counts=$(python3 scripts/link-order/refresh.py "$out/$target/release/mtls-sidecar" "$copy" "$fresh")
            echo "build-release.sh: link order: $counts" >&2
            if [[ $counts != *"remapped 0,"* ]]; then
                ordered "$fresh"
            fi
        fi
    else
        echo "build-release.sh: linking with $order failed (not LLD?); building without it" >&2
        build
    fi
else
    build
fi
install -D -m 0755 "$out/$target/release/mtls-sidecar" "$out/dist/mtls-sidecar"
echo "build-release.sh: $out/dist/mtls-sidecar" >&2
