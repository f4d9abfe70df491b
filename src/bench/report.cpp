#include "bench/report.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>

#include "core/duration.h"

namespace sluice::bench {
namespace {

constexpr std::size_t kMaxTimelineRows = 60;

std::string format(const char* spec, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* spec, ...) {
  va_list args;
  va_start(args, spec);
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, spec, args);
  va_end(args);
  std::string out(static_cast<std::size_t>(std::max(n, 0)), '\0');
  std::vsnprintf(out.data(), out.size() + 1, spec, again);
  va_end(again);
  return out;
}

double us_of(std::uint64_t ns) { return static_cast<double>(ns) / 1000.0; }
double us_of(Nanos d) { return static_cast<double>(d.count()) / 1000.0; }

const char* mode_name(const Plan& plan) {
  switch (plan.mode) {
    case Mode::kBurst:
      return "burst";
    case Mode::kRequests:
      return "requests";
    case Mode::kDuration:
      return "duration";
    case Mode::kRate:
      return plan.ramp ? "ramp" : "rate";
  }
  return "";
}

std::string join_statuses(const std::vector<int>& codes) {
  std::string out;
  for (int code : codes) out += (out.empty() ? "" : ",") + std::to_string(code);
  return out;
}

// "50 × 503, 2 × 500" for the statuses outside `allowed`.
std::string unexpected_statuses(const Report& r, const std::vector<int>& allowed,
                                std::uint64_t& count) {
  std::string out;
  count = 0;
  for (const auto& [code, n] : r.status_counts) {
    if (std::find(allowed.begin(), allowed.end(), code) != allowed.end()) continue;
    count += n;
    out += (out.empty() ? "" : ", ") + std::to_string(n) + " × " + std::to_string(code);
  }
  return out;
}

std::vector<ExpectationResult> check(const Expectations& expect, const Report& r) {
  std::vector<ExpectationResult> results;
  if (!expect.status.empty()) {
    ExpectationResult e{"--expect-status " + join_statuses(expect.status), true, ""};
    std::uint64_t unexpected = 0;
    const std::string seen = unexpected_statuses(r, expect.status, unexpected);
    if (unexpected > 0) {
      e.passed = false;
      e.detail = std::to_string(unexpected) + " responses had another status: " + seen;
    }
    if (r.errors > 0) {
      e.passed = false;
      e.detail += (e.detail.empty() ? "" : "; ") + std::to_string(r.errors) +
                  " requests got no response (" + r.most_common_error() + ")";
    }
    if (e.passed) e.detail = "all " + std::to_string(r.responses) + " responses had one of them";
    results.push_back(std::move(e));
  }
  if (expect.admitted) {
    ExpectationResult e{"--expect-admitted " + std::to_string(*expect.admitted),
                        r.admitted == *expect.admitted, ""};
    e.detail = std::to_string(r.admitted) + " admitted (2xx)" +
               (e.passed ? "" : ", expected exactly " + std::to_string(*expect.admitted));
    results.push_back(std::move(e));
  }
  if (expect.admitted_max) {
    ExpectationResult e{"--expect-admitted-max " + std::to_string(*expect.admitted_max),
                        r.admitted <= *expect.admitted_max, ""};
    e.detail =
        std::to_string(r.admitted) + " admitted (2xx)" +
        (e.passed ? "" : ", more than the " + std::to_string(*expect.admitted_max) + " allowed");
    results.push_back(std::move(e));
  }
  return results;
}

// "15 s", or "14 to 15 s".
std::string seconds_range(const Spread& s) {
  if (s.min == s.max) return format("%lld s", static_cast<long long>(s.min));
  return format("%lld to %lld s", static_cast<long long>(s.min), static_cast<long long>(s.max));
}

void append_rate_limit(std::string& out, const RateLimitSummary& rl, std::uint64_t rejected) {
  // Rejections without a Retry-After are worth a line of their own, as the JSON has them.
  const bool any = rl.remaining.count > 0 || rl.reset_s.count > 0 || rl.retry_after_s.count > 0 ||
                   rl.retry_after_invalid > 0 || !rl.policies.empty() || rejected > 0;
  if (!any) {
    out += "\n  Rate-limit headers   none seen\n";
    return;
  }
  out += "\n  Rate-limit headers\n";
  for (const std::string& policy : rl.policies) {
    out += format("    %-18s %s\n", "RateLimit-Policy", policy.c_str());
  }
  if (rl.remaining.count > 0) {
    out +=
        format("    %-18s %lld down to %lld, %llu values seen\n", "remaining",
               static_cast<long long>(rl.remaining.max), static_cast<long long>(rl.remaining.min),
               static_cast<unsigned long long>(rl.remaining.count));
  }
  if (rl.reset_s.count > 0) {
    out += format("    %-18s %s\n", "reset in", seconds_range(rl.reset_s).c_str());
  }
  if (rejected > 0 || rl.retry_after_s.count > 0 || rl.retry_after_invalid > 0) {
    const std::string range =
        rl.retry_after_s.count == 0 ? std::string("none") : seconds_range(rl.retry_after_s);
    out += format("    %-18s %s; %llu of %llu rejections had none\n", "Retry-After", range.c_str(),
                  static_cast<unsigned long long>(rl.rejected_without_retry_after),
                  static_cast<unsigned long long>(rejected));
  }
  if (rl.retry_after_invalid > 0) {
    // Counted as none above: a client cannot wait for "-5" or "soon" (RFC 9110 10.2.3).
    out += format("    %-18s %llu invalid (neither seconds nor a date); first: \"%s\"\n", "",
                  static_cast<unsigned long long>(rl.retry_after_invalid),
                  rl.first_invalid_retry_after.c_str());
  }
  if (rl.remaining.count > 0) {
    if (rl.window_rises > 0) {
      // Only a fixed window's remaining never rises before its reset: the headers do not say which
      // algorithm counts, so the report says what a rise means for each.
      out += format(
          "    %-18s remaining rose within a window %llu times in %llu checks; first: %s\n"
          "    %-18s (with a fixed window, a sign of servers or processes that each count alone; a "
          "sliding window or log, a token bucket or GCRA frees quota as time passes)\n",
          "window check", static_cast<unsigned long long>(rl.window_rises),
          static_cast<unsigned long long>(rl.window_checks), rl.first_rise.c_str(), "");
    } else if (rl.window_checks > 0) {
      out += format("    %-18s remaining only fell within each window (%llu check%s)\n", "window check",
                    static_cast<unsigned long long>(rl.window_checks), rl.window_checks == 1 ? "" : "s");
    } else {
      out += format("    %-18s no two responses on a connection fell in one window for sure\n",
                    "window check");
    }
  }
}

void append_timeline(std::string& out, const Report& r) {
  if (r.timeline.empty()) return;
  const std::size_t group = (r.timeline.size() + kMaxTimelineRows - 1) / kMaxTimelineRows;
  const Nanos row_step = r.step * static_cast<std::int64_t>(group);
  out += format("\n  %-10s %10s %10s %10s %10s\n", ("Per " + format_duration(row_step)).c_str(),
                "admitted", "rejected", "other", "errors");
  for (std::size_t i = 0; i < r.timeline.size(); i += group) {
    Counts sum;
    for (std::size_t j = i; j < std::min(i + group, r.timeline.size()); ++j) sum += r.timeline[j];
    const double t = static_cast<double>((r.step * static_cast<std::int64_t>(i)).count()) / 1e9;
    out += format("  %-10s %10llu %10llu %10llu %10llu\n", format("%.1fs", t).c_str(),
                  static_cast<unsigned long long>(sum.admitted),
                  static_cast<unsigned long long>(sum.rejected),
                  static_cast<unsigned long long>(sum.other),
                  static_cast<unsigned long long>(sum.errors));
  }
}

}  // namespace

