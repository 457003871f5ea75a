#!/usr/bin/env bash
# The image pull benchmark: how long until a large image is usable on a fresh worker, pulled with
# containerd's defaults, pulled with clusterforge's settings, and preloaded into the node image.
# It serves a generated multi-layer image (16 x 128 MiB = 2 GiB of incompressible data) from a
# local distribution v3.0.0 registry (directly, and through a proxy holding each connection to
# PER_CONNECTION_MIBPS, default 64, as a remote registry serves each stream), bakes a node image
# with the same image preloaded, runs BenchmarkImageReady (test/bench/pull: the stack booted, its
# first worker restarted fresh for each mode) RUNS times (default 3) and writes build/bench/pull.md.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=5055
REF="127.0.0.1:$PORT/bench/training-app:2g"
out="$PWD/build/bench"

step() { printf '==> %s\n' "$*"; }

scripts/toolchain.sh rehearsal node packer bench
# BAKE=0 reuses the images and the registry's data of the last run.
bake=${BAKE:-1}
[ "$bake" = 0 ] || rm -rf "$out/registry"
mkdir -p "$out/registry"
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

RUNS=${RUNS:-3}
if [ "$bake" != 0 ]; then
  step "the images the stack boots (stack dev: worker and control plane)"
  scripts/image.sh local dev
  ROLE=control-plane scripts/image.sh local dev
  step "pushing $REF and baking it, pulled from the registry, into build/images/node-bench.tar"
  IMAGE_NAME=node-bench TESTAPP_ARGS="-name $REF -layers 16 -layer-mib 128 -seed 2 -push $REF -from-registry" \
    scripts/image.sh local dev
fi

step "BenchmarkImageReady, $RUNS runs (each boots the stack twice and restarts its first worker fresh per mode)"
go test -count="$RUNS" -run '^$' -bench ImageReady -benchtime 1x -timeout 180m ./test/bench/pull \
  -args -pull-image "$REF" -preloaded-image "$PWD/build/images/node-bench.tar" \
  -per-connection-mibps "${PER_CONNECTION_MIBPS:-64}" | tee "$out/pull.txt"

# Each cell: the median of the runs, and their range; the ratio is of the medians.
awk -v ref="$REF" -v runs="$RUNS" -v date="$(date -u +%F)" -v commit="$(git rev-parse --short HEAD)" \
  -v host="$(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)" '
  function median(key,   k, m, v, i, j, t) {
    m = count[key]; for (i = 1; i <= m; i++) v[i] = val[key, i]
    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
    lo[key] = v[1]; hi[key] = v[m]
    return m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
  }
  function cell(key) { return sprintf("%.1f (%.1f-%.1f); CRI %.1f", median(key), lo[key], hi[key], median(key "/cri")) }
  /^BenchmarkImageReady\// {
    name = $1; sub(/^BenchmarkImageReady\//, "", name); sub(/-[0-9]+$/, "", name)
    for (i = 3; i < NF; i++) {
      if ($(i+1) == "ns/op") val[name, ++count[name]] = $i / 1e9
      if ($(i+1) == "s-until-CRI") val[name "/cri", ++count[name "/cri"]] = $i
    }
    if (split(name, part, "/") == 2 && !(part[1] in seen)) { seen[part[1]] = 1; networks[++n] = part[1] }
  }
  END {
    if (count["preloaded"] < runs) { print "bench-pull: only " count["preloaded"] + 0 " of " runs " runs finished" > "/dev/stderr"; exit 1 }
    print "# Image pull benchmark\n"
    print "Seconds from a fresh worker'"'"'s start (a clean shutdown, a new empty local disk, systemd-nspawn started again) until `" ref "` (2 GiB: 16 layers of 128 MiB of incompressible data, plus the entrypoint) is usable: median of " runs " runs (range), and the median part until containerd'"'"'s CRI answered (for preloaded, that includes seeding the local disk with the baked images). Registry: distribution v3.0.0 on this host, reached from the worker'"'"'s loopback directly and through a proxy that holds each connection to a fixed throughput, as a remote registry serves each stream. " date ", " commit ", " host ".\n"
    print "| registry | containerd defaults | clusterforge settings | preloaded | settings vs defaults | preloaded vs defaults |"
    print "|---|---|---|---|---|---|"
    p = median("preloaded")
    for (i = 1; i <= n; i++) {
      d = networks[i] "/pull-containerd-defaults"; o = networks[i] "/pull-clusterforge-settings"
      printf "| %s | %s | %s | %s | %.2fx | %.2fx |\n", networks[i], cell(d), cell(o), cell("preloaded"), median(d) / median(o), median(d) / p
    }
  }' "$out/pull.txt" >"$out/pull.md"
step "report: $out/pull.md"
cat "$out/pull.md"
