#!/usr/bin/env bash
# install.sh builds the real webhooks of the conformance suite
# (test/e2e/conformance) that are not part of this module: cert-manager's
# webhook, from the pinned module in hack/conformance/cert-manager, through
# the Go module proxy, into a cache folder outside the repository keyed by
# version. It builds only what is missing.
#
# Usage: hack/conformance/install.sh      # prints the cert-manager webhook's path on stdout
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# The version is the one hack/conformance/cert-manager/go.mod pins.
CERT_MANAGER_VERSION=$(awk '$1 == "github.com/cert-manager/cert-manager" { print $2; exit }' "$here/cert-manager/go.mod")
if [ -z "$CERT_MANAGER_VERSION" ]; then
  echo "conformance: no cert-manager version in $here/cert-manager/go.mod" >&2
  exit 1
fi
cache=${WEBHOOK_GUARD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/webhook-guard}
# The key includes a hash of the wrapper's sources, so a change to it
# rebuilds instead of reusing a stale binary.
src=$(cat "$here/cert-manager/go.mod" "$here/cert-manager/go.sum" "$here/cert-manager/main.go" | sha256sum | cut -c1-12)
bin="$cache/bin/conformance-cert-manager-$CERT_MANAGER_VERSION-$src"
mkdir -p "$bin"

export CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:-} -mod=mod"

if [ ! -x "$bin/cert-manager-webhook" ]; then
  echo "conformance: building cert-manager $CERT_MANAGER_VERSION's webhook from source (about 4 minutes of CPU on a cold machine, 10 minutes on a busy 2-core one; cached afterwards in $bin)" >&2
  start=$SECONDS
  (cd "$here/cert-manager" && go build -trimpath -ldflags "-s -w" -o "$bin/cert-manager-webhook.tmp" .)
  mv "$bin/cert-manager-webhook.tmp" "$bin/cert-manager-webhook"
  echo "conformance: built cert-manager-webhook in $((SECONDS - start))s" >&2
fi

echo "$bin/cert-manager-webhook"
