#!/usr/bin/env bash
# Alternating A/B of the gateway's added latency at one connection. Single runs on a shared VM
# vary by about 15 %, so a change is measured against its base in interleaved rounds: this builds
# <base-rev> in a temporary worktree and runs the bench's gateway rows for the base and for this
# tree in turn.
#
#   scripts/bench-ab.sh <base-rev> [rounds]        (BENCH_SECONDS=3 by default)
set -euo pipefail
base=${1:?usage: scripts/bench-ab.sh <base-rev> [rounds]}
rounds=${2:-4}
here=$(cd "$(dirname "$0")/.." && pwd)
tree=$(mktemp -d)
trap 'git -C "$here" worktree remove --force "$tree" >/dev/null 2>&1 || true' EXIT
git -C "$here" worktree add --detach "$tree" "$base" >/dev/null 2>&1
ln -s "$here/node_modules" "$tree/node_modules"
(cd "$tree" && npx tsc -p tsconfig.build.json)
(cd "$here" && npx tsc -p tsconfig.build.json)

for _ in $(seq "$rounds"); do
  for side in base new; do
    dir=$here
    [ "$side" = base ] && dir=$tree
    (cd "$dir" && BENCH_SECONDS=${BENCH_SECONDS:-3} node scripts/bench.mjs --only=gw-50,up-1,gw-1 2>/dev/null) |
      awk -F'|' -v side="$side" '
        $2 ~ /upstream direct, JSON/ && $3 + 0 == 1 { up = $5 }
        $2 ~ /gateway, JSON/ && $3 + 0 == 1 { gw = $5; cpu = $9 }
        END { printf "%-4s added p50 %.3f ms, gateway CPU %d us/req\n", side, gw - up, cpu }'
  done
done
