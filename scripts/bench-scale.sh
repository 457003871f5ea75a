#!/usr/bin/env bash
# The scale benchmark: a rehearsal of STACK of its own, KWOK nodes ramped through the steps, each
# hold judged against Kubernetes' API SLOs, then the event storm with the events etcd split and
# unsplit and the apiserver restart storm (test/scale). Reports in build/bench/scale:
# summary.json, step-NNNNN/*.json, storm.json, restart.json, report.md and the charts. ARGS are
# rehearse bench-scale's flags (--long: 20-minute holds and 10-minute storm phases). PUBLISH=1
# copies the charts, the report, storm.json, restart.json and every step's raw step.json into
# docs/bench/scale and the report's headline into docs/bench/scale.md.
set -euo pipefail
cd "$(dirname "$0")/.."
STACK="${1:-dev}"
out=build/bench/scale
rm -rf "$out"/step-* # an earlier run's steps are not this one's
# shellcheck disable=SC2086 # ARGS are flags, split on purpose
build/bin/rehearse bench-scale --stack "$STACK" --out "$out" ${ARGS:-} 2>&1 | grep --line-buffered -v '^E[0-9]\{4\} '
if [ "${PUBLISH:-}" = 1 ]; then
  mkdir -p docs/bench/scale
  rm -rf docs/bench/scale/step-*
  cp "$out"/*.svg "$out"/report.md "$out"/summary.json "$out"/storm.json "$out"/restart.json docs/bench/scale/
  for step in "$out"/step-*/; do
    mkdir -p "docs/bench/scale/$(basename "$step")" && cp "$step/step.json" "docs/bench/scale/$(basename "$step")/"
  done
  { echo '<!-- scale-bench:start -->'
    echo "\`make bench-scale\` at $(git rev-parse --short HEAD), $(date -u +%F), on $(nproc) cores: one ramp, each step its own hold."
    echo
    sed -n '/^\*\*Largest/,/^Charts:/p' "$out/report.md" | grep -v '^Charts:'
    for c in slo cpu memory etcd-size storm; do echo "![$c](scale/$c.svg)"; done
    echo '<!-- scale-bench:end -->'
  } >"$out/readme-block.md"
  awk -v block="$out/readme-block.md" '
    /<!-- scale-bench:start -->/ { while ((getline line < block) > 0) print line; skip = 1; next }
    /<!-- scale-bench:end -->/ { skip = 0; next }
    !skip' docs/bench/scale.md >docs/bench/scale.md.new && mv docs/bench/scale.md.new docs/bench/scale.md
  echo "==> published to docs/bench/scale and docs/bench/scale.md"
fi
