#!/usr/bin/env bash
# The boot benchmark: `make boot STACK` from nothing to a healthy cluster, RUNS times (default 3),
# with the images already baked. Each run starts from `make boot-down` and with the images'
# unpack stamps removed, so every run unpacks them again. Reports the whole `make boot` and its
# phases (image unpack, machine boot, cloud-init, cluster ready) as median (range), and each
# machine's working-set memory once booted; writes build/bench/boot.md. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
STACK="${1:-dev}"
RUNS="${RUNS:-3}"
out="$PWD/build/bench"
mkdir -p "$out"
raw="$out/boot.txt"
: >"$raw"

for run in $(seq "$RUNS"); do
  make --no-print-directory boot-down STACK="$STACK" >/dev/null
  rm -f "build/boot/$STACK/images/"*.stamp
  printf '==> run %s of %s: make boot STACK=%s\n' "$run" "$RUNS" "$STACK"
  start=$(date +%s%N)
  make --no-print-directory boot STACK="$STACK" | tee "$out/boot-run.log" | grep --line-buffered '^==> \(phase\|image\|memory\)'
  end=$(date +%s%N)
  { echo "run $run total $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')"; sed -n "s/^==> /run $run /p" "$out/boot-run.log"; } >>"$raw"
done
make --no-print-directory boot-down STACK="$STACK" >/dev/null

awk -v runs="$RUNS" -v stack="$STACK" -v fmt="%.1f (%.1f-%.1f)" -f scripts/stats.awk -f /dev/stdin "$raw" >"$out/boot.md" <<'AWK'
  $3 == "total" { total = total " " $4 }
  # "run N phase <name>: <seconds>s"
  $3 == "phase" {
    name = $4; for (i = 5; i < NF; i++) name = name " " $i; sub(/:$/, "", name)
    v = $NF; sub(/s$/, "", v)
    if (!(name in phase)) order[++n] = name
    phase[name] = phase[name] " " v
  }
  # "run N memory <role> <machine> <MiB> MiB"
  $3 == "memory" { if (!($4 in mem)) roles[++r] = $4; mem[$4] = mem[$4] " " $6 }
  END {
    print "# boot benchmark\n"
    print "`make bench-boot STACK=" stack "` (`scripts/bench-boot.sh`), " runs " runs, median (range), images already baked, each run from `make boot-down` with the images unpacked again. This machine: 2 cores, systemd-nspawn containers sharing its kernel.\n"
    print "| step | seconds |"
    print "|---|---|"
    printf "| `make boot` to a healthy cluster (all of it: set-up checks, plan, boot) | %s |\n", stats(total)
    for (i = 1; i <= n; i++) printf "| phase %s | %s |\n", order[i], stats(phase[order[i]])
    print "\nWorking-set memory per machine once booted (MiB; the memory cgroup less inactive file cache), over every machine of the role and every run:\n"
    print "| role | MiB |"
    print "|---|---|"
    for (i = 1; i <= r; i++) printf "| %s | %s |\n", roles[i], stats(mem[roles[i]])
  }
AWK
cat "$out/boot.md"
