#!/usr/bin/env bash
# sluice's token bucket against Go's golang.org/x/time/rate, in one run, alternating the two ROUNDS
# times (default 5): time passed in (BM_TokenBucket_TimePassedIn vs AllowN(now, 1)) and the clock
# read per decision (BM_TokenBucket_ClockRead/FastClock vs Allow()). Prints the ratio of the medians
# and of the fastest runs: on a shared host single runs of the same binary differ by up to 1.6x
# (the clock read most: rdtsc shares its core with whatever the host runs beside it), and the
# fastest run of each is the one least disturbed.
# Usage: [ROUNDS=n] bench/core_vs_go.sh [build-dir]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
core=$build/bench/sluice_core_bench
[[ -x $core ]] || { echo "core_vs_go: $core is missing; run make build first" >&2; exit 1; }
command -v go >/dev/null || { echo "core_vs_go: go is missing; run scripts/bootstrap --bench" >&2; exit 1; }

gocache=$(mktemp -d)
trap 'rm -rf "$gocache"' EXIT
sluice_runs=() go_runs=()
rounds=${ROUNDS:-5}
for ((round = 1; round <= rounds; ++round)); do
  sluice_runs+=("$("$core" --benchmark_filter='BM_TokenBucket_TimePassedIn$|BM_TokenBucket_ClockRead/FastClock$' \
    --benchmark_min_time=1 --benchmark_format=csv 2>/dev/null | grep '^"BM_')")
  go_runs+=("$(cd "$here/peers/go" && GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE=$gocache \
    go test -run '^$' -bench . -benchtime 1s 2>/dev/null | grep '^Benchmark')")
done

median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
fastest() { sort -g | head -n 1; }
sluice_ns() { printf '%s\n' "${sluice_runs[@]}" | grep "\"$1\"" | cut -d, -f3; }  # real_time, ns
go_ns() { printf '%s\n' "${go_runs[@]}" | awk -v name="$1" '$1 ~ "^"name"(-[0-9]+)?$" {print $3}'; }

printf '%-26s %-8s %10s %10s %8s\n' "decision" "of runs" "sluice ns" "Go ns" "ratio"
row() {  # label, sluice benchmark, Go benchmark
  for pick in median fastest; do
    local s g
    s=$(sluice_ns "$2" | $pick)
    g=$(go_ns "$3" | $pick)
    printf '%-26s %-8s %10.1f %10.1f %7.1fx\n' "$1" "$pick" "$s" "$g" "$(echo "$g / $s" | bc -l)"
  done
}
row "time passed in" BM_TokenBucket_TimePassedIn BenchmarkAllowNTimePassedIn
row "clock read per decision" BM_TokenBucket_ClockRead/FastClock BenchmarkAllow
echo "($rounds rounds of each)"
