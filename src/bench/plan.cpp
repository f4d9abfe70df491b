#include "bench/plan.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <string_view>

#include <boost/url/ipv4_address.hpp>
#include <boost/url/ipv6_address.hpp>
#include <boost/url/parse.hpp>
#include <boost/url/url_view.hpp>

#include "core/duration.h"

namespace sluice::bench {
namespace {

using namespace std::chrono_literals;

constexpr std::uint64_t kMaxBurst = 100'000;
constexpr int kMaxConnections = 100'000;
constexpr double kMaxRate = 10'000'000;
// One request in about 11.6 days: a slower rate is not a load, and its schedule (in nanoseconds
// from the start, 64 bits) would overflow within a few requests.
constexpr double kMinRate = 1e-6;
// The last request of a schedule is due within this (a little under the 292 years that nanoseconds
// in 64 bits hold).
constexpr double kMaxScheduleSeconds = 9e9;

// "1 request", "2 requests".
std::string requests_text(std::uint64_t n) {
  return std::to_string(n) + (n == 1 ? " request" : " requests");
}

std::string format_rate(double rate) {
  std::ostringstream out;
  out << rate;
  return out.str();
}

Error bad(std::string message) { return invalid_argument(std::move(message)); }

bool is_token(std::string_view s) {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) ||
           std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
  });
}

// Whether a header value holds what a field's value cannot (RFC 9110 5.5): a control character
// other than a tab, a line break among them.
bool has_control(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) {
    return (static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f;
  });
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::optional<double> parse_rate(std::string_view s) {
  s = trim(s);
  double value = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || ptr != s.data() + s.size() || s.empty() || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

Result<Nanos> parse_positive_duration(std::string_view flag, const std::string& text) {
  const std::optional<Nanos> d = parse_duration(text);
  // A whole number and a unit that reads with a smaller number: the number is too large.
  const std::size_t unit = text.find_first_not_of("0123456789");
  if (!d && unit > 0 && unit != std::string::npos && parse_duration("1" + text.substr(unit))) {
    return bad(std::string(flag) + ": '" + text + "' is too long: at most 106751d");
  }
  if (!d) {
    return bad(std::string(flag) + ": '" + text +
               "' is not a duration; write a whole number and a unit, e.g. 500ms, 10s, 2m");
  }
  if (d->count() <= 0) return bad(std::string(flag) + " must be longer than 0");
  return *d;
}

// A port as the URL gives it: digits only, 1 to 65535 (Boost.URL's port_number() wraps 99999 to
// 34463, so the text is read here).
std::optional<std::uint16_t> parse_port(std::string_view text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string_view::npos) {
    return std::nullopt;
  }
  std::uint32_t value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || value < 1 || value > 65535) return std::nullopt;
  return static_cast<std::uint16_t>(value);
}

// A host name or an IPv4 address: the characters of a DNS name (RFC 3986 allows more in a
// reg-name, but nothing a resolver would find).
bool is_host_name(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_' ||
           c == '~';
  });
}

// What RFC 3986 refuses in a URL's path, query and fragment (`rest`, from the first '/', '?' or
// '#' on), said plainly (Boost.URL says "leftover" or "invalid"): a character a URL holds only
// percent-encoded, with its encoding, or a '%' that begins no percent-encoded byte.
std::optional<std::string> refused_in_rest(std::string_view rest) {
  const auto allowed = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("-._~!$&'()*+,;=:@/?", c) != nullptr;
  };
  const auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
  bool fragment = false;
  for (std::size_t i = 0; i < rest.size(); ++i) {
    const char c = rest[i];
    if (c == '%') {
      if (i + 2 < rest.size() && hex(rest[i + 1]) && hex(rest[i + 2])) {
        i += 2;
        continue;
      }
      return "'%' must begin a percent-encoded byte of two hex digits (%25 for '%' itself)";
    }
    if (c == '#' && !fragment) {
      fragment = true;
      continue;
    }
    if (!allowed(c)) {
      char encoded[4];
      std::snprintf(encoded, sizeof encoded, "%%%02X", static_cast<unsigned char>(c));
      return std::string("'") + c + "' must be percent-encoded (" + encoded + ")";
    }
  }
  return std::nullopt;
}

