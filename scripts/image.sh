#!/usr/bin/env bash
# Packer for clusterforge images, offline: packer and packer-plugin-azure at their pins and our plugin,
# all local builds installed with `packer plugins install --path` (no network for plugins).
#
#   scripts/image.sh validate        `packer validate` images/worker.pkr.hcl and images/control-plane.pkr.hcl
#                                    (Azure is not contacted: it checks the templates and every
#                                    provisioner's Prepare)
#   scripts/image.sh publish STACK   publish ROLE's image for stacks/Pulumi.STACK.yaml into an Azure Compute
#                                    Gallery: the real `packer build` of images/ROLE.pkr.hcl (azure-arm, the
#                                    Azure CLI's login), version IMAGE_VERSION, into GALLERY (a gallery id;
#                                    default: the gallery of the image the stack boots). A worker preloads
#                                    the upstream pause image by digest and the add-on archives
#                                    (images/cmd/mkimages). Prints the stack lines to set. DRY_RUN=1 stops
#                                    after `packer validate`; BINARIES_DIR as for local.
#   scripts/image.sh publish-args STACK   check a publish's STACK, ROLE, IMAGE_VERSION, GALLERY and DRY_RUN
#   scripts/image.sh local [STACK]   bake images/local.pkr.hcl for stacks/Pulumi.STACK.yaml (default dev).
#                                    ROLE=worker (default): build/images/node-STACK.tar, preloading the
#                                    archives images/cmd/mkimages writes to build/images/node-STACK.preload/
#                                    (its own pause binary: no registry here) and the test environment's app
#                                    image (images/testenv/testapp); IMAGE_NAME renames the image;
#                                    TESTAPP_ARGS are added to testapp's;
#                                    BINARIES_DIR replaces .tools/node or .tools/bin (a stack on the releases
#                                    before the pinned ones: the bake refuses a binary of another release).
#                                    ROLE=control-plane: build/images/control-plane-STACK.tar.
set -euo pipefail
cd "$(dirname "$0")/.."
work="$PWD/build/packer"
export PACKER_PLUGIN_PATH="$work/plugins" PACKER_CONFIG_DIR="$work/config" PACKER_CACHE_DIR="$work/cache" CHECKPOINT_DISABLE=1
packer="$PWD/.tools/bin/packer"

step() { printf '==> %s\n' "$*"; }

install_plugins() {
  rm -rf "$PACKER_PLUGIN_PATH" && mkdir -p "$PACKER_PLUGIN_PATH" "$PACKER_CONFIG_DIR"
  step "building packer-plugin-clusterforge"
  (cd images && go build -o "$work/packer-plugin-clusterforge" .)
  step "installing the plugins into $PACKER_PLUGIN_PATH"
  "$packer" plugins install --path .tools/bin/packer-plugin-azure github.com/hashicorp/azure
  "$packer" plugins install --path "$work/packer-plugin-clusterforge" github.com/clusterforge/clusterforge
}

validate() {
  install_plugins
  # validate stats the binaries: empty stand-ins here, so the templates are checked before the
  # toolchain builds the real ones; a bake checks those. The variables are the publish path's own
  # (bakeinputs publish), with a publish's preload list for the pause image.
  local fixture="$work/fixture" template
  rm -rf "$fixture" && mkdir -p "$fixture"
  (cd images && go run ./cmd/bakeinputs fixture "$fixture/binaries")
  for template in worker control-plane; do
    local preload=()
    [ "$template" != worker ] || preload=(-preload "$fixture/binaries/preload.pkrvars.json")
    (cd images && go run ./cmd/bakeinputs publish -role "$template" -stack ../stacks/Pulumi.dev.yaml -version 0.0.1 \
      -gallery /subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/images/providers/Microsoft.Compute/galleries/clusterforge \
      -binaries "$fixture/binaries/$template" "${preload[@]}" -out "$fixture/$template.pkrvars.json" >/dev/null)
    step "packer validate images/$template.pkr.hcl"
    (cd images && "$packer" validate -var-file="$fixture/$template.pkrvars.json" "$template.pkr.hcl")
  done
}

