#!/usr/bin/env bash
# Benchmarks `sluice serve` against nginx as the same kind of proxy, in one run (docs/benchmarks.md,
# "Gateway"). Both proxy to one nginx `return 200` upstream over keep-alive connections, with the same
# number of workers and the same wrk connections; sluice has limits active that never reject (system,
# interface and grant limits plus an in-flight limit), nginx a `limit_req` that never rejects. wrk
# also calls the upstream directly, to measure the latency a proxy adds. A second sluice counts the
# same limits in a redis-server of the script's own (`store: redis://`): the limits of a request in
# one script call (batched with other requests' under load) plus one to give back the in-flight
# lease; a third counts only the system limit in that Redis (as nginx has one limit_req). Rounds
# alternate the five targets; the figures are each target's medians, with the CPU the proxy and
# Redis spent per request. With --pin, each proxy runs each worker on a CPU of its own (sluice
# --pin-workers, nginx worker_cpu_affinity auto).
#
#   bench/gateway_vs_nginx.sh [--threads N] [--connections C] [--duration S] [--rounds R] [--pin]
#
# Needs build/sluice (make build), redis-server, and nginx and wrk (scripts/bootstrap --bench).
set -euo pipefail
cd "$(dirname "$0")/.."

threads=1 connections=32 duration=10 rounds=3 wrk_threads=1 pin=()
while (($#)); do
  case "$1" in
    --threads) threads=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --pin) pin=(--pin-workers); shift ;;
    *) echo "usage: $0 [--threads N] [--connections C] [--duration S] [--rounds R] [--pin]" >&2; exit 2 ;;
  esac
done

for tool in nginx wrk redis-server redis-cli; do
  command -v "$tool" >/dev/null || { echo "$tool is missing: run scripts/bootstrap --bench" >&2; exit 1; }
done
[[ -x build/sluice ]] || { echo "build/sluice is missing: run make build" >&2; exit 1; }

source bench/gateway_setup.sh  # $work, pids (killed on exit), the setups
upstream_port=$(free_port) nginx_port=$(free_port) sluice_port=$(free_port) admin_port=$(free_port)
redis_port=$(free_port) sluice_redis_port=$(free_port) redis_admin_port=$(free_port)
sluice_one_port=$(free_port) one_admin_port=$(free_port)

write_upstream_conf "$work/upstream" "$upstream_port"
write_proxy_conf "$work/proxy" "$nginx_port" "$upstream_port" \
  "worker_processes $threads;${pin:+ worker_cpu_affinity auto;}"
write_sluice_yaml "$work/sluice.yaml" "$upstream_port"
# The Redis-backed sluice with one limit: the system's.
write_sluice_yaml "$work/sluice-one.yaml" "$upstream_port" one

nginx -p "$work/upstream" -c "$work/upstream/nginx.conf" -g 'daemon off;' & pids+=($!)
nginx -p "$work/proxy" -c "$work/proxy/nginx.conf" -g 'daemon off;' & pids+=($!)
nginx_pid=$!
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
  --daemonize no >"$work/redis.log" 2>&1 & pids+=($!)
