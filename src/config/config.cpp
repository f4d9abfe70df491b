#include "config/config.h"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <ctime>
#include <set>
#include <string_view>
#include <utility>

#include "config/path_pattern.h"
#include "core/duration.h"
#include "sluice/redis/address.h"

namespace sluice::config {

std::vector<std::int32_t> Upstream::default_failure_statuses() {
  std::vector<std::int32_t> statuses;
  for (std::int32_t s = 500; s <= 599; ++s) statuses.push_back(s);
  return statuses;
}

bool has_control_characters(std::string_view s) {
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) return true;
    if (c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) <= 0x9f) return true;
  }
  return false;
}

std::size_t utf8_sequence(std::string_view s) {
  const auto at = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = at(0);
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the second byte's range
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (s.size() < n || at(1) < lo || at(1) > hi) return 0;
  for (std::size_t i = 2; i < n; ++i) {
    if (at(i) < 0x80 || at(i) > 0xbf) return 0;
  }
  return n;
}

std::size_t invalid_utf8_at(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
    } else if (const std::size_t n = utf8_sequence(s.substr(i)); n > 0) {
      i += n;
    } else {
      return i;
    }
  }
  return std::string_view::npos;
}

std::string as_utf8(std::string_view s) {
  if (invalid_utf8_at(s) == std::string_view::npos) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = static_cast<unsigned char>(s[i]) < 0x80 ? 1 : utf8_sequence(s.substr(i));
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

// Whether text holds a character that shows nothing or moves what follows, or is not UTF-8: a
// space other than ' ' (U+00A0, U+2000-U+200A, U+202F, U+205F, U+3000), a zero-width, joining or
// blank one (U+034F, U+115F, U+1160, U+17B4, U+17B5, U+180E, U+200B-U+200D, U+2060-U+2064, U+2800,
// U+3164, U+FEFF, U+FFA0), a direction mark or override (U+061C, U+200E-U+200F, U+202A-U+202E,
// U+2066-U+2069), a soft hyphen (U+00AD), a line or paragraph separator (U+2028-U+2029), a
// variation selector (U+FE00-U+FE0F, U+E0100-U+E01EF) or a tag (U+E0000-U+E007F).
bool has_invisible_characters(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = static_cast<unsigned char>(text[i]) < 0x80 ? 1 : utf8_sequence(text.substr(i));
    if (n == 0) return true;
    std::uint32_t cp = static_cast<unsigned char>(text[i]);
    if (n > 1) {
      cp &= 0x7FU >> n;
      for (std::size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3FU);
    }
    if (cp == 0xA0 || cp == 0xAD || cp == 0x34F || cp == 0x61C || cp == 0x115F || cp == 0x1160 || cp == 0x17B4 ||
        cp == 0x17B5 || cp == 0x180E || (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
        (cp >= 0x205F && cp <= 0x2069) || cp == 0x2800 || cp == 0x3000 || cp == 0x3164 ||
        (cp >= 0xFE00 && cp <= 0xFE0F) || cp == 0xFEFF || cp == 0xFFA0 || (cp >= 0xE0000 && cp <= 0xE007F) ||
        (cp >= 0xE0100 && cp <= 0xE01EF)) {
      return true;
    }
    i += n;
  }
  return false;
}

namespace {

// Whether a header can never carry a system key: one the gateway takes for a caller's API key
// (caller_auth.h's kApiKeyHeader: every request would be refused as a bad one), or one of the
// message's framing or connection (a request's length would be its key).
bool header_of_sluices_own(std::string_view name) {
  for (const std::string_view own : {"X-Api-Key", "Content-Length", "Transfer-Encoding", "Connection", "Expect",
                                     "Upgrade"}) {
    if (cgi_alias_of(name, own)) return true;
  }
  return false;
}

}  // namespace

std::string Problem::to_string() const {
  std::string s;
  if (!file.empty()) s += file + ":";
  if (line > 0) s += std::to_string(line) + ":" + std::to_string(column) + ":";
  if (!s.empty()) s += " ";
  if (!path.empty()) s += path + ": ";
  return s + message;
}

const char* to_string(KeyBy key_by) {
  switch (key_by) {
    case KeyBy::kOwner: return "owner";
    case KeyBy::kClientIp: return "client_ip";
    case KeyBy::kHeader: return "header";
    case KeyBy::kQuery: return "query";
  }
  return "owner";
}

const char* to_string(OnStoreFailure policy) {
  switch (policy) {
    case OnStoreFailure::kAllow: return "allow";
    case OnStoreFailure::kDeny: return "deny";
    case OnStoreFailure::kLocal: return "local";
  }
  return "allow";
}

const char* to_string(Auth auth) {
  switch (auth) {
    case Auth::kKey: return "key";
    case Auth::kApiKey: return "api_key";
    case Auth::kHmac: return "hmac";
  }
  return "key";
}

const char* to_string(BreakerForce force) {
  switch (force) {
    case BreakerForce::kNone: return "none";
    case BreakerForce::kOpen: return "open";
    case BreakerForce::kClosed: return "closed";
  }
  return "none";
}

namespace {

// Where a store URL's password is, as redis::parse_address reads it: the credentials run to the last
// '@', the password from the first ':' in them (all of them without one). Nothing when it has none.
std::optional<std::pair<std::size_t, std::size_t>> password_span(std::string_view store) {
  const std::size_t scheme = store.find("://");
  const std::size_t at = store.rfind('@');
  if (scheme == std::string_view::npos || at == std::string_view::npos || at < scheme + 3) return std::nullopt;
  const std::size_t begin = scheme + 3;
  const std::size_t colon = store.substr(begin, at - begin).find(':');
  const std::size_t password = colon == std::string_view::npos ? begin : begin + colon + 1;
  if (password == at) return std::nullopt;
  return std::pair{password, at};
}

}  // namespace

std::string redact_store_password(std::string_view store) {
  const auto span = password_span(store);
  if (!span) return std::string(store);
  return std::string(store.substr(0, span->first)).append(kRedactedPassword).append(store.substr(span->second));
}

bool has_redacted_password(std::string_view store) {
  const auto span = password_span(store);
  return span && store.substr(span->first, span->second - span->first) == kRedactedPassword;
}

std::string format_time(std::int64_t unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::optional<std::int64_t> parse_time(std::string_view text) {
  std::tm tm{};
  char z = 0;
  int consumed = 0;
  const std::string s(text);
  if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%c%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                  &tm.tm_min, &tm.tm_sec, &z, &consumed) != 7 ||
      z != 'Z' || consumed != static_cast<int>(s.size()) || tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 ||
      tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60) {
    return std::nullopt;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<std::int64_t>(timegm(&tm));
}

const char* to_string(Language language) {
  return language == Language::kChinese ? "zh-CN" : "en";
}

const char* to_string(RateLimitHeaders headers) {
  switch (headers) {
    case RateLimitHeaders::kDraft: return "draft";
    case RateLimitHeaders::kLegacy: return "legacy";
    case RateLimitHeaders::kNone: return "none";
  }
  return "draft";
}

std::optional<Target> parse_target(std::string_view text) {
  const std::size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  std::string_view host = text.substr(0, colon);
  const std::string_view port = text.substr(colon + 1);
  if (host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  unsigned value = 0;
  auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc() || ptr != port.data() + port.size() || value > 65535 || host.empty()) {
    return std::nullopt;
  }
  return Target{std::string(host), static_cast<std::uint16_t>(value)};
}

namespace {

// An address's bytes (IPv4 in the first 4, an IPv4-mapped IPv6 address as IPv4); nullopt when text
// is not an address.
std::optional<std::pair<std::array<unsigned char, 16>, bool>> address_bytes(std::string_view text) {
  const std::string s(text);
  std::array<unsigned char, 16> b{};
  if (inet_pton(AF_INET, s.c_str(), b.data()) == 1) return std::pair{b, true};
  if (inet_pton(AF_INET6, s.c_str(), b.data()) != 1) return std::nullopt;
  static constexpr unsigned char kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::equal(std::begin(kMapped), std::end(kMapped), b.begin())) {
    std::array<unsigned char, 16> v4{};
    std::copy(b.begin() + 12, b.end(), v4.begin());
    return std::pair{v4, true};
  }
  return std::pair{b, false};
}

// Whether a and b agree in their first `bits` bits.
bool same_prefix(const std::array<unsigned char, 16>& a, const std::array<unsigned char, 16>& b, int bits) {
  for (int i = 0; bits > 0; ++i, bits -= 8) {
    const unsigned mask = bits >= 8 ? 0xffU : (0xffU << (8 - bits)) & 0xffU;
    if (((a[static_cast<std::size_t>(i)] ^ b[static_cast<std::size_t>(i)]) & mask) != 0) return false;
  }
  return true;
}

}  // namespace

