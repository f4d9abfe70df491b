#!/usr/bin/env bash
# sluice's token bucket against Go's golang.org/x/time/rate, in one run, alternating the two three
# times and comparing medians: time passed in (BM_TokenBucket_TimePassedIn vs AllowN(now, 1)) and
# the clock read per decision (BM_TokenBucket_ClockRead/FastClock vs Allow()).
# Usage: bench/core_vs_go.sh [build-dir]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
core=$build/bench/sluice_core_bench
[[ -x $core ]] || { echo "core_vs_go: $core is missing; run make build first" >&2; exit 1; }
command -v go >/dev/null || { echo "core_vs_go: go is missing; run scripts/bootstrap --bench" >&2; exit 1; }

gocache=$(mktemp -d)
trap 'rm -rf "$gocache"' EXIT
sluice_runs=() go_runs=()
for round in 1 2 3; do
  sluice_runs+=("$("$core" --benchmark_filter='BM_TokenBucket_TimePassedIn$|BM_TokenBucket_ClockRead/FastClock$' \
    --benchmark_min_time=1 --benchmark_format=csv 2>/dev/null | grep '^"BM_')")
  go_runs+=("$(cd "$here/peers/go" && GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE=$gocache \
    go test -run '^$' -bench . -benchtime 1s 2>/dev/null | grep '^Benchmark')")
done

median() { sort -g | sed -n 2p; }
pick_sluice() { printf '%s\n' "${sluice_runs[@]}" | grep "\"$1\"" | cut -d, -f3 | median; }  # real_time, ns
pick_go() { printf '%s\n' "${go_runs[@]}" | awk -v name="$1" '$1 ~ "^"name"(-[0-9]+)?$" {print $3}' | median; }

s_passed=$(pick_sluice BM_TokenBucket_TimePassedIn)
s_clock=$(pick_sluice BM_TokenBucket_ClockRead/FastClock)
g_passed=$(pick_go BenchmarkAllowNTimePassedIn)
g_clock=$(pick_go BenchmarkAllow)
printf '%-34s %10s %10s %8s\n' "decision" "sluice ns" "Go ns" "ratio"
printf '%-34s %10.1f %10.1f %7.1fx\n' "time passed in" "$s_passed" "$g_passed" "$(echo "$g_passed / $s_passed" | bc -l)"
printf '%-34s %10.1f %10.1f %7.1fx\n' "clock read per decision" "$s_clock" "$g_clock" "$(echo "$g_clock / $s_clock" | bc -l)"