redis_pid=$!
for _ in $(seq 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
build/sluice serve --config "$work/sluice.yaml" --threads "$threads" "${pin[@]}" \
  --listen "127.0.0.1:$sluice_port" --admin-listen "127.0.0.1:$admin_port" 2>"$work/sluice.err" & pids+=($!)
sluice_pid=$!
build/sluice serve --config "$work/sluice.yaml" --threads "$threads" "${pin[@]}" --store "redis://127.0.0.1:$redis_port" \
  --listen "127.0.0.1:$sluice_redis_port" --admin-listen "127.0.0.1:$redis_admin_port" 2>"$work/sluice-redis.err" & pids+=($!)
redis_sluice_pid=$!
build/sluice serve --config "$work/sluice-one.yaml" --threads "$threads" "${pin[@]}" --store "redis://127.0.0.1:$redis_port" \
  --listen "127.0.0.1:$sluice_one_port" --admin-listen "127.0.0.1:$one_admin_port" 2>"$work/sluice-one.err" & pids+=($!)
one_sluice_pid=$!
for port in $upstream_port $nginx_port $sluice_port $sluice_redis_port $sluice_one_port; do
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/api/x" -H 'X-System-Key: bench' && break; sleep 0.1; done
done
[[ $(curl -s -o /dev/null -w '%{http_code}' -H 'X-System-Key: bench' "http://127.0.0.1:$sluice_port/api/x") == 200 ]] \
  || { echo "sluice does not answer 200:"; cat "$work/sluice.err"; exit 1; }
[[ $(curl -s -o /dev/null -w '%{http_code}' -H 'X-System-Key: bench' "http://127.0.0.1:$sluice_redis_port/api/x") == 200 ]] \
  || { echo "sluice with the Redis store does not answer 200:"; cat "$work/sluice-redis.err"; exit 1; }

# CPU ticks (user + system) used so far by a process and its children that are still running
# (nginx's workers), from /proc.
cpu_ticks() {
  local total=0 pid
  for pid in "$1" $(pgrep -P "$1" || true); do
    total=$((total + $(awk '{sub(/.*\) /, ""); print $12 + $13}' "/proc/$pid/stat")))
  done
  echo "$total"
}

# One wrk run against a proxy whose processes start at pid $2 (0 for none), with the redis-server of
# pid $3 behind it (0 for none): prints "requests_per_second p50_ms p99_ms cpu_us_per_request
# redis_cpu_us_per_request".
run_wrk() {
  local before=0 redis_before=0
  (($2)) && before=$(cpu_ticks "$2")
  (($3)) && redis_before=$(cpu_ticks "$3")
  local text
  text=$(wrk -t"$wrk_threads" -c"$connections" -d"${duration}s" --latency -H 'X-System-Key: bench' "$1")
  local ticks=0 redis_ticks=0
  (($2)) && ticks=$(($(cpu_ticks "$2") - before))
  (($3)) && redis_ticks=$(($(cpu_ticks "$3") - redis_before))
  python3 -c '
import re, sys
text = sys.stdin.read()
ticks, hz, redis_ticks = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
def ms(v, unit):
    return float(v) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
pct = {p: ms(v, u) for p, v, u in re.findall(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)}
errors = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
if errors: print("warning: %s non-2xx responses" % errors.group(1), file=sys.stderr)
requests = int(re.search(r"(\d+) requests in", text).group(1))
print(rps, pct["50"], pct["99"], ticks / hz * 1e6 / requests, redis_ticks / hz * 1e6 / requests)' \
    "$ticks" "$(getconf CLK_TCK)" "$redis_ticks" <<<"$text"
}

declare -A results
targets=(sluice redis one nginx direct)
declare -A urls=([sluice]="http://127.0.0.1:$sluice_port/api/x" [nginx]="http://127.0.0.1:$nginx_port/api/x"
                 [direct]="http://127.0.0.1:$upstream_port/api/x" [redis]="http://127.0.0.1:$sluice_redis_port/api/x"
                 [one]="http://127.0.0.1:$sluice_one_port/api/x")
declare -A procs=([sluice]=$sluice_pid [redis]=$redis_sluice_pid [one]=$one_sluice_pid [nginx]=$nginx_pid [direct]=0)
declare -A redis_procs=([sluice]=0 [redis]=$redis_pid [one]=$redis_pid [nginx]=0 [direct]=0)
run_wrk "${urls[sluice]}" 0 0 >/dev/null  # warm-up
run_wrk "${urls[redis]}" 0 0 >/dev/null
run_wrk "${urls[one]}" 0 0 >/dev/null
for ((r = 0; r < rounds; r++)); do
  # Alternate which target goes first, so that drift on a noisy machine does not favour one.
  order=("${targets[@]:r%5}" "${targets[@]:0:r%5}")
  for t in "${order[@]}"; do
    line=$(run_wrk "${urls[$t]}" "${procs[$t]}" "${redis_procs[$t]}")
    results[$t]+="$line;"
    echo "round $((r + 1)) $t: $line (req/s p50_ms p99_ms proxy_cpu_us/request redis_cpu_us/request)"
  done
done

# The Redis-backed sluice must have decided in Redis: its metrics count no store error.
for admin in $redis_admin_port $one_admin_port; do
  store_errors=$(curl -s "http://127.0.0.1:$admin/metrics" | awk '$1 == "sluice_store_errors_total" {print $2}')
  [[ $store_errors == 0 ]] || echo "warning: a Redis-backed sluice counted $store_errors store errors" >&2
done
echo "redis: $(redis-cli -p "$redis_port" info commandstats | grep -E '^cmdstat_evalsha' | tr -d '\r')"

python3 - "${results[sluice]}" "${results[nginx]}" "${results[direct]}" "${results[redis]}" "${results[one]}" "$threads" "$connections" "$duration" "$rounds" "${#pin[@]}" <<'PY'
import statistics, sys
def parse(s):
    rows = [list(map(float, x.split())) for x in s.strip(";").split(";")]
    return [statistics.median(col) for col in zip(*rows)]
sl, ng, di, rd, r1 = (parse(a) for a in sys.argv[1:6])
threads, conns, dur, rounds, pinned = sys.argv[6:10] + [sys.argv[10] != "0"]
print()
print(f"threads/workers {threads}{' (pinned)' if pinned else ''}, {conns} connections, {dur}s x {rounds} rounds, medians")
print(f"| | requests/s | p50 | p99 | proxy CPU per request | Redis CPU per request |")
print(f"| --- | --- | --- | --- | --- | --- |")
for name, v in (("sluice (limits active, local store)", sl), ("sluice (limits active, store: redis://)", rd),
                ("sluice (system limit only, store: redis://)", r1),
                ("nginx proxy (limit_req)", ng), ("upstream direct", di)):
    cpu = f"{v[3]:.1f} µs" if v[3] > 0 else "–"
    redis_cpu = f"{v[4]:.1f} µs" if v[4] > 0 else "–"
    print(f"| {name} | {v[0]:.0f} | {v[1]:.3f} ms | {v[2]:.3f} ms | {cpu} | {redis_cpu} |")
print()
print(f"sluice / nginx requests/s: {sl[0] / ng[0]:.2f}x; p99 sluice / nginx: {sl[2] / ng[2]:.2f}x; "
      f"CPU per request sluice / nginx: {sl[3] / ng[3]:.2f}x")
print(f"sluice with Redis / nginx requests/s: {rd[0] / ng[0]:.2f}x; p99 sluice with Redis / nginx: {rd[2] / ng[2]:.2f}x")
print(f"sluice with Redis, one limit / nginx requests/s: {r1[0] / ng[0]:.2f}x; p99: {r1[2] / ng[2]:.2f}x")
print(f"latency sluice adds over direct: p50 +{sl[1] - di[1]:.3f} ms, p99 +{sl[2] - di[2]:.3f} ms")
print(f"latency sluice with Redis adds:   p50 +{rd[1] - di[1]:.3f} ms, p99 +{rd[2] - di[2]:.3f} ms")
print(f"latency nginx adds over direct:  p50 +{ng[1] - di[1]:.3f} ms, p99 +{ng[2] - di[2]:.3f} ms")
PY