std::optional<Network> parse_network(std::string_view text) {
  const std::size_t slash = text.find('/');
  const auto address = address_bytes(text.substr(0, slash));
  if (!address) return std::nullopt;
  Network n;
  n.bytes = address->first;
  n.v4 = address->second;
  const int bits = n.v4 ? 32 : 128;
  n.prefix = bits;
  if (slash != std::string_view::npos) {
    const std::string_view p = text.substr(slash + 1);
    auto [ptr, ec] = std::from_chars(p.data(), p.data() + p.size(), n.prefix);
    if (p.empty() || ec != std::errc() || ptr != p.data() + p.size() || n.prefix < 0 || n.prefix > bits) {
      return std::nullopt;
    }
  }
  // 10.0.0.1/8 is most likely a mistake for 10.0.0.0/8 or 10.0.0.1/32.
  for (int i = n.prefix; i < bits; ++i) {
    if ((n.bytes[static_cast<std::size_t>(i / 8)] & (0x80U >> (i % 8))) != 0) return std::nullopt;
  }
  return n;
}

bool Network::contains(std::string_view address) const {
  const auto a = address_bytes(address);
  return a && a->second == v4 && same_prefix(a->first, bytes, prefix);
}

std::string unnamed_limit_name(std::string_view owner, std::size_t unnamed, std::size_t place) {
  return unnamed == 1 ? std::string(owner) : std::string(owner) + "-" + std::to_string(place);
}

