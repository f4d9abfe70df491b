#include "bench/ratelimit_headers.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>

namespace sluice::bench {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::optional<std::int64_t> parse_int(std::string_view s) {
  s = trim(s);
  std::int64_t value = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || ptr != s.data() + s.size() || s.empty()) return std::nullopt;
  return value;
}

// Splits on `sep` outside double quotes.
std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  bool quoted = false;
  std::size_t start = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '"') quoted = !quoted;
    if (s[i] == sep && !quoted) {
      parts.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  parts.push_back(s.substr(start));
  return parts;
}

std::pair<std::string_view, std::string_view> key_value(std::string_view param) {
  const auto eq = param.find('=');
  if (eq == std::string_view::npos) return {trim(param), {}};
  return {trim(param.substr(0, eq)), trim(param.substr(eq + 1))};
}

}  // namespace

void parse_ratelimit_field(std::string_view value, std::vector<QuotaSeen>& out) {
  const std::vector<std::string_view> members = split(value, ',');
  QuotaSeen legacy;  // the older dictionary form: limit=100, remaining=50, reset=30
  bool is_legacy = false;
  for (std::string_view member : members) {
    member = trim(member);
    if (member.empty()) continue;
    if (member.front() == '"' || member.find(';') != std::string_view::npos) {
      // "name";r=1;t=3 (a token instead of the quoted name is accepted too)
      const std::vector<std::string_view> params = split(member, ';');
      QuotaSeen quota;
      std::string_view name = trim(params.front());
      if (name.size() >= 2 && name.front() == '"' && name.back() == '"') {
        name = name.substr(1, name.size() - 2);
      }
      quota.name = std::string(name);
      for (std::size_t i = 1; i < params.size(); ++i) {
        const auto [k, v] = key_value(params[i]);
        if (k == "r") quota.remaining = parse_int(v);
        if (k == "t") quota.reset_s = parse_int(v);
      }
      if (quota.remaining || quota.reset_s) out.push_back(std::move(quota));
      continue;
    }
    const auto [k, v] = key_value(member);
    if (k == "remaining") {
      legacy.remaining = parse_int(v);
      is_legacy = true;
    } else if (k == "reset") {
      legacy.reset_s = parse_int(v);
      is_legacy = true;
    }
  }
  if (is_legacy) out.push_back(std::move(legacy));
}

std::optional<std::int64_t> parse_seconds(std::string_view value) {
  const auto seconds = parse_int(value);
  if (!seconds || *seconds < 0) return std::nullopt;
  return seconds;
}

namespace {

// Each takes what it reads off the front of `s`, and leaves `s` as it was when it reads nothing.
bool take(std::string_view& s, std::string_view text) {
  if (s.substr(0, text.size()) != text) return false;
  s.remove_prefix(text.size());
  return true;
}

std::optional<int> take_digits(std::string_view& s, std::size_t n) {
  if (s.size() < n) return std::nullopt;
  int value = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (s[i] < '0' || s[i] > '9') return std::nullopt;
    value = value * 10 + (s[i] - '0');
  }
  s.remove_prefix(n);
  return value;
}

std::optional<int> take_month(std::string_view& s) {
  static constexpr std::array<std::string_view, 12> kMonths{
      "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  for (std::size_t i = 0; i < kMonths.size(); ++i) {
    if (take(s, kMonths[i])) return static_cast<int>(i) + 1;
  }
  return std::nullopt;
}

bool take_day_name(std::string_view& s, bool full) {
  static constexpr std::array<std::string_view, 7> kDays{
      "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"};
  return std::any_of(kDays.begin(), kDays.end(),
                     [&](std::string_view day) { return take(s, full ? day : day.substr(0, 3)); });
}

struct TimeOfDay {
  int hour = 0;
  int minute = 0;
  int second = 0;
};

std::optional<TimeOfDay> take_time(std::string_view& s) {
  const auto h = take_digits(s, 2);
  if (!h || !take(s, ":")) return std::nullopt;
  const auto m = take_digits(s, 2);
  if (!m || !take(s, ":")) return std::nullopt;
  const auto sec = take_digits(s, 2);
  if (!sec || *h > 23 || *m > 59 || *sec > 60) return std::nullopt;  // 60: a leap second
  return TimeOfDay{*h, *m, *sec};
}

std::optional<std::int64_t> unix_time(int year, int month, int day, const TimeOfDay& t) {
  const std::chrono::year_month_day date{std::chrono::year(year),
                                         std::chrono::month(static_cast<unsigned>(month)),
                                         std::chrono::day(static_cast<unsigned>(day))};
  if (!date.ok()) return std::nullopt;  // 31 Feb
  const std::int64_t days = std::chrono::sys_days(date).time_since_epoch().count();
  return days * 86'400 + t.hour * 3'600 + t.minute * 60 + t.second;
}

// "Sun, 06 Nov 1994 08:49:37 GMT"
std::optional<std::int64_t> imf_fixdate(std::string_view s) {
  if (!take_day_name(s, false) || !take(s, ", ")) return std::nullopt;
  const auto day = take_digits(s, 2);
  if (!day || !take(s, " ")) return std::nullopt;
  const auto month = take_month(s);
  if (!month || !take(s, " ")) return std::nullopt;
  const auto year = take_digits(s, 4);
  if (!year || !take(s, " ")) return std::nullopt;
  const auto time = take_time(s);
  if (!time || !take(s, " GMT") || !s.empty()) return std::nullopt;
  return unix_time(*year, *month, *day, *time);
}

