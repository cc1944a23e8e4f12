#!/usr/bin/env bash
# What the registry would get, checked as `cargo package`'s verification would: every published
# package's manifest and file list (docs/ and the harnesses stay out), then each package compiled
# from its own packaged sources alone. The compile is a `cargo check` of the unpacked packages as
# one workspace that shares this one's target directory, patched to one another as the registry
# would resolve them — not `cargo package`'s own verification, which builds every package in a
# feature set of its own (5 m 20 s on 2 cores, against about 1 m here; 2026-11-28).
set -euo pipefail
cd "$(dirname "$0")/.."

rm -rf target/package
cargo package -q --workspace --exclude benches --exclude distlock-chaos --allow-dirty --no-verify
cd target/package
members=() patches=()
for crate in *.crate; do
    tar -xzf "$crate"
    dir="${crate%.crate}"
    members+=("\"$dir\"")
    patches+=("${dir%-*} = { path = \"$dir\" }")
done
{
    echo '[workspace]'
    echo 'resolver = "2"'
    echo "members = [$(IFS=,; echo "${members[*]}")]"
    echo '[patch.crates-io]'
    printf '%s\n' "${patches[@]}"
} > Cargo.toml
cp ../../Cargo.lock .
CARGO_TARGET_DIR=../../target cargo check -q --workspace --all-features
