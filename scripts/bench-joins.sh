#!/usr/bin/env bash
# The joins benchmark (L11): on a rehearsal of STACK of its own, 1,000 KWOK nodes join all at once,
# then through the stack's join stepper (joins.step nodes a step, joins.pause after each, each
# step's registrations spread over joins.jitter), three rounds each; every run is judged on the
# apiservers' mutating p99. Reports in build/bench/joins: joins.json and joins.md. ARGS are
# rehearse bench-joins's flags (--join-nodes, --join-rounds). PUBLISH=1 copies the report into
# docs/bench/joins.md and its headline into docs/bench/smooth-joins.md.
set -euo pipefail
cd "$(dirname "$0")/.."
STACK="${1:-dev}"
out=build/bench/joins
dirty=""; [ -z "$(git status --porcelain)" ] || dirty=" with uncommitted changes" # what the published block says it measured
# shellcheck disable=SC2086 # ARGS are flags, split on purpose
build/bin/rehearse bench-joins --stack "$STACK" --out "$out" ${ARGS:-} 2>&1 | grep --line-buffered -v '^E[0-9]\{4\} '
if [ "${PUBLISH:-}" = 1 ]; then
  mkdir -p docs/bench
  cp "$out/joins.md" docs/bench/joins.md
  { echo '<!-- joins-bench:start -->'
    echo "\`make bench-joins\` at $(git rev-parse --short HEAD)$dirty, $(date -u +%F), on $(nproc) cores ([full report](joins.md)):"
    echo
    sed -n '/^| mode /,/^$/p' "$out/joins.md"
    echo '<!-- joins-bench:end -->'
  } >"$out/readme-block.md"
  awk -v block="$out/readme-block.md" '
    /<!-- joins-bench:start -->/ { while ((getline line < block) > 0) print line; skip = 1; next }
    /<!-- joins-bench:end -->/ { skip = 0; next }
    !skip' docs/bench/smooth-joins.md >docs/bench/smooth-joins.md.new && mv docs/bench/smooth-joins.md.new docs/bench/smooth-joins.md
  echo "==> published to docs/bench/joins.md and docs/bench/smooth-joins.md"
fi