std::string in_flight_limit_name(std::string_view interface_id) {
  return std::string(interface_id) + "-in-flight";
}

std::optional<Target> parse_listen_address(std::string_view text) {
  auto target = parse_target(text);
  if (!target || target->host == "localhost") return target;
  std::array<unsigned char, sizeof(in6_addr)> ip{};
  if (inet_pton(AF_INET, target->host.c_str(), ip.data()) == 1) return target;
  const std::string host = target->host.substr(0, target->host.find('%'));  // an IPv6 zone aside
  if (inet_pton(AF_INET6, host.c_str(), ip.data()) != 1) return std::nullopt;
  return target;
}

std::string to_string(const Target& target) {
  const bool v6 = target.host.find(':') != std::string::npos;
  return (v6 ? "[" + target.host + "]" : target.host) + ":" + std::to_string(target.port);
}

std::string authority_of(const Target& target) {
  const std::size_t zone = target.host.find('%');
  if (zone == std::string::npos || target.host.find(':') == std::string::npos) return to_string(target);
  Target encoded = target;
  encoded.host.insert(zone + 1, "25");
  return to_string(encoded);
}

// --- limits as fields ---------------------------------------------------------------------------

namespace {

// Reads a limit's fields, noting every problem (a field that does not read, or is out of range).
struct FieldReader {
  const LimitFields& fields;
  std::vector<Problem>* problems;
  std::set<std::string> used{"algorithm"};
  bool failed = false;

  bool has(const std::string& name) const { return fields.count(name) != 0; }

  bool fail(const std::string& field, std::string message) {
    if (problems != nullptr) problems->push_back(Problem{field, std::move(message)});
    failed = true;
    return false;
  }

  // A count read, then checked against the core's range (`what`: its name in the core's message).
  bool count(const std::string& name, const char* what, std::int64_t& out) {
    if (!integer(name, out)) return false;
    const Status s = check_count(what, out);
    return s || fail(name, s.error().message);
  }

  bool period(const std::string& name, const char* what, Nanos& out) {
    if (!duration(name, out)) return false;
    const Status s = check_period(what, out);
    return s || fail(name, s.error().message);
  }

  bool integer(const std::string& name, std::int64_t& out) {
    used.insert(name);
    auto it = fields.find(name);
    if (it == fields.end()) return fail(name, "is required");
    const std::string& v = it->second;
    auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
    if (ec == std::errc::result_out_of_range && ptr == v.data() + v.size()) {
      return fail(name, "is out of range, got " + v);
    }
    if (ec != std::errc() || ptr != v.data() + v.size()) {
      return fail(name, "must be a whole number, got \"" + v + "\"");
    }
    return true;
  }

  bool duration(const std::string& name, Nanos& out) {
    used.insert(name);
    auto it = fields.find(name);
    if (it == fields.end()) return fail(name, "is required");
    auto d = parse_duration(it->second);
    if (!d) {
      return fail(name, "must be a duration like 500ms, 15s, 1m, 2h or 1d, got \"" + it->second + "\"");
    }
    out = *d;
    return true;
  }

  void no_others(const std::string& algorithm) {
    for (const auto& [name, value] : fields) {
      if (used.count(name) == 0) fail(name, "is not a parameter of " + algorithm);
    }
  }
};

}  // namespace

