#include "config/json.h"

#include <boost/json/basic_parser_impl.hpp>
#include <boost/json/serialize.hpp>
#include <charconv>
#include <unordered_set>
#include <vector>

#include "core/duration.h"

namespace sluice::config {
namespace {

namespace json = boost::json;

// A limit field as JSON: a number when it is a whole number, the text otherwise (durations).
json::value field_value(const std::string& text) {
  std::int64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc() && ptr == text.data() + text.size()) return v;
  return json::string(text);
}

json::array limits_json(const std::vector<LimitRule>& rules) {
  json::array out;
  for (const LimitRule& r : rules) out.push_back(to_json(r));
  return out;
}

json::array strings_json(const std::vector<std::string>& v) {
  json::array out;
  for (const std::string& s : v) out.push_back(json::string(s));
  return out;
}

json::object breaker_json(const Breaker& b) {
  const CircuitBreakerOptions& o = b.options;
  json::object out;
  out["enabled"] = b.enabled;
  out["force"] = to_string(b.force);
  if (o.window == BreakerWindow::kCount) {
    out["window"] = o.window_size;
  } else {
    out["window"] = format_duration(o.window_duration);
  }
  out["minimum_calls"] = o.minimum_calls;
  out["failure_rate"] = o.failure_rate;
  out["slow_call_rate"] = o.slow_call_rate;
  out["slow_call"] = format_duration(o.slow_call);
  out["consecutive_failures"] = o.consecutive_failures;
  out["open_for"] = format_duration(o.open_for);
  out["max_open_for"] = format_duration(o.max_open_for);
  out["backoff_multiplier"] = o.backoff_multiplier;
  out["jitter_percent"] = o.jitter_percent;
  out["half_open_probes"] = o.half_open_probes;
  return out;
}

void pretty_to(std::string& out, const json::value& v, int indent) {
  const std::string pad(static_cast<std::size_t>(indent + 2), ' ');
  if (v.is_object() && !v.as_object().empty()) {
    out += "{\n";
    bool first = true;
    for (const auto& kv : v.as_object()) {
      if (!first) out += ",\n";
      first = false;
      out += pad + json::serialize(json::string(kv.key())) + ": ";
      pretty_to(out, kv.value(), indent + 2);
    }
    out += "\n" + std::string(static_cast<std::size_t>(indent), ' ') + "}";
  } else if (v.is_array() && !v.as_array().empty()) {
    const bool flat = std::all_of(v.as_array().begin(), v.as_array().end(),
                                  [](const json::value& e) { return !e.is_object() && !e.is_array(); });
    if (flat) {
      out += json::serialize(v);
      return;
    }
    out += "[\n";
    bool first = true;
    for (const json::value& e : v.as_array()) {
      if (!first) out += ",\n";
      first = false;
      out += pad;
      pretty_to(out, e, indent + 2);
    }
    out += "\n" + std::string(static_cast<std::size_t>(indent), ' ') + "]";
  } else {
    out += json::serialize(v);
  }
}

}  // namespace

json::object to_json(const LimitRule& r) {
  json::object out;
  if (!r.name.empty()) out["name"] = r.name;
  for (const auto& [k, v] : limit_fields(r.limit)) out[k] = field_value(v);
  switch (r.key_by) {
    case KeyBy::kOwner: out["key_by"] = "owner"; break;
    case KeyBy::kClientIp: out["key_by"] = "client_ip"; break;
    case KeyBy::kHeader: out["key_by"] = "header:" + r.key_name; break;
    case KeyBy::kQuery: out["key_by"] = "query:" + r.key_name; break;
  }
  out["on_store_failure"] = to_string(r.on_store_failure);
  out["shadow"] = r.shadow;
  return out;
}

