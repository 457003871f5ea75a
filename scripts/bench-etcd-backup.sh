#!/usr/bin/env bash
# The etcd backup benchmark: for an etcd holding 10,000 Node-sized objects and 100,000 others, and
# for a 2 GiB database, the time the agent takes to snapshot through etcd's client API, upload to
# Azurite and verify, and the time one member's restore takes (download, checksum, etcdutl).
# RUNS runs each (default 3); writes build/bench/etcd-backup.md with the median and range, and the
# recovery point the default settings give. Then the delta stream's recovery point: per database
# size (RPO_SIZES, default 2GiB,7GiB), a steady 1,000 writes/s, the only member killed, restored
# and replayed, the acknowledged writes lost, and what the stream costs. BenchmarkBackup and
# BenchmarkDeltaRPO are in components/etcdbackup. Last the recovery time of a total loss (root):
# on a rehearsal of RTO_STACK's capacity topology (default prod-10k; one machine of each role, each
# capped at its cores, as make bench-scale runs it) whose main etcd holds RTO_SIZE (default 2GiB),
# from the restore's start until every apiserver serves from its cache (BenchmarkTotalLossRTO,
# test/e2e/backups).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench-etcd-backup: its last part rehearses the cluster (network namespaces, mounts): run it as root" >&2; exit 1; }
RUNS="${RUNS:-3}"
out="$PWD/build/bench"
mkdir -p "$out"

scripts/toolchain.sh etcd etcdutl azurite
printf '==> BenchmarkBackup, %s runs (each loads its etcd afresh; the 2 GiB run takes a few minutes)\n' "$RUNS"
go test -count="$RUNS" -run '^$' -bench 'Backup$' -benchtime 1x -timeout 120m ./components/etcdbackup | tee "$out/etcd-backup.txt"
printf '==> BenchmarkDeltaRPO, %s runs of %s (each fills its etcd afresh, then a minute of writes)\n' "$RUNS" "${RPO_SIZES:=2GiB,7GiB}"
RPO_SIZES="$RPO_SIZES" go test -count="$RUNS" -run '^$' -bench DeltaRPO -benchtime 1x -timeout 300m ./components/etcdbackup | tee "$out/etcd-backup-rpo.txt"
scripts/toolchain.sh rehearsal
printf '==> BenchmarkTotalLossRTO, %s runs on the capacity topology of %s (its main etcd filled to %s once, then each run: a snapshot, 400 writes/s until the next is due, every member lost, the restore timed)\n' "$RUNS" "${RTO_STACK:=prod-10k}" "${RTO_SIZE:=2GiB}"
RTO_SIZE="$RTO_SIZE" go test -count="$RUNS" -run '^$' -bench TotalLossRTO -benchtime 1x -timeout 180m ./test/e2e/backups -args -stack "$RTO_STACK" -topology capacity | tee "$out/etcd-backup-rto.txt"

# Median (range) of a space-separated list, to digits decimals, numbers compared as numbers.
stats='function stats(list, digits,   n, a, i, j, t, med, f) {
  n = split(list, a, " ")
  for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
  if (n == 0) return "no valid run"
  med = (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  f = "%." digits "f"
  return sprintf(f " (" f "-" f ")", med, a[1], a[n])
}'
interval=$(sed -n 's/.*DefaultBackupInterval *= "\(.*\)"/\1/p' components/spec/defaults.go)
# The releases the runs used, as the binaries and the lock file say.
etcd_version=$(.tools/bin/etcd --version | awk '/^etcd Version/ {print $3}')
azurite_version=$(jq -r '.packages."".dependencies.azurite' scripts/toolchain/azurite/package-lock.json)
awk -v runs="$RUNS" -v interval="$interval" -v etcd="$etcd_version" -v azurite="$azurite_version" "$stats"'
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
    print "`make bench-etcd-backup` (`scripts/bench-etcd-backup.sh`), " runs " runs, median (range). One etcd v" etcd " member on loopback, Azurite " azurite " as the blob store, on this machine; seconds.\n"
    print "| dataset | snapshot size (MiB) | snapshot + upload + verify (s) | restore of one member (s) |"
    print "|---|---|---|---|"
    for (i = 1; i <= n; i++) { k = order[i]; printf "| %s | %s | %s | %s |\n", k, stats(size[k], 1), stats(snap[k], 1), stats(restore[k], 1) }
    split(snap[order[1]], first, " "); m = stats(snap[order[1]], 1); sub(/ .*/, "", m)
    mins = interval; sub(/m$/, "", mins)
    printf "\nRecovery point with the defaults (`backup.interval` %s, the agent checking every min(interval/10, 30 s) = %d s): at most %s + %d s + one snapshot (%s s for %s) = %.1f min.\n", interval, (mins * 6 < 30 ? mins * 6 : 30), interval, (mins * 6 < 30 ? mins * 6 : 30), m, order[1], mins + ((mins * 6 < 30 ? mins * 6 : 30) + m) / 60
  }' "$out/etcd-backup.txt" > "$out/etcd-backup.md"