bool Report::passed() const {
  // What an interrupted run saw is not what the assertions are about: a limit that admitted 50 of
  // 60 requests sent may be caught out by the 40 never sent. Nor does a run that got no response
  // pass: "at most 10 admitted" holds of a target that answered nothing.
  return !stopped_early && responses > 0 &&
         std::all_of(expectations.begin(), expectations.end(),
                     [](const ExpectationResult& e) { return e.passed; });
}

std::string Report::most_common_error() const {
  const auto most = std::max_element(
      error_counts.begin(), error_counts.end(),
      [](const auto& a, const auto& b) { return a.second < b.second; });
  return most == error_counts.end() ? "" : most->first;
}

Report make_report(const Plan& plan, const RunResult& run) {
  const Stats& s = run.stats;
  Report r;
  r.url = plan.url;
  r.mode = mode_name(plan);
  r.description = plan.describe();
  r.connections = plan.connections;
  r.threads = plan.threads;

  for (std::size_t code = 0; code < s.status.size(); ++code) {
    if (s.status[code] == 0) continue;
    r.status_counts[static_cast<int>(code)] = s.status[code];
    r.responses += s.status[code];
    switch (outcome_of(static_cast<int>(code))) {
      case Outcome::kAdmitted:
        r.admitted += s.status[code];
        break;
      case Outcome::kRejected:
        r.rejected += s.status[code];
        break;
      case Outcome::kOther:
        r.other += s.status[code];
        break;
    }
  }
  r.error_counts = s.errors;
  r.errors = s.error_count();
  r.requests = r.responses + r.errors;
  r.retried = s.retries;
  r.elapsed = run.elapsed;
  const double seconds = static_cast<double>(run.elapsed.count()) / 1e9;
  r.throughput_rps = seconds > 0 ? static_cast<double>(r.responses) / seconds : 0;

  const Histogram& h = s.latency;
  r.latency = LatencySummary{us_of(h.min()),        h.mean() / 1000.0,     us_of(h.value_at(50)),
                             us_of(h.value_at(90)), us_of(h.value_at(99)), us_of(h.value_at(99.9)),
                             us_of(h.max())};

  for (const auto& [ns, count] : h.buckets()) r.latency_buckets.emplace_back(us_of(ns), count);
  r.step = plan.bucket;
  r.timeline = s.timeline;
  if (!plan.vary_name.empty()) {
    r.vary_name = plan.vary_name;
    for (std::size_t i = 0; i < plan.vary_values.size(); ++i) {
      r.callers.emplace_back(plan.vary_values[i], i < s.callers.size() ? s.callers[i] : Counts{});
    }
  }
  r.rate_limit = s.rate_limit;
  if (s.first_write) r.burst_spread = *s.last_write - *s.first_write;
  if (plan.mode == Mode::kRate) {
    r.max_send_lag = s.max_send_lag;
    r.max_connection_wait = s.max_connection_wait;
    r.connection_wait_at_max_lag = s.connection_wait_at_max_lag;
  }
  r.stopped_early = run.stopped_early;
  r.expectations = check(plan.expect, r);
  return r;
}