json::object to_json(const Upstream& u) {
  json::object out;
  out["name"] = u.name;
  json::array targets;
  for (const Target& t : u.targets) targets.push_back(json::string(to_string(t)));
  out["targets"] = std::move(targets);
  out["connect_timeout"] = format_duration(u.connect_timeout);
  out["timeout"] = format_duration(u.timeout);
  out["max_idle_connections"] = u.max_idle_connections;
  json::array statuses;
  for (std::int32_t s : u.failure_statuses) statuses.push_back(s);
  out["failure_statuses"] = std::move(statuses);
  out["breaker"] = breaker_json(u.breaker);
  return out;
}

json::object to_json(const Credential& c) {
  json::object out;
  out["id"] = c.id;
  out["kind"] = to_string(c.kind);
  if (c.kind == Auth::kApiKey) out["api_key_sha256"] = c.api_key_sha256;
  if (c.kind == Auth::kHmac) out["sealed_secret"] = c.sealed_secret;
  out["created"] = format_time(c.created);
  out["expires"] = c.expires ? json::value(format_time(*c.expires)) : json::value(nullptr);
  return out;
}

json::object to_json(const System& s) {
  json::object out;
  out["key"] = s.key;
  out["description"] = s.description;
  out["enabled"] = s.enabled;
  out["auth"] = to_string(s.auth);
  // None: no field, as in YAML, so that an export imported back (where credentials: [] removes
  // every credential) keeps those made since.
  if (!s.credentials.empty()) {
    json::array credentials;
    for (const Credential& c : s.credentials) credentials.push_back(to_json(c));
    out["credentials"] = std::move(credentials);
  }
  std::vector<std::string> ids = s.interfaces;
  if (s.all_interfaces) ids.insert(ids.begin(), "*");
  out["interfaces"] = strings_json(ids);
  out["limits"] = limits_json(s.limits);
  return out;
}

json::object to_json(const Interface& f) {
  json::object out;
  out["id"] = f.id;
  out["description"] = f.description;
  out["methods"] = strings_json(f.methods);
  out["path"] = f.path;
  out["upstream"] = f.upstream;
  out["enabled"] = f.enabled;
  out["public"] = f.is_public;
  out["concurrency"] = f.concurrency ? json::value(*f.concurrency) : json::value(nullptr);
  out["concurrency_lease_timeout"] =
      f.concurrency_lease_timeout ? json::value(format_duration(*f.concurrency_lease_timeout)) : json::value(nullptr);
  out["timeout"] = f.timeout ? json::value(format_duration(*f.timeout)) : json::value(nullptr);
  out["limits"] = limits_json(f.limits);
  return out;
}

json::object to_json(const Grant& g) {
  json::object out;
  out["system"] = g.system;
  out["interface"] = g.interface;
  out["limits"] = limits_json(g.limits);
  return out;
}

json::object settings_json(const Config& c) {
  json::object out;
  out["listen"] = c.listen;
  out["admin_listen"] = c.admin_listen;
  out["store"] = c.store;
  out["fleet_size"] = c.fleet_size;
  out["store_timeout"] = format_duration(c.store_timeout);
  out["system_key_header"] = c.system_key_header;
  out["language"] = to_string(c.language);
  out["rate_limit_headers"] = to_string(c.rate_limit_headers);
  out["max_body_bytes"] = c.max_body_bytes;
  out["header_timeout"] = format_duration(c.header_timeout);
  // Newer than the other settings: left out at its default, so that a database this version writes
  // still reads in the one before (a fleet upgraded one gateway at a time).
  if (c.send_timeout != Config{}.send_timeout) out["send_timeout"] = format_duration(c.send_timeout);
  if (c.drain_delay != Config{}.drain_delay) out["drain_delay"] = format_duration(c.drain_delay);  // as send_timeout
  out["drain_timeout"] = format_duration(c.drain_timeout);
  out["access_log"] = c.access_log;
  if (c.decide_client_ip_from != Config{}.decide_client_ip_from) {  // as send_timeout
    json::array from;
    for (const std::string& s : c.decide_client_ip_from) from.push_back(json::string(s));
    out["decide_client_ip_from"] = std::move(from);
  }
  if (!c.trusted_proxies.empty()) {
    json::array proxies;
    for (const std::string& s : c.trusted_proxies) proxies.push_back(json::string(s));
    out["trusted_proxies"] = std::move(proxies);
  }
  return out;
}

