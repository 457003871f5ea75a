#!/usr/bin/env bash
# Builds the pinned binaries clusterforge runs, from the wrapper modules in scripts/toolchain/
# (one go.mod each, so the project's go.sum stays about the project):
#   rehearsal → .tools/bin        what `make demo` runs: etcd, Kubernetes control plane, kubectl, KWOK,
#                                 kube-bench; our own clusterforge-csr-approver, clusterforge-etcd-backup and
#                                 clusterforge-ops, built from this repository; Azurite (npm), the blob
#                                 store the backups go to
#   checks    → .tools/…          what the fast tier's tests run (make check), each in its own group's folder
#   node      → .tools/node       what the Packer plugin installs on a worker (cni/ for CNI plugins),
#                                 our clusterforge-node-join among them
#   addons    → .tools/addons     the add-ons' binaries, which images/cmd/mkimages puts in the OCI
#                                 images a worker preloads: CoreDNS, Prometheus, node_exporter,
#                                 node-problem-detector and clusterforge-ops (from .tools/bin)
#   control-plane → .tools/bin    what the Packer plugin installs on the etcd and apiserver machines
#                                 (machine.ImageBinaries), a subset of rehearsal
#   packer    → .tools/bin        packer and the Azure plugin, for `packer validate` and local bakes
#   bench     → .tools/bin        the distribution registry, for the image pull benchmark
#   pulumi    → .tools/bin        the Pulumi engine: the CLI at the SDK release go.mod requires, its Go
#                                 language host and the pulumi-kubernetes provider (test/machines/pulumilocal
#                                 installs the provider as the plugin release the SDK asks for)
#   upgrades  → .tools/versions   the Kubernetes and etcd releases before the pinned ones, where the
#                                 upgrade drills start (versions/kubernetes-<previous>/, versions/etcd-<previous>/)
#   hops      → .tools/versions   the Kubernetes minor before those, which an older cluster passes
#                                 through (versions/kubernetes-<hop>/); built only for a stack that names it
# A binary is rebuilt only when its wrapper module or build flags change; a stamp file records them,
# and a cache outside the clone (CLUSTERFORGE_CACHE, default ~/.cache/clusterforge) keeps every build.
#
# Usage: scripts/toolchain.sh [GROUP|TOOL...]      (default: rehearsal)
#        scripts/toolchain.sh sources               only fetch and copy the files taken from modules'
#                                                   sources (the provider's main and schemas, kube-bench's
#                                                   checks, KWOK's pod stages) into .tools/share; a fast-tier test runs it
#                                                   on an empty module cache
set -euo pipefail
cd "$(dirname "$0")/.."

# pinned KEY: a version of components/spec/versions.yaml, where every pin is written once (the
# wrapper modules' go.mod files require the same releases; TestVersionsFile checks them).
pinned() {
  local v
  v=$(sed -n "s/^$1: *\([^ #]*\).*/\1/p" components/spec/versions.yaml | tr -d "\"'\r")
  [ -n "$v" ] || { echo "toolchain: components/spec/versions.yaml has no $1" >&2; exit 1; }
  echo "$v"
}
KUBERNETES_VERSION=$(pinned kubernetes)
# The releases the upgrade drills start from.
KUBERNETES_PREVIOUS=$(pinned previousKubernetes)
ETCD_PREVIOUS=$(pinned previousEtcd)
KUBERNETES_HOP=$(pinned hopKubernetes)
KUBE_BENCH_VERSION=$(pinned kubeBench)
PROMETHEUS_VERSION=$(pinned prometheus)
NODE_EXPORTER_VERSION=$(pinned nodeExporter)
NODE_PROBLEM_DETECTOR_VERSION=$(pinned nodeProblemDetector)
CONTAINERD_VERSION=$(pinned containerd)
RUNC_VERSION=$(pinned runc)
CRICTL_VERSION=$(pinned crictl)
AZURE_CNI_VERSION=$(pinned azureCNI)
NVIDIA_CONTAINER_TOOLKIT_VERSION=$(pinned nvidiaContainerToolkit)
# The CLI is the release of the SDK the programs are built with, read from the project's go.mod.
PULUMI_VERSION=$(go list -m -f '{{.Version}}' github.com/pulumi/pulumi/sdk/v3)
PULUMI_LANGUAGE_GO_VERSION=$(pinned pulumiLanguageGo)
PULUMI_KUBERNETES_SOURCE=$(pinned pulumiKubernetesSource)
TOOLS_DIR="$PWD/.tools"
BIN="$TOOLS_DIR/bin"
SHARE="$PWD/.tools/share"
# One cache entry per tool and inputs (the stamp below): a fresh clone on a machine that built them
# before copies them in seconds.
# shellcheck source=scripts/cache.sh
. scripts/cache.sh
# The modules the proxy serves but the checksum database does not know (its lookup answers 404 or
# 403; checked 2026-11-23). Each wrapper's go.sum pins them, so this matters only when a wrapper
# is re-tidied; every other module is still checked against the database.
export GONOSUMDB="github.com/Azure/azure-container-networking,sigs.k8s.io/cri-tools,k8s.io/cloud-provider,k8s.io/node-problem-detector,k8s.io/cri-api,k8s.io/cri-client,k8s.io/csi-translation-lib,k8s.io/endpointslice,k8s.io/externaljwt,k8s.io/kube-controller-manager,k8s.io/sample-apiserver"

