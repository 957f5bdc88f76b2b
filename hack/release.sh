#!/usr/bin/env bash
# release.sh writes a release into DIST, from the working tree, without a
# container daemon ("make release" runs it):
#   kubectl-webhook_guard_<VERSION>_<os>_<arch>.tar.gz
#                                  the guard binary as the kubectl plugin
#                                  kubectl-webhook_guard (.exe on windows),
#                                  and LICENSE, for each platform of
#                                  RELEASE_PLATFORMS (CGO_ENABLED=0 go build
#                                  -trimpath, the Makefile's -ldflags)
#   guard_<VERSION>_<os>_<arch>.cdx.json
#                                  the CycloneDX SBOM of each binary the
#                                  release builds ("cyclonedx-gomod bin":
#                                  every module linked in, with its license)
#   image/                         the OCI layout of the image index, one
#                                  image per IMAGE_PLATFORMS on scratch
#                                  (hack/image build; "make release-push"
#                                  pushes it)
#   image.cdx.json                 the CycloneDX SBOM of the image index
#                                  (hack/image sbom)
#   install.yaml                   kustomize build of overlays/default, its
#                                  image set to IMAGE's repository at the
#                                  index's digest
#   webhook-guard-<X.Y.Z>.tgz      the chart deploy/helm/webhook-guard,
#                                  "helm package"d with version X.Y.Z,
#                                  appVersion VERSION and the image by
#                                  digest in its values; "helm push" pushes
#                                  this file as it is, so "helm pull
#                                  oci://..." gives it back byte for byte
#   webhook-guard.yaml             the krew plugin manifest: the template
#                                  deploy/krew/webhook-guard.yaml with the
#                                  version, and one platform per archive with
#                                  its download URI (the GitHub release
#                                  VERSION) and sha256
#   SHA256SUMS                     the sha256 of every file above, those of
#                                  image/ included, in sha256sum format
#                                  ("cd DIST && sha256sum -c SHA256SUMS")
# It prints the sha256 of each file on stdout, one "sha256:<hex>  <file>"
# line each, and the image on stderr. The same tree gives the same files,
# byte for byte, and the same image digest.
#
# Usage: hack/release.sh VERSION IMAGE DIST KUSTOMIZE HELM
#   VERSION  vX.Y.Z[-PRERELEASE]; the chart's version drops the v
#   IMAGE    the repository the image is published to, with or without a
#            tag: install.yaml and the chart name it at the index's digest,
#            and keep the tag (the chart's image.tag) for people to read
# Environment:
#   RELEASE_PLATFORMS  the os/arch pairs of the plugin archives, separated
#                      by spaces; default linux/amd64 linux/arm64
#                      darwin/arm64 windows/amd64 (a test builds only its own)
#   IMAGE_PLATFORMS    the os/arch pairs of the image index; default
#                      linux/amd64 linux/arm64
#   COMMIT             the commit in "guard version" and the image's
#                      org.opencontainers.image.revision; default git's
#                      HEAD, "unknown" outside a checkout
#   CYCLONEDX_GOMOD    cyclonedx-gomod; default the pinned build in the
#                      cache (hack/tools/cyclonedx-gomod.sh builds it)
set -euo pipefail

if [ $# -ne 5 ]; then
  echo "usage: $0 VERSION IMAGE DIST KUSTOMIZE HELM" >&2
  exit 2
fi
version=$1 image=$2 dist=$3 kustomize=$4 helm=$5
root=$(cd "$(dirname "$0")/.." && pwd)
platforms=${RELEASE_PLATFORMS:-linux/amd64 linux/arm64 darwin/arm64 windows/amd64}
image_platforms=${IMAGE_PLATFORMS:-linux/amd64 linux/arm64}
commit=${COMMIT:-$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)}
cyclonedx=${CYCLONEDX_GOMOD:-$("$root/hack/tools/cyclonedx-gomod.sh")}
# The GitHub release the krew manifest downloads the archives from.
downloads=https://github.com/webhook-guard/webhook-guard/releases/download/$version
plugin=kubectl-webhook_guard

# The image's repository and its tag. A colon in the last path segment
# starts the tag (registry.example.com:5000/guard has none).
repository=$image tag=""
if [[ $image == *@* ]]; then
  echo "release: IMAGE $image has a digest; the release builds the image and pins its own digest: give the repository (IMAGE_REPO=registry.example.com/webhook-guard)" >&2
  exit 1