Result<Target> parse_target(const std::string& text) {
  // "localhost:8080/x" is taken as http://localhost:8080/x.
  const std::string url = text.find("://") == std::string::npos ? "http://" + text : text;
  const std::size_t scheme_end = url.find("://");
  const std::string_view scheme = std::string_view(url).substr(0, scheme_end);
  if (iequals(scheme, "https")) {
    return bad("'" + text + "': sluice bench speaks plain HTTP/1.1 only; use an http:// URL");
  }
  if (!iequals(scheme, "http")) return bad("'" + text + "': the URL must start with http://");
  // Boost.URL says only "leftover" of these.
  const auto unusable = [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u <= 0x20 || u >= 0x7f;
  };
  if (std::any_of(url.begin(), url.end(), unusable)) {
    return bad("'" + text + "' is not a URL: a space, a control or a non-ASCII character must be percent-encoded "
               "(%20, %C3%A9)");
  }

  // The authority is split off here rather than by Boost.URL, which reads the IPv4 address at the
  // front of "127.0.0.1.:8080" or "127.0.0.1:80:80" and takes the rest for the path.
  const std::size_t authority_begin = scheme_end + 3;
  const std::size_t authority_end = std::min(url.find_first_of("/?#", authority_begin), url.size());
  const std::string_view authority =
      std::string_view(url).substr(authority_begin, authority_end - authority_begin);
  if (authority.find('@') != std::string_view::npos) {
    return bad("'" + text +
               "': user:password@ in the URL is not supported; "
               "send --header 'Authorization: ...' instead");
  }
  if (const auto refused = refused_in_rest(std::string_view(url).substr(authority_end))) {
    return bad("'" + text + "' is not a URL: " + *refused);
  }
  // The rest (path, query, fragment) behind a host that parses one way only.
  const std::string rest = "http://h" + url.substr(authority_end);
  const auto parsed = boost::urls::parse_uri(rest);
  if (!parsed) return bad("'" + text + "' is not a URL (" + parsed.error().message() + ")");

  Target t;
  std::string_view host;
  std::string_view after_host;  // ":port", or nothing
  if (!authority.empty() && authority.front() == '[') {
    const std::size_t close = authority.find(']');
    if (close == std::string_view::npos ||
        !boost::urls::parse_ipv6_address(authority.substr(1, close - 1))) {
      return bad("'" + text + "' is not a URL: '" + std::string(authority) +
                 "' is not an IPv6 address in brackets");
    }
    host = authority.substr(0, close + 1);
    t.host = std::string(authority.substr(1, close - 1));
    after_host = authority.substr(close + 1);
    if (!after_host.empty() && after_host.front() != ':') {
      return bad("'" + text + "' is not a URL: '" + std::string(after_host) +
                 "' after the address");
    }
  } else {
    host = authority.substr(0, authority.find(':'));
    after_host = authority.substr(host.size());
    if (host.empty()) return bad("'" + text + "' has no host");
    if (!is_host_name(host)) {
      return bad("'" + text + "' is not a URL: '" + std::string(host) + "' is not a host name");
    }
    t.host = std::string(host);
    // A name may end in a dot (an absolute name); an address with one is still the address, as
    // browsers read it (WHATWG URL): the resolver would look "127.0.0.1." up as a name.
    if (t.host.size() > 1 && t.host.back() == '.' &&
        boost::urls::parse_ipv4_address(std::string_view(t.host).substr(0, t.host.size() - 1))) {
      t.host.pop_back();
    }
  }
  if (after_host.empty()) {
    t.port = "80";
  } else {
    const std::string_view port_text = after_host.substr(1);
    const std::optional<std::uint16_t> port = parse_port(port_text);
    if (!port) {
      return bad("'" + text + "' has a bad port: '" + std::string(port_text) +
                 "' is not a number from 1 to 65535");
    }
    t.port = std::to_string(*port);
  }
  t.host_header = std::string(authority);
  t.path = std::string(parsed->encoded_target());
  if (t.path.empty() || t.path.front() != '/') t.path.insert(0, "/");
  return t;
}

