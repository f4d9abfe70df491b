#!/usr/bin/env bash
# Installs sluice from the build tree into a scratch prefix, builds examples/ against it with
# find_package(sluice), and runs the examples: quickstart, and shared_limit (the Redis store, when
# the build has it) against a redis-server of its own. Then: core alone found without Boost, and
# the Redis store linked into a shared library.
set -euo pipefail
build=$1
source=$2
scratch=$(mktemp -d)
redis_pid=
cleanup() {
  [[ -n $redis_pid ]] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
  rm -rf "$scratch"
}
trap cleanup EXIT
cmake --install "$build" --prefix "$scratch/prefix" >/dev/null
cmake -S "$source/examples" -B "$scratch/examples" -DCMAKE_PREFIX_PATH="$scratch/prefix" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$scratch/examples" >/dev/null
"$scratch/examples/quickstart"
if [[ -x $scratch/examples/shared_limit ]]; then
  command -v redis-server >/dev/null || { echo "redis-server is missing (scripts/bootstrap installs it)" >&2; exit 1; }
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$scratch" \
    --daemonize no >/dev/null & redis_pid=$!
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
  "$scratch/examples/shared_limit" "redis://127.0.0.1:$port"
fi

# Core alone needs no Boost; the Redis store links into a shared library (position-independent).
cmake -S "$source/examples" -B "$scratch/core-only" -DCMAKE_PREFIX_PATH="$scratch/prefix" \
  -DCMAKE_DISABLE_FIND_PACKAGE_Boost=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$scratch/core-only" >/dev/null
"$scratch/core-only/quickstart" >/dev/null
if [[ -x $scratch/examples/shared_limit ]]; then
  mkdir -p "$scratch/plugin"
  cat >"$scratch/plugin/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(plugin LANGUAGES CXX)
find_package(sluice REQUIRED COMPONENTS redis)
add_library(plugin SHARED plugin.cpp)
target_link_libraries(plugin PRIVATE sluice::redis)
CMAKE
  cat >"$scratch/plugin/plugin.cpp" <<'CPP'
#include <sluice/redis/redis_store.h>
bool opens(const char* address) { return sluice::redis::RedisStore::open({.address = address}).ok(); }
CPP
  cmake -S "$scratch/plugin" -B "$scratch/plugin/build" -DCMAKE_PREFIX_PATH="$scratch/prefix" \
    -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$scratch/plugin/build" >/dev/null
fi
