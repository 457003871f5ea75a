#!/usr/bin/env bash
# Validates images/worker.pkr.hcl with the real packer v1.12.0, the Azure plugin v1.4.5 and our
# plugin, all installed from local builds (no network): `packer plugins install --path`.
# Azure is not contacted: validate only checks the template and every provisioner's Prepare.
set -euo pipefail
cd "$(dirname "$0")/.."
work="$PWD/build/packer"
export PACKER_PLUGIN_PATH="$work/plugins" PACKER_CONFIG_DIR="$work/config" CHECKPOINT_DISABLE=1
rm -rf "$work" && mkdir -p "$PACKER_PLUGIN_PATH" "$PACKER_CONFIG_DIR" "$work/fixture"

echo "==> building packer-plugin-clusterforge"
(cd images && go build -o "$work/packer-plugin-clusterforge" .)
echo "==> installing the plugins into $PACKER_PLUGIN_PATH"
.tools/bin/packer plugins install --path .tools/bin/packer-plugin-azure github.com/hashicorp/azure
.tools/bin/packer plugins install --path "$work/packer-plugin-clusterforge" github.com/clusterforge/clusterforge
.tools/bin/packer plugins installed

# validate stats the preload archive; its content is checked at bake time, by digest.
: >"$work/fixture/pause.oci.tar"
cat >"$work/fixture/validate.pkrvars.hcl" <<VARS
stack                  = "$PWD/stacks/Pulumi.dev.yaml"
binaries_dir           = "$PWD/.tools/node"
subscription_id        = "00000000-0000-0000-0000-000000000000"
gallery_resource_group = "images"
image_version          = "0.0.1"
preload_images = [{
  name    = "registry.k8s.io/pause:3.10.1"
  archive = "$work/fixture/pause.oci.tar"
  digest  = "sha256:0000000000000000000000000000000000000000000000000000000000000000"
}]
VARS
echo "==> packer validate images/worker.pkr.hcl"
(cd images && "$OLDPWD/.tools/bin/packer" validate -var-file="$work/fixture/validate.pkrvars.hcl" .)
