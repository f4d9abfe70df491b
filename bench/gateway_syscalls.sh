#!/usr/bin/env bash
# System calls per proxied request, sluice against nginx: on a host where a system call is dear
# (a Firecracker guest, say) they weigh more than the user-space instructions gateway_instructions.sh
# counts. The setups are gateway_vs_nginx.sh's: sluice with every kind of limit active and never
# rejecting (local store), nginx as a proxy with a limit_req, one worker each, in front of one nginx
# `return 200` upstream. For each proxy in turn, `perf stat` counts the proxy worker's system calls
# and CPU time (task-clock) while wrk runs for --duration seconds; each count is divided by the
# requests wrk made.
#
#   bench/gateway_syscalls.sh [--duration S] [--rounds R] [--connections C]
#
# Needs build/sluice (make build), nginx, wrk and perf (scripts/bootstrap --bench), and the rights to
# read syscall tracepoints (root, or kernel.perf_event_paranoid -1).
set -euo pipefail
cd "$(dirname "$0")/.."

duration=5 rounds=2 connections=32
while (($#)); do
  case "$1" in
    --duration) duration=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
    *) echo "usage: $0 [--duration S] [--rounds R] [--connections C]" >&2; exit 2 ;;
  esac
done
for tool in nginx wrk perf; do
  command -v "$tool" >/dev/null || { echo "$tool is missing: run scripts/bootstrap --bench" >&2; exit 1; }
done
[[ -x build/sluice ]] || { echo "build/sluice is missing: run make build" >&2; exit 1; }

source bench/gateway_setup.sh  # $work, pids (killed on exit), the setups
upstream_port=$(free_port) nginx_port=$(free_port) sluice_port=$(free_port) admin_port=$(free_port)
write_upstream_conf "$work/upstream" "$upstream_port"
write_proxy_conf "$work/proxy" "$nginx_port" "$upstream_port" "worker_processes 1;"
write_sluice_yaml "$work/sluice.yaml" "$upstream_port"
nginx -p "$work/upstream" -c "$work/upstream/nginx.conf" -g 'daemon off;' & pids+=($!)
nginx -p "$work/proxy" -c "$work/proxy/nginx.conf" -g 'daemon off;' & pids+=($!)
nginx_master=$!
build/sluice serve --config "$work/sluice.yaml" --threads 1 --listen "127.0.0.1:$sluice_port" \
  --admin-listen "127.0.0.1:$admin_port" 2>"$work/sluice.err" & pids+=($!)
sluice_pid=$!
for port in $upstream_port $nginx_port $sluice_port; do
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/api/x" -H 'X-System-Key: bench' && break; sleep 0.1; done
done
nginx_pid=$(pgrep -P "$nginx_master")  # the worker

events=task-clock
for call in sendmsg sendto writev write recvmsg recvfrom readv read epoll_wait epoll_pwait epoll_ctl futex; do
  events+=",syscalls:sys_enter_$call"
done
perf stat -e "$events" -- true >/dev/null 2>&1 \
  || { echo "perf cannot read syscall tracepoints here (run as root, or lower kernel.perf_event_paranoid)" >&2; exit 1; }

for round in $(seq "$rounds"); do
  # Each round starts with a different proxy, so that drift favours neither.
  order=(sluice nginx); ((round % 2 == 0)) && order=(nginx sluice)
  for target in "${order[@]}"; do
    if [[ $target == sluice ]]; then port=$sluice_port pid=$sluice_pid; else port=$nginx_port pid=$nginx_pid; fi
    perf stat -x, -p "$pid" -e "$events" -o "$work/perf" &
    perf_pid=$!
    sleep 0.2  # perf attached
    out=$(wrk -t1 -c"$connections" -d"${duration}s" -H 'X-System-Key: bench' "http://127.0.0.1:$port/api/x")
    kill -INT "$perf_pid"; wait "$perf_pid" || true
    requests=$(awk '/requests in/ {print $1}' <<<"$out")
    echo "== $target, round $round: $(awk '/Requests\/sec/ {print $2}' <<<"$out") requests/s; per request:"
    awk -F, -v n="$requests" '$1 ~ /^[0-9.]+$/ && $1 > 0 {
      name = $3; sub(/^syscalls:sys_enter_/, "", name)
      if (name == "task-clock") printf "  %-12s %8.2f us\n", "CPU", $1 * 1000 / n
      else printf "  %-12s %8.3f\n", name, $1 / n
    }' "$work/perf"
  done
done
