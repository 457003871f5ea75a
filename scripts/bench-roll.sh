#!/usr/bin/env bash
# The roll drills as a benchmark: TestRollDrills (test/e2e/rolls/roll_test.go) RUNS times
# (default 3), each on a new rehearsal of STACK started on the releases before the pinned ones;
# reports per drill the time, the mean time per etcd member, apiserver and worker, the API's
# availability through the load balancer (10 probes a second) and the acknowledged writes lost,
# as median (range) over the runs, in build/bench/roll.md.
set -euo pipefail
cd "$(dirname "$0")/.."
STACK="${1:-dev}"
RUNS="${RUNS:-3}"
out="$PWD/build/bench"
mkdir -p "$out"
rm -f "$out/roll.tsv"
per_run=0
for run in $(seq "$RUNS"); do
  printf '==> run %s of %s: TestRollDrills on %s\n' "$run" "$RUNS" "$STACK"
  before=$(grep -c . "$out/roll.tsv" 2>/dev/null || true)
  go test -count=1 -run 'TestRollDrills' -timeout 40m ./test/e2e/rolls -args -stack "$STACK" -roll-report "$out/roll.tsv" 2>&1 |
    tee "$out/roll-run.log" | grep --line-buffered -E '^\s+roll_test.go|^(--- |ok|FAIL)|^==> \[' || true
  grep -q '^ok' "$out/roll-run.log" || { echo "run $run failed (build/bench/roll-run.log)" >&2; exit 1; }
  # Every run reports as many drills as the first: one that stopped short would skew the medians.
  rows=$(( $(grep -c . "$out/roll.tsv") - ${before:-0} ))
  [ "$run" = 1 ] && per_run=$rows
  [ "$rows" -gt 0 ] && [ "$rows" = "$per_run" ] || { echo "run $run reported $rows drills, run 1 $per_run" >&2; exit 1; }
done
awk -F'\t' -v runs="$RUNS" -v stack="$STACK" -v fmt="%g (%g-%g)" -f scripts/stats.awk -f /dev/stdin "$out/roll.tsv" >"$out/roll.md" <<'AWK'
  {
    if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1; machines[$1] = $2 }
    took[$1] = took[$1] " " $3
    if ($4 >= 0) etcd[$1] = etcd[$1] " " $4
    if ($5 >= 0) api[$1] = api[$1] " " $5
    if ($6 >= 0) worker[$1] = worker[$1] " " $6
    avail[$1] = avail[$1] " " 100 * $7 / ($8 > 0 ? $8 : 1)
    lost[$1] += $9; probes[$1] += $8
  }
  function cell(list) { return list == "" ? "-" : stats(list) }
  END {
    print "# Roll drills\n"
    print "`scripts/bench-roll.sh " stack "` (`make bench-roll`): TestRollDrills " runs " times, each on a new process rehearsal of the " stack " stack; median (range) over the runs. Seconds; availability is the share of reads through the load balancer (10 a second, each allowed 2 s) that succeeded. This machine: 2 cores.\n"
    print "| drill | machines | took | per etcd member | per apiserver | per worker | API availability % | probes | acknowledged writes lost |"
    print "|---|---|---|---|---|---|---|---|---|"
    for (i = 1; i <= n; i++) {
      d = order[i]
      printf "| %s | %d | %s | %s | %s | %s | %s | %d | %d |\n", d, machines[d], stats(took[d]), cell(etcd[d]), cell(api[d]), cell(worker[d]), stats(avail[d]), probes[d], lost[d]
    }
  }
AWK
cat "$out/roll.md"
