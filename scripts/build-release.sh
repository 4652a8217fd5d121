#!/usr/bin/env bash
# The one release build command, shared by the Dockerfile and CI.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --bin mtls-sidecar
