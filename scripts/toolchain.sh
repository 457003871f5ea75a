#!/usr/bin/env bash
# Builds the pinned binaries the rehearsal runs, from the wrapper modules in scripts/toolchain/
# (one go.mod each, so the project's go.sum stays about the project), into .tools/bin/.
# A binary is rebuilt only when its wrapper module or build flags change; a stamp file records them.
#
# Usage: scripts/toolchain.sh [TOOL...]      (default: every tool below)
set -euo pipefail
cd "$(dirname "$0")/.."

KUBERNETES_VERSION=v1.34.1
KUBE_BENCH_VERSION=v0.12.0
BIN="$PWD/.tools/bin"
SHARE="$PWD/.tools/share"
# Some k8s.io staging versions are served by the proxy but missing from the checksum database;
# each wrapper's go.sum pins them.
export GONOSUMDB="k8s.io,${GONOSUMDB:-}"

kube_ldflags() {
  local ld="" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=34 -X $pkg.gitTreeState=clean"
  done
  echo "$ld"
}

# tool → "wrapper-module package extra-ldflags"
declare -A TOOLS=(
  [etcd]="etcd go.etcd.io/etcd/server/v3"
  [etcdctl]="etcd go.etcd.io/etcd/etcdctl/v3"
  [kube-apiserver]="kubernetes k8s.io/kubernetes/cmd/kube-apiserver kube"
  [kube-controller-manager]="kubernetes k8s.io/kubernetes/cmd/kube-controller-manager kube"
  [kube-scheduler]="kubernetes k8s.io/kubernetes/cmd/kube-scheduler kube"
  [kubectl]="kubernetes k8s.io/kubernetes/cmd/kubectl kube"
  [kwok]="kwok sigs.k8s.io/kwok/cmd/kwok"
  [kube-bench]="kube-bench github.com/aquasecurity/kube-bench bench"
)
ORDER=(etcd etcdctl kube-apiserver kube-controller-manager kube-scheduler kubectl kwok kube-bench)

step() { printf '==> %s\n' "$*"; }

# build TOOL: go build in its wrapper module, printing elapsed time every 30 s (cold builds take minutes).
build() {
  local tool=$1 module pkg kind ldflags stamp want
  read -r module pkg kind <<<"${TOOLS[$tool]}"
  ldflags="-s -w"
  case "${kind:-}" in
    kube) ldflags+="$(kube_ldflags)" ;;
    bench) ldflags+=" -X github.com/aquasecurity/kube-bench/cmd.KubeBenchVersion=$KUBE_BENCH_VERSION" ;;
  esac
  stamp="$BIN/.$tool.stamp"
  want="$(cat "scripts/toolchain/$module/go.mod" "scripts/toolchain/$module/go.sum" | sha256sum | cut -c1-16) $(go env GOVERSION) $ldflags"
  if [ -x "$BIN/$tool" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    step "$tool: up to date"
    return
  fi
  step "$tool: building $pkg (module scripts/toolchain/$module)"
  local start=$SECONDS
  ( while sleep 30; do echo "    ... $tool still building ($((SECONDS - start)) s)"; done ) &
  local ticker=$!
  trap 'kill $ticker 2>/dev/null || true' RETURN
  (cd "scripts/toolchain/$module" && go build -trimpath -ldflags "$ldflags" -o "$BIN/$tool.new" "$pkg")
  mv "$BIN/$tool.new" "$BIN/$tool"
  echo "$want" >"$stamp"
  step "$tool: built in $((SECONDS - start)) s"
}

# kube-bench reads its CIS checks from the cfg/ folder of its own module.
install_bench_config() {
  local src
  src="$(cd scripts/toolchain/kube-bench && go list -m -f '{{.Dir}}' github.com/aquasecurity/kube-bench)/cfg"
  if [ ! -d "$SHARE/kube-bench/cfg" ] || [ "$src" -nt "$SHARE/kube-bench/cfg" ]; then
    rm -rf "$SHARE/kube-bench" && mkdir -p "$SHARE/kube-bench"
    cp -r "$src" "$SHARE/kube-bench/cfg" && chmod -R u+w "$SHARE/kube-bench"
  fi
}

mkdir -p "$BIN"
exec 9>"$BIN/.lock"
flock 9   # one build at a time: `make -j` or two terminals share .tools
tools=("$@")
[ ${#tools[@]} -gt 0 ] || tools=("${ORDER[@]}")
for tool in "${tools[@]}"; do
  [ -n "${TOOLS[$tool]:-}" ] || { echo "toolchain: unknown tool '$tool'; known: ${ORDER[*]}" >&2; exit 2; }
  build "$tool"
  [ "$tool" != kube-bench ] || install_bench_config
done
step "toolchain ready in .tools/bin"