elif [[ ${image##*/} == *:* ]]; then
  repository=${image%:*} tag=${image##*:}
fi
tag=${tag:-$version}

if [ -n "$(git -C "$root" status --porcelain 2>/dev/null)" ]; then
  echo "release: warning: the tree has uncommitted changes; this release is not the commit $commit" >&2
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$dist"

if command -v sha256sum >/dev/null; then
  sha256=(sha256sum)
else
  sha256=(shasum -a 256)
fi

# The binaries, each platform once, whether an archive or the image needs
# it, with its SBOM.
sboms=()
for platform in $(printf '%s\n' $platforms $image_platforms | sort -u); do
  os=${platform%/*} arch=${platform#*/}
  exe=""
  [ "$os" = windows ] && exe=.exe
  mkdir -p "$tmp/bin/$os-$arch"
  (cd "$root" && CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath \
    -ldflags "-s -w -X main.version=$version -X main.commit=$commit" -o "$tmp/bin/$os-$arch/guard$exe" ./cmd/guard)
  sbom="guard_${version}_${os}_${arch}.cdx.json"
  # -licenses reads each module's license from the module cache; the
  # main module is in none, and it says so on stderr.
  if ! "$cyclonedx" bin -json -noserial -notimestamp -licenses -version "$version" \
    -output "$tmp/$sbom" "$tmp/bin/$os-$arch/guard$exe" 2>"$tmp/sbom.log"; then
    cat "$tmp/sbom.log" >&2
    echo "release: cyclonedx-gomod failed on the $platform binary" >&2
    exit 1
  fi
  sboms+=("$sbom")
done

# The image index, on scratch, and its SBOM (hack/image, with
# go-containerregistry, in the hack module).
(cd "$root/hack" && CGO_ENABLED=0 go build -trimpath -o "$tmp/image-tool" ./image)
image_args=()
image_sboms=()
for platform in $image_platforms; do
  os=${platform%/*} arch=${platform#*/}
  image_args+=(-platform "$platform=$tmp/bin/$os-$arch/guard")
  image_sboms+=("$tmp/guard_${version}_${os}_${arch}.cdx.json")
done
digest=$("$tmp/image-tool" build -layout "$tmp/image" -version "$version" -revision "$commit" -tag "$tag" "${image_args[@]}")
"$tmp/image-tool" sbom -layout "$tmp/image" -repository "$repository" -out "$tmp/image.cdx.json" "${image_sboms[@]}"
pinned=$repository@$digest

cp -R "$root/deploy/kustomize" "$tmp/kustomize"
(cd "$tmp/kustomize/overlays/default" && "$kustomize" edit set image "webhook-guard=$pinned")
"$kustomize" build "$tmp/kustomize/overlays/default" > "$tmp/install.yaml"

# The chart's values name the image in three lines of the "image:" block
# (values.yaml marks them); a test of the release checks the result. The
# digest wins over the tag in the chart's image reference.
cp -R "$root/deploy/helm/webhook-guard" "$tmp/webhook-guard"
awk -v repository="$repository" -v tag="$tag" -v digest="$digest" '
  /^[^ #]/ { inImage = ($0 == "image:") }
  inImage && /^  repository: / { print "  repository: " repository; next }
  inImage && /^  tag: /        { print "  tag: \"" tag "\""; next }
  inImage && /^  digest: /     { print "  digest: \"" digest "\""; next }
  { print }
' "$root/deploy/helm/webhook-guard/values.yaml" > "$tmp/webhook-guard/values.yaml"
"$helm" package "$tmp/webhook-guard" --version "${version#v}" --app-version "$version" --destination "$tmp" >/dev/null

# The kubectl plugin: an archive per platform, and the krew manifest that
# names them. Its platform entry (the lines after "  platforms:") is
# written once per archive.
archives=()
awk '/^#/ { next } { print } /^  platforms:$/ { exit }' "$root/deploy/krew/webhook-guard.yaml" |
  sed "s|@VERSION@|$version|g" > "$tmp/webhook-guard.yaml"
entry=$(awk 'found { print } /^  platforms:$/ { found = 1 }' "$root/deploy/krew/webhook-guard.yaml")
for platform in $platforms; do
  os=${platform%/*} arch=${platform#*/}
  exe=""
  [ "$os" = windows ] && exe=.exe
  archive="${plugin}_${version}_${os}_${arch}.tar.gz"
  mkdir -p "$tmp/$os-$arch"
  cp "$tmp/bin/$os-$arch/guard$exe" "$tmp/$os-$arch/$plugin$exe"
  cp "$root/LICENSE" "$tmp/$os-$arch/LICENSE"
  # The same bytes for the same files: sorted, owned by root, dated the
  # Unix epoch, and gzip without a name or time.
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - -C "$tmp/$os-$arch" "$plugin$exe" LICENSE |
    gzip -n > "$tmp/$archive"
  sum=$(cd "$tmp" && "${sha256[@]}" "$archive" | cut -d' ' -f1)
  sed -e "s|@OS@|$os|g" -e "s|@ARCH@|$arch|g" -e "s|@URI@|$downloads/$archive|g" -e "s|@SHA256@|$sum|g" \
    -e "s|@BIN@|$plugin$exe|g" <<<"$entry" >> "$tmp/webhook-guard.yaml"
  archives+=("$archive")
done

# SHA256SUMS covers the files of this release (an older release's chart
# left in DIST is not one of them), by their paths in DIST.
layout=()
while IFS= read -r f; do layout+=("$f"); done < <(cd "$tmp" && find image -type f | LC_ALL=C sort)
artifacts=("${archives[@]}" "${sboms[@]}" "${layout[@]}" image.cdx.json install.yaml "webhook-guard-${version#v}.tgz" webhook-guard.yaml)
(cd "$tmp" && "${sha256[@]}" "${artifacts[@]}") > "$tmp/SHA256SUMS"

rm -rf "$dist/image"
mv "$tmp/image" "$dist/image"
for f in "${artifacts[@]}" SHA256SUMS; do
  case $f in image/*) continue ;; esac
  mv "$tmp/$f" "$dist/$f"
done
echo "release: wrote into $dist the plugin archives for $platforms, the image index for $image_platforms ($dist/image), the SBOMs, install.yaml, the chart, webhook-guard.yaml and SHA256SUMS" >&2
echo "release: image $pinned" >&2
while read -r sum file; do
  echo "sha256:$sum  $dist/$file"
done < "$dist/SHA256SUMS"
