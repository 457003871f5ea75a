#!/usr/bin/env bash
# The data-plane benchmark on booted machines: pod start-up (create to Running, 100 pods of the
# preloaded app image on the stack's workers, in waves of their free pod slots) and DNS query
# latency through CoreDNS (1,000 lookups from a pod), each RUNS times (default 3) on one boot;
# reports p50 and p99 as median (range) over the runs in build/bench/dataplane.md. Needs root and
# the stack's images (make images-local).
set -euo pipefail
cd "$(dirname "$0")/.."
STACK="${1:-dev}"
RUNS="${RUNS:-3}"
out="$PWD/build/bench"
mkdir -p "$out"
printf '==> BenchmarkPodStartup and BenchmarkDNSQuery, %s runs each, on a boot of %s (test/e2e/booted)\n' "$RUNS" "$STACK"
go test -count=1 -run '^$' -bench 'PodStartup|DNSQuery' -benchtime 1x -count "$RUNS" -timeout 60m \
  ./test/e2e/booted -args -stack "$STACK" | tee "$out/dataplane.txt" | grep --line-buffered -E '^(Benchmark|==> (phase|up in))'

awk -v runs="$RUNS" -v stack="$STACK" -v fmt="%g (%g-%g)" -v date="$(date -u +%F)" -v commit="$(git rev-parse --short HEAD)" \
  -v host="$(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)" \
  -f scripts/stats.awk -f /dev/stdin "$out/dataplane.txt" >"$out/dataplane.md" <<'AWK'
  /^Benchmark/ {
    name = $1; sub(/-[0-9]+$/, "", name)
    for (i = 3; i < NF; i++) if ($(i+1) ~ /^p[0-9]+-(ms|us)$/) v[name "," $(i+1)] = v[name "," $(i+1)] " " $i
  }
  END {
    print "# Data-plane benchmark\n"
    print "`scripts/bench-dataplane.sh " stack "` (`make bench-dataplane`) at " commit ", " date ", on " host ": " runs " runs on one boot of the " stack " stack, median (range) over the runs; the workers are systemd-nspawn containers sharing the host's kernel and CPUs.\n"
    print "| measure | p50 | p99 |"
    print "|---|---|---|"
    printf "| pod start-up, create to Running, 100 pods of the preloaded app image (ms) | %s | %s |\n", stats(v["BenchmarkPodStartup,p50-ms"]), stats(v["BenchmarkPodStartup,p99-ms"])
    printf "| DNS lookup of kubernetes.default.svc.cluster.local from a pod through CoreDNS (µs) | %s | %s |\n", stats(v["BenchmarkDNSQuery,p50-us"]), stats(v["BenchmarkDNSQuery,p99-us"])
  }
AWK
cat "$out/dataplane.md"