// The whole of --body-file, or why it cannot be read. With stdio rather than a stream: an
// ifstream opens a directory, and reading it then throws from inside libstdc++ (the process ended
// with "terminate called").
Result<std::string> read_body_file(const std::string& path) {
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  const std::unique_ptr<std::FILE, Closer> file(std::fopen(path.c_str(), "rb"));
  auto cannot_read = [&] {
    return bad("--body-file: cannot read '" + path + "': " + std::strerror(errno));
  };
  if (!file) return cannot_read();
  std::string body;
  char chunk[64 * 1024];
  for (std::size_t n = sizeof chunk; n == sizeof chunk;) {
    n = std::fread(chunk, 1, sizeof chunk, file.get());
    body.append(chunk, n);
  }
  if (std::ferror(file.get())) return cannot_read();
  return body;
}

struct HeaderLine {
  std::string name;
  std::string value;
};

// The fields that say how long the body is: sluice bench writes them from the body it sends.
bool is_length_header(std::string_view name) {
  return iequals(name, "Content-Length") || iequals(name, "Transfer-Encoding");
}

Result<HeaderLine> parse_header(const std::string& text) {
  const auto colon = text.find(':');
  if (colon == std::string::npos) {
    return bad("--header '" + text + "': write it as 'Name: value'");
  }
  HeaderLine h{std::string(trim(std::string_view(text).substr(0, colon))),
               std::string(trim(std::string_view(text).substr(colon + 1)))};
  if (!is_token(h.name))
    return bad("--header '" + text + "': '" + h.name + "' is not a header name");
  if (has_control(h.value)) return bad("--header '" + h.name + "': the value has a line break or another control character");
  if (is_length_header(h.name)) {
    return bad("--header " + h.name + ": sluice bench sets the body's length itself");
  }
  return h;
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (const std::string& p : parts) {
    if (!out.empty()) out += sep;
    out += p;
  }
  return out;
}

// Which of the load flags were given, for messages.
std::vector<std::string> load_flags(const Options& o) {
  std::vector<std::string> given;
  if (o.burst) given.emplace_back("--burst");
  if (o.requests) given.emplace_back("--requests");
  if (o.duration) given.emplace_back("--duration");
  if (o.rate) given.emplace_back("--rate");
  if (o.ramp) given.emplace_back("--ramp");
  return given;
}

Status plan_load(const Options& o, Plan& plan) {
  const std::vector<std::string> given = load_flags(o);
  Nanos duration{0};
  if (o.duration) {
    Result<Nanos> d = parse_positive_duration("--duration", *o.duration);
    if (!d) return d.error();
    duration = *d;
  }
  if (o.burst) {
    if (given.size() > 1) {
      return bad("--burst sends its requests all at once; it cannot be combined with " +
                 join({given.begin() + 1, given.end()}, ", "));
    }
    if (o.connections) {
      return bad("--burst opens one connection per request; leave out --connections");
    }
    if (*o.burst < 1 || *o.burst > kMaxBurst) {
      return bad("--burst must be between 1 and " + std::to_string(kMaxBurst));
    }
    plan.mode = Mode::kBurst;
    plan.requests = *o.burst;
    plan.connections = static_cast<int>(*o.burst);
    plan.bucket = 100ms;
    return {};
  }
  plan.bucket = 1s;
  if (o.requests && *o.requests < 1) return bad("--requests must be at least 1");
  if (o.ramp) {
    if (o.rate) return bad("--ramp FROM:TO already gives the rate; leave out --rate");
    if (o.requests) return bad("--ramp runs for --duration; leave out --requests");
    if (!o.duration)
      return bad("--ramp needs --duration, the time the rate takes to go from FROM to TO");
    const auto colon = o.ramp->find(':');
    const std::optional<double> from =
        colon == std::string::npos ? std::nullopt : parse_rate(o.ramp->substr(0, colon));
    const std::optional<double> to =
        colon == std::string::npos ? std::nullopt : parse_rate(o.ramp->substr(colon + 1));
    if (!from || !to) {
      return bad("--ramp '" + *o.ramp + "': write FROM:TO in requests per second, e.g. 10:500");
    }
    const auto in_range = [](double r) { return r == 0 || (r >= kMinRate && r <= kMaxRate); };
    if (!in_range(*from) || !in_range(*to) || (*from == 0 && *to == 0)) {
      return bad("--ramp rates must be 0 or from 0.000001 to 10000000 per second, not both 0");
    }
    plan.mode = Mode::kRate;
    plan.ramp = true;
    plan.duration = duration;
    plan.schedule = Schedule::ramp(*from, *to, duration);
  } else if (o.rate) {
    if (!(*o.rate >= kMinRate) || *o.rate > kMaxRate) {
      return bad("--rate must be from 0.000001 (one request in 11.6 days) to 10000000 per second");
    }
    if (o.requests && o.duration) {
      return bad("--rate runs for --requests or for --duration, not both");
    }
    plan.mode = Mode::kRate;
    if (o.requests) {
      if (static_cast<double>(*o.requests - 1) / *o.rate > kMaxScheduleSeconds) {
        return bad("--rate " + format_rate(*o.rate) + " for " + std::to_string(*o.requests) +
                   " requests would take over 285 years: give a higher rate or fewer requests");
      }
      plan.schedule = Schedule::constant(*o.rate, *o.requests);
    } else {
      plan.duration = o.duration ? duration : Nanos{10s};
      plan.schedule = Schedule::constant_for(*o.rate, plan.duration);
    }
  } else if (o.requests) {
    if (o.duration) return bad("give --requests or --duration, not both");
    plan.mode = Mode::kRequests;
    plan.requests = *o.requests;
  } else {
    plan.mode = Mode::kDuration;
    plan.duration = o.duration ? duration : Nanos{10s};
  }
  if (plan.schedule) {
    plan.requests = plan.schedule->count();
    if (plan.requests == 0) return bad("the rate and duration given leave no request to send");
  }
  return {};
}