# role_stack STACK: checks STACK names a stack file and ROLE an image role, and sets binaries to
# the role's pinned binaries (BINARIES_DIR replaces them: an upgrade hop's releases).
role_stack() {
  [[ "$1" =~ ^[a-z0-9-]+$ && -f "stacks/Pulumi.$1.yaml" ]] || { echo "image.sh: no stacks/Pulumi.$1.yaml; STACK is one of: $(ls stacks | sed -n 's/^Pulumi\.\(.*\)\.yaml$/\1/p' | xargs)" >&2; exit 2; }
  case "$role" in
    worker) binaries=${BINARIES_DIR:-$PWD/.tools/node} ;;
    control-plane) binaries=${BINARIES_DIR:-$PWD/.tools/bin} ;;
    *) echo "image.sh: ROLE=$role is not an image role; use worker or control-plane" >&2; exit 2 ;;
  esac
}

# publish_args STACK: what a publish needs, checked before anything is built.
publish_args() {
  role_stack "$1"
  [[ "${IMAGE_VERSION:-}" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "image.sh: IMAGE_VERSION=<major.minor.patch> is required: the gallery image version to create" >&2; exit 2; }
  [[ "${DRY_RUN:-}" = "" || "${DRY_RUN:-}" = 1 ]] || { echo "image.sh: DRY_RUN=1 stops after packer validate; leave it unset to build (got DRY_RUN=${DRY_RUN})" >&2; exit 2; }
  [[ "${GALLERY:-}" =~ ^[A-Za-z0-9/._()-]*$ ]] || { echo "image.sh: GALLERY is a gallery's resource id, /subscriptions/<guid>/resourceGroups/<rg>/providers/Microsoft.Compute/galleries/<name>" >&2; exit 2; }
}

publish() {
  local stack=${1:-} role=${ROLE:-worker} version=${IMAGE_VERSION:-} binaries dir lines preload=()
  publish_args "$stack"
  dir="$PWD/build/images/publish-$role-$stack-$version"
  rm -rf "$dir" && mkdir -p "$dir" "$PWD/build/bin"
  install_plugins
  if [ "$role" = worker ]; then
    step "making the preload archives (images/cmd/mkimages): the pause image by digest, the add-ons"
    (cd images && go build -o "$PWD/../build/bin/mkimages" ./cmd/mkimages)
    build/bin/mkimages -tools .tools -stack "stacks/Pulumi.$stack.yaml" -out "$dir/preload"
    preload=(-preload "$dir/preload/preload.pkrvars.json")
  fi
  step "writing $dir/vars.pkrvars.json"
  lines=$(cd images && go run ./cmd/bakeinputs publish -role "$role" -stack "../stacks/Pulumi.$stack.yaml" -version "$version" \
    ${GALLERY:+-gallery "$GALLERY"} -binaries "$binaries" "${preload[@]}" -out "$dir/vars.pkrvars.json")
  step "packer validate images/$role.pkr.hcl"
  (cd images && "$packer" validate -var-file="$dir/vars.pkrvars.json" "$role.pkr.hcl")
  if [ "${DRY_RUN:-}" = 1 ]; then
    step "DRY_RUN=1: not building. A publish would print these lines to set in stacks/Pulumi.$stack.yaml:"
    sed 's/^/    /' <<<"$lines"
    return
  fi
  step "packer build images/$role.pkr.hcl (azure-arm, as the Azure CLI's login)"
  (cd images && "$packer" build -timestamp-ui -var-file="$dir/vars.pkrvars.json" "$role.pkr.hcl")
  step "published; set in stacks/Pulumi.$stack.yaml, then \`pulumi up\` (a first deploy) or \`forge diff --stack $stack\` (a running cluster):"
  sed 's/^/    /' <<<"$lines"
}

# A bake's failure anywhere in a command substitution fails the script (bake_key's inputs).
shopt -s inherit_errexit
# One cache entry per hash of what a bake reads.
# shellcheck source=scripts/cache.sh
. scripts/cache.sh

# bake_key ROLE STACK BINARIES: the hash of everything a bake of ROLE reads: our plugin's and the
# rendering's sources, the stack, the binaries it installs (and a worker's add-on binaries), packer,
# Go, and the Debian archive's release file (a new point release bakes again). Prints nothing when
# the archive cannot be read: then nothing is cached.
bake_key() {
  local role=$1 stack=$2 binaries=$3 archive release
  archive=$(cd images && go run ./cmd/bakeinputs archive)
  release=$(curl -fsS -m 30 "$archive" | sha256sum) || return 0
  {
    echo "$role $stack ${TESTAPP_ARGS:-} $(go env GOVERSION) $archive $release"
    git ls-files -z -co --exclude-standard images components go.mod go.sum scripts/image.sh "stacks/Pulumi.$stack.yaml" | xargs -0 sha256sum
    # Paths relative to their folder: the key is the same in every clone.
    (cd images && go run ./cmd/bakeinputs binaries "$role") | (cd "$binaries" && xargs sha256sum)
    if [ "$role" = worker ]; then
      (cd "$binaries" && find cni -type f | sort | xargs sha256sum)
      (cd images && go run ./cmd/bakeinputs addons "../stacks/Pulumi.$stack.yaml") | (cd .tools && xargs sha256sum)
    fi
    sha256sum <"$packer"
  } | sha256sum | cut -c1-32
}

bake_local() {
  local stack=${1:-dev} role=${ROLE:-worker} out="$PWD/build/images" name binaries vars=()
  role_stack "$stack"
  name=${IMAGE_NAME:-node-$stack}
  [ "$role" = worker ] || name=${IMAGE_NAME:-control-plane-$stack}
  vars=(-var "binaries_dir=$binaries")
  local key cached
  key=$(bake_key "$role" "$stack" "$binaries")
  cached="images/$key"
  mkdir -p "$out"
  # The preload list names the archives the bake that made it read, in its own clone: the
  # digests are what the checks read.
  if [ -n "$key" ] && cache_get "$cached" image.tar "$out/$name.tar.new"; then
    mv "$out/$name.tar.new" "$out/$name.tar"
    cache_get "$cached" manifest.json "$out/$name.manifest.json"
    [ "$role" != worker ] || { mkdir -p "$out/$name.preload" && cache_get "$cached" preload.pkrvars.json "$out/$name.preload/preload.pkrvars.json"; }
    touch "$CACHE/$cached"
    step "$role image for $stack: from the cache ($CACHE/$cached), its inputs unchanged"
    return
  fi
  install_plugins
  mkdir -p "$out" "$PWD/build/bin"
  if [ "$role" = worker ]; then
    local preload="$out/$name.preload"
    step "making the preload archives (images/cmd/mkimages, images/testenv/testapp)"
    (cd images && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$PWD/../build/bin/pause" ./cmd/pause \
      && go build -o "$PWD/../build/bin/mkimages" ./cmd/mkimages && go build -o "$PWD/../build/bin/testapp" ./testenv/testapp)
    build/bin/mkimages -pause-binary build/bin/pause -tools .tools -stack "stacks/Pulumi.$stack.yaml" -out "$preload"
    # shellcheck disable=SC2086 # TESTAPP_ARGS is a list of flags
    build/bin/testapp -pause-binary build/bin/pause -vars "$preload/preload.pkrvars.json" ${TESTAPP_ARGS:-}
    vars+=(-var-file="$preload/preload.pkrvars.json")
  fi
  step "packer build images/local.pkr.hcl (role $role) → $out/$name.tar"
  # A private mount namespace: whatever the bake mounts goes away with it, even if packer dies.
  (cd images && unshare --mount --propagation private "$packer" build -timestamp-ui \
    -var "role=$role" -var "stack=$PWD/../stacks/Pulumi.$stack.yaml" "${vars[@]}" \
    -var "output=$out/$name.tar" -var "manifest_output=$out/$name.manifest.json" local.pkr.hcl)
  [ -n "$key" ] || return 0
  step "keeping the $role image in $CACHE/$cached"
  local files=("$out/$name.tar=image.tar" "$out/$name.manifest.json=manifest.json")
  [ "$role" != worker ] || files+=("$out/$name.preload/preload.pkrvars.json=preload.pkrvars.json")
  cache_put "$cached" "${files[@]}"
  # The four most recently used stay (both roles of two stacks): an image is about a gigabyte.
  cache_keep images 4
}

case "${1:-}" in
  validate) validate ;;
  local) bake_local "${2:-}" ;;
  publish) publish "${2:-}" ;;
  publish-args) role=${ROLE:-worker}; publish_args "${2:-}" ;;
  *) echo "usage: scripts/image.sh validate | local [STACK] | publish STACK | publish-args STACK" >&2; exit 2 ;;
esac
