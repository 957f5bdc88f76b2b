#!/usr/bin/env bash
# promtool.sh builds promtool, Prometheus's rule tester, from source through
# the Go module proxy at the github.com/prometheus/prometheus version pinned
# in hack/tools/promtool/go.mod (the same version as hack/go.mod, whose
# hack/promcheck tests parse the rules with Prometheus's own code; a test
# there checks that they agree), into a cache folder outside the
# repository keyed by that version. It builds only when the binary is
# missing, and prints a line while it builds.
#
# Usage: hack/tools/promtool.sh            # prints the promtool path on stdout
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
version=$(awk '$1 == "github.com/prometheus/prometheus" { print $2 } $1 == "require" && $2 == "github.com/prometheus/prometheus" { print $3 }' "$here/promtool/go.mod")
if [ -z "$version" ]; then
  echo "promtool: no github.com/prometheus/prometheus version in $here/promtool/go.mod" >&2
  exit 1
fi
cache=${WEBHOOK_GUARD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/webhook-guard}
bin="$cache/bin/promtool-$version"
if [ ! -x "$bin/promtool" ]; then
  mkdir -p "$bin"
  echo "tools: building promtool $version from source (about 5 minutes on a cold 2-core machine, measured 262 s; cached afterwards in $bin)" >&2
  start=$SECONDS
  (cd "$here/promtool" && CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly" \
    go build -trimpath -ldflags "-s -w -X github.com/prometheus/common/version.Version=${version#v}" \
    -o "$bin/promtool.tmp" github.com/prometheus/prometheus/cmd/promtool)
  mv "$bin/promtool.tmp" "$bin/promtool"
  echo "tools: built promtool in $((SECONDS - start))s" >&2
fi
echo "$bin/promtool"
