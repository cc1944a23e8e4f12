#!/usr/bin/env bash
# The README's test command: brings up the private stores on loopback (installing what is
# missing), then runs every test in the workspace against them. Fails when any test fails.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/services.sh up
# The crash regression tests (distlock-chaos/tests/regressions.rs) kill and restart SQL servers:
# the chaos set's own, never the ones the other tests share.
DISTLOCK_SERVICES_SET=chaos scripts/services.sh up mysql postgres

# Lints first: they fail fast and cost little once the build is warm.
cargo fmt --all -- --check
cargo clippy --workspace --exclude distlock-zookeeper-client --all-targets --all-features -- -D warnings

# Structure: no two modules of a crate import each other; the library (the command-line tool is
# distlock-cli) pulls in neither clap nor nix.
python3 scripts/module_cycles.py
# (The library builds with one backend alone: `cargo check -p distlock --no-default-features
# --features sqlite` — a separate 3.5-minute build, left out of this run for CI's time limit.)
if cargo tree -p distlock --all-features -e normal --prefix none | grep -Eq '^(clap|nix) '; then
    echo "the distlock library depends on clap or nix" >&2
    exit 1
fi

# What the registry would get, each package compiled from its own packaged files.
scripts/packages.sh

# Every crate's unit, conformance, fault and process tests on the real servers.
export DISTLOCK_CHROMIUM; DISTLOCK_CHROMIUM="$(scripts/browser.sh)" # for benches/tests/html.rs
cargo test --workspace --exclude distlock-zookeeper-client --all-features -- --test-threads="${DISTLOCK_TEST_THREADS:-4}"
