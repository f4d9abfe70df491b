// to_json(): the report as JSON, with Boost.JSON.
#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>

#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include "bench/report.h"

namespace sluice::bench {
namespace {

namespace json = boost::json;

// Rounded to `decimals` places, so that 690.175 is not written 690.1750000000001.
double rounded(double value, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::round(value * scale) / scale;
}

json::object counts_of(const Counts& s) {
  return {
      {"admitted", s.admitted}, {"rejected", s.rejected}, {"other", s.other}, {"errors", s.errors}};
}

json::object spread_of(const Spread& s) {
  json::object o{{"count", s.count}};
  if (s.count > 0) {
    o["min"] = s.min;
    o["max"] = s.max;
  }
  return o;
}

json::object rate_limit_of(const RateLimitSummary& rl) {
  json::object o;
  json::array policies;
  for (const std::string& p : rl.policies) policies.emplace_back(p);
  o["policies"] = std::move(policies);
  o["remaining"] = spread_of(rl.remaining);
  o["reset_s"] = spread_of(rl.reset_s);
  o["retry_after_s"] = spread_of(rl.retry_after_s);
  o["rejected_without_retry_after"] = rl.rejected_without_retry_after;
  o["retry_after_invalid"] = rl.retry_after_invalid;
  if (!rl.first_invalid_retry_after.empty()) {
    o["first_invalid_retry_after"] = rl.first_invalid_retry_after;
  }
  o["window_checks"] = rl.window_checks;
  o["window_rises"] = rl.window_rises;
  if (!rl.first_rise.empty()) o["first_rise"] = rl.first_rise;
  return o;
}

// `s` with every byte that is not part of well-formed UTF-8 (RFC 3629) replaced by U+FFFD. Strings
// from the responses (a RateLimit-Policy value may carry obs-text, bytes 0x80-0xFF) would otherwise
// make the whole JSON invalid, and Boost.JSON writes strings as they are.
std::string valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
    const unsigned char b = byte(0);
    std::size_t length = 0;
    unsigned char low = 0x80;  // the range of the second byte; the others are 0x80-0xBF
    unsigned char high = 0xBF;
    if (b < 0x80) {
      length = 1;
    } else if (b >= 0xC2 && b <= 0xDF) {
      length = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      length = 3;
      if (b == 0xE0) low = 0xA0;   // no overlong forms
      if (b == 0xED) high = 0x9F;  // no surrogates
    } else if (b >= 0xF0 && b <= 0xF4) {
      length = 4;
      if (b == 0xF0) low = 0x90;   // no overlong forms
      if (b == 0xF4) high = 0x8F;  // nothing above U+10FFFF
    }
    bool ok = length > 0 && i + length <= s.size();
    for (std::size_t k = 1; ok && k < length; ++k) {
      ok = k == 1 ? byte(k) >= low && byte(k) <= high : byte(k) >= 0x80 && byte(k) <= 0xBF;
    }
    if (ok) {
      out.append(s.substr(i, length));
      i += length;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

std::string quoted(std::string_view s) { return json::serialize(json::string(valid_utf8(s))); }

// Numbers as people write them (1234.5, not 1.2345E3), and the nesting indented, with any object or
// array that fits in kInline characters on one line.
constexpr std::size_t kInline = 96;

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  std::string s = buf;
  s.erase(s.find_last_not_of('0') + 1);
  if (s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

void write(std::string& out, const json::value& v, int depth);

std::string inline_form(const json::value& v) {
  std::string out;
  write(out, v, -1);
  return out;
}

void write(std::string& out, const json::value& v, int depth) {
  const bool flat = depth < 0;
  const std::string pad = flat ? "" : std::string(static_cast<std::size_t>(depth + 1) * 2, ' ');
  const std::string close_pad = flat ? "" : std::string(static_cast<std::size_t>(depth) * 2, ' ');
  switch (v.kind()) {
    case json::kind::double_:
      out += number(v.get_double());
      return;
    case json::kind::object: {
      const json::object& o = v.get_object();
      if (!flat && (o.empty() || inline_form(v).size() + pad.size() <= kInline)) {
        out += inline_form(v);
        return;
      }
      out += flat ? "{" : "{\n";
      for (auto it = o.begin(); it != o.end(); ++it) {
        if (it != o.begin()) out += flat ? ", " : ",\n";
        out += pad + quoted(it->key()) + ": ";
        write(out, it->value(), flat ? -1 : depth + 1);
      }
      out += flat ? "}" : "\n" + close_pad + "}";
      return;
    }
    case json::kind::array: {
      const json::array& a = v.get_array();
      if (!flat && (a.empty() || inline_form(v).size() + pad.size() <= kInline)) {
        out += inline_form(v);
        return;
      }
      out += flat ? "[" : "[\n";
      for (std::size_t i = 0; i < a.size(); ++i) {
        if (i > 0) out += flat ? ", " : ",\n";
        out += pad;
        write(out, a[i], flat ? -1 : depth + 1);
      }
      out += flat ? "]" : "\n" + close_pad + "]";
      return;
    }
    case json::kind::string:
      out += quoted(v.get_string());
      return;
    default:
      out += json::serialize(v);
  }
}

}  // namespace

std::string to_json(const Report& r) {
  json::object o;
  o["url"] = r.url;
  o["mode"] = r.mode;
  o["description"] = r.description;
  o["connections"] = r.connections;
  o["threads"] = r.threads;
  o["requests"] = r.requests;
  o["responses"] = r.responses;
  o["admitted"] = r.admitted;
  o["rejected"] = r.rejected;
  o["other"] = r.other;
  o["errors"] = r.errors;
  o["retried"] = r.retried;

  json::object statuses;
  for (const auto& [code, n] : r.status_counts) statuses[std::to_string(code)] = n;
  o["status_counts"] = std::move(statuses);
  json::object errors;
  for (const auto& [reason, n] : r.error_counts) errors[reason] = n;
  o["error_counts"] = std::move(errors);

  o["duration_us"] = r.elapsed.count() / 1000;
  o["throughput_rps"] = rounded(r.throughput_rps, 2);
  const LatencySummary& l = r.latency;
  o["latency_us"] = {{"min", rounded(l.min_us, 3)}, {"mean", rounded(l.mean_us, 3)},
                     {"p50", rounded(l.p50_us, 3)}, {"p90", rounded(l.p90_us, 3)},
                     {"p99", rounded(l.p99_us, 3)}, {"p999", rounded(l.p999_us, 3)},
                     {"max", rounded(l.max_us, 3)}};

  json::array buckets;
  for (const auto& [us, count] : r.latency_buckets) {
    buckets.emplace_back(json::array{rounded(us, 3), count});
  }
  o["latency_buckets_us"] = std::move(buckets);

  json::array steps;
  for (const Counts& s : r.timeline) steps.emplace_back(counts_of(s));
  o["timeline"] = {{"step_ms", r.step.count() / 1'000'000}, {"steps", std::move(steps)}};

  if (!r.callers.empty()) {
    json::array callers;
    for (const auto& [value, c] : r.callers) {
      json::object caller{{"value", value}};
      for (const auto& field : counts_of(c)) {
        caller[field.key()] = field.value();
      }
      callers.emplace_back(std::move(caller));
    }
    o["vary_header"] = {{"name", r.vary_name}, {"callers", std::move(callers)}};
  }

  o["rate_limit"] = rate_limit_of(r.rate_limit);
  if (r.burst_spread)
    o["burst_spread_us"] = rounded(static_cast<double>(r.burst_spread->count()) / 1000, 3);
  if (r.max_send_lag) {
    o["max_send_lag_us"] = rounded(static_cast<double>(r.max_send_lag->count()) / 1000, 3);
    o["max_connection_wait_us"] = rounded(static_cast<double>(r.max_connection_wait.count()) / 1000, 3);
  }
  o["stopped_early"] = r.stopped_early;

  json::array expectations;
  for (const ExpectationResult& e : r.expectations) {
    expectations.emplace_back(
        json::object{{"check", e.check}, {"passed", e.passed}, {"detail", e.detail}});
  }
  o["expectations"] = std::move(expectations);
  o["passed"] = r.passed();
  std::string out;
  write(out, o, 0);
  return out + "\n";
}

}  // namespace sluice::bench
