#!/usr/bin/env bash
# The chaos runs. Without --random: every scripted fault scenario on every backend; writes
# target/chaos-report/report.md. With --random --seed S --minutes M [--backend B|all]: the random
# fault schedule (nemesis) on each backend in turn; writes target/chaos-report/random-S.md.
# Exits non-zero on any stale write accepted, out-of-order write, unexpected overlap or (random)
# liveness failure.
#
# --services chaos (or DISTLOCK_SERVICES_SET=chaos) runs on the second, independent set of store
# instances (ports +1000), which is the only set whose stores the nemesis pauses and kills; the
# default set is the one the tests share, and there the nemesis draws client faults only.
set -euo pipefail
cd "$(dirname "$0")/.."
set_name=${DISTLOCK_SERVICES_SET:-default}
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case ${args[i]} in
    --services) set_name=${args[i + 1]:-} ;;
    --services=*) set_name=${args[i]#--services=} ;;
  esac
done
export DISTLOCK_SERVICES_SET=$set_name
scripts/services.sh up >/dev/null
# services.sh up installed protoc, which the etcd targets' client needs.
cargo build --release -q -p distlock-chaos --features etcd
exec target/release/distlock-chaos --out target/chaos-report "$@"
