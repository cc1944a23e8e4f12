#!/usr/bin/env bash
# Runs the differential state-machine test (distlock_core::conformance::differential) longer than
# scripts/test.sh does: every backend, a given seed and case count.
#   scripts/differential.sh [SEED] [CASES]      (defaults: a random seed, 200 cases)
# A failure prints the minimal sequence and the DISTLOCK_DIFF_SEED/DISTLOCK_DIFF_CASES that
# replay it. Needs scripts/services.sh up.
set -euo pipefail
cd "$(dirname "$0")/.."
seed="${1:-$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')}"
cases="${2:-200}"
echo "differential: seed $seed, $cases cases per backend"
scripts/services.sh up >/dev/null
DISTLOCK_DIFF_SEED="$seed" DISTLOCK_DIFF_CASES="$cases" \
  cargo test --workspace --all-features --test conformance --test memory_conformance \
  differential_against_reference -- --nocapture --test-threads=2
