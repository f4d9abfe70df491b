// Report: what a run showed, in the shape of a load tester's aggregate report, and the verdict on
// the --expect-* assertions; printed as text, JSON or an SVG chart. Values and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench/plan.h"
#include "bench/ratelimit_headers.h"
#include "bench/runner.h"
#include "bench/stats.h"

namespace sluice::bench {

// Latencies in microseconds, each within 0.4% (min and max exact).
struct LatencySummary {
  double min_us = 0;
  double mean_us = 0;
  double p50_us = 0;
  double p90_us = 0;
  double p99_us = 0;
  double p999_us = 0;
  double max_us = 0;
};

struct ExpectationResult {
  std::string check;  // the flag as given: "--expect-admitted 50"
  bool passed = false;
  std::string detail;  // one line: what was seen
};

struct Report {
  std::string url;
  std::string mode;         // burst, requests, duration, rate or ramp
  std::string description;  // Plan::describe()
  int connections = 0;
  int threads = 0;

  std::uint64_t requests = 0;   // sent: responses + errors
  std::uint64_t responses = 0;  // with a status
  std::uint64_t admitted = 0;   // 2xx
  std::uint64_t rejected = 0;   // 429
  std::uint64_t other = 0;      // any other status
  std::uint64_t errors = 0;     // no response
  std::uint64_t retried = 0;    // sent again: the connection they went on had been closed
  std::map<int, std::uint64_t> status_counts;
  std::map<std::string, std::uint64_t> error_counts;
  Nanos elapsed{0};
  double throughput_rps = 0;  // responses per second
  LatencySummary latency;
  // The latency histogram: (microseconds, count) per non-empty bucket, to merge runs or replot.
  std::vector<std::pair<double, std::uint64_t>> latency_buckets;

  Nanos step{0};  // of the timeline: 1 s, or 100 ms for a burst
  std::vector<Counts> timeline;

  std::string vary_name;  // --vary-header's name, and per value what it got
  std::vector<std::pair<std::string, Counts>> callers;

  RateLimitSummary rate_limit;
  std::optional<Nanos> burst_spread;  // from the first request written to the last
  std::optional<Nanos> max_send_lag;  // open loop: the most a request left after its time
  Nanos max_connection_wait{0};       // open loop: the most of such a wait with every connection busy
  Nanos connection_wait_at_max_lag{0};  // open loop: that wait for the request most behind
  bool stopped_early = false;

  std::vector<ExpectationResult> expectations;
  bool passed() const;  // every expectation held, the run was not stopped early, and something answered
  // The reason most requests without a response failed for ("" when none failed).
  std::string most_common_error() const;
};

Report make_report(const Plan& plan, const RunResult& run);

// The report for a person, on a terminal 100 columns wide.
std::string format_report(const Report& report);
// Everything in the report as one JSON object (see docs/bench.md for the fields).
std::string to_json(const Report& report);
// A chart: admitted and rejected over time, and the latency percentiles.
std::string to_svg(const Report& report);
// The live line: elapsed, responses, rate so far, admitted, rejected, errors.
std::string format_progress(const Progress& progress);

// "850us", "12.3ms", "1.50s": three significant digits.
std::string format_latency_us(double us);

}  // namespace sluice::bench
