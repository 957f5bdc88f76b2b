#!/usr/bin/env bash
# krew.sh builds krew, the kubectl plugin manager, from source through the
# Go module proxy at the sigs.k8s.io/krew version pinned in
# hack/tools/krew/go.mod, into a cache folder outside the repository keyed
# by that version, the way registry.sh builds the registry. test/e2e/helm
# installs the released plugin with it ("kubectl krew install --manifest
# --archive") into a temporary KREW_ROOT. It builds only when the binary is
# missing, and prints a line while it builds. The binary is named
# kubectl-krew, as krew installs itself, so that "kubectl krew" finds it on
# PATH; the -X flags are those of krew's own release build.
#
# Usage: hack/tools/krew.sh                # prints the kubectl-krew path on stdout
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
module=sigs.k8s.io/krew
version=$(awk -v m="$module" '$1 == m { print $2 } $1 == "require" && $2 == m { print $3 }' "$here/krew/go.mod")
if [ -z "$version" ]; then
  echo "krew: no $module version in $here/krew/go.mod" >&2
  exit 1
fi
cache=${WEBHOOK_GUARD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/webhook-guard}
bin="$cache/bin/krew-$version"
if [ ! -x "$bin/kubectl-krew" ]; then
  mkdir -p "$bin"
  echo "tools: building krew $version from source (about 1 minute on a cold 2-core machine; cached afterwards in $bin)" >&2
  start=$SECONDS
  (cd "$here/krew" && CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly" \
    go build -trimpath -ldflags "-s -w -X $module/internal/version.gitTag=$version" \
    -o "$bin/kubectl-krew.tmp" "$module/cmd/krew")
  mv "$bin/kubectl-krew.tmp" "$bin/kubectl-krew"
  echo "tools: built krew in $((SECONDS - start))s" >&2
fi
echo "$bin/kubectl-krew"
