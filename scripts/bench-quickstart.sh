#!/usr/bin/env bash
# Times the README's commands as a newcomer meets them and CI runs them: each on a fresh clone with
# empty Go module and build caches and an empty clusterforge cache (cold, once: a fresh machine),
# then WARM_RUNS times (default 3; median and range) each on a fresh clone again, as CI runs, with
# the caches the cold run filled. A run that fails stops the script: the warm runs are also
# consecutive green runs. COLD=0 skips the cold run: the warm runs use this user's caches, and the
# report keeps the last cold run's figures (build/bench/quickstart-cold.tsv) with their date.
# COLD=user runs the cold run in this user's own caches, which must be empty (a fresh machine), and
# leaves them filled for the warm runs and for what comes after; it takes one command.
# COMMANDS picks the commands (default "check test"); targets joined by + run as one make in one
# clone ("check+images-local": everything `make test` does before its end-to-end tier). Debian
# packages are not removed first: set-up's apt step is what it is on this machine. Writes
# build/bench/quickstart.md with the date and machine, and, unless README=0, the README's
# times block. Needs root (make test does). Takes one to four hours.
#
# Usage: scripts/bench-quickstart.sh [WORK_DIR]     (default /tmp/clusterforge-quickstart)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
work=${1:-/tmp/clusterforge-quickstart}
warm_runs=${WARM_RUNS:-3}
cold_run=${COLD:-1}
commands=${COMMANDS:-check test}
update_readme=${README:-1}
report=$repo/build/bench/quickstart.md
cold_record=$repo/build/bench/quickstart-cold.tsv # command, seconds, end-to-end seconds, date
mkdir -p "$(dirname "$report")"

step() { printf '==> %s\n' "$*"; }

# stamp: each line of stdin behind the time it was read, so the log shows where the time went.
stamp() { while IFS= read -r line || [ -n "$line" ]; do printf '%(%T)T %s\n' -1 "$line"; done; }

# timed NAME DIR CMD...: runs CMD in DIR, logging to WORK/NAME.log, and prints the seconds it took.
timed() {
  local name=$1 dir=$2 start=$SECONDS
  shift 2
  # Its stdout is not the caller's $(...): that would wait for the ticker's last sleep.
  ( while sleep 60; do echo "    ... $name still running ($((SECONDS - start)) s)" >&2; done ) >/dev/null &
  local ticker=$!
  if ! (cd "$dir" && "$@" 2>&1 | stamp) >"$work/$name.log"; then
    kill $ticker
    echo "$name failed; see $work/$name.log" >&2
    exit 1
  fi
  kill $ticker
  echo $((SECONDS - start))
}

# median and range of numbers on stdin, as "median (min-max)".
summary() { sort -n | awk '{v[NR]=$1} END {m = NR % 2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2; printf "%d s (%d-%d)", m, v[1], v[NR]}'; }

# e2e_seconds DIR: the end-to-end packages' seconds in the clone DIR/repo's last make e2e, or nothing.
e2e_seconds() {
  local times=$1/repo/build/e2e-times.json
  [ -f "$times" ] || return 0
  python3 -c 'import json,sys; print(round(sum(p["seconds"] for p in json.load(open(sys.argv[1]))["packages"])))' "$times"
}

# fresh DIR: a clean clone of this repository's HEAD in DIR/repo.
fresh() { rm -rf "$1/repo" && git clone -q "$repo" "$1/repo"; }

# minsec SECONDS: "M min S s", or "not run".
minsec() { [ -n "$1" ] && echo "$(($1 / 60)) min $(($1 % 60)) s" || echo "not run"; }

