#!/usr/bin/env bash
# Prints the path of a toxiproxy server binary, building it from Go modules the first time.
#
#   scripts/tools/toxiproxy.sh       -> /root/.cache/httpbus/tools/toxiproxy-v2.5.0/toxiproxy-server
#
# Toxiproxy (Shopify) is a TCP proxy with "toxics": latency, jitter, resets, stalls. The kernel
# here has no netem, so the tests that put an endpoint behind latency and loss go through it
# (tests/support/toxiproxy.py). As scripts/tools/helm.sh does for Helm: compiled with the local
# Go toolchain from the module proxy, cached under ~/.cache/httpbus outside the work tree, one
# build at a time under a lock, only the path on stdout.
#
# Overrides: HTTPBUS_TOXIPROXY (use this binary as is), HTTPBUS_CACHE_DIR, GO.
set -euo pipefail

version="v2.5.0"
cache="${HTTPBUS_CACHE_DIR:-$HOME/.cache/httpbus}"
bin="$cache/tools/toxiproxy-$version/toxiproxy-server"

if [[ -n "${HTTPBUS_TOXIPROXY:-}" ]]; then
    echo "$HTTPBUS_TOXIPROXY"
    exit 0
fi
if [[ ! -x "$bin" ]]; then
    go="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
    [[ -x "$go" ]] || { echo "toxiproxy.sh: no Go toolchain (go on PATH, /usr/local/go/bin/go)" >&2; exit 1; }
    mkdir -p "$cache/tools"
    exec 9>"$cache/tools/toxiproxy.lock"
    flock 9
    if [[ ! -x "$bin" ]]; then  # another caller may have built it while we waited
        echo "toxiproxy.sh: building toxiproxy $version from Go modules (first time only)..." >&2
        tmp="$(mktemp -d "$cache/tools/.toxiproxy-build.XXXXXX")"
        trap 'rm -rf "$tmp"' EXIT
        (cd / && env GOPATH="$cache/go" GOMODCACHE="$cache/go/pkg/mod" GOCACHE="$tmp/gocache" \
            GOBIN="$tmp" GOTOOLCHAIN=local GOFLAGS=-modcacherw CGO_ENABLED=0 \
            "$go" install -trimpath -ldflags "-s -w" \
            "github.com/Shopify/toxiproxy/v2/cmd/server@$version") >&2
        mkdir -p "$(dirname "$bin")"
        mv "$tmp/server" "$bin.partial" && mv "$bin.partial" "$bin"
    fi
fi
echo "$bin"
