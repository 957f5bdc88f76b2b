#!/usr/bin/env bash
# registry.sh builds the CNCF distribution registry (cmd/registry), the OCI
# registry that test/e2e/helm pushes the released chart to with "helm push"
# and installs it from with oci://, from source through the Go module proxy
# at the github.com/distribution/distribution/v3 version pinned in
# hack/tools/registry/go.mod, into a cache folder outside the repository
# keyed by that version, the way staticcheck.sh builds staticcheck. It
# builds only when the binary is missing, and prints a line while it builds.
# The -X flag is that of distribution's own Makefile: its version, which
# "registry --version" reports.
#
# Usage: hack/tools/registry.sh            # prints the registry path on stdout
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
module=github.com/distribution/distribution/v3
version=$(awk -v m="$module" '$1 == m { print $2 } $1 == "require" && $2 == m { print $3 }' "$here/registry/go.mod")
if [ -z "$version" ]; then
  echo "registry: no $module version in $here/registry/go.mod" >&2
  exit 1
fi
cache=${WEBHOOK_GUARD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/webhook-guard}
bin="$cache/bin/registry-$version"
if [ ! -x "$bin/registry" ]; then
  mkdir -p "$bin"
  echo "tools: building the distribution registry $version from source (about 4 minutes on a cold 2-core machine, measured 247 s; cached afterwards in $bin)" >&2
  start=$SECONDS
  (cd "$here/registry" && CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly" \
    go build -trimpath -ldflags "-s -w -X $module/version.version=$version" \
    -o "$bin/registry.tmp" "$module/cmd/registry")
  mv "$bin/registry.tmp" "$bin/registry"
  echo "tools: built the registry in $((SECONDS - start))s" >&2
fi
echo "$bin/registry"
