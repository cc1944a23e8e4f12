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
# distlock-cli) pulls in neither clap nor nix, and builds with one backend alone.
python3 scripts/module_cycles.py
cargo check -q -p distlock --no-default-features --features sqlite
if cargo tree -p distlock --all-features -e normal --prefix none | grep -Eq '^(clap|nix) '; then
    echo "the distlock library depends on clap or nix" >&2
    exit 1
fi

# What the registry would get: every published package's manifest and file list (docs/ and the
# harnesses stay out), each built from its own .crate as a user would (unpublished workspace
# members resolve locally; about 80 s warm, the dependencies being built already).
# Cargo extracts those .crate files under CARGO_HOME's registry/src, in one directory keyed by
# name and version only, and reuses an extraction it finds there: one left by an earlier run of an
# older commit would be built instead of this one (seen: a distlock-core without a function the
# new distlock-etcd calls). Ours are removed first; crates from the registry re-extract on demand.
rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/distlock-*
cargo package -q --workspace --exclude benches --exclude distlock-chaos --allow-dirty

# Every crate's unit, conformance, fault and process tests on the real servers.
export DISTLOCK_CHROMIUM; DISTLOCK_CHROMIUM="$(scripts/browser.sh)" # for benches/tests/html.rs
cargo test --workspace --exclude distlock-zookeeper-client --all-features -- --test-threads="${DISTLOCK_TEST_THREADS:-4}"
