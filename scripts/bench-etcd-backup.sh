#!/usr/bin/env bash
# The etcd backup benchmark: for an etcd holding 10,000 Node-sized objects and 100,000 others, and
# for a 2 GiB database, the time the agent takes to snapshot through etcd's client API, upload to
# Azurite and verify, and the time one member's restore takes (download, checksum, etcdutl).
# RUNS runs each (default 3); writes build/bench/etcd-backup.md with the median and range, and the
# recovery point the default settings give. BenchmarkBackup is in components/etcdbackup.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${RUNS:-3}"
out="$PWD/build/bench"
mkdir -p "$out"

scripts/toolchain.sh etcd etcdutl azurite
printf '==> BenchmarkBackup, %s runs (each loads its etcd afresh; the 2 GiB run takes a few minutes)\n' "$RUNS"
go test -count="$RUNS" -run '^$' -bench Backup -benchtime 1x -timeout 120m ./components/etcdbackup | tee "$out/etcd-backup.txt"

interval=$(sed -n 's/.*DefaultBackupInterval *= "\(.*\)"/\1/p' components/spec/defaults.go)
awk -v runs="$RUNS" -v interval="$interval" '
  function stats(list,   n, a, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    med = (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    lo = a[1]; hi = a[n]
    return sprintf("%.1f (%.1f-%.1f)", med, lo, hi)
  }
  # The loader prints progress between a benchmark'"'"'s name and its figures: keep the last name.
  /^BenchmarkBackup\// {
    name = $1; sub(/^BenchmarkBackup\//, "", name); sub(/-[0-9]+$/, "", name)
    if (!(name in seen)) { seen[name] = 1; order[++n] = name }
  }
  /s-snapshot-upload-verify/ {
    for (i = 1; i < NF; i++) {
      if ($(i+1) == "MiB-snapshot") size[name] = size[name] " " $i
      if ($(i+1) == "s-snapshot-upload-verify") snap[name] = snap[name] " " $i
      if ($(i+1) == "s-restore") restore[name] = restore[name] " " $i
    }
  }
  END {
    print "# etcd backup benchmark\n"
    print "`make bench-etcd-backup` (`scripts/bench-etcd-backup.sh`), " runs " runs, median (range). One etcd v3.6.4 member on loopback, Azurite 3.35.0 as the blob store, on this machine; seconds.\n"
    print "| dataset | snapshot size (MiB) | snapshot + upload + verify (s) | restore of one member (s) |"
    print "|---|---|---|---|"
    for (i = 1; i <= n; i++) { k = order[i]; printf "| %s | %s | %s | %s |\n", k, stats(size[k]), stats(snap[k]), stats(restore[k]) }
    split(snap[order[1]], first, " "); m = stats(snap[order[1]]); sub(/ .*/, "", m)
    mins = interval; sub(/m$/, "", mins)
    printf "\nRecovery point with the defaults (`backup.interval` %s, the agent checking every min(interval/10, 30 s) = %d s): at most %s + %d s + one snapshot (%s s for %s) = %.1f min.\n", interval, (mins * 6 < 30 ? mins * 6 : 30), interval, (mins * 6 < 30 ? mins * 6 : 30), m, order[1], mins + ((mins * 6 < 30 ? mins * 6 : 30) + m) / 60
  }' "$out/etcd-backup.txt" > "$out/etcd-backup.md"
cat "$out/etcd-backup.md"
