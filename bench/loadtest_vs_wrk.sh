#!/usr/bin/env bash
# Compares `sluice bench` with wrk against nginx answering `return 200` on this machine: the same
# connections, threads and duration, in one run, rounds alternating which tool goes first, and the
# medians of the per-round ratios (the machine may be shared and noisy; one round proves little).
#
#   bench/loadtest_vs_wrk.sh [BUILD_DIR]          BUILD_DIR defaults to build
#   CONNECTIONS=64 THREADS=2 DURATION=10 ROUNDS=5 WORKERS=1 bench/loadtest_vs_wrk.sh
#
# Needs nginx and wrk (scripts/bootstrap --bench). nginx runs as this user from a temporary directory
# on a free port on 127.0.0.1 and is stopped on exit.
set -euo pipefail

build=${1:-build}
sluice="$build/sluice"
connections=${CONNECTIONS:-64}
threads=${THREADS:-2}
duration=${DURATION:-10}
rounds=${ROUNDS:-5}
workers=${WORKERS:-1}

for tool in nginx wrk; do
  command -v "$tool" >/dev/null || { echo "$tool is missing: run scripts/bootstrap --bench" >&2; exit 2; }
done
[[ -x "$sluice" ]] || { echo "$sluice is missing: build first (make build)" >&2; exit 2; }

tmp=$(mktemp -d)
nginx_pid=
cleanup() {
  [[ -n "$nginx_pid" ]] && kill "$nginx_pid" 2>/dev/null && wait "$nginx_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

port_is_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start_nginx() {
  local port
  for _ in $(seq 20); do
    port=$((20000 + RANDOM % 40000))
    port_is_free "$port" || continue
    mkdir -p "$tmp/logs" "$tmp/temp"
    cat >"$tmp/nginx.conf" <<CONF
daemon off;
master_process on;
worker_processes $workers;
pid $tmp/nginx.pid;
error_log $tmp/logs/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $tmp/temp/body;
  proxy_temp_path $tmp/temp/proxy;
  fastcgi_temp_path $tmp/temp/fastcgi;
  uwsgi_temp_path $tmp/temp/uwsgi;
  scgi_temp_path $tmp/temp/scgi;
  keepalive_requests 1000000000;
  server {
    listen 127.0.0.1:$port;
    location / { return 200 "ok\n"; }
  }
}
CONF
    nginx -p "$tmp" -c "$tmp/nginx.conf" -e "$tmp/logs/error.log" &
    nginx_pid=$!
    for _ in $(seq 50); do
      if ! port_is_free "$port"; then url="http://127.0.0.1:$port/"; return 0; fi
      kill -0 "$nginx_pid" 2>/dev/null || break
      sleep 0.1
    done
    kill "$nginx_pid" 2>/dev/null || true
    wait "$nginx_pid" 2>/dev/null || true
    nginx_pid=
  done
  echo "could not start nginx; see $tmp/logs/error.log" >&2
  exit 2
}

# wrk prints "50%  602.00us" / "1.23ms" / "1.00s": microseconds.
to_us() {
  awk -v v="$1" 'BEGIN {
    n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
    if (u == "ms") n *= 1000; else if (u == "s") n *= 1000000; else if (u == "m") n *= 60000000
    printf "%.1f", n }'
}

run_wrk() {
  local out
  out=$(wrk -t"$threads" -c"$connections" -d"${duration}s" --latency "$url")
  wrk_rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
  wrk_p50=$(to_us "$(awk '$1 == "50%" {print $2}' <<<"$out")")
}

run_sluice() {
  "$sluice" bench -q -t "$threads" -c "$connections" -d "${duration}s" --json "$tmp/sluice.json" "$url"
  sluice_rps=$(sed -n 's/.*"throughput_rps": \([0-9.]*\).*/\1/p' "$tmp/sluice.json")
  sluice_p50=$(sed -n 's/.*"p50": \([0-9.]*\).*/\1/p' "$tmp/sluice.json")
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

start_nginx
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; nginx $workers worker(s) at $url"
echo "each tool: $threads threads, $connections connections, ${duration}s; $rounds rounds, order alternating"
printf '%-6s %12s %12s %8s %12s %12s %8s\n' round wrk_rps sluice_rps ratio wrk_p50_us sluice_p50 ratio
: >"$tmp/rps_ratios"
: >"$tmp/p50_ratios"
for round in $(seq "$rounds"); do
  if ((round % 2)); then run_wrk; run_sluice; else run_sluice; run_wrk; fi
  rps_ratio=$(awk -v a="$sluice_rps" -v b="$wrk_rps" 'BEGIN { printf "%.3f", a / b }')
  p50_ratio=$(awk -v a="$sluice_p50" -v b="$wrk_p50" 'BEGIN { printf "%.3f", a / b }')
  echo "$rps_ratio" >>"$tmp/rps_ratios"
  echo "$p50_ratio" >>"$tmp/p50_ratios"
  printf '%-6s %12.0f %12.0f %8s %12.1f %12.1f %8s\n' "$round" "$wrk_rps" "$sluice_rps" "$rps_ratio" \
    "$wrk_p50" "$sluice_p50" "$p50_ratio"
done
echo "median requests/s ratio (sluice / wrk): $(median <"$tmp/rps_ratios")"
echo "median p50 latency ratio (sluice / wrk): $(median <"$tmp/p50_ratios")"
