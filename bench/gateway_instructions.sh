#!/usr/bin/env bash
# User-space instructions per proxied request, sluice against nginx, counted by callgrind: a figure
# the host's speed does not move (requests/s and CPU time on a shared machine swing by 2x within an
# hour; see docs/benchmarks.md, "Gateway"). The setups are gateway_vs_nginx.sh's: sluice with every
# kind of limit active and never rejecting (local store), nginx as a proxy with a limit_req, both in
# front of one nginx `return 200` upstream that runs natively. Each proxy runs under valgrind's
# callgrind; after a warm-up request its counters are zeroed, wrk runs for --duration seconds, and the
# counters are dumped: instructions divided by the requests wrk made. Kernel work is not counted
# (gateway_syscalls.sh counts the system calls, where the two differ). With --redis, a
# third sluice counts the system's limit alone in a redis-server of the script's own (as
# gateway_vs_nginx.sh's "one limit"): the instructions of sluice's side of the Redis path.
#
#   bench/gateway_instructions.sh [--duration S] [--sluice BINARY] [--redis]
#
# Needs build/sluice (make build), and nginx, wrk and valgrind (scripts/bootstrap --bench); with
# --redis, redis-server.
set -euo pipefail
cd "$(dirname "$0")/.."

duration=5 sluice=build/sluice redis=0
while (($#)); do
  case "$1" in
    --duration) duration=$2; shift 2 ;;
    --sluice) sluice=$2; shift 2 ;;
    --redis) redis=1; shift ;;
    *) echo "usage: $0 [--duration S] [--sluice BINARY] [--redis]" >&2; exit 2 ;;
  esac
done
tools=(nginx wrk valgrind callgrind_control callgrind_annotate)
((redis)) && tools+=(redis-server redis-cli)
for tool in "${tools[@]}"; do
  command -v "$tool" >/dev/null || { echo "$tool is missing: run scripts/bootstrap --bench" >&2; exit 1; }
done
[[ -x $sluice ]] || { echo "$sluice is missing: run make build" >&2; exit 1; }

source bench/gateway_setup.sh  # $work, pids (killed on exit), the setups
upstream_port=$(free_port) nginx_port=$(free_port) sluice_port=$(free_port) admin_port=$(free_port)
write_upstream_conf "$work/upstream" "$upstream_port"
# One process (no master), so that callgrind counts the worker itself.
write_proxy_conf "$work/proxy" "$nginx_port" "$upstream_port" "master_process off;
daemon off;"
write_sluice_yaml "$work/sluice.yaml" "$upstream_port"

nginx -p "$work/upstream" -c "$work/upstream/nginx.conf" -g 'daemon off;' & pids+=($!)

# Runs a proxy ("$@", answering on port $1, named $2) under callgrind; prints the requests wrk made
# and the instructions they took.
count() {
  local port=$1 name=$2
  shift 2
  valgrind --tool=callgrind --callgrind-out-file="$work/$name.%p" "$@" 2>"$work/$name.err" &
  local pid=$!
  pids+=("$pid")
  local url="http://127.0.0.1:$port/api/x"
  for _ in $(seq 200); do
    [[ $(curl -s -o /dev/null -w '%{http_code}' -H 'X-System-Key: bench' "$url") == 200 ]] && break
    sleep 0.1
  done
  [[ $(curl -s -o /dev/null -w '%{http_code}' -H 'X-System-Key: bench' "$url") == 200 ]] \
    || { echo "$name does not answer 200:" >&2; cat "$work/$name.err" >&2; exit 1; }
  callgrind_control -z "$pid" >/dev/null 2>&1
  local requests
  requests=$(wrk -t1 -c32 -d"${duration}s" -H 'X-System-Key: bench' "$url" | awk '/requests in/ {print $1}')
  callgrind_control -d "$pid" >/dev/null 2>&1
  local dump
  dump=$(ls "$work/$name.$pid".* | head -n 1)
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  echo "$requests $(callgrind_annotate "$dump" | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')"
}

read -r sluice_requests sluice_ir < <(count "$sluice_port" sluice "$sluice" serve --config "$work/sluice.yaml" \
  --threads 1 --listen "127.0.0.1:$sluice_port" --admin-listen "127.0.0.1:$admin_port")
read -r nginx_requests nginx_ir < <(count "$nginx_port" nginx nginx -p "$work/proxy" -c "$work/proxy/nginx.conf")
if ((redis)); then
  redis_port=$(free_port) one_port=$(free_port) one_admin_port=$(free_port)
  write_sluice_yaml "$work/sluice-one.yaml" "$upstream_port" one
  redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
    --daemonize no >"$work/redis.log" 2>&1 & pids+=($!)
  for _ in $(seq 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  read -r one_requests one_ir < <(count "$one_port" sluice-one "$sluice" serve --config "$work/sluice-one.yaml" \
    --threads 1 --store "redis://127.0.0.1:$redis_port" --listen "127.0.0.1:$one_port" \
    --admin-listen "127.0.0.1:$one_admin_port")
fi

per() { echo $(($2 / $1)); }
printf '%-38s %10s %14s %12s\n' "proxy" "requests" "instructions" "per request"
printf '%-38s %10s %14s %12s\n' "sluice (limits active, local store)" "$sluice_requests" "$sluice_ir" \
  "$(per "$sluice_requests" "$sluice_ir")"
printf '%-38s %10s %14s %12s\n' "nginx proxy (limit_req)" "$nginx_requests" "$nginx_ir" \
  "$(per "$nginx_requests" "$nginx_ir")"
if ((redis)); then
  printf '%-38s %10s %14s %12s\n' "sluice (system limit, store: redis://)" "$one_requests" "$one_ir" \
    "$(per "$one_requests" "$one_ir")"
fi
echo "sluice / nginx user-space instructions per request: $(echo "scale=2; $(per "$sluice_requests" "$sluice_ir") / $(per "$nginx_requests" "$nginx_ir")" | bc)x"