Result<Limit> limit_from_fields(const LimitFields& fields, std::vector<Problem>* problems) {
  FieldReader r{fields, problems};
  auto it = fields.find("algorithm");
  if (it == fields.end()) {
    r.fail("algorithm", "is required (token_bucket, gcra, sliding_log, sliding_window, fixed_window or concurrency)");
    return invalid_argument("algorithm is required");
  }
  const std::string& algorithm = it->second;
  const Error bad = invalid_argument("invalid limit");
  // Every field is read and checked, so that all their problems are reported together; the spec is
  // built only from fields that all passed (it then checks only what spans them: the time to fill).
  Result<Limit> limit = bad;
  if (algorithm == "token_bucket") {
    TokenBucketSpec spec;
    r.count("capacity", "capacity", spec.capacity);
    if ((r.has("rate") || r.has("per")) && (r.has("refill_tokens") || r.has("refill_interval"))) {
      r.fail(r.has("refill_tokens") ? "refill_tokens" : "refill_interval",
             "cannot go with rate and per: give rate and per (continuous refill), or refill_tokens and "
             "refill_interval (refill in steps), not both");
      r.used.insert({"rate", "per", "refill_tokens", "refill_interval"});
    } else if (r.has("rate") || r.has("per")) {
      r.count("rate", "refill tokens", spec.refill_tokens);
      r.period("per", "refill period", spec.refill_period);
    } else if (!r.has("refill_tokens") && !r.has("refill_interval")) {
      r.fail("rate", "is required: give rate and per (continuous refill), or refill_tokens and "
                     "refill_interval (refill in steps)");
    } else {
      spec.refill = Refill::kInterval;
      r.count("refill_tokens", "refill tokens", spec.refill_tokens);
      r.period("refill_interval", "refill period", spec.refill_period);
    }
    r.no_others(algorithm);
    if (!r.failed) limit = Limit::token_bucket(spec);
  } else if (algorithm == "gcra") {
    GcraSpec spec;
    r.count("limit", "limit", spec.limit);
    r.period("period", "period", spec.period);
    spec.burst = spec.limit;
    if (r.has("burst")) r.count("burst", "burst", spec.burst);
    r.no_others(algorithm);
    if (!r.failed) limit = Limit::gcra(spec);
  } else if (algorithm == "sliding_log" || algorithm == "sliding_window" ||
             algorithm == "fixed_window") {
    WindowSpec spec;
    r.count("limit", "limit", spec.limit);
    r.period("period", "period", spec.period);
    r.no_others(algorithm);
    if (!r.failed) {
      limit = algorithm == "sliding_log"      ? Limit::sliding_log(spec)
              : algorithm == "sliding_window" ? Limit::sliding_window(spec)
                                              : Limit::fixed_window(spec);
    }
  } else if (algorithm == "concurrency") {
    ConcurrencySpec spec;
    r.count("limit", "limit", spec.limit);
    r.period("lease_timeout", "lease timeout", spec.lease_timeout);
    r.no_others(algorithm);
    if (!r.failed) limit = Limit::concurrency(spec);
  } else {
    r.fail("algorithm", "must be token_bucket, gcra, sliding_log, sliding_window, fixed_window or "
                        "concurrency, got \"" + algorithm + "\"");
  }
  if (r.failed) return bad;
  if (!limit.ok()) r.fail("", limit.error().message);  // the time to fill, which no one field decides
  return limit;
}

std::vector<std::pair<std::string, std::string>> limit_fields(const Limit& limit) {
  const detail::LimitParams& p = limit.params();
  const std::string period = format_duration(Nanos{p.period_us * 1000});
  const std::string quota = std::to_string(p.quota);
  const std::string rate = std::to_string(p.rate);
  std::vector<std::pair<std::string, std::string>> f{{"algorithm", to_string(p.algorithm)}};
  switch (p.algorithm) {
    case Algorithm::kTokenBucket:
      f.emplace_back("capacity", quota);
      if (p.refill == Refill::kContinuous) {
        f.emplace_back("rate", rate);
        f.emplace_back("per", period);
      } else {
        f.emplace_back("refill_tokens", rate);
        f.emplace_back("refill_interval", period);
      }
      break;
    case Algorithm::kGcra:
      f.emplace_back("limit", rate);
      f.emplace_back("period", period);
      f.emplace_back("burst", quota);
      break;
    case Algorithm::kConcurrency:
      f.emplace_back("limit", quota);
      f.emplace_back("lease_timeout", period);
      break;
    case Algorithm::kSlidingLog:
    case Algorithm::kSlidingWindow:
    case Algorithm::kFixedWindow:
      f.emplace_back("limit", quota);
      f.emplace_back("period", period);
      break;
  }
  return f;
}

// --- validation ---------------------------------------------------------------------------------

namespace {

class Validator {
 public:
  explicit Validator(const Config& c) : c_(c) {}

