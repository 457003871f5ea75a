#!/usr/bin/env bash
# Times the README's two commands as a newcomer meets them: `make demo` and `make test`, each on a
# fresh clone with empty Go module and build caches (cold, once: a cold build takes tens of
# minutes), then again on the same clone (warm, WARM_RUNS times: median and range). Debian
# packages are not removed first: set-up's apt step is what it is on this machine.
# Writes build/bench/quickstart.md. Needs root (make test does). Takes an hour or more.
#
# Usage: scripts/bench-quickstart.sh [WORK_DIR]     (default /tmp/clusterforge-quickstart)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
work=${1:-/tmp/clusterforge-quickstart}
warm_runs=${WARM_RUNS:-3}
report=$repo/build/bench/quickstart.md
mkdir -p "$(dirname "$report")"

step() { printf '==> %s\n' "$*"; }

# timed NAME DIR CMD...: runs CMD in DIR, logging to WORK/NAME.log, and prints the seconds it took.
timed() {
  local name=$1 dir=$2 start=$SECONDS
  shift 2
  ( while sleep 60; do echo "    ... $name still running ($((SECONDS - start)) s)" >&2; done ) &
  local ticker=$!
  if ! (cd "$dir" && "$@") >"$work/$name.log" 2>&1; then
    kill $ticker
    echo "$name failed; see $work/$name.log" >&2
    exit 1
  fi
  kill $ticker
  echo $((SECONDS - start))
}

# median and range of numbers on stdin, as "median (min-max)".
summary() { sort -n | awk '{v[NR]=$1} END {m = NR % 2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2; printf "%d s (%d-%d)", m, v[1], v[NR]}'; }

declare -A cold warm
for cmd in demo test; do
  dir=$work/$cmd
  rm -rf "$dir" && mkdir -p "$dir"
  git clone -q "$repo" "$dir/repo"
  export GOMODCACHE=$dir/mod GOCACHE=$dir/build GOFLAGS=-modcacherw
  step "make $cmd, cold (empty caches in $dir)"
  cold[$cmd]=$(timed "$cmd-cold" "$dir/repo" make "$cmd")
  [ "$cmd" = test ] || (cd "$dir/repo" && make rehearse-down >/dev/null)
  runs=()
  for i in $(seq "$warm_runs"); do
    step "make $cmd, warm run $i"
    runs+=("$(timed "$cmd-warm-$i" "$dir/repo" make "$cmd")")
    [ "$cmd" = test ] || (cd "$dir/repo" && make rehearse-down >/dev/null)
  done
  warm[$cmd]=$(printf '%s\n' "${runs[@]}" | summary)
  step "make $cmd: cold ${cold[$cmd]} s, warm ${warm[$cmd]}"
done

cat >"$report" <<EOF
| command | cold (fresh clone, empty Go caches; one run) | warm (same clone; median and range of $warm_runs) |
|---|---|---|
| \`make demo\` | $((cold[demo] / 60)) min $((cold[demo] % 60)) s | ${warm[demo]} |
| \`make test\` | $((cold[test] / 60)) min $((cold[test] % 60)) s | ${warm[test]} |
EOF
step "wrote $report"
cat "$report"