# write_report: the report so far (after every run, so a stopped bench keeps what it measured)
# and, unless README=0, the README's times block.
write_report() {
  local cmd caches
  {
  caches="with the caches the cold run filled"
  [ "$cold_run" != 0 ] || caches="with this user's caches (the cold figures are the last cold run's, of the date given)"
  echo "Measured $(date -u +%F) on $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) by \`make bench-quickstart\`: cold is a fresh clone with empty Go module and build caches and an empty clusterforge cache (one run, a fresh machine), warm a fresh clone again $caches (median and range of the consecutive runs counted in the cell, all green), as CI runs."
  echo
  echo "| command | cold | warm | of which the end-to-end packages, cold and warm |"
  echo "|---|---|---|---|"
  for cmd in $commands; do
    echo "| \`make ${cmd//+/ }\` | $(minsec "${cold[$cmd]:-}")${cold_date[$cmd]:+ (${cold_date[$cmd]})} | ${warm[$cmd]:-not run} | $(minsec "${cold_e2e[$cmd]:-}"); ${warm_e2e[$cmd]:-not run} |"
  done
  } >"$report"
  [ "$update_readme" = 1 ] || return 0
  # The block between the README's times markers is this report.
  awk -v report="$report" '
    /<!-- times:end -->/ { while ((getline line < report) > 0) print line; skip = 0 }
    !skip { print }
    /<!-- times:start -->/ { skip = 1 }' README.md >README.md.new && mv README.md.new README.md
}

[ "$cold_run" != user ] || [ "$(wc -w <<<"$commands")" = 1 ] || { echo "COLD=user takes one command: the first one's cold run fills the caches" >&2; exit 1; }
declare -A cold warm cold_e2e warm_e2e cold_date
runs=()
if [ "$cold_run" = 0 ] && [ -f "$cold_record" ]; then
  while IFS=$'\t' read -r c secs e2e day; do cold[$c]=$secs cold_e2e[$c]=$e2e cold_date[$c]=$day; done <"$cold_record"
fi
for cmd in $commands; do
  dir=$work/$cmd
  rm -rf "$dir" && mkdir -p "$dir"
  if [ "$cold_run" != 0 ]; then
    if [ "$cold_run" = user ]; then
      for cache in "$(go env GOMODCACHE)" "$(go env GOCACHE)" "$(. scripts/cache.sh && echo "$CACHE")"; do
        [ -z "$(ls -A "$cache" 2>/dev/null)" ] || { echo "COLD=user needs empty caches; $cache is not" >&2; exit 1; }
      done
    else
      export GOMODCACHE=$dir/mod GOCACHE=$dir/build GOFLAGS=-modcacherw CLUSTERFORGE_CACHE=$dir/cache
    fi
    fresh "$dir"
    step "make $cmd, cold (empty caches: $(go env GOCACHE))"
    # shellcheck disable=SC2086 # the targets of cmd, split on +
    cold[$cmd]=$(timed "$cmd-cold" "$dir/repo" make ${cmd//+/ })
    cold_e2e[$cmd]=$(e2e_seconds "$dir") cold_date[$cmd]=$(date -u +%F)
    { grep -v "^$cmd"$'\t' "$cold_record" 2>/dev/null || true; printf '%s\t%s\t%s\t%s\n' "$cmd" "${cold[$cmd]}" "${cold_e2e[$cmd]}" "${cold_date[$cmd]}"; } >"$cold_record.new"
    mv "$cold_record.new" "$cold_record"
    write_report
    [ "$cmd" != demo ] || (cd "$dir/repo" && make rehearse-down >/dev/null)
  fi
  runs=() e2e_runs=()
  for i in $(seq "$warm_runs"); do
    fresh "$dir"
    step "make $cmd, warm run $i of $warm_runs (a fresh clone)"
    # shellcheck disable=SC2086
    runs+=("$(timed "$cmd-warm-$i" "$dir/repo" make ${cmd//+/ })")
    step "  $((${runs[-1]} / 60)) min $((${runs[-1]} % 60)) s"
    e2e=$(e2e_seconds "$dir")
    [ -z "$e2e" ] || e2e_runs+=("$e2e")
    warm[$cmd]="$(printf '%s\n' "${runs[@]}" | summary), ${#runs[@]} run$([ "${#runs[@]}" = 1 ] || echo s)"
    [ "${#e2e_runs[@]}" -eq 0 ] || warm_e2e[$cmd]=$(printf '%s\n' "${e2e_runs[@]}" | summary)
    write_report
    [ "$cmd" != demo ] || (cd "$dir/repo" && make rehearse-down >/dev/null)
  done
  step "make $cmd: cold ${cold[$cmd]:-not run} s, warm ${warm[$cmd]:-not run}"
done
step "wrote $report"
cat "$report"