Status plan_requests(const Options& o, Plan& plan) {
  std::string method = o.method;
  std::transform(method.begin(), method.end(), method.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  if (!is_token(method)) return bad("--method '" + o.method + "' is not an HTTP method");
  plan.head = method == "HEAD";

  std::vector<HeaderLine> headers;
  for (const std::string& text : o.headers) {
    Result<HeaderLine> h = parse_header(text);
    if (!h) return h.error();
    // A request has one Host (RFC 9112 3.2: a server answers two with 400); other fields may repeat.
    if (iequals(h->name, "Host") && std::any_of(headers.begin(), headers.end(),
                                                [](const HeaderLine& e) { return iequals(e.name, "Host"); })) {
      return bad("--header Host is given twice: a request has one Host");
    }
    headers.push_back(std::move(h).value());
  }

  if (o.body && o.body_file) return bad("give --body or --body-file, not both");
  std::string body = o.body.value_or("");
  if (o.body_file) {
    Result<std::string> content = read_body_file(*o.body_file);
    if (!content) return content.error();
    body = std::move(content).value();
  }

  if (o.vary_header) {
    const auto eq = o.vary_header->find('=');
    const std::string name =
        eq == std::string::npos ? "" : std::string(trim(o.vary_header->substr(0, eq)));
    if (!is_token(name)) {
      return bad("--vary-header '" + *o.vary_header + "': write it as 'Name=value1,value2,...'");
    }
    std::stringstream values(o.vary_header->substr(eq + 1));
    for (std::string v; std::getline(values, v, ',');) {
      const std::string value(trim(v));
      if (value.empty() || has_control(value)) {
        return bad("--vary-header " + name + ": every value must be non-empty, on one line, without control characters");
      }
      plan.vary_values.push_back(value);
    }
    if (plan.vary_values.empty()) return bad("--vary-header " + name + " has no values");
    if (is_length_header(name)) {
      return bad("--vary-header " + name + ": sluice bench sets the body's length itself");
    }
    // Both would be sent (two Host fields, which a server must answer with 400).
    if (std::any_of(headers.begin(), headers.end(),
                    [&](const HeaderLine& h) { return iequals(h.name, name); })) {
      return bad("--vary-header " + name +
                 ": the header is also given with --header; give it with one of them");
    }
    plan.vary_name = name;
  }

  auto given = [&](std::string_view name) {
    return std::any_of(headers.begin(), headers.end(),
                       [&](const HeaderLine& h) { return iequals(h.name, name); }) ||
           (!plan.vary_name.empty() && iequals(plan.vary_name, name));
  };
  std::string head = method + " " + plan.target.path + " HTTP/1.1\r\n";
  if (!given("Host")) head += "Host: " + plan.target.host_header + "\r\n";
  if (!given("User-Agent")) head += "User-Agent: sluice-bench\r\n";
  for (const HeaderLine& h : headers) {
    head += h.name + ": " + h.value + "\r\n";
    // RFC 9112 9.6: the connection closes after the response to a request that says close, whatever
    // the response says.
    if (iequals(h.name, "Connection")) {
      std::stringstream options(h.value);
      for (std::string option; std::getline(options, option, ',');) plan.close_each |= iequals(trim(option), "close");
    }
  }
  const bool sends_body = !body.empty() || method == "POST" || method == "PUT" || method == "PATCH";
  std::string tail;
  if (sends_body) tail += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  tail += "\r\n";
  tail += body;

  if (plan.vary_values.empty()) {
    plan.wire.push_back(head + tail);
  } else {
    for (const std::string& value : plan.vary_values) {
      plan.wire.push_back(head + plan.vary_name + ": " + value + "\r\n" + tail);
    }
  }
  return {};
}

Status plan_expectations(const Options& o, Plan& plan) {
  if (o.expect_status) {
    std::stringstream list(*o.expect_status);
    for (std::string item; std::getline(list, item, ',');) {
      const std::string_view code = trim(item);
      int value = 0;
      const auto [ptr, ec] = std::from_chars(code.data(), code.data() + code.size(), value);
      if (ec != std::errc() || ptr != code.data() + code.size() || value < 100 || value > 599) {
        return bad("--expect-status '" + *o.expect_status +
                   "': write status codes between 100 and 599, separated by commas");
      }
      plan.expect.status.push_back(value);
    }
    if (plan.expect.status.empty()) return bad("--expect-status needs at least one status code");
  }
  plan.expect.admitted = o.expect_admitted;
  plan.expect.admitted_max = o.expect_admitted_max;
  return {};
}

}  // namespace