awk -v runs="$RUNS" "$stats"'
  /^BenchmarkDeltaRPO\// {
    name = $1; sub(/^BenchmarkDeltaRPO\//, "", name); sub(/-[0-9]+$/, "", name)
    if (!(name in seen)) { seen[name] = 1; order[++n] = name }
  }
  /s-rpo/ {
    delete m
    for (i = 1; i < NF; i++) m[$(i+1)] = $i
    if (m["valid"] != 1) { invalid[name]++; next }
    rpo[name] = rpo[name] " " m["s-rpo"]; lost[name] = lost[name] " " m["writes-lost"]
    rto[name] = rto[name] " " m["s-restore-replay"]; kib[name] = kib[name] " " m["KiB/s-stored-per-1000wps"]
    cores[name] = cores[name] " " m["cores-per-1000wps"]
  }
  END {
    print "\n## Delta stream: recovery point at 1,000 writes/s\n"
    print "BenchmarkDeltaRPO, " runs " runs, median (range); a run whose writer delivered under 95% of its offered load is invalid and left out.\n"
    print "| database | RPO (s) | acknowledged writes lost | restore + replay of one member (s) | stored KiB/s per 1,000 writes/s | cores per 1,000 writes/s | invalid runs |"
    print "|---|---|---|---|---|---|---|"
    for (i = 1; i <= n; i++) { k = order[i]; printf "| %s | %s | %s | %s | %s | %s | %d |\n", k, stats(rpo[k], 2), stats(lost[k], 0), stats(rto[k], 1), stats(kib[k], 0), stats(cores[k], 3), invalid[k] }
  }' "$out/etcd-backup-rpo.txt" >> "$out/etcd-backup.md"
awk -v runs="$RUNS" -v stack="$RTO_STACK" "$stats"'
  /^BenchmarkTotalLossRTO\// {
    name = $1; sub(/^BenchmarkTotalLossRTO\//, "", name); sub(/-[0-9]+$/, "", name)
    if (!(name in seen)) { seen[name] = 1; order[++n] = name }
  }
  /s-rto/ {
    delete m
    for (i = 1; i < NF; i++) m[$(i+1)] = $i
    if (m["valid"] != 1) { invalid[name]++; next }
    split("s-rto s-stopping s-rebuild s-start s-replay s-apiservers s-caches s-writing writes-replayed", keys, " ")
    for (k in keys) v[name, keys[k]] = v[name, keys[k]] " " m[keys[k]]
  }
  END {
    print "\n## Total loss: recovery time to every apiserver serving\n"
    print "BenchmarkTotalLossRTO, " runs " runs, median (range), seconds, on the capacity topology of " stack " (one machine of each role, each capped at its cores, all on this machine); a run whose writer delivered under its share of the offered load, or that restored another snapshot, is invalid and left out.\n"
    print "| database | restore to every apiserver serving from its cache | stopping | members rebuilt | members started | deltas replayed | apiservers ready | caches filled | writes replayed (written for) | invalid runs |"
    print "|---|---|---|---|---|---|---|---|---|---|"
    for (i = 1; i <= n; i++) {
      k = order[i]
      printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s (%s s) | %d |\n", k, stats(v[k, "s-rto"], 1), stats(v[k, "s-stopping"], 1), stats(v[k, "s-rebuild"], 1), stats(v[k, "s-start"], 1), stats(v[k, "s-replay"], 1), stats(v[k, "s-apiservers"], 1), stats(v[k, "s-caches"], 1), stats(v[k, "writes-replayed"], 0), stats(v[k, "s-writing"], 0), invalid[k]
    }
  }' "$out/etcd-backup-rto.txt" >> "$out/etcd-backup.md"
{ echo; echo "Measured $(date -u +%F) at $(git rev-parse --short HEAD) on $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB."; } >> "$out/etcd-backup.md"
cat "$out/etcd-backup.md"
