#!/usr/bin/env bash
# staticcheck.sh builds staticcheck from source through the Go module proxy
# at the honnef.co/go/tools version pinned in hack/tools/staticcheck/go.mod,
# into a cache folder outside the repository keyed by that version, the way
# promtool.sh builds promtool. It builds only when the binary is missing,
# and prints a line while it builds.
#
# Usage: hack/tools/staticcheck.sh         # prints the staticcheck path on stdout
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
version=$(awk '$1 == "honnef.co/go/tools" { print $2 } $1 == "require" && $2 == "honnef.co/go/tools" { print $3 }' "$here/staticcheck/go.mod")
if [ -z "$version" ]; then
  echo "staticcheck: no honnef.co/go/tools version in $here/staticcheck/go.mod" >&2
  exit 1
fi
cache=${WEBHOOK_GUARD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/webhook-guard}
bin="$cache/bin/staticcheck-$version"
if [ ! -x "$bin/staticcheck" ]; then
  mkdir -p "$bin"
  echo "tools: building staticcheck $version from source (about 1.5 minutes on a cold 2-core machine; cached afterwards in $bin)" >&2
  start=$SECONDS
  (cd "$here/staticcheck" && CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly" \
    go build -trimpath -ldflags "-s -w" -o "$bin/staticcheck.tmp" honnef.co/go/tools/cmd/staticcheck)
  mv "$bin/staticcheck.tmp" "$bin/staticcheck"
  echo "tools: built staticcheck in $((SECONDS - start))s" >&2
fi
echo "$bin/staticcheck"
