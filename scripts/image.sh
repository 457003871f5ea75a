#!/usr/bin/env bash
# Packer for clusterforge images, offline: packer and packer-plugin-azure at their pins and our plugin,
# all local builds installed with `packer plugins install --path` (no network for plugins).
#
#   scripts/image.sh validate        `packer validate` images/worker.pkr.hcl and images/control-plane.pkr.hcl
#                                    (Azure is not contacted: it checks the templates and every
#                                    provisioner's Prepare)
#   scripts/image.sh local [STACK]   bake images/local.pkr.hcl for stacks/Pulumi.STACK.yaml (default dev).
#                                    ROLE=worker (default): build/images/node-STACK.tar, preloading the
#                                    archives images/cmd/mkimages writes to build/images/node-STACK.preload/;
#                                    IMAGE_NAME renames the image; MKIMAGES_ARGS are added to mkimages';
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
  # validate stats the binaries and the preload archive: empty stand-ins here, so the templates are
  # checked before the toolchain builds the real ones; a bake checks those (the archive by digest).
  rm -rf "$work/fixture" && mkdir -p "$work/fixture"
  : >"$work/fixture/pause.oci.tar"
  (cd images && go run ./cmd/bakeinputs fixture "$work/fixture/binaries")
  local common="stack = \"$PWD/stacks/Pulumi.dev.yaml\"
subscription_id        = \"00000000-0000-0000-0000-000000000000\"
gallery_resource_group = \"images\"
image_version          = \"0.0.1\""
  cat >"$work/fixture/worker.pkrvars.hcl" <<VARS
$common
binaries_dir = "$work/fixture/binaries/worker"
preload_images = [{
  name    = "$(sed -n 's/^pauseImage: *//p' components/spec/versions.yaml)"
  archive = "$work/fixture/pause.oci.tar"
  digest  = "sha256:0000000000000000000000000000000000000000000000000000000000000000"
}]
VARS
  cat >"$work/fixture/control-plane.pkrvars.hcl" <<VARS
$common
binaries_dir = "$work/fixture/binaries/control-plane"
VARS
  local template
  for template in worker control-plane; do
    (cd images && go run ./cmd/bakeinputs tags "$template" ../stacks/Pulumi.dev.yaml) >>"$work/fixture/$template.pkrvars.hcl"
    step "packer validate images/$template.pkr.hcl"
    (cd images && "$packer" validate -var-file="$work/fixture/$template.pkrvars.hcl" "$template.pkr.hcl")
  done
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
    echo "$role $stack ${MKIMAGES_ARGS:-} $(go env GOVERSION) $archive $release"
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
  [ -f "stacks/Pulumi.$stack.yaml" ] || { echo "image.sh: no stacks/Pulumi.$stack.yaml; STACK is one of: $(ls stacks | sed -n 's/^Pulumi\.\(.*\)\.yaml$/\1/p' | xargs)" >&2; exit 2; }
  case "$role" in
    worker) name=${IMAGE_NAME:-node-$stack}; binaries=${BINARIES_DIR:-$PWD/.tools/node} ;;
    control-plane) name=${IMAGE_NAME:-control-plane-$stack}; binaries=${BINARIES_DIR:-$PWD/.tools/bin} ;;
    *) echo "image.sh: ROLE=$role is not an image role; use worker or control-plane" >&2; exit 2 ;;
  esac
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
    step "making the preload archives (images/cmd/mkimages)"
    (cd images && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$PWD/../build/bin/pause" ./cmd/pause \
      && go build -o "$PWD/../build/bin/mkimages" ./cmd/mkimages)
    # shellcheck disable=SC2086 # MKIMAGES_ARGS is a list of flags
    build/bin/mkimages -pause-binary build/bin/pause -tools .tools -stack "stacks/Pulumi.$stack.yaml" -out "$preload" ${MKIMAGES_ARGS:-}
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
  *) echo "usage: scripts/image.sh validate | local [STACK]" >&2; exit 2 ;;
esac
