#!/usr/bin/env bash
# Alternating A/B of the gateway's added latency at one connection. Single runs on a shared VM
# vary by about 15 %, so a change is measured against its base in interleaved rounds: this builds
# <base-rev> in a temporary worktree and runs the bench's gateway rows for the base and for this
# tree in turn.
#
#   scripts/bench-ab.sh <base-rev> [rounds]             (BENCH_SECONDS=3 by default)
#   BENCH_AB=postgres scripts/bench-ab.sh <base-rev> [rounds]
#   BENCH_AB=stream scripts/bench-ab.sh <base-rev> [rounds]
#
# BENCH_AB=postgres compares the Postgres rows instead: what Postgres adds at p50 over SQLite at
# one connection (both measured in the same run, and again with requests alternating between the
# two), and requests/s at 50 connections for the
# gateway in the bench's process, one `gateway serve` and two on one database. BENCH_AB=stream
# compares paced streams: the first data event's added p50 at one connection and the gateway's CPU
# per streamed event at 20 connections.
set -euo pipefail
base=${1:?usage: scripts/bench-ab.sh <base-rev> [rounds]}
rounds=${2:-4}
mode=${BENCH_AB:-sqlite}
here=$(cd "$(dirname "$0")/.." && pwd)
tree=$(mktemp -d)
trap 'git -C "$here" worktree remove --force "$tree" >/dev/null 2>&1 || true' EXIT
git -C "$here" worktree add --detach "$tree" "$base" >/dev/null 2>&1
ln -s "$here/node_modules" "$tree/node_modules"
# One instrument for both builds: this tree's bench scripts measure the base's build too.
cp "$here"/scripts/bench*.mjs "$tree/scripts/"
(cd "$tree" && npx tsc -p tsconfig.build.json)
(cd "$here" && npx tsc -p tsconfig.build.json)

# The bench process's peak resident memory (the gateway's, with the idle floors), read the same way
# on both sides: the loader is given to the bench process only, not to its children.
peak=$tree/peak-rss.cjs
cat >"$peak" <<'JS'
process.on("exit", () => console.log(`peak RSS ${Math.round(process.resourceUsage().maxRSS / 1024)}`));
JS

rows=gw-50,up-1,gw-1
[ "$mode" = postgres ] && rows=up-1,gw-1,gw-pg-1,pair-1,gw-pg-50,gw-pgp-50,gw-pg2-50
[ "$mode" = stream ] && rows=up-p1,gw-p1,gw-p1-20

for _ in $(seq "$rounds"); do
  for side in base new; do
    dir=$here
    [ "$side" = base ] && dir=$tree
    (cd "$dir" && BENCH_SECONDS=${BENCH_SECONDS:-3} node -r "$peak" scripts/bench.mjs --only=$rows 2>/dev/null) |
      awk -F'|' -v side="$side" -v mode="$mode" '
        # Columns by their header, so a base whose table has fewer columns still reads right.
        $2 ~ /scenario/ { for (i = 2; i <= NF; i++) { h = $i; gsub(/^ +| +$/, "", h); col[h] = i } }
        $2 ~ /upstream direct, JSON/ && $3 + 0 == 1 { up = $col["p50 ms"] }
        $2 ~ /^ gateway, JSON/ && $3 + 0 == 1 { gw = $col["p50 ms"]; cpu1 = $col["gw CPU us/req"] }
        $2 ~ /^ gateway, JSON/ && $3 + 0 == 50 { rps = $col["req/s"]; cpu50 = $col["gw CPU us/req"] }
        $2 ~ /^ gateway on Postgres, JSON +$/ && $3 + 0 == 1 { pg = $col["p50 ms"]; pgcpu1 = $col["gw CPU us/req"] }
        $2 ~ /^ gateway on Postgres, JSON +$/ && $3 + 0 == 50 { pg50 = $col["req/s"] }
        $2 ~ /^ 1 gateway process on Postgres/ { one = $col["req/s"] }
        /alternating requests at 1 connection/ { pair = $0; sub(/^.*connection: /, "", pair); sub(/ ms .*$/, "", pair) }
        $2 ~ /^ 2 gateway processes on Postgres/ { two = $col["req/s"] }
        /^peak RSS/ { rss = $0; sub(/^peak RSS /, "", rss) }
        /^added first data event, paced 1 ms/ { first = $0; sub(/^[^:]*: */, "", first); sub(/ ms .*$/, "", first) }
        /^gateway CPU per streamed event, 20 conns/ { event = $0; sub(/^[^:]*: */, "", event); sub(/ us .*$/, "", event) }
        END {
          if (mode == "stream")
            printf "%-4s first data event added %s ms p50 at 1 conn (paced 1 ms), CPU %s us an event at 20 conns, peak RSS %s MB\n",
              side, first, event, rss
          else if (mode == "postgres")
            printf "%-4s Postgres adds %.3f ms p50 over SQLite (%.3f ms added) at 1 conn, %s ms alternating, CPU %d us/req; at 50 conns %d req/s in process, one serve %d, two serves %d\n",
              side, pg - gw, gw - up, pair == "" ? "-" : pair, pgcpu1, pg50, one, two
          else
            printf "%-4s added p50 %.3f ms, CPU %d us/req at 1 conn, %d us/req at 50 (%d req/s), peak RSS %s MB\n",
              side, gw - up, cpu1, cpu50, rps, rss
        }'
  done
done
