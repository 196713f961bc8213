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
npm install --no-audit --no-fund --prefer-offline --no-save "$tarball"
npm test
