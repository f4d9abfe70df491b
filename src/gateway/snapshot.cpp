#include "gateway/snapshot.h"

#include <algorithm>
#include <map>

namespace sluice::gateway {
namespace {

char scope_char(Scope s) {
  switch (s) {
    case Scope::kSystem: return 's';
    case Scope::kInterface: return 'i';
    case Scope::kGrant: return 'g';
    case Scope::kInFlight: return 'f';
  }
  return '?';
}

// A name as part of a store key: its '|' (which parts the key) and '%' escaped, so that no two
// keys meet whatever ids, limit names and header or parameter names hold (a caller's value comes
// last, and may hold anything). A name without either is as it is: its counters carry over.
std::string key_part(std::string_view name) {
  std::string out;
  out.reserve(name.size());
  for (const char c : name) {
    if (c == '|') {
      out += "%7C";
    } else if (c == '%') {
      out += "%25";
    } else {
      out += c;
    }
  }
  return out;
}

// A header's name as part of a store key, as the request's header is found (config::cgi_alias_of):
// "X-User", "x-user" and "X_USER" read the same header, so they count under the same key.
std::string header_key_name(std::string_view name) {
  std::string out(name);
  for (char& c : out) c = c == '_' ? '-' : static_cast<char>(c >= 'A' && c <= 'Z' ? c | 0x20 : c);
  return out;
}

// A limit's name as the RateLimit fields give it, a quoted string (RFC 8941 sf-string: printable
// ASCII): a name from an id in another script ("限流") has its bytes outside that percent-encoded,
// and its '%', '"' and '\' too (%25, %22, %5C), so that the field stays valid and the name can
// still be told. Made once here, not per response.
std::string field_name(std::string_view name) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out = "\"";
  for (const char c : name) {
    const auto b = static_cast<unsigned char>(c);
    if (b < 0x20 || b > 0x7e || c == '%' || c == '"' || c == '\\') {
      out += '%';
      out += kHex[b >> 4];
      out += kHex[b & 0xf];
    } else {
      out += c;
    }
  }
  return out + '"';
}

// owner names the limits (RateLimit-Policy); key_owner goes into their store keys, and must tell
// owners apart where owner cannot (a grant's system and interface may both hold a '/').
std::vector<CompiledLimit> compile(Scope scope, const std::string& owner, const std::string& key_owner,
                                   const std::vector<config::LimitRule>& rules) {
  std::vector<CompiledLimit> out;
  std::map<std::string, int> seen;  // identical unnamed limits, by description
  std::size_t unnamed = 0;
  for (const config::LimitRule& r : rules) unnamed += r.name.empty() ? 1 : 0;
  for (std::size_t i = 0; i < rules.size(); ++i) {
    const config::LimitRule& r = rules[i];
    CompiledLimit c;
    c.scope = scope;
    c.rule = &r;
    c.owner = owner;
    if (!r.name.empty()) {
      c.name = r.name;
    } else {
      c.name = config::unnamed_limit_name(owner, unnamed, i);
    }
    c.field_name = field_name(c.name);
    std::string by = config::to_string(r.key_by);
    if (r.key_by == config::KeyBy::kHeader) by += ":" + key_part(header_key_name(r.key_name));
    if (r.key_by == config::KeyBy::kQuery) by += ":" + key_part(r.key_name);
    const std::string description = r.limit.to_string() + "|" + by;
    const std::string tag = r.name.empty() ? "#" + std::to_string(seen[description]++) : "=" + key_part(r.name);
    c.key = std::string(1, scope_char(scope)) + "|" + key_part(key_owner) + "|" + description + "|" + tag + "|";
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

bool InterfaceEntry::lists(std::string_view method) const {
  const auto& methods = interface->methods;
  return methods.empty() || std::find(methods.begin(), methods.end(), method) != methods.end();
}

std::string Snapshot::breaker_key(const config::Upstream& upstream) {
  config::Breaker settings = upstream.breaker;
  settings.force = config::BreakerForce::kNone;  // forcing keeps the breaker, and its window
  return upstream.name + "\n" + config::describe(settings);
}

std::shared_ptr<CircuitBreaker> BreakerRegistry::get(const config::Upstream& upstream) {
  if (!upstream.breaker.enabled) return nullptr;
  const std::string key = Snapshot::breaker_key(upstream);
  std::lock_guard lock(mu_);
  auto& slot = breakers_[key];
  if (!slot) {
    CircuitBreakerOptions o = upstream.breaker.options;
    o.clock = options_.clock;
    if (options_.on_change) {
      o.on_state_change = [on_change = options_.on_change, name = upstream.name](BreakerState from,
                                                                                 BreakerState to) {
        on_change(name, from, to);
      };
    }
    slot = std::make_shared<CircuitBreaker>(std::move(o));
  }
  const BreakerState state = slot->state();
  switch (upstream.breaker.force) {
    case config::BreakerForce::kOpen:
      if (state != BreakerState::kForcedOpen) slot->force_open();
      break;
    case config::BreakerForce::kClosed:
      if (state != BreakerState::kForcedClosed) slot->force_closed();
      break;
    case config::BreakerForce::kNone:
      if (state == BreakerState::kForcedOpen || state == BreakerState::kForcedClosed) slot->reset();
      break;
  }
  return slot;
}

void BreakerRegistry::retain(const std::vector<std::string>& keys) {
  std::lock_guard lock(mu_);
  std::erase_if(breakers_, [&](const auto& kv) {
    return std::find(keys.begin(), keys.end(), kv.first) == keys.end();
  });
}

Snapshot::Snapshot(std::shared_ptr<const config::Config> config, BreakerRegistry& breakers,
                   std::uint64_t generation, const config::SecretKey* secret_key)
    : config_(std::move(config)),
      generation_(generation),
      callers_(*config_, secret_key, &caller_problems_) {
  const config::Config& c = *config_;
  const auto keyed = [](const std::vector<config::LimitRule>& rules) {
    return std::any_of(rules.begin(), rules.end(), [](const config::LimitRule& r) {
      return r.key_by == config::KeyBy::kHeader || r.key_by == config::KeyBy::kQuery;
    });
  };
  keys_by_request_ = std::any_of(c.systems.begin(), c.systems.end(), [&](const auto& x) { return keyed(x.limits); }) ||
                     std::any_of(c.interfaces.begin(), c.interfaces.end(), [&](const auto& x) { return keyed(x.limits); }) ||
                     std::any_of(c.grants.begin(), c.grants.end(), [&](const auto& x) { return keyed(x.limits); });
  for (const std::string& n : c.trusted_proxies) {
    if (const auto network = config::parse_network(n)) trusted_proxies_.push_back(*network);  // validated
  }
  kept_headers_.push_back(c.system_key_header);
  const auto keep = [&](const std::vector<config::LimitRule>& rules) {
    for (const config::LimitRule& r : rules) {
      if (r.key_by != config::KeyBy::kHeader) continue;
      if (std::none_of(kept_headers_.begin(), kept_headers_.end(),
                       [&](const std::string& k) { return config::cgi_alias_of(r.key_name, k); })) {
        kept_headers_.push_back(r.key_name);
      }
    }
  };
  for (const auto& x : c.systems) keep(x.limits);
  for (const auto& x : c.interfaces) keep(x.limits);
  for (const auto& x : c.grants) keep(x.limits);
  upstreams_.resize(c.upstreams.size());
  std::unordered_map<std::string, const UpstreamEntry*> upstream_by_name;
  for (std::size_t i = 0; i < c.upstreams.size(); ++i) {
    UpstreamEntry& u = upstreams_[i];
    u.upstream = &c.upstreams[i];
    u.index = i;
    u.breaker = breakers.get(c.upstreams[i]);
    for (std::int32_t s : c.upstreams[i].failure_statuses) {
      if (s >= 0 && s < 600) u.failure_statuses.set(static_cast<std::size_t>(s));
    }
    upstream_by_name[u.upstream->name] = &u;
  }

  interfaces_.resize(c.interfaces.size());
  std::unordered_map<std::string, std::size_t> interface_index;
  for (std::size_t i = 0; i < c.interfaces.size(); ++i) {
    const config::Interface& f = c.interfaces[i];
    InterfaceEntry& e = interfaces_[i];
    e.interface = &f;
    e.index = i;
    std::string error;
    e.pattern = config::PathPattern::parse(f.path, &error).value_or(config::PathPattern{});
    e.limits = compile(Scope::kInterface, f.id, f.id, f.limits);
    e.upstream = upstream_by_name.at(f.upstream);
    e.timeout = f.timeout.value_or(e.upstream->upstream->timeout);
    if (f.concurrency) {
      e.in_flight_limit = std::make_unique<Limit>(
          // A lease outlives its request only when a process dies holding it (with a shared
          // store); it is given back by itself after the lease timeout.
          *Limit::concurrency({.limit = *f.concurrency,
                               .lease_timeout = f.concurrency_lease_timeout.value_or(config::kConcurrencyLeaseTimeout)}));
      e.in_flight.scope = Scope::kInFlight;
      e.in_flight.name = config::in_flight_limit_name(f.id);
      e.in_flight.field_name = field_name(e.in_flight.name);
      e.in_flight.owner = f.id;
      e.in_flight.key = "f|" + key_part(f.id) + "|" + e.in_flight_limit->to_string() + "|";
    }
    interface_index[f.id] = i;
    if (e.pattern.is_exact()) {
      exact_[f.path].push_back(&e);
    } else {
      patterns_.push_back(&e);
    }
  }
  std::stable_sort(patterns_.begin(), patterns_.end(), [](const InterfaceEntry* a, const InterfaceEntry* b) {
    return a->pattern.compare_specificity(b->pattern) < 0;
  });

  grants_.reserve(c.grants.size());
  for (const config::Grant& g : c.grants) {
    // "a/b" + "c" and "a" + "b/c" are two grants: the key says where the system ends.
    grants_.push_back(GrantEntry{&g, compile(Scope::kGrant, g.system + "/" + g.interface,
                                             std::to_string(g.system.size()) + ":" + g.system + "/" + g.interface,
                                             g.limits)});
  }
  for (const config::System& s : c.systems) {
    SystemEntry e;
    e.system = &s;
    e.limits = compile(Scope::kSystem, s.key, s.key, s.limits);
    e.permitted.assign(interfaces_.size(), s.all_interfaces);
    for (const std::string& id : s.interfaces) e.permitted[interface_index.at(id)] = true;
    e.has_permissions = s.all_interfaces || !s.interfaces.empty();
    e.grants.assign(interfaces_.size(), nullptr);
    for (const GrantEntry& g : grants_) {
      if (g.grant->system == s.key) e.grants[interface_index.at(g.grant->interface)] = &g;
    }
    systems_.emplace(s.key, std::move(e));
  }
}

const SystemEntry* Snapshot::system(std::string_view key) const {
  auto it = systems_.find(key);
  return it == systems_.end() ? nullptr : &it->second;
}

const InterfaceEntry* Snapshot::route(std::string_view method, std::string_view path) const {
  // HEAD is GET without the body (RFC 9110 9.3.2): it goes where GET would, unless an interface of
  // that same pattern lists HEAD (or any method).
  const bool head = method == "HEAD";
  const InterfaceEntry* as_get = nullptr;
  if (auto it = exact_.find(path); it != exact_.end()) {
    for (const InterfaceEntry* e : it->second) {
      if (e->lists(method)) return e;
      if (head && as_get == nullptr && e->lists("GET")) as_get = e;
    }
    if (as_get != nullptr) return as_get;
  }
  // Most specific first: patterns of one shape are next to each other.
  for (const InterfaceEntry* e : patterns_) {
    if (as_get != nullptr && e->pattern.compare_specificity(as_get->pattern) != 0) return as_get;
    if (!e->pattern.matches(path)) continue;
    if (e->lists(method)) return e;
    if (head && as_get == nullptr && e->lists("GET")) as_get = e;
  }
  return as_get;
}

const GrantEntry* Snapshot::grant(const SystemEntry& system, const InterfaceEntry& interface) const {
  return system.grants[interface.index];
}

}  // namespace sluice::gateway