// "Sunday, 06-Nov-94 08:49:37 GMT"
std::optional<std::int64_t> rfc850_date(std::string_view s) {
  if (!take_day_name(s, true) || !take(s, ", ")) return std::nullopt;
  const auto day = take_digits(s, 2);
  if (!day || !take(s, "-")) return std::nullopt;
  const auto month = take_month(s);
  if (!month || !take(s, "-")) return std::nullopt;
  const auto year = take_digits(s, 2);
  if (!year || !take(s, " ")) return std::nullopt;
  const auto time = take_time(s);
  if (!time || !take(s, " GMT") || !s.empty()) return std::nullopt;
  return unix_time(*year < 70 ? 2000 + *year : 1900 + *year, *month, *day, *time);
}

// "Sun Nov  6 08:49:37 1994"
std::optional<std::int64_t> asctime_date(std::string_view s) {
  if (!take_day_name(s, false) || !take(s, " ")) return std::nullopt;
  const auto month = take_month(s);
  if (!month || !take(s, " ")) return std::nullopt;
  const auto day = take(s, " ") ? take_digits(s, 1) : take_digits(s, 2);
  if (!day || !take(s, " ")) return std::nullopt;
  const auto time = take_time(s);
  if (!time || !take(s, " ")) return std::nullopt;
  const auto year = take_digits(s, 4);
  if (!year || !s.empty()) return std::nullopt;
  return unix_time(*year, *month, *day, *time);
}

}  // namespace

std::optional<std::int64_t> parse_http_date(std::string_view value) {
  value = trim(value);
  if (auto t = imf_fixdate(value)) return t;
  if (auto t = rfc850_date(value)) return t;
  return asctime_date(value);
}

std::optional<std::int64_t> parse_retry_after(std::string_view value, std::int64_t now_unix_s) {
  if (auto seconds = parse_seconds(value)) return seconds;
  const std::optional<std::int64_t> date = parse_http_date(value);
  if (!date) return std::nullopt;
  return std::max<std::int64_t>(0, *date - now_unix_s);
}

std::string printable_sample(std::string_view value) {
  constexpr std::size_t kMax = 40;
  std::string out(value.substr(0, kMax));
  for (char& c : out) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  if (value.size() > kMax) out += "...";
  return out;
}

std::int64_t reset_delta(std::int64_t value, std::int64_t now_unix_s) {
  constexpr std::int64_t kUnixTimeFloor = 1'000'000'000;  // 2001: no window is that long
  if (value < kUnixTimeFloor) return value;
  return std::max<std::int64_t>(0, value - now_unix_s);
}

void Spread::add(std::int64_t value) {
  min = count == 0 ? value : std::min(min, value);
  max = count == 0 ? value : std::max(max, value);
  ++count;
}

void Spread::merge(const Spread& other) {
  if (other.count == 0) return;
  min = count == 0 ? other.min : std::min(min, other.min);
  max = count == 0 ? other.max : std::max(max, other.max);
  count += other.count;
}

void RateLimitSummary::add_policy(std::string_view value) {
  if (policies.size() >= kMaxPolicies) return;
  if (std::find(policies.begin(), policies.end(), value) != policies.end()) return;
  policies.emplace_back(value);
}

void RateLimitSummary::merge(const RateLimitSummary& other) {
  remaining.merge(other.remaining);
  reset_s.merge(other.reset_s);
  retry_after_s.merge(other.retry_after_s);
  rejected_without_retry_after += other.rejected_without_retry_after;
  retry_after_invalid += other.retry_after_invalid;
  if (first_invalid_retry_after.empty()) {
    first_invalid_retry_after = other.first_invalid_retry_after;
  }
  for (const std::string& p : other.policies) add_policy(p);
  window_checks += other.window_checks;
  window_rises += other.window_rises;
  if (first_rise.empty()) first_rise = other.first_rise;
}

void WindowCheck::observe(std::uint32_t caller, const QuotaSeen& quota, Nanos sent, Nanos received,
                          RateLimitSummary& summary) {
  if (!quota.remaining) return;
  auto it = std::find_if(last_.begin(), last_.end(),
                         [&](const Last& l) { return l.caller == caller && l.name == quota.name; });
  if (it == last_.end()) {
    last_.push_back(Last{caller, quota.name, 0, std::nullopt, Nanos{0}});
    it = last_.end() - 1;
  } else if (it->reset_s && *it->reset_s > 1 &&
             received < it->sent + std::chrono::seconds(*it->reset_s - 1)) {
    ++summary.window_checks;
    if (*quota.remaining > it->remaining) {
      if (summary.window_rises == 0) {
        summary.first_rise = "remaining rose from " + std::to_string(it->remaining) + " to " +
                             std::to_string(*quota.remaining) +
                             (quota.name.empty() ? "" : " on \"" + quota.name + "\"") +
                             ", the response before having said the window resets in " +
                             std::to_string(*it->reset_s) + " s";
      }
      ++summary.window_rises;
    }
  }
  it->remaining = *quota.remaining;
  it->reset_s = quota.reset_s;
  it->sent = sent;
}

}  // namespace sluice::bench
