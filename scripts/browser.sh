#!/usr/bin/env bash
# The headless browser the benchmark report's test opens report.html in (benches/tests/html.rs):
# installs Debian's chromium when it is missing and prints its path, for
# `export DISTLOCK_CHROMIUM=$(scripts/browser.sh)` in scripts/test.sh. Not part of the
# README's first command, which installs nothing.
set -euo pipefail
bin=/usr/bin/chromium
if [ ! -x "$bin" ]; then
    log=/tmp/distlock-apt-chromium.log
    echo "browser.sh: installing chromium (log: $log)" >&2
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q chromium >"$log" 2>&1; then
        apt-get update -q >>"$log" 2>&1 || true
        apt-get install -y -q chromium >>"$log" 2>&1 || {
            echo "browser.sh: apt-get install chromium failed (see $log)" >&2
            exit 1
        }
    fi
fi
echo "$bin"
