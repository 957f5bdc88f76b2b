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
#   SHA256SUMS                     the sha256 of both, in sha256sum format
#                                  ("cd DIST && sha256sum -c SHA256SUMS")
# It prints the sha256 of each artifact on stdout, one "sha256:<hex>  <file>"
# line each.
#
# Usage: hack/release.sh VERSION IMAGE DIST KUSTOMIZE HELM
#   VERSION  vX.Y.Z[-PRERELEASE]; the chart's version drops the v
#   IMAGE    repository:tag or repository@sha256:digest
set -euo pipefail

if [ $# -ne 5 ]; then
  echo "usage: $0 VERSION IMAGE DIST KUSTOMIZE HELM" >&2
  exit 2
fi
version=$1 image=$2 dist=$3 kustomize=$4 helm=$5
root=$(cd "$(dirname "$0")/.." && pwd)

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

# SHA256SUMS covers the artifacts of this release (an older release's
# chart left in DIST is not one of them), by their names in DIST.
artifacts=(install.yaml "webhook-guard-${version#v}.tgz")
if command -v sha256sum >/dev/null; then
  sha256=(sha256sum)
else
  sha256=(shasum -a 256)
fi
(cd "$tmp" && "${sha256[@]}" "${artifacts[@]}") > "$tmp/SHA256SUMS"

for f in "${artifacts[@]}" SHA256SUMS; do
  mv "$tmp/$f" "$dist/$f"
done
echo "release: wrote $dist/install.yaml, $dist/webhook-guard-${version#v}.tgz and $dist/SHA256SUMS (image $image)" >&2
while read -r sum file; do
  echo "sha256:$sum  $dist/$file"
done < "$dist/SHA256SUMS"