std::string format_latency_us(double us) {
  if (us < 1000) return format(us < 10 ? "%.2fus" : us < 100 ? "%.1fus" : "%.0fus", us);
  const double ms = us / 1000;
  if (ms < 1000) return format(ms < 10 ? "%.2fms" : ms < 100 ? "%.1fms" : "%.0fms", ms);
  return format("%.2fs", ms / 1000);
}

std::string format_report(const Report& r) {
  std::string out;
  out += "sluice bench " + r.url + "\n";
  out += "  " + r.description + "\n";
  if (r.stopped_early) out += "  stopped early (interrupted): what was seen until then\n";

  out += format("\n  %-12s %llu in %s, %.0f responses/s\n", "Requests",
                static_cast<unsigned long long>(r.requests),
                format_latency_us(us_of(r.elapsed)).c_str(), r.throughput_rps);
  if (r.burst_spread) {
    out += format("  %-12s all written within %s\n", "Burst",
                  format_latency_us(us_of(*r.burst_spread)).c_str());
  }
  if (r.max_send_lag) {
    out += format("  %-12s %s at worst behind schedule%s\n", "Schedule",
                  format_latency_us(us_of(*r.max_send_lag)).c_str(),
                  *r.max_send_lag <= std::chrono::milliseconds(10) ? ""
                  // The request most behind: mostly waiting for a connection, or for the
                  // sender itself (it woke late).
                  : r.connection_wait_at_max_lag * 2 >= *r.max_send_lag
                      ? " (every connection was busy: try more --connections)"
                      : " (the sender fell behind: a busy machine, or try more --threads)");
  }
  out += format("  %-12s %llu (2xx)\n", "Admitted", static_cast<unsigned long long>(r.admitted));
  out += format("  %-12s %llu (429)\n", "Rejected", static_cast<unsigned long long>(r.rejected));
  if (r.other > 0) {
    out += format("  %-12s %llu\n", "Other", static_cast<unsigned long long>(r.other));
  }
  out += format("  %-12s %llu\n", "Errors", static_cast<unsigned long long>(r.errors));
  for (const auto& [reason, n] : r.error_counts) {
    out += format("  %-12s   %llu × %s\n", "", static_cast<unsigned long long>(n), reason.c_str());
  }
  if (r.retried > 0) {
    out += format("  %-12s %llu (the server had closed the connection they went on)\n", "Retried",
                  static_cast<unsigned long long>(r.retried));
  }
  std::string statuses;
  for (const auto& [code, n] : r.status_counts) {
    statuses += (statuses.empty() ? "" : ", ") + std::to_string(code) + " × " + std::to_string(n);
  }
  out += format("  %-12s %s\n", "Status", statuses.empty() ? "none" : statuses.c_str());

  if (r.responses > 0) {
    const LatencySummary& l = r.latency;
    out += format("\n  %-12s %9s %9s %9s %9s %9s %9s %9s\n", "Latency", "min", "p50", "p90", "p99",
                  "p99.9", "max", "mean");
    out += format("  %-12s %9s %9s %9s %9s %9s %9s %9s\n", "", format_latency_us(l.min_us).c_str(),
                  format_latency_us(l.p50_us).c_str(), format_latency_us(l.p90_us).c_str(),
                  format_latency_us(l.p99_us).c_str(), format_latency_us(l.p999_us).c_str(),
                  format_latency_us(l.max_us).c_str(), format_latency_us(l.mean_us).c_str());
  }

  append_timeline(out, r);

  if (!r.callers.empty()) {
    out += format("\n  %-22s %10s %10s %10s %10s\n", r.vary_name.c_str(), "admitted", "rejected",
                  "other", "errors");
    for (const auto& [value, c] : r.callers) {
      out += format(
          "  %-22s %10llu %10llu %10llu %10llu\n", value.c_str(),
          static_cast<unsigned long long>(c.admitted), static_cast<unsigned long long>(c.rejected),
          static_cast<unsigned long long>(c.other), static_cast<unsigned long long>(c.errors));
    }
  }

  append_rate_limit(out, r.rate_limit, r.rejected);

  if (!r.expectations.empty()) {
    out += "\n  Expectations\n";
    for (const ExpectationResult& e : r.expectations) {
      out += format("    %-4s  %-28s %s\n", e.passed ? "ok" : "FAIL", e.check.c_str(),
                    e.detail.c_str());
    }
  }
  return out;
}

std::string format_progress(const Progress& p) {
  const double seconds = static_cast<double>(p.elapsed.count()) / 1e9;
  const double rate = seconds > 0 ? static_cast<double>(p.responses) / seconds : 0;
  return format("%6.1fs  %llu responses  %.0f/s  admitted %llu  rejected %llu  errors %llu",
                seconds, static_cast<unsigned long long>(p.responses), rate,
                static_cast<unsigned long long>(p.admitted),
                static_cast<unsigned long long>(p.rejected),
                static_cast<unsigned long long>(p.errors));
}

}  // namespace sluice::bench
