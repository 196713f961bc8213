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

# The bench process's peak resident memory (the gateway's, with the idle floors), read the same way
# on both sides: the loader is given to the bench process only, not to its children.
peak=$tree/peak-rss.cjs
cat >"$peak" <<'JS'
process.on("exit", () => console.log(`peak RSS ${Math.round(process.resourceUsage().maxRSS / 1024)}`));
JS

for _ in $(seq "$rounds"); do
  for side in base new; do
    dir=$here
    [ "$side" = base ] && dir=$tree
    (cd "$dir" && BENCH_SECONDS=${BENCH_SECONDS:-3} node -r "$peak" scripts/bench.mjs --only=gw-50,up-1,gw-1 2>/dev/null) |
      awk -F'|' -v side="$side" '
        # Columns by their header, so a base whose table has fewer columns still reads right.
        $2 ~ /scenario/ { for (i = 2; i <= NF; i++) { h = $i; gsub(/^ +| +$/, "", h); col[h] = i } }
        $2 ~ /upstream direct, JSON/ && $3 + 0 == 1 { up = $col["p50 ms"] }
        $2 ~ /gateway, JSON/ && $3 + 0 == 1 { gw = $col["p50 ms"]; cpu1 = $col["gw CPU us/req"] }
        $2 ~ /gateway, JSON/ && $3 + 0 == 50 { rps = $col["req/s"]; cpu50 = $col["gw CPU us/req"] }
        /^peak RSS/ { rss = $0; sub(/^peak RSS /, "", rss) }
        END {
          printf "%-4s added p50 %.3f ms, CPU %d us/req at 1 conn, %d us/req at 50 (%d req/s), peak RSS %s MB\n",
            side, gw - up, cpu1, cpu50, rps, rss
        }'
  done
done
