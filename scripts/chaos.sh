#!/usr/bin/env bash
# The long chaos run: every fault scenario on every backend; writes target/chaos-report/report.md
# and exits non-zero on any stale write accepted, out-of-order write or unexpected overlap.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/services.sh up >/dev/null
cargo build --release -q -p lock-chaos
exec target/release/lock-chaos --out target/chaos-report "$@"
