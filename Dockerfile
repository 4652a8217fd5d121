# syntax=docker/dockerfile:1
#
# mtls-sidecar container image.
#
#   docker build -t mtls-sidecar .
#
# Three stages:
#   chef     a Rust toolchain plus cargo-chef.
#   planner  reduces the workspace to a "recipe" (manifests and lockfile only),
#            so the dependency layer below is rebuilt only when they change.
#   builder  compiles the dependencies from the recipe (the cached layer), then
#            the crate itself with scripts/build-release.sh, the very script
#            CI runs, so CI proves this recipe's build command and flags
#            (and, with valgrind, the link order derived in the build).
# The binary is static (scripts/build-release.sh links glibc in, with its
# `files` and `dns` host lookups), so the final image is distroless/static:
# CA certificates and /etc/passwd, no libc, no shell, no package manager,
# running as the distroless "nonroot" user (65532). Everything an operator
# needs inside the container is a subcommand of the binary (`check`,
# `health`), so the missing shell costs nothing.

ARG RUST_VERSION=1.95.0
ARG CARGO_CHEF_VERSION=0.1.76
ARG CARGO_AUDITABLE_VERSION=0.7.7

FROM docker.io/library/rust:${RUST_VERSION}-slim-trixie AS chef
ARG CARGO_CHEF_VERSION
ARG CARGO_AUDITABLE_VERSION
# cargo-auditable embeds the dependency list in the binary (.dep-v0), which
# image scanners read from the static binary.
RUN cargo install --locked cargo-chef --version "${CARGO_CHEF_VERSION}" \
 && cargo install --locked cargo-auditable --version "${CARGO_AUDITABLE_VERSION}"
WORKDIR /src

FROM chef AS planner
COPY . .
RUN cargo chef prepare --recipe-path recipe.json

FROM chef AS builder
# scripts/build-release.sh carries the committed link order over to the
# binary's symbol names (scripts/link-order/refresh.py: python3; nm and
# c++filt come with gcc's binutils), so the image's binary is the one two
# clean builds of the commit give.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=planner /src/recipe.json recipe.json
# Same profile, lockfile policy, target and RUSTFLAGS as
# scripts/build-release.sh, so the dependencies compiled here are the ones
# the real build reuses.
RUN RUSTFLAGS="-C target-feature=+crt-static" cargo chef cook --release --locked \
      --target "$(rustc -vV | sed -n 's/^host: //p')" --bin mtls-sidecar --recipe-path recipe.json
COPY . .
RUN bash scripts/build-release.sh \
 && install -D -m 0755 target/dist/mtls-sidecar /out/rootfs/usr/local/bin/mtls-sidecar \
 && ln -s /usr/local/bin/mtls-sidecar /out/rootfs/mtls-sidecar

FROM gcr.io/distroless/static-debian13:nonroot
LABEL org.opencontainers.image.title="mtls-sidecar" \
      org.opencontainers.image.description="A transparent mutual-TLS sidecar proxy for plaintext controller/replica ports" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/rootfs/ /
# Numeric, so Kubernetes can verify runAsNonRoot without a passwd lookup.
USER 65532:65532
# 6877: the server sidecar's mTLS listener in the examples; 9901: admin
# (/metrics, /livez, /readyz, /status). Both are set by flags, not fixed.
EXPOSE 6877 9901
# For plain Docker/Podman (Kubernetes ignores HEALTHCHECK and uses the
# probes in deploy/kubernetes). Exec form: there is no shell to run one.
# It assumes the sidecar was started with `--admin 127.0.0.1:9901`.
HEALTHCHECK --interval=15s --timeout=5s --start-period=10s --retries=3 \
    CMD ["/usr/local/bin/mtls-sidecar", "health", "--admin", "127.0.0.1:9901"]
ENTRYPOINT ["/usr/local/bin/mtls-sidecar"]
CMD ["--help"]