  std::vector<Problem> run() {
    if (!parse_listen_address(c_.listen)) {
      add("listen", "must be host:port with an IP address or localhost, got \"" + c_.listen + "\"");
    }
    if (c_.admin_listen != "off" && !parse_listen_address(c_.admin_listen)) {
      add("admin_listen", "must be host:port with an IP address or localhost, or off, got \"" + c_.admin_listen + "\"");
    }
    if (c_.store != "local" && c_.store.rfind("redis://", 0) != 0 &&
        c_.store.rfind("redis-cluster://", 0) != 0) {
      add("store", "must be local, redis://host:port or redis-cluster://host:port,host:port");
    } else if (c_.store != "local") {
      // Read as the gateway will read it at start, so that no check lets through what cannot start.
      if (auto address = redis::parse_address(c_.store); !address) add("store", address.error().message);
    }
    if (c_.store_timeout < std::chrono::milliseconds(1) || c_.store_timeout > std::chrono::minutes(1)) {
      add("store_timeout", "must be between 1ms and 1m, got " + format_duration(c_.store_timeout));
    }
    if (c_.fleet_size < 1 || c_.fleet_size > Config::kMaxFleetSize) {
      add("fleet_size", "must be between 1 and " + std::to_string(Config::kMaxFleetSize) + ", got " +
                            std::to_string(c_.fleet_size));
    }
    if (!valid_header_name(c_.system_key_header)) {
      add("system_key_header", "must be a header name, got \"" + c_.system_key_header + "\"");
    } else if (header_of_sluices_own(c_.system_key_header)) {
      add("system_key_header", "cannot be " + c_.system_key_header +
                                   ": the gateway reads that header for its own ends (a caller's API key, or "
                                   "the message's framing or connection)");
    }
    if (c_.max_body_bytes < 0) add("max_body_bytes", "must not be negative");
    if (c_.header_timeout < std::chrono::milliseconds(1)) add("header_timeout", "must be at least 1ms");
    if (c_.send_timeout < std::chrono::milliseconds(1)) add("send_timeout", "must be at least 1ms");
    if (c_.drain_delay < Nanos{0} || c_.drain_delay > Config::kMaxDrainDelay) {
      add("drain_delay", "must be between 0s and " + format_duration(Config::kMaxDrainDelay) + ", got " +
                             format_duration(c_.drain_delay));
    }
    if (c_.drain_timeout < Nanos{0}) add("drain_timeout", "must not be negative");
    if (c_.access_log.empty()) add("access_log", "must be stdout, off or a file path");
    using Networks = std::pair<const char*, const std::vector<std::string>*>;
    for (const auto& [name, networks] : {Networks{"decide_client_ip_from", &c_.decide_client_ip_from},
                                         Networks{"trusted_proxies", &c_.trusted_proxies}}) {
      for (std::size_t i = 0; i < networks->size(); ++i) {
        const std::optional<Network> network = parse_network((*networks)[i]);
        const std::string at = std::string(name) + "[" + std::to_string(i) + "]";
        if (!network) {
          add(at, "must be an IP address or a range such as 10.0.0.0/8, got \"" + (*networks)[i] + "\"");
        } else if (network->prefix == 0 && networks == &c_.trusted_proxies) {
          add(at, "is every address: every client's X-Forwarded-For would be believed; name the proxies in front "
                  "of sluice");
        }
      }
    }

    std::set<std::string> upstreams;
    for (std::size_t i = 0; i < c_.upstreams.size(); ++i) upstream(i, upstreams);
    std::set<std::string> interfaces;
    for (std::size_t i = 0; i < c_.interfaces.size(); ++i) interface(i, interfaces, upstreams);
    routes();
    std::set<std::string> systems;
    for (std::size_t i = 0; i < c_.systems.size(); ++i) system(i, systems, interfaces);
    std::set<std::pair<std::string, std::string>> grants;
    for (std::size_t i = 0; i < c_.grants.size(); ++i) grant(i, grants);
    return std::move(problems_);
  }

 private:
  void add(std::string path, std::string message) {
    problems_.push_back(Problem{std::move(path), std::move(message)});
  }

  static bool valid_header_name(std::string_view name) {
    if (name.empty()) return false;
    return std::all_of(name.begin(), name.end(), [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) != 0 ||
             std::string_view("!#$%&'*+-.^_`|~").find(ch) != std::string_view::npos;
    });
  }

  // Refuses an id, key or name longer than kMaxIdBytes.
  void length(const std::string& path, const std::string& value) {
    if (value.size() > kMaxIdBytes) {
      add(path, "must be at most " + std::to_string(kMaxIdBytes) + " bytes long, got " + std::to_string(value.size()));
    }
  }

  // Refuses an id the admin API's URLs could not name: browsers and HTTP clients take "." and ".."
  // (and %2E%2E) for steps in the path, so /admin/v1/systems/.. would be the API's root.
  void addressable(const std::string& path, const std::string& value) {
    if (value == "." || value == "..") add(path, "cannot be \"" + value + "\": a URL cannot name it");
  }

  // The limits of `owner` (a system's key, an interface's id, "system/interface" for a grant), whose
  // unnamed ones are called after it (see the gateway's Snapshot): a name given may be none of
  // theirs either, or two limits would answer to it (in RateLimit fields, the admin API's peeks
  // and resets).
  // in_flight: the name of the interface's in-flight limit, when it has one.
  void limits(const std::string& at, const std::string& owner, const std::vector<LimitRule>& rules,
              const std::string& in_flight = "") {
    const auto count = static_cast<std::size_t>(
        std::count_if(rules.begin(), rules.end(), [](const LimitRule& r) { return r.name.empty(); }));
    std::map<std::string, std::string> taken;  // the names limits get without one given: whose
    for (std::size_t i = 0; i < rules.size(); ++i) {
      if (rules[i].name.empty()) {
        taken.emplace(unnamed_limit_name(owner, count, i), "the unnamed limit at " + at + ".limits[" + std::to_string(i) + "]");
      }
    }
    if (!in_flight.empty()) taken.emplace(in_flight, "the in-flight limit of " + at + ".concurrency");
    std::set<std::string> names;
    for (std::size_t i = 0; i < rules.size(); ++i) {
      const LimitRule& r = rules[i];
      const std::string path = at + ".limits[" + std::to_string(i) + "]";
      if (const auto it = taken.find(r.name); !r.name.empty() && it != taken.end()) {
        add(path + ".name", "\"" + r.name + "\" is the name " + it->second + " gets: give one of them another");
      } else if (!r.name.empty() && !names.insert(r.name).second) {
        add(path + ".name", "\"" + r.name + "\" names another limit of the same owner too");
      }
      length(path + ".name", r.name);
      if (r.name.find_first_of("\"\\") != std::string::npos || has_control_characters(r.name)) {
        add(path + ".name", "must not contain quotes, backslashes or control characters");
      }
      if ((r.key_by == KeyBy::kHeader && !valid_header_name(r.key_name)) ||
          (r.key_by == KeyBy::kQuery && r.key_name.empty())) {
        add(path + ".key_by", "names no header or query parameter");
      }
    }
  }

