#!/usr/bin/env bash
# The image pull benchmark: how long until a large image is usable on a fresh node, pulled with
# containerd's defaults, pulled with clusterforge's settings, and preloaded into the node image.
# It serves a generated multi-layer image (16 x 128 MiB = 2 GiB of incompressible data) from a
# local distribution v3.0.0 registry, bakes a node image with the same image preloaded, runs
# BenchmarkImageReady (components/rehearsal) and writes build/bench/pull.md.
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
step "pushing $REF and baking it into build/images/node-bench.tar"
IMAGE_NAME=node-bench MKIMAGES_ARGS="-app-name $REF -app-layers 16 -app-layer-mib 128 -seed 2 -push $REF" \
  scripts/image.sh local dev

step "BenchmarkImageReady (each mode boots a fresh node)"
go test -count=1 -run '^$' -bench ImageReady -benchtime 1x -timeout 60m ./components/rehearsal \
  -args -pull-image "$REF" -preloaded-image "$PWD/build/images/node-bench.tar" | tee "$out/pull.txt"

awk -v ref="$REF" '
  /^BenchmarkImageReady\// {
    split($1, name, "/"); sub(/-[0-9]+$/, "", name[2])
    for (i = 3; i < NF; i++) if ($(i+1) == "ns/op") s[name[2]] = $i / 1e9
    order[++n] = name[2]
  }
  END {
    print "# Image pull benchmark\n"
    print "Time from a fresh node'"'"'s first boot unit until `" ref "` (2 GiB, 16 layers + the entrypoint, incompressible) is usable, one run each, on this machine. Registry: distribution v3.0.0 on loopback.\n"
    print "| mode | seconds | vs containerd defaults |"
    print "|---|---|---|"
    base = s["pull-containerd-defaults"]
    for (i = 1; i <= n; i++) printf "| %s | %.1f | %.2fx faster |\n", order[i], s[order[i]], base / s[order[i]]
  }' "$out/pull.txt" >"$out/pull.md"
step "report: $out/pull.md"
cat "$out/pull.md"
