#!/usr/bin/env bash
# The test command: the whole suite (unit, end-to-end, interop).
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo test "$@"
