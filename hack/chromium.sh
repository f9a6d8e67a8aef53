#!/usr/bin/env bash
# Debian's chromium for the dashboard's browser tests (tests/web/browser.py), installed when it is
# missing; `make test` runs this. Playwright drives it (its own browser download reaches a CDN
# this machine cannot). Needs root and apt-get; otherwise says so, and the browser tests are
# skipped with that reason (under CI they fail instead).
set -euo pipefail
CHROMIUM=${GPUFLEET_CHROMIUM:-/usr/bin/chromium}
[ -x "$CHROMIUM" ] && exit 0
if ! command -v apt-get >/dev/null || [ "$(id -u)" != 0 ]; then
    echo "hack/chromium.sh: no $CHROMIUM, and installing Debian's chromium needs root and apt-get" >&2
    exit 0
fi
log=$(mktemp)
start=$(date +%s)
echo "hack/chromium.sh: installing Debian's chromium for the browser tests (about a minute) ..."
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -q --no-install-recommends chromium >"$log" 2>&1; then
    apt-get update -q >>"$log" 2>&1
    apt-get install -y -q --no-install-recommends chromium >>"$log" 2>&1 || { tail -20 "$log" >&2; exit 1; }
fi
echo "hack/chromium.sh: $("$CHROMIUM" --version 2>/dev/null | head -1) in $(( $(date +%s) - start )) s"
