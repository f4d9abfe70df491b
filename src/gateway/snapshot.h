// Snapshot: one configuration compiled for serving — systems by key, the route table, grants by
// pair, each limit with its state key, each upstream with its breaker. Immutable once built and
// shared between threads (std::shared_ptr<const Snapshot>); a reload builds a new one.
#pragma once

#include <algorithm>
#include <array>
#include <bitset>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/config.h"
#include "config/path_pattern.h"
#include "gateway/caller_keys.h"
#include "sluice/circuit_breaker.h"

namespace sluice::gateway {

// Who a limit belongs to; also what a rejection by it is called.
enum class Scope : std::uint8_t { kSystem, kInterface, kGrant, kInFlight };

// A limit ready to use: its rule, its name (metrics, logs, the admin API) and the RateLimit fields'
// form of it, and its state key.
struct CompiledLimit {
  Scope scope = Scope::kSystem;
  const config::LimitRule* rule = nullptr;
  std::string name;
  std::string field_name;  // name as the RateLimit fields give it: quoted, escaped
  // The store key: scope, owner, the limit's canonical description, what it is keyed by and its
  // name (or its rank among identical unnamed limits), each name's '|' and '%' escaped. A limit that
  // did not change across a reload keeps its key, and so its counters. Keyed-by limits append the
  // value.
  std::string key;
  std::string owner;  // for metrics
};

struct UpstreamEntry {
  const config::Upstream* upstream = nullptr;
  std::size_t index = 0;                     // in the snapshot's upstreams (and each worker's pools)
  std::shared_ptr<CircuitBreaker> breaker;   // null when disabled
  std::bitset<600> failure_statuses;
};

struct InterfaceEntry {
  const config::Interface* interface = nullptr;
  std::size_t index = 0;
  config::PathPattern pattern;
  std::vector<CompiledLimit> limits;
  std::unique_ptr<Limit> in_flight_limit;  // from `concurrency`
  CompiledLimit in_flight;                 // rule == nullptr unless in_flight_limit is set
  const UpstreamEntry* upstream = nullptr;
  Nanos timeout{0};

  // Whether it lists the method (or lists none: any).
  bool lists(std::string_view method) const;
};

struct GrantEntry {
  const config::Grant* grant = nullptr;
  std::vector<CompiledLimit> limits;
};

struct SystemEntry {
  const config::System* system = nullptr;
  std::vector<CompiledLimit> limits;
  std::vector<bool> permitted;                 // by interface index
  std::vector<const GrantEntry*> grants;       // by interface index; null where none
  bool has_permissions = false;
};

// Breakers outlive snapshots: a reload that leaves an upstream's breaker settings alone keeps its
// breaker, and so its state and window. Thread-safe.
class BreakerRegistry {
 public:
  struct Options {
    const Clock* clock = nullptr;  // nullptr: SteadyClock
    // Called on every state change with the upstream's name.
    std::function<void(const std::string& upstream, BreakerState from, BreakerState to)> on_change;
  };
  explicit BreakerRegistry(Options options) : options_(std::move(options)) {}

  // The breaker for this upstream and these settings; the same one as before when they match. Its
  // state follows the configuration's force (open, closed, or none: back to closed when it was forced).
  std::shared_ptr<CircuitBreaker> get(const config::Upstream& upstream);
  // Forgets breakers no snapshot uses any more.
  void retain(const std::vector<std::string>& keys);

 private:
  Options options_;
  std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<CircuitBreaker>> breakers_;  // guarded by mu_
};

class Snapshot {
 public:
  // Compiles a validated configuration; secret_key opens its signing secrets (caller_keys.h).
  Snapshot(std::shared_ptr<const config::Config> config, BreakerRegistry& breakers,
           std::uint64_t generation, const config::SecretKey* secret_key = nullptr);
  Snapshot(const Snapshot&) = delete;
  Snapshot& operator=(const Snapshot&) = delete;

  const config::Config& config() const { return *config_; }
  std::shared_ptr<const config::Config> config_ptr() const { return config_; }
  std::uint64_t generation() const { return generation_; }

  const SystemEntry* system(std::string_view key) const;
  // The most specific enabled-or-not interface whose pattern and methods match.
  const InterfaceEntry* route(std::string_view method, std::string_view path) const;
  // Whether some limit is keyed by a header or a query parameter (which a request must then give
  // once): when none is, a request's are not looked at.
  bool keys_by_request() const { return keys_by_request_; }
  // The fields the upstream must get as the gateway read them, even when the request's Connection
  // names them: the system key header, and every header a limit is keyed by (a request that made
  // its header hop-by-hop would be counted by a value the upstream never sees).
  std::span<const std::string> kept_headers() const { return kept_headers_; }
  // Whether an address (text) is of a proxy in trusted_proxies.
  bool trusts(std::string_view address) const {
    return std::any_of(trusted_proxies_.begin(), trusted_proxies_.end(),
                       [&](const config::Network& n) { return n.contains(address); });
  }
  bool trusts_proxies() const { return !trusted_proxies_.empty(); }
  const GrantEntry* grant(const SystemEntry& system, const InterfaceEntry& interface) const;

  const CallerKeys& callers() const { return callers_; }
  // Credentials that cannot be checked (signing secrets that do not open), for the log.
  const std::vector<std::string>& caller_problems() const { return caller_problems_; }

  const std::vector<InterfaceEntry>& interfaces() const { return interfaces_; }
  const std::vector<UpstreamEntry>& upstreams() const { return upstreams_; }
  // The key a breaker is registered under (its upstream's name and settings).
  static std::string breaker_key(const config::Upstream& upstream);

 private:
  struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using SystemMap = std::unordered_map<std::string, SystemEntry, StringHash, std::equal_to<>>;

  std::shared_ptr<const config::Config> config_;
  std::uint64_t generation_;
  std::vector<UpstreamEntry> upstreams_;
  std::vector<InterfaceEntry> interfaces_;
  SystemMap systems_;
  // Exact paths first, by path; then the other patterns, most specific first.
  std::unordered_map<std::string, std::vector<const InterfaceEntry*>, StringHash, std::equal_to<>> exact_;
  std::vector<const InterfaceEntry*> patterns_;
  std::vector<GrantEntry> grants_;
  std::vector<std::string> caller_problems_;
  CallerKeys callers_;
  std::vector<std::string> kept_headers_;
  std::vector<config::Network> trusted_proxies_;
  bool keys_by_request_ = false;
};

}  // namespace sluice::gateway
