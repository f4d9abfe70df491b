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
  wrk_mean=$(to_us "$(awk '$1 == "Latency" {print $2; exit}' <<<"$out")")
}

run_sluice() {
  "$sluice" bench -q -t "$threads" -c "$connections" -d "${duration}s" --json "$tmp/sluice.json" "$url"
  sluice_rps=$(sed -n 's/.*"throughput_rps": \([0-9.]*\).*/\1/p' "$tmp/sluice.json")
  sluice_p50=$(sed -n 's/.*"p50": \([0-9.]*\).*/\1/p' "$tmp/sluice.json")
  sluice_mean=$(sed -n 's/.*"mean": \([0-9.]*\).*/\1/p' "$tmp/sluice.json")
  sluice_p50c=$(corrected_p50 "$tmp/sluice.json")
}

# wrk "corrects" its closed-loop latencies for coordinated omission: with interval = run time /
# (requests / connections), every latency v >= 2 x interval adds samples at v - interval,
# v - 2 x interval, ... down to the interval (stats_correct in wrk's stats.c). That raises its p50
# when the run has a long tail. For a like-for-like reading, the same correction applied to
# sluice bench's histogram (latency_buckets_us in its JSON), and the median taken as wrk does.
corrected_p50() {
  local interval
  interval=$(awk -v d="$(sed -n 's/.*"duration_us": \([0-9]*\).*/\1/p' "$1")" \
                 -v n="$(sed -n 's/.*"responses": \([0-9]*\).*/\1/p' "$1")" -v c="$connections" \
                 'BEGIN { printf "%d", d / int(n / c) }')
  tr -d ' \n' <"$1" |
    awk '{ s = substr($0, index($0, "\"latency_buckets_us\":[") + 22); print substr(s, 1, index(s, "]]")) }' |
    grep -o '\[[0-9.]*,[0-9]*' | tr '[,' '  ' |
    awk -v e="$interval" '{ print $1, $2; if ($1 >= 2 * e) for (m = $1 - e; m > e; m -= e) print m, $2 }' |
    sort -g |
    awk '{ v[NR] = $1; c[NR] = $2; t += $2 }
         END { r = int(0.5 * t + 0.5); for (i = 1; i <= NR; i++) { s += c[i]; if (s >= r) { printf "%.1f", v[i]; exit } } }'
}

# Little's law for a closed loop: mean latency = connections / throughput. A tool whose mean latency
# times its throughput comes to its connections measures each request's whole time.
little() { awk -v m="$1" -v r="$2" -v c="$connections" 'BEGIN { printf "%.2f", m / 1e6 * r / c }'; }

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

start_nginx
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; nginx $workers worker(s) at $url"
echo "each tool: $threads threads, $connections connections, ${duration}s; $rounds rounds, order alternating"
printf '%-6s %9s %9s %6s %9s %9s %9s %6s %6s %7s %7s\n' round wrk_rps sluice_rps ratio wrk_p50 \
  sl_p50 sl_p50_c ratio ratio_c wrk_L sl_L
: >"$tmp/rps_ratios"
: >"$tmp/p50_ratios"
: >"$tmp/p50c_ratios"
for round in $(seq "$rounds"); do
  if ((round % 2)); then run_wrk; run_sluice; else run_sluice; run_wrk; fi
  rps_ratio=$(awk -v a="$sluice_rps" -v b="$wrk_rps" 'BEGIN { printf "%.3f", a / b }')
  p50_ratio=$(awk -v a="$sluice_p50" -v b="$wrk_p50" 'BEGIN { printf "%.3f", a / b }')
  echo "$rps_ratio" >>"$tmp/rps_ratios"
  echo "$p50_ratio" >>"$tmp/p50_ratios"
  p50c_ratio=$(awk -v a="$sluice_p50c" -v b="$wrk_p50" 'BEGIN { printf "%.3f", a / b }')
  echo "$p50c_ratio" >>"$tmp/p50c_ratios"
  printf '%-6s %9.0f %9.0f %6s %9.1f %9.1f %9.1f %6s %6s %7s %7s\n' "$round" "$wrk_rps" \
    "$sluice_rps" "$rps_ratio" "$wrk_p50" "$sluice_p50" "$sluice_p50c" "$p50_ratio" "$p50c_ratio" \
    "$(little "$wrk_mean" "$wrk_rps")" "$(little "$sluice_mean" "$sluice_rps")"
done
echo "median requests/s ratio (sluice / wrk): $(median <"$tmp/rps_ratios")"
echo "median p50 latency ratio (sluice / wrk): $(median <"$tmp/p50_ratios") as measured," \
  "$(median <"$tmp/p50c_ratios") with wrk's correction applied to both"
echo "latencies in us; sl_p50_c: sluice's p50 after wrk's coordinated-omission correction;"
echo "wrk_L, sl_L: mean latency x throughput / connections (1.00 by Little's law for latencies"
echo "measured as they were; wrk's correction lifts its mean above that)"
