#!/usr/bin/env bash
# cyclonedx-gomod.sh builds cyclonedx-gomod, which "make release" runs to
# write the CycloneDX SBOM of each guard binary, from source through the Go
# module proxy at the github.com/CycloneDX/cyclonedx-gomod version pinned in
# hack/tools/cyclonedx-gomod/go.mod, into a cache folder outside the
# repository keyed by that version, the way registry.sh builds the
# registry. It builds only when the binary is missing, and prints a line
# while it builds.
#
# Usage: hack/tools/cyclonedx-gomod.sh     # prints the cyclonedx-gomod path on stdout
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
module=github.com/CycloneDX/cyclonedx-gomod
version=$(awk -v m="$module" '$1 == m { print $2 } $1 == "require" && $2 == m { print $3 }' "$here/cyclonedx-gomod/go.mod")
if [ -z "$version" ]; then
  echo "cyclonedx-gomod: no $module version in $here/cyclonedx-gomod/go.mod" >&2
  exit 1
fi
cache=${WEBHOOK_GUARD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/webhook-guard}
bin="$cache/bin/cyclonedx-gomod-$version"
if [ ! -x "$bin/cyclonedx-gomod" ]; then
  mkdir -p "$bin"
  echo "tools: building cyclonedx-gomod $version from source (about 1 minute on a cold 2-core machine; cached afterwards in $bin)" >&2
  start=$SECONDS
  (cd "$here/cyclonedx-gomod" && CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly" \
    go build -trimpath -ldflags "-s -w" -o "$bin/cyclonedx-gomod.tmp" "$module/cmd/cyclonedx-gomod")
  mv "$bin/cyclonedx-gomod.tmp" "$bin/cyclonedx-gomod"
  echo "tools: built cyclonedx-gomod in $((SECONDS - start))s" >&2
fi
echo "$bin/cyclonedx-gomod"