json::object to_json(const Config& c) {
  json::object out = settings_json(c);
  json::array upstreams;
  for (const Upstream& u : c.upstreams) upstreams.push_back(to_json(u));
  json::array systems;
  for (const System& s : c.systems) systems.push_back(to_json(s));
  json::array interfaces;
  for (const Interface& f : c.interfaces) interfaces.push_back(to_json(f));
  json::array grants;
  for (const Grant& g : c.grants) grants.push_back(to_json(g));
  out["upstreams"] = std::move(upstreams);
  out["systems"] = std::move(systems);
  out["interfaces"] = std::move(interfaces);
  out["grants"] = std::move(grants);
  return out;
}

std::string pretty(const json::value& value) {
  std::string out;
  pretty_to(out, value, 0);
  return out + "\n";
}

namespace {

// A basic_parser handler that stops at the first key an object has twice, and keeps its path.
class RepeatedKeys {
 public:
  static constexpr std::size_t max_object_size = std::size_t(-1);
  static constexpr std::size_t max_array_size = std::size_t(-1);
  static constexpr std::size_t max_key_size = std::size_t(-1);
  static constexpr std::size_t max_string_size = std::size_t(-1);

  std::optional<std::string> repeated;

  bool on_document_begin(boost::system::error_code&) { return true; }
  bool on_document_end(boost::system::error_code&) { return true; }
  bool on_array_begin(boost::system::error_code&) { return open(); }
  bool on_array_end(std::size_t, boost::system::error_code&) { return close(); }
  bool on_object_begin(boost::system::error_code&) { return open(); }
  bool on_object_end(std::size_t, boost::system::error_code&) { return close(); }
  bool on_string_part(std::string_view, std::size_t, boost::system::error_code&) { return true; }
  bool on_string(std::string_view, std::size_t, boost::system::error_code&) { return true; }
  bool on_key_part(std::string_view s, std::size_t, boost::system::error_code&) {
    part_.append(s);
    return true;
  }
  bool on_key(std::string_view s, std::size_t, boost::system::error_code& ec) {
    part_.append(s);
    Open& o = open_.back();
    if (!o.keys.insert(part_).second) {
      std::string path;
      for (const Open& outer : open_) {
        if (!outer.outer_key.empty()) path.append(outer.outer_key).append(".");
      }
      repeated = path + part_;
      ec = boost::json::error::syntax;  // stops the parse
      return false;
    }
    key_ = std::move(part_);
    part_.clear();
    return true;
  }
  bool on_number_part(std::string_view, boost::system::error_code&) { return true; }
  bool on_int64(std::int64_t, std::string_view, boost::system::error_code&) { return true; }
  bool on_uint64(std::uint64_t, std::string_view, boost::system::error_code&) { return true; }
  bool on_double(double, std::string_view, boost::system::error_code&) { return true; }
  bool on_bool(bool, boost::system::error_code&) { return true; }
  bool on_null(boost::system::error_code&) { return true; }
  bool on_comment_part(std::string_view, boost::system::error_code&) { return true; }
  bool on_comment(std::string_view, boost::system::error_code&) { return true; }

 private:
  struct Open {
    std::unordered_set<std::string> keys;  // an object's, so far
    std::string outer_key;          // the key it is the value of ("" in an array or at the top)
  };
  bool open() {
    open_.push_back(Open{{}, std::move(key_)});
    key_.clear();
    return true;
  }
  bool close() {
    open_.pop_back();
    key_.clear();
    return true;
  }
  std::vector<Open> open_;
  std::string key_;   // the key whose value comes next
  std::string part_;  // a key read in parts
};

}  // namespace

std::optional<std::string> repeated_key(std::string_view text) {
  json::basic_parser<RepeatedKeys> parser(json::parse_options{});
  boost::system::error_code ec;
  parser.write_some(false, text.data(), text.size(), ec);
  return std::move(parser.handler().repeated);
}

}  // namespace sluice::config
