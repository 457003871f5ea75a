#!/usr/bin/env bash
# The image pull benchmark: how long until a large image is usable on a fresh node, pulled with
# containerd's defaults, pulled with clusterforge's settings, and preloaded into the node image.
# It serves a generated multi-layer image (16 x 128 MiB = 2 GiB of incompressible data) from a
# local distribution v3.0.0 registry (directly, and through a proxy holding each connection to
# PER_CONNECTION_MIBPS, default 64, as a remote registry serves each stream), bakes a node image
# with the same image preloaded, runs BenchmarkImageReady (test/e2e/image) and writes
# build/bench/pull.md.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=5055
REF="127.0.0.1:$PORT/bench/training-app:2g"
out="$PWD/build/bench"

step() { printf '==> %s\n' "$*"; }

scripts/toolchain.sh rehearsal node packer bench
rm -rf "$out" && mkdir -p "$out/registry"
cat >"$out/registry.yml" <<YAML
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $out/registry
http:
  addr: 127.0.0.1:$PORT
YAML
step "registry v3.0.0 on 127.0.0.1:$PORT"
.tools/bin/registry serve "$out/registry.yml" >"$out/registry.log" 2>&1 &
registry=$!
trap 'kill $registry 2>/dev/null || true' EXIT
for _ in $(seq 50); do curl -fsS "http://127.0.0.1:$PORT/v2/" >/dev/null 2>&1 && break; sleep 0.1; done

step "the node image every pulling node boots (stack dev)"
scripts/image.sh local dev
step "pushing $REF and baking it, pulled from the registry, into build/images/node-bench.tar"
IMAGE_NAME=node-bench MKIMAGES_ARGS="-app-name $REF -app-layers 16 -app-layer-mib 128 -seed 2 -push $REF -app-from-registry" \
  scripts/image.sh local dev

step "BenchmarkImageReady (each mode boots a fresh node)"
go test -count=1 -run '^$' -bench ImageReady -benchtime 1x -timeout 60m ./test/e2e/image \
  -args -pull-image "$REF" -preloaded-image "$PWD/build/images/node-bench.tar" \
  -per-connection-mibps "${PER_CONNECTION_MIBPS:-64}" | tee "$out/pull.txt"

awk -v ref="$REF" '
  /^BenchmarkImageReady\// {
    name = $1; sub(/^BenchmarkImageReady\//, "", name); sub(/-[0-9]+$/, "", name)
    for (i = 3; i < NF; i++) {
      if ($(i+1) == "ns/op") total[name] = $i / 1e9
      if ($(i+1) == "s-until-CRI") cri[name] = $i
    }
    if (split(name, part, "/") == 2 && !(part[1] in seen)) { seen[part[1]] = 1; networks[++n] = part[1] }
  }
  END {
    print "# Image pull benchmark\n"
    print "Seconds from a fresh node'"'"'s first boot unit until `" ref "` (2 GiB: 16 layers of 128 MiB of incompressible data, plus the entrypoint) is usable, one run each; in brackets, the part until containerd'"'"'s CRI answered (for preloaded, seeding the local disk with the baked images). Registry: distribution v3.0.0 on loopback, reached directly and through a proxy that holds each connection to a fixed throughput, as a remote registry serves each stream.\n"
    print "| registry | containerd defaults | clusterforge settings | preloaded | settings vs defaults | preloaded vs defaults |"
    print "|---|---|---|---|---|---|"
    p = total["preloaded"]
    for (i = 1; i <= n; i++) {
      d = total[networks[i] "/pull-containerd-defaults"]; o = total[networks[i] "/pull-clusterforge-settings"]
      printf "| %s | %.1f (%.1f) | %.1f (%.1f) | %.1f (%.1f) | %.2fx | %.2fx |\n", networks[i], d, cri[networks[i] "/pull-containerd-defaults"], o, cri[networks[i] "/pull-clusterforge-settings"], p, cri["preloaded"], d / o, d / p
    }
  }' "$out/pull.txt" >"$out/pull.md"
step "report: $out/pull.md"
cat "$out/pull.md"
