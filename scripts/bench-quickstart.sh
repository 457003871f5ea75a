#!/usr/bin/env bash
# Times the README's commands as a newcomer meets them and CI runs them: each on a fresh clone with
# empty Go module and build caches and an empty clusterforge cache (cold, once: a fresh machine),
# then WARM_RUNS times (default 3; median and range) each on a fresh clone again, as CI runs, with
# the caches the cold run filled. A run that fails stops the script: the warm runs are also
# consecutive green runs. COLD=0 skips the cold run: the warm runs use this user's caches. The
# report keeps each command's last cold and warm figures (build/bench/quickstart-{cold,warm}.tsv)
# with their dates, so a bench of one command leaves the other's row as it was; COLD=0 WARM_RUNS=0
# only writes the report from them.
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
warm_record=$repo/build/bench/quickstart-warm.tsv # command, runs' summary, end-to-end summary, date
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

# median and range of seconds on stdin, as "M min S s (M:SS-M:SS)".
summary() {
  sort -n | awk '
    function ms(t) { return sprintf("%d:%02d", t / 60, t % 60) }
    { v[NR] = $1 }
    END { m = int(NR % 2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2); printf "%d min %d s (%s-%s)", m / 60, m % 60, ms(v[1]), ms(v[NR]) }'
}

# record FILE CMD FIELDS...: FILE's line for CMD becomes CMD and FIELDS, tab-separated, an empty
# field written "-" (read splits on runs of tabs).
record() {
  local file=$1 cmd=$2 f fields=()
  shift 2
  for f; do fields+=("${f:--}"); done
  { grep -v "^$cmd"$'\t' "$file" 2>/dev/null || true; (IFS=$'\t'; echo "$cmd"$'\t'"${fields[*]}"); } >"$file.new"
  mv "$file.new" "$file"
}

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
  local cmd
  {
  echo "Measured on $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) by \`make bench-quickstart\`, on the dates given: cold is a fresh clone with empty Go module and build caches and an empty clusterforge cache (one run, a fresh machine), warm a fresh clone again with the caches a cold run filled (median and range of the consecutive runs counted in the cell, all green), as CI runs."
  echo
  echo "| command | cold | warm | of which the end-to-end packages, cold and warm |"
  echo "|---|---|---|---|"
  for cmd in "${rows[@]}"; do
    [ -n "${cold[$cmd]:-}${warm[$cmd]:-}" ] || continue
    echo "| \`make ${cmd//+/ }\` | $(minsec "${cold[$cmd]:-}")${cold_date[$cmd]:+ (${cold_date[$cmd]})} | ${warm[$cmd]:-not run}${warm_date[$cmd]:+ (${warm_date[$cmd]})} | $(minsec "${cold_e2e[$cmd]:-}"); ${warm_e2e[$cmd]:-not run} |"
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
declare -A cold warm cold_e2e warm_e2e cold_date warm_date
rows=() runs=()
# row CMD: the report has a row for CMD, in the order first met, the README's two commands first.
row() { [[ " ${rows[*]} " == *" $1 "* ]] || rows+=("$1"); }
row check
row test
if [ -f "$cold_record" ]; then
  while IFS=$'\t' read -r c secs e2e day; do cold[$c]=$secs cold_e2e[$c]=${e2e#-} cold_date[$c]=$day; row "$c"; done <"$cold_record"
fi
if [ -f "$warm_record" ]; then
  while IFS=$'\t' read -r c runs_cell e2e day; do warm[$c]=$runs_cell warm_e2e[$c]=${e2e#-} warm_date[$c]=$day; row "$c"; done <"$warm_record"
fi
for cmd in $commands; do row "$cmd"; done
for cmd in $commands; do
  dir=$work/$cmd
  [ "$cold_run$warm_runs" = 00 ] || { rm -rf "$dir" && mkdir -p "$dir"; } # a report-only call keeps the last clone
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
    record "$cold_record" "$cmd" "${cold[$cmd]}" "${cold_e2e[$cmd]}" "${cold_date[$cmd]}"
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
    warm_e2e[$cmd]="" warm_date[$cmd]=$(date -u +%F)
    [ "${#e2e_runs[@]}" -eq 0 ] || warm_e2e[$cmd]=$(printf '%s\n' "${e2e_runs[@]}" | summary)
    record "$warm_record" "$cmd" "${warm[$cmd]}" "${warm_e2e[$cmd]}" "${warm_date[$cmd]}"
    write_report
    [ "$cmd" != demo ] || (cd "$dir/repo" && make rehearse-down >/dev/null)
  done
  step "make $cmd: cold $(minsec "${cold[$cmd]:-}"), warm ${warm[$cmd]:-not run}"
done
write_report
step "wrote $report"
cat "$report"
