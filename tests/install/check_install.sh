#!/usr/bin/env bash
# Installs sluice from the build tree into a scratch prefix, builds examples/ against it with
# find_package(sluice), and runs the example.
set -euo pipefail
build=$1
source=$2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cmake --install "$build" --prefix "$scratch/prefix" >/dev/null
cmake -S "$source/examples" -B "$scratch/examples" -DCMAKE_PREFIX_PATH="$scratch/prefix" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$scratch/examples" >/dev/null
"$scratch/examples/quickstart"
