#!/usr/bin/env bash
# release.sh writes the two artifacts of a release into DIST, and their
# checksums ("make release" runs it):
#   install.yaml                   kustomize build of overlays/default, its
#                                  image set to IMAGE ("kustomize edit set
#                                  image" in a temporary copy)
#   webhook-guard-<X.Y.Z>.tgz      the chart deploy/helm/webhook-guard,
#                                  "helm package"d with version X.Y.Z,
#                                  appVersion VERSION and IMAGE in its values;
#                                  "helm push" pushes this file as it is (the
#                                  chart layer of the OCI artifact), so
#                                  "helm pull oci://..." gives it back byte
#                                  for byte
#   kubectl-guard_<VERSION>_<os>_<arch>.tar.gz
#                                  the guard binary as the kubectl plugin
#                                  kubectl-guard, and LICENSE, for each
#                                  platform of RELEASE_PLATFORMS
#                                  (CGO_ENABLED=0 go build -trimpath, the
#                                  Makefile's -ldflags)
#   guard.yaml                     the krew plugin manifest: the template
#                                  deploy/krew/guard.yaml with the version,
#                                  and one platform per archive with its
#                                  download URI (the GitHub release
#                                  VERSION) and sha256
#   SHA256SUMS                     the sha256 of all of them, in sha256sum
#                                  format ("cd DIST && sha256sum -c SHA256SUMS")
# It prints the sha256 of each artifact on stdout, one "sha256:<hex>  <file>"
# line each.
#
# Usage: hack/release.sh VERSION IMAGE DIST KUSTOMIZE HELM
#   VERSION  vX.Y.Z[-PRERELEASE]; the chart's version drops the v
#   IMAGE    repository:tag or repository@sha256:digest
# Environment:
#   RELEASE_PLATFORMS  the os/arch pairs of the kubectl-guard archives,
#                      separated by spaces; default linux/amd64 linux/arm64
#                      darwin/amd64 darwin/arm64 (a test builds only its own)
#   COMMIT             the commit in "guard version"; default: git's HEAD,
#                      "unknown" outside a checkout
set -euo pipefail

if [ $# -ne 5 ]; then
  echo "usage: $0 VERSION IMAGE DIST KUSTOMIZE HELM" >&2
  exit 2
fi
version=$1 image=$2 dist=$3 kustomize=$4 helm=$5
root=$(cd "$(dirname "$0")/.." && pwd)
platforms=${RELEASE_PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}
commit=${COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)}
# The GitHub release the krew manifest downloads the archives from.
downloads=https://github.com/webhook-guard/webhook-guard/releases/download/$version

# The image's repository and its tag or digest. A colon in the last path
# segment starts the tag (registry.example.com:5000/guard has none).
repository=$image tag="" digest=""
if [[ $image == *@* ]]; then
  repository=${image%@*} digest=${image#*@}
elif [[ ${image##*/} == *:* ]]; then
  repository=${image%:*} tag=${image##*:}
fi
if [ -z "$tag" ] && [ -z "$digest" ]; then
  echo "release: the image $image has neither a tag nor a digest; a release pins one (IMG=registry.example.com/webhook-guard:$version)" >&2
  exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$dist"

cp -R "$root/deploy/kustomize" "$tmp/kustomize"
(cd "$tmp/kustomize/overlays/default" && "$kustomize" edit set image "webhook-guard=$image")
"$kustomize" build "$tmp/kustomize/overlays/default" > "$tmp/install.yaml"

# The chart's values name the image in three lines of the "image:" block
# (values.yaml marks them); a test of the release checks the result.
cp -R "$root/deploy/helm/webhook-guard" "$tmp/webhook-guard"
awk -v repository="$repository" -v tag="$tag" -v digest="$digest" '
  /^[^ #]/ { inImage = ($0 == "image:") }
  inImage && /^  repository: / { print "  repository: " repository; next }
  inImage && /^  tag: /        { print "  tag: \"" tag "\""; next }
  inImage && /^  digest: /     { print "  digest: \"" digest "\""; next }
  { print }
' "$root/deploy/helm/webhook-guard/values.yaml" > "$tmp/webhook-guard/values.yaml"
"$helm" package "$tmp/webhook-guard" --version "${version#v}" --app-version "$version" --destination "$tmp" >/dev/null

if command -v sha256sum >/dev/null; then
  sha256=(sha256sum)
else
  sha256=(shasum -a 256)
fi

# The kubectl plugin: an archive per platform, and the krew manifest that
# names them. Its platform entry (the lines after "  platforms:") is
# written once per archive.
archives=()
awk '/^#/ { next } { print } /^  platforms:$/ { exit }' "$root/deploy/krew/guard.yaml" |
  sed "s|@VERSION@|$version|g" > "$tmp/guard.yaml"
entry=$(awk 'found { print } /^  platforms:$/ { found = 1 }' "$root/deploy/krew/guard.yaml")
for platform in $platforms; do
  os=${platform%/*} arch=${platform#*/}
  archive="kubectl-guard_${version}_${os}_${arch}.tar.gz"
  mkdir -p "$tmp/$os-$arch"
  (cd "$root" && CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath \
    -ldflags "-s -w -X main.version=$version -X main.commit=$commit" -o "$tmp/$os-$arch/kubectl-guard" ./cmd/guard)
  cp "$root/LICENSE" "$tmp/$os-$arch/LICENSE"
  tar -czf "$tmp/$archive" -C "$tmp/$os-$arch" kubectl-guard LICENSE
  sum=$(cd "$tmp" && "${sha256[@]}" "$archive" | cut -d' ' -f1)
  sed -e "s|@OS@|$os|g" -e "s|@ARCH@|$arch|g" -e "s|@URI@|$downloads/$archive|g" -e "s|@SHA256@|$sum|g" <<<"$entry" >> "$tmp/guard.yaml"
  archives+=("$archive")
done

# SHA256SUMS covers the artifacts of this release (an older release's
# chart left in DIST is not one of them), by their names in DIST.
artifacts=(install.yaml "webhook-guard-${version#v}.tgz" "${archives[@]}" guard.yaml)
(cd "$tmp" && "${sha256[@]}" "${artifacts[@]}") > "$tmp/SHA256SUMS"

for f in "${artifacts[@]}" SHA256SUMS; do
  mv "$tmp/$f" "$dist/$f"
done
echo "release: wrote $dist/install.yaml, $dist/webhook-guard-${version#v}.tgz, the kubectl-guard archives for $platforms, $dist/guard.yaml and $dist/SHA256SUMS (image $image)" >&2
while read -r sum file; do
  echo "sha256:$sum  $dist/$file"
done < "$dist/SHA256SUMS"
