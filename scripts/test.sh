#!/usr/bin/env bash
# The README's test command: brings up the private stores on loopback (installing what is
# missing), then runs every test in the workspace against them. Fails when any test fails.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/services.sh up

# Lints first: they fail fast and cost little once the build is warm.
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --all-features -- -D warnings

# Every crate's unit, conformance, fault and process tests on the real servers.
cargo test --workspace --all-features -- --test-threads="${DISTLOCK_TEST_THREADS:-4}"
