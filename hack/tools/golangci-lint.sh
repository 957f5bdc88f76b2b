#!/usr/bin/env bash
# golangci-lint.sh builds golangci-lint from source through the Go module
# proxy at the github.com/golangci/golangci-lint/v2 version pinned in
# hack/tools/golangci-lint/go.mod, into a cache folder outside the
# repository keyed by that version, the way promtool.sh builds promtool. It
# builds only when the binary is missing, and prints a line while it builds.
#
# golangci-lint's authors recommend their release binaries over a source
# build; this machine reaches only the Go module proxy, so it builds from the
# tagged module. The version is stamped in, so "golangci-lint version" says
# which one runs.
#
# Usage: hack/tools/golangci-lint.sh       # prints the golangci-lint path on stdout
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
module=github.com/golangci/golangci-lint/v2
version=$(awk -v m="$module" '$1 == m { print $2 } $1 == "require" && $2 == m { print $3 }' "$here/golangci-lint/go.mod")
if [ -z "$version" ]; then
  echo "golangci-lint: no $module version in $here/golangci-lint/go.mod" >&2
  exit 1
fi
cache=${WEBHOOK_GUARD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/webhook-guard}
bin="$cache/bin/golangci-lint-$version"
if [ ! -x "$bin/golangci-lint" ]; then
  mkdir -p "$bin"
  echo "tools: building golangci-lint $version from source (about 4 minutes on a cold 2-core machine; cached afterwards in $bin)" >&2
  start=$SECONDS
  (cd "$here/golangci-lint" && CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly" \
    go build -trimpath -ldflags "-s -w -X main.version=${version#v} -X main.commit=$version -X main.date=module-proxy" \
    -o "$bin/golangci-lint.tmp" "$module/cmd/golangci-lint")
  mv "$bin/golangci-lint.tmp" "$bin/golangci-lint"
  echo "tools: built golangci-lint in $((SECONDS - start))s" >&2
fi
echo "$bin/golangci-lint"
