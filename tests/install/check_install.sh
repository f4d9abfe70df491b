#!/usr/bin/env bash
# Installs sluice from the build tree into a scratch prefix, builds examples/ against it with
# find_package(sluice), and runs the examples: quickstart, and shared_limit (the Redis store, when
# the build has it) against a redis-server of its own.
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
