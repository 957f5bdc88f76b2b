#!/usr/bin/env bash
# helm.sh builds helm, for the chart in deploy/helm and its tests in
# test/e2e/helm, from source through the Go module proxy at HELM_VERSION,
# into a cache folder outside the repository keyed by that version, the way
# promtool.sh builds promtool. It builds only when the binary is missing,
# and prints a line while it builds.
#
# The build runs in a throwaway module that requires only helm.sh/helm/v3 at
# HELM_VERSION (GOFLAGS=-mod=mod): helm's own go.mod has no replace lines,
# so minimal version selection picks exactly the versions helm's go.mod
# names, and sum.golang.org checks every download. The -X flags are those
# of helm's own Makefile: its version, and the Kubernetes version that
# "helm template" and "helm lint" assume without a cluster (client-go
# v0.37 is Kubernetes 1.37).
#
# Usage: hack/tools/helm.sh                # prints the helm path on stdout
set -euo pipefail

HELM_VERSION=v3.22.0
# The commit of the tag HELM_VERSION, as "helm version" reports it.
HELM_COMMIT=144ca65f8501953fa8b41cd1d37c7223051c85b7
HELM_KUBE_MAJOR=1
HELM_KUBE_MINOR=37

cache=${WEBHOOK_GUARD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/webhook-guard}
bin="$cache/bin/helm-$HELM_VERSION"
if [ ! -x "$bin/helm" ]; then
  mkdir -p "$bin"
  echo "tools: building helm $HELM_VERSION from source (about 2 minutes on a cold 2-core machine, measured 127 s; cached afterwards in $bin)" >&2
  start=$SECONDS
  mod=$(mktemp -d)
  trap 'rm -rf "$mod"' EXIT
  ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  ldflags+=" -X helm.sh/helm/v3/internal/version.gitCommit=$HELM_COMMIT -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ldflags+=" -X $p.k8sVersionMajor=$HELM_KUBE_MAJOR -X $p.k8sVersionMinor=$HELM_KUBE_MINOR"
  done
  # go get lists every module it adds; keep that for a failure only.
  if ! (cd "$mod" && export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=mod" &&
    go mod init webhook-guard.io/tools/helm &&
    go get "helm.sh/helm/v3@$HELM_VERSION" &&
    go build -trimpath -ldflags "$ldflags" -o "$bin/helm.tmp" helm.sh/helm/v3/cmd/helm) >"$mod/log" 2>&1; then
    cat "$mod/log" >&2
    echo "tools: building helm $HELM_VERSION failed" >&2
    exit 1
  fi
  mv "$bin/helm.tmp" "$bin/helm"
  echo "tools: built helm in $((SECONDS - start))s" >&2
fi
echo "$bin/helm"