Result<Plan> make_plan(const Options& o, int cores) {
  Plan plan;
  plan.url = o.url;
  if (o.url.empty()) return bad("give the URL to load, e.g. http://127.0.0.1:8080/api/orders");
  Result<Target> target = parse_target(o.url);
  if (!target) return target.error();
  plan.target = std::move(target).value();

  if (Status s = plan_load(o, plan); !s) return s.error();

  if (plan.mode != Mode::kBurst) {
    const int connections = o.connections.value_or(Options::kDefaultConnections);
    if (connections < 1 || connections > kMaxConnections) {
      return bad("--connections must be between 1 and " + std::to_string(kMaxConnections));
    }
    plan.connections = connections;
    // No more connections than requests: the rest would only open and close.
    if (plan.requests > 0 && plan.requests < static_cast<std::uint64_t>(connections)) {
      plan.connections = static_cast<int>(plan.requests);
    }
  }
  if (o.threads && (*o.threads < 1 || *o.threads > 1024)) {
    return bad("--threads must be between 1 and 1024");
  }
  plan.threads = std::min(o.threads.value_or(std::max(cores, 1)), plan.connections);

  Result<Nanos> timeout = parse_positive_duration("--timeout", o.timeout);
  if (!timeout) return timeout.error();
  // The runner looks for requests past their time every tenth of it, but at most once a
  // millisecond: a shorter timeout would let answers many times slower count as answered.
  if (*timeout < std::chrono::milliseconds(1)) {
    return bad("--timeout: '" + o.timeout + "' is shorter than the 1ms the runner can keep to");
  }
  plan.timeout = *timeout;

  if (Status s = plan_requests(o, plan); !s) return s.error();
  if (Status s = plan_expectations(o, plan); !s) return s.error();
  return plan;
}

std::string Plan::describe() const {
  const std::string on = " on " + std::to_string(connections) +
                         (connections == 1 ? " connection" : " connections") + ", " +
                         std::to_string(threads) + (threads == 1 ? " thread" : " threads");
  switch (mode) {
    case Mode::kBurst:
      return "burst of " + requests_text(requests) + " written at one instant" + on;
    case Mode::kRequests:
      return requests_text(requests) + ", closed loop" + on;
    case Mode::kDuration:
      return "closed loop for " + format_duration(duration) + on;
    case Mode::kRate:
      if (ramp) {
        return "open loop ramping from " + format_rate(schedule->rate_from()) + " to " +
               format_rate(schedule->rate_to()) + " req/s over " + format_duration(duration) +
               " (" + requests_text(requests) + ")" + on;
      }
      return "open loop at " + format_rate(schedule->rate_from()) + " req/s, " +
             requests_text(requests) +
             (duration.count() > 0 ? " in " + format_duration(duration) : "") + on;
  }
  return {};
}

}  // namespace sluice::bench
