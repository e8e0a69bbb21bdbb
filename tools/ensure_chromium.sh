#!/usr/bin/env bash
# The report tests look at every HTML report in headless Chromium (tests/_browser.py): Debian's
# `chromium` package. Present: nothing to do. Missing: installed with apt-get when we are root
# (as in CI); otherwise a one-line error saying how, and exit 1, so CI never skips those tests.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "error: chromium is not installed; run as root: apt-get update && apt-get install -y chromium" >&2
    exit 1
fi
echo "installing chromium (apt-get) for the browser tests of the HTML reports" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends chromium >/dev/null
command -v chromium >/dev/null