  void upstream(std::size_t i, std::set<std::string>& names) {
    const Upstream& u = c_.upstreams[i];
    const std::string at = "upstreams[" + std::to_string(i) + "]";
    if (u.name.empty()) add(at + ".name", "is required");
    if (has_control_characters(u.name)) add(at + ".name", "must not hold control characters");
    length(at + ".name", u.name);
    addressable(at + ".name", u.name);
    if (!u.name.empty() && !names.insert(u.name).second) {
      add(at + ".name", "\"" + u.name + "\" is the name of another upstream too");
    }
    if (u.targets.empty()) add(at + ".targets", "needs at least one host:port");
    for (std::size_t j = 0; j < u.targets.size(); ++j) target(at + ".targets[" + std::to_string(j) + "]", u.targets[j]);
    if (u.connect_timeout < std::chrono::milliseconds(1)) add(at + ".connect_timeout", "must be at least 1ms");
    if (u.timeout < std::chrono::milliseconds(1)) add(at + ".timeout", "must be at least 1ms");
    if (u.max_idle_connections < 0) add(at + ".max_idle_connections", "must not be negative");
    for (std::size_t j = 0; j < u.failure_statuses.size(); ++j) {
      if (u.failure_statuses[j] < 100 || u.failure_statuses[j] > 599) {
        add(at + ".failure_statuses[" + std::to_string(j) + "]", "must be an HTTP status from 100 to 599");
      }
    }
    if (u.breaker.enabled) {
      for (const Error& e : u.breaker.options.problems()) {
        const std::string& m = e.message;
        const std::size_t space = m.find(' ');
        const std::string field = m.substr(0, space);
        static const std::set<std::string> kFields{
            "failure_rate",  "slow_call_rate", "jitter_percent",       "window_size",
            "minimum_calls", "half_open_probes", "backoff_multiplier", "consecutive_failures",
            "window_duration", "open_for",     "max_open_for", "slow_call"};
        if (kFields.count(field) != 0) {
          add(at + ".breaker." + (field == "window_size" || field == "window_duration" ? "window" : field),
              m.substr(space + 1));
        } else {
          add(at + ".breaker", m);
        }
      }
    }
  }

  // A target host:port reads (parse_target) that no connection could reach: a URL, as nginx's
  // proxy_pass takes ("http://app:8081" reads as the host "http://app"), or port 0.
  void target(const std::string& at, const Target& t) {
    const std::size_t scheme = t.host.find("://");
    const std::string text = scheme == std::string::npos ? to_string(t) : t.host + ":" + std::to_string(t.port);
    if (scheme != std::string::npos) {
      add(at, "\"" + text + "\" is a URL: give host:port (" + to_string(Target{t.host.substr(scheme + 3), t.port}) +
                  "); sluice speaks plain HTTP/1.1 to its upstreams");
    } else if (t.host.find_first_of("/?#@ \t") != std::string::npos) {
      add(at, "\"" + text + "\" is not host:port");
    } else if (t.port == 0) {
      add(at, "\"" + text + "\": port 0 is no port to connect to");
    }
  }

  void interface(std::size_t i, std::set<std::string>& ids, const std::set<std::string>& upstreams) {
    const Interface& f = c_.interfaces[i];
    const std::string at = "interfaces[" + std::to_string(i) + "]";
    if (f.id.empty()) add(at + ".id", "is required");
    if (f.id == "*") add(at + ".id", "\"*\" stands for every interface and cannot be an id");
    if (has_control_characters(f.id)) add(at + ".id", "must not hold control characters");
    length(at + ".id", f.id);
    addressable(at + ".id", f.id);
    if (!f.id.empty() && !ids.insert(f.id).second) {
      add(at + ".id", "\"" + f.id + "\" is the id of another interface too");
    }
    std::string error;
    if (!PathPattern::parse(f.path, &error)) add(at + ".path", error);
    for (std::size_t j = 0; j < f.methods.size(); ++j) {
      const std::string& m = f.methods[j];
      if (m.empty() || !std::all_of(m.begin(), m.end(), [](char ch) { return std::isupper(ch); })) {
        add(at + ".methods[" + std::to_string(j) + "]", "must be an HTTP method in capitals, like GET");
      }
    }
    if (f.upstream.empty()) {
      add(at + ".upstream", "is required");
    } else if (upstreams.count(f.upstream) == 0) {
      add(at + ".upstream", "names no upstream: \"" + f.upstream + "\"");
    }
    if (f.concurrency && (*f.concurrency < 1 || *f.concurrency > kMaxLimit)) {
      add(at + ".concurrency", "must be between 1 and 2^40");
    }
    if (f.concurrency_lease_timeout) {
      if (!f.concurrency) {
        add(at + ".concurrency_lease_timeout", "is given without concurrency");
      } else if (Status s = check_period("lease timeout", *f.concurrency_lease_timeout); !s) {
        add(at + ".concurrency_lease_timeout", s.error().message);
      }
    }
    if (f.timeout && *f.timeout < std::chrono::milliseconds(1)) add(at + ".timeout", "must be at least 1ms");
    limits(at, f.id, f.limits, f.concurrency ? in_flight_limit_name(f.id) : "");
  }

