#!/usr/bin/env bash
# Tests the package as users install it: packs it, installs the tarball into examples/ci-kit
# (from the npm cache when it has everything), and runs that project's tests.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
example="$root/examples/ci-kit"
pack_dir="$(mktemp -d)"
trap 'rm -rf "$pack_dir"' EXIT

cd "$root"
# `prepare` builds dist/ before packing.
npm pack --pack-destination "$pack_dir" --silent >/dev/null
tarball="$(ls "$pack_dir"/*.tgz)"

cd "$example"
# better-sqlite3 is the only dependency with an install script, and it compiles from source (minutes
# on a small machine). The repository's copy was compiled for this same Node: when the versions
# match and its addon loads here, it is reused; otherwise better-sqlite3 is built as npm would.
npm install --no-audit --no-fund --prefer-offline --no-save --ignore-scripts "$tarball"
version() { node -p "require('$1/package.json').version"; }
ours="$root/node_modules/better-sqlite3"
theirs="$example/node_modules/better-sqlite3"
if [ -f "$ours/build/Release/better_sqlite3.node" ] && [ "$(version "$ours")" = "$(version "$theirs")" ]; then
  mkdir -p "$theirs/build/Release"
  cp "$ours/build/Release/better_sqlite3.node" "$theirs/build/Release/"
fi
if ! node -e "require('better-sqlite3')(':memory:').close()" 2>/dev/null; then
  npm rebuild better-sqlite3
fi
npm test
