#!/usr/bin/env bash
# Prints the path of a Helm binary, building it from Go modules the first time.
#
#   scripts/tools/helm.sh            -> /root/.cache/httpbus/tools/helm-v3.21.4/helm
#
# No binary download: Debian has no helm package, so the pinned version is compiled with
# `go install helm.sh/helm/v3/cmd/helm@VERSION` (sources from the Go module proxy, the local
# toolchain only: GOTOOLCHAIN=local). Everything lives under ~/.cache/httpbus, outside the
# work tree, so a fresh clone reuses it and `git clean` never throws it away. Idempotent: when
# the binary is there it answers at once; concurrent callers wait on one lock and one build.
# Only the path goes to stdout; the build's chatter goes to stderr.
#
# Overrides: HTTPBUS_HELM (use this binary as is), HTTPBUS_HELM_VERSION, HTTPBUS_CACHE_DIR,
# GO (the go command; default: go on PATH, else /usr/local/go/bin/go).
set -euo pipefail

version="${HTTPBUS_HELM_VERSION:-v3.21.4}"
cache="${HTTPBUS_CACHE_DIR:-$HOME/.cache/httpbus}"
dest="$cache/tools/helm-$version"
bin="$dest/helm"

if [[ -n "${HTTPBUS_HELM:-}" ]]; then
    [[ -x "$HTTPBUS_HELM" ]] || { echo "HTTPBUS_HELM=$HTTPBUS_HELM is not executable" >&2; exit 1; }
    echo "$HTTPBUS_HELM"
    exit 0
fi
if [[ -x "$bin" ]]; then
    echo "$bin"
    exit 0
fi

go="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
if [[ ! -x "$go" ]]; then
    echo "helm.sh: no Go toolchain (looked for 'go' on PATH and /usr/local/go/bin/go);" \
         "install Go >= 1.24 or set HTTPBUS_HELM to a helm binary" >&2
    exit 1
fi

mkdir -p "$cache/tools"
exec 9>"$cache/tools/helm.lock"
flock 9
if [[ ! -x "$bin" ]]; then  # another caller may have built it while we waited
    echo "helm.sh: building helm $version from Go modules (first time only)..." >&2
    start=$SECONDS
    tmp="$(mktemp -d "$cache/tools/.helm-build.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    # cd /: never pick up a go.mod of the caller's directory. The build cache (~700 MB) goes
    # with the temporary folder; the module cache stays for the next version bump.
    gocmd() {
        (cd / && env GOPATH="$cache/go" GOMODCACHE="$cache/go/pkg/mod" GOCACHE="$tmp/gocache" \
            GOBIN="$tmp" GOTOOLCHAIN=local GOFLAGS=-modcacherw CGO_ENABLED=0 "$go" "$@")
    }
    gocmd mod download "helm.sh/helm/v3@$version" >&2
    # As helm's Makefile does: the default Kubernetes version of `helm template` and of the lint
    # deprecation rules is the client-go it is built with (v0.36 -> 1.36), not the 1.20 fallback.
    client_go="$(awk '$1 == "k8s.io/client-go" {print $2}' \
        "$cache/go/pkg/mod/helm.sh/helm/v3@$version/go.mod")"
    k8s_minor="$(echo "$client_go" | cut -d. -f2)"
    [[ "$k8s_minor" =~ ^[0-9]+$ ]] || { echo "helm.sh: no client-go version in go.mod" >&2; exit 1; }
    ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$version"
    for pkg in pkg/lint/rules pkg/chartutil; do
        ldflags+=" -X helm.sh/helm/v3/$pkg.k8sVersionMajor=1"
        ldflags+=" -X helm.sh/helm/v3/$pkg.k8sVersionMinor=$k8s_minor"
    done
    gocmd install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$version" >&2
    mkdir -p "$dest"
    mv "$tmp/helm" "$bin.partial" && mv "$bin.partial" "$bin"
    echo "helm.sh: built $bin in $((SECONDS - start)) s" >&2
fi
echo "$bin"