# kube_ldflags VERSION: the version Kubernetes binaries report (else "v0.0.0-master").
kube_ldflags() {
  local ld="" pkg minor=${1#v*.}
  minor=${minor%%.*}
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $pkg.gitVersion=$1 -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  echo "$ld"
}

# tool → "wrapper-module package flags-kind output-dir" (output dir relative to .tools)
declare -A TOOLS=(
  [etcd]="etcd go.etcd.io/etcd/server/v3 - bin"
  [etcdctl]="etcd go.etcd.io/etcd/etcdctl/v3 - bin"
  [etcdutl]="etcd go.etcd.io/etcd/etcdutl/v3 - bin"
  [kube-apiserver]="kubernetes k8s.io/kubernetes/cmd/kube-apiserver kube bin"
  [kube-controller-manager]="kubernetes k8s.io/kubernetes/cmd/kube-controller-manager kube bin"
  [kube-scheduler]="kubernetes k8s.io/kubernetes/cmd/kube-scheduler kube bin"
  [kubectl]="kubernetes k8s.io/kubernetes/cmd/kubectl kube bin"
  [kwok]="kwok sigs.k8s.io/kwok/cmd/kwok - bin"
  [kube-bench]="kube-bench github.com/aquasecurity/kube-bench bench bin"
  [promtool]="prometheus github.com/prometheus/prometheus/cmd/promtool prometheus bin"
  [prometheus]="prometheus github.com/prometheus/prometheus/cmd/prometheus prometheus addons"
  [nvidia-ctk]="nvidia-container-toolkit github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk nvidia bin"
  [nvidia-container-runtime-hook]="nvidia-container-toolkit github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-container-runtime-hook nvidia bin"
  [node_exporter]="node-exporter github.com/prometheus/node_exporter node-exporter addons"
  [node-problem-detector]="node-problem-detector k8s.io/node-problem-detector/cmd/nodeproblemdetector npd addons"
  [coredns]="coredns github.com/coredns/coredns - addons"
  [kubelet]="kubernetes k8s.io/kubernetes/cmd/kubelet kube node"
  [containerd]="containerd github.com/containerd/containerd/v2/cmd/containerd containerd node"
  [containerd-shim-runc-v2]="containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 containerd node"
  [ctr]="containerd github.com/containerd/containerd/v2/cmd/ctr containerd node"
  [runc]="runc github.com/opencontainers/runc runc node"
  [crictl]="cri-tools sigs.k8s.io/cri-tools/cmd/crictl crictl node"
  [kube-proxy]="kubernetes k8s.io/kubernetes/cmd/kube-proxy kube node"
  [azure-vnet]="azure-cni github.com/Azure/azure-container-networking/cni/network/plugin - node/cni"
  [azure-vnet-ipam]="azure-cni github.com/Azure/azure-container-networking/cni/ipam/plugin - node/cni"
  [azure-npm]="azure-cni github.com/Azure/azure-container-networking/npm/cmd azure-npm node"
  [loopback]="cni-plugins github.com/containernetworking/plugins/plugins/main/loopback - node/cni"
  [packer]="packer github.com/hashicorp/packer - bin"
  [packer-plugin-azure]="packer github.com/hashicorp/packer-plugin-azure - bin"
  [registry]="registry github.com/distribution/distribution/v3/cmd/registry - bin"
  [pulumi]="pulumi github.com/pulumi/pulumi/pkg/v3/cmd/pulumi pulumi bin"
  [pulumi-language-go]="pulumi-language-go github.com/pulumi/pulumi/sdk/v3/go/pulumi-language-go pulumi-language-go bin"
  [pulumi-resource-kubernetes]="pulumi-kubernetes github.com/pulumi/pulumi-kubernetes/provider/v4/cmd/pulumi-resource-kubernetes pulumi-kubernetes bin"
  # The releases before the pinned ones, where the upgrade drills start (tool@version → versions/<component>-<version>/tool).
  [kube-apiserver@$KUBERNETES_PREVIOUS]="kubernetes-${KUBERNETES_PREVIOUS%.*} k8s.io/kubernetes/cmd/kube-apiserver kube@$KUBERNETES_PREVIOUS versions/kubernetes-$KUBERNETES_PREVIOUS"
  [kube-controller-manager@$KUBERNETES_PREVIOUS]="kubernetes-${KUBERNETES_PREVIOUS%.*} k8s.io/kubernetes/cmd/kube-controller-manager kube@$KUBERNETES_PREVIOUS versions/kubernetes-$KUBERNETES_PREVIOUS"
  [kube-scheduler@$KUBERNETES_PREVIOUS]="kubernetes-${KUBERNETES_PREVIOUS%.*} k8s.io/kubernetes/cmd/kube-scheduler kube@$KUBERNETES_PREVIOUS versions/kubernetes-$KUBERNETES_PREVIOUS"
  [kubelet@$KUBERNETES_PREVIOUS]="kubernetes-${KUBERNETES_PREVIOUS%.*} k8s.io/kubernetes/cmd/kubelet kube@$KUBERNETES_PREVIOUS versions/kubernetes-$KUBERNETES_PREVIOUS"
  [etcd@$ETCD_PREVIOUS]="etcd-${ETCD_PREVIOUS%.*} go.etcd.io/etcd/server/v3 - versions/etcd-$ETCD_PREVIOUS"
  [etcdctl@$ETCD_PREVIOUS]="etcd-${ETCD_PREVIOUS%.*} go.etcd.io/etcd/etcdctl/v3 - versions/etcd-$ETCD_PREVIOUS"
  [etcdutl@$ETCD_PREVIOUS]="etcd-${ETCD_PREVIOUS%.*} go.etcd.io/etcd/etcdutl/v3 - versions/etcd-$ETCD_PREVIOUS"
  [kube-apiserver@$KUBERNETES_HOP]="kubernetes-${KUBERNETES_HOP%.*} k8s.io/kubernetes/cmd/kube-apiserver kube@$KUBERNETES_HOP versions/kubernetes-$KUBERNETES_HOP"
  [kube-controller-manager@$KUBERNETES_HOP]="kubernetes-${KUBERNETES_HOP%.*} k8s.io/kubernetes/cmd/kube-controller-manager kube@$KUBERNETES_HOP versions/kubernetes-$KUBERNETES_HOP"
  [kube-scheduler@$KUBERNETES_HOP]="kubernetes-${KUBERNETES_HOP%.*} k8s.io/kubernetes/cmd/kube-scheduler kube@$KUBERNETES_HOP versions/kubernetes-$KUBERNETES_HOP"
  [kubelet@$KUBERNETES_HOP]="kubernetes-${KUBERNETES_HOP%.*} k8s.io/kubernetes/cmd/kubelet kube@$KUBERNETES_HOP versions/kubernetes-$KUBERNETES_HOP"
)
# Our own binaries the machines run, built from this repository's module (Go's cache keeps it
# quick): package, then the folder under .tools.
declare -A LOCAL_TOOLS=(
  [clusterforge-csr-approver]="./cmd/clusterforge-csr-approver bin"
  [clusterforge-etcd-backup]="./cmd/clusterforge-etcd-backup bin"
  [clusterforge-node-join]="./cmd/clusterforge-node-join node"
  [clusterforge-ops]="./cmd/clusterforge-ops bin"
)
declare -A TOOL_GROUPS=(
  [rehearsal]="etcd etcdctl etcdutl kube-apiserver kube-controller-manager kube-scheduler kubectl kwok kube-bench clusterforge-csr-approver clusterforge-etcd-backup clusterforge-ops azurite"
  [upgrades]="kube-apiserver@$KUBERNETES_PREVIOUS kube-controller-manager@$KUBERNETES_PREVIOUS kube-scheduler@$KUBERNETES_PREVIOUS kubelet@$KUBERNETES_PREVIOUS etcd@$ETCD_PREVIOUS etcdctl@$ETCD_PREVIOUS etcdutl@$ETCD_PREVIOUS"
  [hops]="kube-apiserver@$KUBERNETES_HOP kube-controller-manager@$KUBERNETES_HOP kube-scheduler@$KUBERNETES_HOP kubelet@$KUBERNETES_HOP"
  [control-plane]="etcd etcdctl etcdutl kube-apiserver kube-controller-manager kube-scheduler kubectl clusterforge-etcd-backup clusterforge-csr-approver"
  [checks]="promtool nvidia-ctk nvidia-container-runtime-hook node-problem-detector containerd runc azurite packer packer-plugin-azure"
  [node]="kubelet kube-proxy containerd containerd-shim-runc-v2 ctr runc crictl azure-vnet azure-vnet-ipam azure-npm loopback clusterforge-node-join"
  [packer]="packer packer-plugin-azure"
  [bench]="registry"
  [pulumi]="pulumi pulumi-language-go pulumi-resource-kubernetes"
  [addons]="coredns prometheus node_exporter node-problem-detector clusterforge-ops"
)

step() { printf '==> %s\n' "$*"; }

# kubernetes_provider_version: the version the provider reports. Its source is an untagged commit,
# which Go names v4.0.0-<time>-<commit>; it comes after the SDK release its go.mod requires, so it
# reports itself as Go would name a commit after that tag: <that release's next patch>-0.<time>-<commit>.
kubernetes_provider_version() {
  local sdk next
  sdk=$(cd scripts/toolchain/pulumi-kubernetes && go list -m -f '{{.Version}}' github.com/pulumi/pulumi-kubernetes/sdk/v4)
  sdk=${sdk#v}
  next="${sdk%.*}.$((${sdk##*.} + 1))"
  echo "$next-0.${PULUMI_KUBERNETES_SOURCE#v4.0.0-}"
}

# module_dir WRAPPER MODULE: the directory of MODULE at the release WRAPPER's go.mod selects, downloaded
# first. A fresh machine's module cache holds only what was fetched: asking it (go list -m -f
# '{{.Dir}}') for a module nothing downloaded yet prints nothing.
module_dir() {
  local version dir
  version=$(cd "scripts/toolchain/$1" && go list -m -f '{{.Version}}' "$2")
  dir=$(cd "scripts/toolchain/$1" && go mod download -json "$2@$version" | jq -r '.Dir // empty')
  [ -d "$dir" ] || { echo "toolchain: could not download $2@$version (wrapper scripts/toolchain/$1)" >&2; exit 1; }
  echo "$dir"
}

# kubernetes_provider_source: the provider's main embeds its schema (stamped with its version) and
# Terraform mapping compacted, files its own build generates (generate.go) and its module lacks; Go
# builds nothing from a changed module cache, so this copies main.go beside them into a module of
# the wrapper's go.mod and go.sum. Prints that module's directory.
kubernetes_provider_source() {
  local src dir="$SHARE/pulumi-kubernetes"
  src="$(module_dir pulumi-kubernetes github.com/pulumi/pulumi-kubernetes/provider/v4)/cmd/pulumi-resource-kubernetes"
  rm -rf "$dir" && mkdir -p "$dir"
  cp scripts/toolchain/pulumi-kubernetes/go.mod scripts/toolchain/pulumi-kubernetes/go.sum "$src/main.go" "$dir/"
  chmod u+w "$dir"/*
  jq -c --arg v "$(kubernetes_provider_version)" '.version = $v' "$src/schema.json" >"$dir/schema-embed.json"
  jq -c . "$src/terraform-mapping.json" >"$dir/terraform-mapping-embed.json"
  echo "$dir"
}

# build TOOL: go build in its wrapper module, printing elapsed time every 30 s (cold builds take minutes).
build() {
  local tool=$1 module pkg kind dest ldflags tags="" cgo=0 stamp want out name dir cached
  read -r module pkg kind dest <<<"${TOOLS[$tool]}"
  ldflags="-s -w"
  case "$kind" in
    kube) ldflags+="$(kube_ldflags "$KUBERNETES_VERSION")" ;;
    kube@*) ldflags+="$(kube_ldflags "${kind#kube@}")" ;;
    # Only the service discovery the monitoring add-on's config uses, Kubernetes (Prometheus's own
    # build tags for a custom build; the booted scrape check fails without it): neither binary then
    # compiles every cloud's SDK (promtool alone took 3.5 of a fresh machine's 16 minutes of make check).
    prometheus) ldflags+=" -X github.com/prometheus/common/version.Version=${PROMETHEUS_VERSION#v}"; tags="remove_all_sd enable_kubernetes_sd" ;;
    node-exporter) ldflags+=" -X github.com/prometheus/common/version.Version=${NODE_EXPORTER_VERSION#v}" ;;
    # No Stackdriver exporter: clusterforge reports to the apiserver and Prometheus only.
    npd) ldflags+=" -X k8s.io/node-problem-detector/pkg/version.version=$NODE_PROBLEM_DETECTOR_VERSION"; tags="disable_stackdriver_exporter" ;;
    bench) ldflags+=" -X github.com/aquasecurity/kube-bench/cmd.KubeBenchVersion=$KUBE_BENCH_VERSION" ;;
    containerd) ldflags+=" -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION"; tags="no_btrfs" ;;
    # As runc's release binaries: static, with seccomp (containerd gives sandboxes a seccomp profile,
    # which a runc without it refuses). Needs libseccomp-dev (scripts/setup.sh). Without the
    # libpathrs tag (a Rust library nothing here can build): runc then resolves paths in the
    # container's root with filepath-securejoin's Go implementation of the same safe lookups.
    runc) ldflags+=" -X main.version=${RUNC_VERSION#v} -extldflags -static"; tags="seccomp netgo osusergo"; cgo=1 ;;
    crictl) ldflags+=" -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" ;;
    # No Application Insights key: azure-npm sends Microsoft no telemetry.
    azure-npm) ldflags+=" -X main.version=$AZURE_CNI_VERSION" ;;
    # go-nvml loads the driver's library through cgo; no GPU is needed to run them.
    nvidia) ldflags+=" -X github.com/NVIDIA/nvidia-container-toolkit/internal/info.version=${NVIDIA_CONTAINER_TOOLKIT_VERSION#v}"; cgo=1 ;;
    pulumi) ldflags+=" -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$PULUMI_VERSION" ;;
    pulumi-language-go) ldflags+=" -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$PULUMI_LANGUAGE_GO_VERSION" ;;
    pulumi-kubernetes) ldflags+=" -X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=$(kubernetes_provider_version)" ;;
  esac
  out="$TOOLS_DIR/$dest"
  mkdir -p "$out"
  stamp="$out/.$tool.stamp"
  name=${tool%@*}
  want="$(cat "scripts/toolchain/$module/go.mod" "scripts/toolchain/$module/go.sum" | sha256sum | cut -c1-16) $(go env GOVERSION) $ldflags $tags cgo=$cgo"
  if [ -x "$out/$name" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    step "$tool: up to date"
    return
  fi
  cached="tools/$(printf '%s\n' "$tool" "$pkg" "$want" | sha256sum | cut -c1-32)"
  if cache_get "$cached" "$name" "$out/$name.new"; then
    mv "$out/$name.new" "$out/$name"
    echo "$want" >"$stamp"
    step "$tool: from the cache ($CACHE/$cached)"
    return
  fi
  step "$tool: building $pkg (module scripts/toolchain/$module)"
  dir="scripts/toolchain/$module"
  [ "$kind" != pulumi-kubernetes ] || { dir=$(kubernetes_provider_source); pkg=.; }
  local start=$SECONDS
  ( while sleep 30; do echo "    ... $tool still building ($((SECONDS - start)) s)"; done ) &
  local ticker=$!
  trap 'kill $ticker 2>/dev/null || true' RETURN
  if ! (cd "$dir" && CGO_ENABLED=$cgo go build -trimpath -tags "$tags" -ldflags "$ldflags" -o "$out/$name.new" "$pkg"); then
    kill $ticker 2>/dev/null || true   # set -e exits without running the RETURN trap
    echo "toolchain: building $tool failed" >&2
    exit 1
  fi
  cache_put "$cached" "$out/$name.new=$name"
  mv "$out/$name.new" "$out/$name"
  echo "$want" >"$stamp"
  step "$tool: built in $((SECONDS - start)) s"
}

build_local() {
  local pkg dest
  read -r pkg dest <<<"${LOCAL_TOOLS[$1]}"
  step "$1: building $pkg (this repository)"
  mkdir -p "$TOOLS_DIR/$dest"
  # No VCS stamp: the binary is the same in every clone of a commit and with uncommitted edits
  # elsewhere, so a bake that installs it is found in the image cache.
  CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "-s -w" -o "$TOOLS_DIR/$dest/$1" "$pkg"
}

# install_azurite: the pinned Azurite from npm (scripts/toolchain/azurite's lock file), linked as
# .tools/bin/azurite-blob. Needs node and npm (Node 20 here).
install_azurite() {
  local dir="$TOOLS_DIR/azurite" want cached
  want="$(cat scripts/toolchain/azurite/package.json scripts/toolchain/azurite/package-lock.json | sha256sum | cut -c1-16) $(node --version)"
  cached="tools/azurite-$(echo "$want" | sha256sum | cut -c1-32)"
  if [ -x "$dir/node_modules/.bin/azurite-blob" ] && [ "$(cat "$dir/.stamp" 2>/dev/null)" = "$want" ]; then
    step "azurite: up to date"
  elif cache_get "$cached" azurite "$dir"; then
    step "azurite: from the cache ($CACHE/$cached)"
  else
    step "azurite: installing $(sed -n 's/.*"azurite": "\(.*\)".*/\1/p' scripts/toolchain/azurite/package.json) from npm (lock file scripts/toolchain/azurite)"
    rm -rf "$dir" && mkdir -p "$dir"
    cp scripts/toolchain/azurite/package.json scripts/toolchain/azurite/package-lock.json "$dir/"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
    echo "$want" >"$dir/.stamp"
    cache_put "$cached" "$dir=azurite"
  fi
  # Relative, so a moved or copied checkout keeps a working link.
  ln -sfn ../azurite/node_modules/.bin/azurite-blob "$BIN/azurite-blob"
}

# kube-bench reads its CIS checks from the cfg/ folder of its own module.
install_bench_config() {
  local src
  src="$(module_dir kube-bench github.com/aquasecurity/kube-bench)/cfg"
  if [ "$(cat "$SHARE/kube-bench/.source" 2>/dev/null)" != "$src" ]; then
    rm -rf "$SHARE/kube-bench" && mkdir -p "$SHARE/kube-bench"
    cp -r "$src" "$SHARE/kube-bench/cfg" && chmod -R u+w "$SHARE/kube-bench"
    echo "$src" >"$SHARE/kube-bench/.source"
  fi
}

# KWOK's own pod stages (its pod-fast set: ready, complete, delete), which v0.8 no longer adds by
# itself to a config that names node stages: the rehearsal appends them to its KWOK config.
install_kwok_stages() {
  local src
  src="$(module_dir kwok sigs.k8s.io/kwok)/kustomize/stage/pod/fast"
  mkdir -p "$SHARE/kwok"
  for stage in pod-ready pod-complete pod-delete; do printf -- '---\n'; cat "$src/$stage.yaml"; done >"$SHARE/kwok/pod-stages.yaml.new"
  mv "$SHARE/kwok/pod-stages.yaml.new" "$SHARE/kwok/pod-stages.yaml"
}

mkdir -p "$BIN"
exec 9>"$BIN/.lock"
flock 9   # one build at a time: `make -j` or two terminals share .tools
if [ "${1:-}" = sources ]; then
  source=$(kubernetes_provider_source)
  step "pulumi-resource-kubernetes: source in $source"
  install_bench_config
  step "kube-bench: checks in $SHARE/kube-bench/cfg"
  install_kwok_stages
  step "kwok: pod stages in $SHARE/kwok/pod-stages.yaml"
  exit 0
fi
tools=()
for arg in "${@:-rehearsal}"; do
  if [ -n "${TOOL_GROUPS[$arg]:-}" ]; then
    read -r -a members <<<"${TOOL_GROUPS[$arg]}"
    tools+=("${members[@]}")
  elif [ -n "${TOOLS[$arg]:-}" ] || [ -n "${LOCAL_TOOLS[$arg]:-}" ] || [ "$arg" = azurite ]; then
    tools+=("$arg")
  else
    echo "toolchain: unknown group or tool '$arg'; groups: ${!TOOL_GROUPS[*]}; tools: ${!TOOLS[*]} ${!LOCAL_TOOLS[*]}" >&2
    exit 2
  fi
done
for tool in "${tools[@]}"; do
  if [ -n "${LOCAL_TOOLS[$tool]:-}" ]; then build_local "$tool"; continue; fi
  if [ "$tool" = azurite ]; then install_azurite; continue; fi
  build "$tool"
  [ "$tool" != kube-bench ] || install_bench_config
  [ "$tool" != kwok ] || install_kwok_stages
done
step "toolchain ready in .tools"
