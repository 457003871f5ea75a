#!/usr/bin/env bash
# The scale benchmark on STACK's capacity topology (one machine of each control-plane role, each
# capped at its cores; ARGS=--topology=ha for the stack's own machines): first the lease-only
# microbenchmark (LEASE_STEPS nodes with their heartbeats alone), then the ramp: KWOK nodes
# through the steps, each hold judged against Kubernetes' API SLOs, the event storm with the
# events etcd split and unsplit, and the apiserver restart storm (test/scale). Reports in
# build/bench/scale (leases/ for the microbenchmark): summary.json with each component's cost,
# capacity.json, step-NNNNN/*.json, storm.json, restart.json, report.md and the charts. ARGS are
# rehearse bench-scale's flags for the ramp (--long: 20-minute holds and 10-minute storm phases).
# PUBLISH=1 copies the reports and every step's raw step.json into docs/bench/scale, the
# headline into docs/bench/scale.md, and capacity.json to components/capacity/figures.json,
# which `make plan` reads.
set -euo pipefail
cd "$(dirname "$0")/.."
STACK="${1:?usage: bench-scale.sh <stack> (make bench-scale passes SCALE_STACK)}"
LEASE_STEPS="${LEASE_STEPS:-1000,2000,4000}"
out=build/bench/scale
commit=$(git rev-parse --short HEAD)
rm -rf "$out"/step-* "$out"/leases # an earlier run's steps are not this one's
quiet() { grep --line-buffered -v '^E[0-9]\{4\} '; }
echo "==> lease-only microbenchmark at $LEASE_STEPS nodes"
# shellcheck disable=SC2086 # ARGS are flags, split on purpose; the last of a flag given twice wins
build/bin/rehearse bench-scale --stack "$STACK" --out "$out/leases" --commit "$commit" ${ARGS:-} --leases-only --steps "$LEASE_STEPS" 2>&1 | quiet
# shellcheck disable=SC2086
build/bin/rehearse bench-scale --stack "$STACK" --out "$out" --commit "$commit" ${ARGS:-} 2>&1 | quiet
if [ "${PUBLISH:-}" = 1 ]; then
  mkdir -p docs/bench/scale/leases
  rm -rf docs/bench/scale/step-* docs/bench/scale/leases/*
  cp "$out"/*.svg "$out"/report.md "$out"/summary.json "$out"/capacity.json "$out"/storm.json "$out"/restart.json docs/bench/scale/
  cp "$out"/leases/report.md "$out"/leases/summary.json "$out"/leases/cpu.svg docs/bench/scale/leases/
  # make plan's figures are one machine of each role's: an ha run's are not (components/capacity).
  if grep -q '"topology": "capacity"' "$out/capacity.json"; then
    cp "$out"/capacity.json components/capacity/figures.json
    make --no-print-directory golden >/dev/null # the plan goldens print them
  else
    echo "==> not the capacity topology: components/capacity/figures.json left as it was"
  fi
  for step in "$out"/step-*/ "$out"/leases/step-*/; do
    dest="docs/bench/scale/${step#"$out"/}"
    mkdir -p "$dest" && cp "$step/step.json" "$dest"
  done
  { echo '<!-- scale-bench:start -->'
    echo "\`make bench-scale\` at $commit, $(date -u +%F), on $(nproc) cores: one ramp, each step its own hold."
    echo
    sed -n '/^Topology:/,/^Charts:/p' "$out/report.md" | grep -v '^Charts:'
    echo "**Lease-only microbenchmark** ($LEASE_STEPS nodes, their heartbeats alone; [report](scale/leases/report.md)):"
    echo
    sed -n '/^| component |/,/^$/p' "$out/leases/report.md"
    for c in slo cpu memory etcd-size storm restart; do echo "![$c](scale/$c.svg)"; done
    echo '<!-- scale-bench:end -->'
  } >"$out/readme-block.md"
  awk -v block="$out/readme-block.md" '
    /<!-- scale-bench:start -->/ { while ((getline line < block) > 0) print line; skip = 1; next }
    /<!-- scale-bench:end -->/ { skip = 0; next }
    !skip' docs/bench/scale.md >docs/bench/scale.md.new && mv docs/bench/scale.md.new docs/bench/scale.md
  echo "==> published to docs/bench/scale and docs/bench/scale.md"
fi