  // Two interfaces must not claim the same request: same pattern shape, overlapping methods.
  void routes() {
    std::map<std::string, std::vector<std::size_t>> by_shape;
    for (std::size_t i = 0; i < c_.interfaces.size(); ++i) {
      std::string error;
      if (auto p = PathPattern::parse(c_.interfaces[i].path, &error)) by_shape[p->shape()].push_back(i);
    }
    for (const auto& [shape, list] : by_shape) {
      for (std::size_t a = 0; a < list.size(); ++a) {
        for (std::size_t b = 0; b < a; ++b) {
          const Interface& x = c_.interfaces[list[a]];
          const Interface& y = c_.interfaces[list[b]];
          bool overlap = x.methods.empty() || y.methods.empty();
          for (const std::string& m : x.methods) {
            overlap = overlap || std::find(y.methods.begin(), y.methods.end(), m) != y.methods.end();
          }
          if (overlap) {
            add("interfaces[" + std::to_string(list[a]) + "].path",
                "\"" + x.path + "\" claims the same requests as interface \"" + y.id + "\" (" + y.path + ")");
          }
        }
      }
    }
  }

  void system(std::size_t i, std::set<std::string>& keys, const std::set<std::string>& interfaces) {
    const System& s = c_.systems[i];
    const std::string at = "systems[" + std::to_string(i) + "]";
    if (s.key.empty()) add(at + ".key", "is required");
    // A caller sends it as a header field's value, which holds no control character and loses the
    // spaces around it: such a key could never be matched.
    if (has_control_characters(s.key) || (!s.key.empty() && (s.key.front() == ' ' || s.key.back() == ' '))) {
      add(at + ".key", "must not hold control characters, nor begin or end with a space");
    }
    length(at + ".key", s.key);
    addressable(at + ".key", s.key);
    if (!s.key.empty() && !keys.insert(s.key).second) {
      add(at + ".key", "\"" + s.key + "\" is the key of another system too");
    }
    for (std::size_t j = 0; j < s.interfaces.size(); ++j) {
      if (interfaces.count(s.interfaces[j]) == 0) {
        add(at + ".interfaces[" + std::to_string(j) + "]", "names no interface: \"" + s.interfaces[j] + "\"");
      }
    }
    credentials(at, s);
    limits(at, s.key, s.limits);
  }

  void credentials(const std::string& at, const System& s) {
    std::set<std::string> ids;
    for (std::size_t j = 0; j < s.credentials.size(); ++j) {
      const Credential& c = s.credentials[j];
      const std::string path = at + ".credentials[" + std::to_string(j) + "]";
      if (c.id.empty()) add(path + ".id", "is required");
      if (has_control_characters(c.id)) add(path + ".id", "must not hold control characters");
      length(path + ".id", c.id);
      addressable(path + ".id", c.id);  // DELETE /admin/v1/systems/{key}/credentials/{id} names it
      if (!c.id.empty() && !ids.insert(c.id).second) {
        add(path + ".id", "\"" + c.id + "\" is the id of another credential of this system too");
      }
      if (c.kind == Auth::kApiKey) {
        const bool hex = c.api_key_sha256.size() == 64 &&
                         std::all_of(c.api_key_sha256.begin(), c.api_key_sha256.end(),
                                     [](char ch) { return std::isxdigit(static_cast<unsigned char>(ch)) != 0; });
        if (!hex) add(path + ".api_key_sha256", "must be the API key's SHA-256 in 64 hex digits");
        // Compared as the bytes the gateway looks keys up by: "AB" and "ab" are the same key.
        std::string lower = c.api_key_sha256;
        std::transform(lower.begin(), lower.end(), lower.begin(),
                       [](char ch) { return static_cast<char>(std::tolower(static_cast<unsigned char>(ch))); });
        if (hex && !api_keys_.insert(std::move(lower)).second) {
          add(path + ".api_key_sha256", "another credential has the same API key");
        }
        if (!c.sealed_secret.empty()) add(path + ".sealed_secret", "belongs to hmac credentials only");
      } else if (c.kind == Auth::kHmac) {
        if (!c.sealed_secret.starts_with("v1:")) {
          add(path + ".sealed_secret", "must be a secret sealed with SLUICE_SECRET_KEY (\"v1:...\")");
        }
        if (!c.api_key_sha256.empty()) add(path + ".api_key_sha256", "belongs to api_key credentials only");
      } else {
        add(path + ".kind", "must be api_key or hmac");
      }
    }
  }

