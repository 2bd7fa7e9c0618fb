#!/usr/bin/env bash
# ensure-chromium.sh: install Debian's chromium for the browser tests (tests/integration/
# test_ui_*.py) when /usr/bin/chromium is missing. Idempotent; never downloads a browser
# through Playwright. Where apt-get is not available it warns and the browser tests skip.
set -u
if [ -x /usr/bin/chromium ]; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-chromium: no apt-get here; install chromium as /usr/bin/chromium for the browser tests" >&2
    exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
fi
$sudo apt-get update -q && $sudo apt-get install -y -q chromium