  void grant(std::size_t i, std::set<std::pair<std::string, std::string>>& pairs) {
    const Grant& g = c_.grants[i];
    const std::string at = "grants[" + std::to_string(i) + "]";
    const auto sys = std::find_if(c_.systems.begin(), c_.systems.end(),
                                  [&](const System& s) { return s.key == g.system; });
    const auto itf = std::find_if(c_.interfaces.begin(), c_.interfaces.end(),
                                  [&](const Interface& f) { return f.id == g.interface; });
    if (sys == c_.systems.end()) add(at + ".system", "names no system: \"" + g.system + "\"");
    if (itf == c_.interfaces.end()) add(at + ".interface", "names no interface: \"" + g.interface + "\"");
    if (sys != c_.systems.end() && itf != c_.interfaces.end() && !itf->is_public &&
        !sys->all_interfaces &&
        std::find(sys->interfaces.begin(), sys->interfaces.end(), g.interface) == sys->interfaces.end()) {
      add(at, "system \"" + g.system + "\" may not call interface \"" + g.interface +
                  "\": add it to the system's interfaces");
    }
    if (!pairs.insert({g.system, g.interface}).second) {
      add(at, "another grant is for the same system and interface");
    }
    limits(at, g.system + "/" + g.interface, g.limits);
  }

  const Config& c_;
  std::vector<Problem> problems_;
  std::set<std::string> api_keys_;  // SHA-256s seen so far, across systems
};

}  // namespace

std::vector<Problem> validate(const Config& config) { return Validator(config).run(); }

namespace {

// write_problems' pass: the rules, and where `before` has the same value already.
class WriteRules {
 public:
  WriteRules(const Config& config, const Config* before) : c_(config), before_(before) {}

  std::vector<Problem> run() {
    for (std::size_t i = 0; i < c_.upstreams.size(); ++i) {
      const Upstream& u = c_.upstreams[i];
      if (!had_upstream(u.name)) legible("upstreams[" + std::to_string(i) + "].name", u.name);
    }
    for (std::size_t i = 0; i < c_.interfaces.size(); ++i) {
      const Interface& f = c_.interfaces[i];
      const std::string at = "interfaces[" + std::to_string(i) + "]";
      const Interface* was = before_ != nullptr ? find_by(before_->interfaces, &Interface::id, f.id) : nullptr;
      if (was == nullptr) legible(at + ".id", f.id);
      if (was == nullptr || was->description != f.description) description(at + ".description", f.description);
      limits(at, f.limits, was != nullptr ? &was->limits : nullptr);
    }
    for (std::size_t i = 0; i < c_.systems.size(); ++i) {
      const System& s = c_.systems[i];
      const std::string at = "systems[" + std::to_string(i) + "]";
      const System* was = before_ != nullptr ? find_by(before_->systems, &System::key, s.key) : nullptr;
      if (was == nullptr) legible(at + ".key", s.key);
      if (was == nullptr || was->description != s.description) description(at + ".description", s.description);
      for (std::size_t j = 0; j < s.credentials.size(); ++j) {
        const std::string& id = s.credentials[j].id;
        if (was == nullptr || find_by(was->credentials, &Credential::id, id) == nullptr) {
          legible(at + ".credentials[" + std::to_string(j) + "].id", id);
        }
      }
      limits(at, s.limits, was != nullptr ? &was->limits : nullptr);
    }
    for (std::size_t i = 0; i < c_.grants.size(); ++i) {
      const Grant& g = c_.grants[i];
      const Grant* was = nullptr;
      if (before_ != nullptr) {
        for (const Grant& b : before_->grants) {
          if (b.system == g.system && b.interface == g.interface) was = &b;
        }
      }
      limits("grants[" + std::to_string(i) + "]", g.limits, was != nullptr ? &was->limits : nullptr);
    }
    return std::move(problems_);
  }

 private:
  template <class T>
  static const T* find_by(const std::vector<T>& list, std::string T::*field, const std::string& value) {
    for (const T& x : list) {
      if (x.*field == value) return &x;
    }
    return nullptr;
  }

  bool had_upstream(const std::string& name) const {
    return before_ != nullptr && find_by(before_->upstreams, &Upstream::name, name) != nullptr;
  }

  void limits(const std::string& at, const std::vector<LimitRule>& rules, const std::vector<LimitRule>* was) {
    for (std::size_t j = 0; j < rules.size(); ++j) {
      if (was == nullptr || find_by(*was, &LimitRule::name, rules[j].name) == nullptr) {
        legible(at + ".limits[" + std::to_string(j) + "].name", rules[j].name);
      }
    }
  }

  void legible(const std::string& path, const std::string& value) {
    if (has_invisible_characters(value)) {
      problems_.push_back(Problem{path, "must not hold invisible characters or bytes that are not UTF-8"});
    }
  }

  void description(const std::string& path, const std::string& value) {
    if (value.size() > kMaxDescriptionBytes) {
      problems_.push_back(Problem{path, "must be at most " + std::to_string(kMaxDescriptionBytes) +
                                            " bytes long, got " + std::to_string(value.size())});
    }
  }

  const Config& c_;
  const Config* before_;
  std::vector<Problem> problems_;
};

}  // namespace

std::vector<Problem> write_problems(const Config& config, const Config* before) {
  return WriteRules(config, before).run();
}

}  // namespace sluice::config
