#include "gateway/metrics.h"

#include <algorithm>
#include <cstdio>

namespace sluice::gateway {
namespace {

std::string label(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char ch : v) {
    if (ch == '\\' || ch == '"') out += '\\';
    if (ch == '\n') {
      out += "\\n";
      continue;
    }
    out += ch;
  }
  return out;
}

const char* scope_name(Scope s) {
  switch (s) {
    case Scope::kSystem: return "system";
    case Scope::kInterface: return "interface";
    case Scope::kGrant: return "grant";
    case Scope::kInFlight: return "in_flight";
  }
  return "";
}

std::string seconds(std::int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(ns) / 1e9);
  return buf;
}

}  // namespace

Metrics::Metrics(std::size_t shards)
    : shards_(std::make_unique<Shard[]>(std::max<std::size_t>(shards, 1))),
      shard_count_(std::max<std::size_t>(shards, 1)) {}

void Metrics::count_request(std::size_t shard, std::string_view system, std::string_view interface,
                            Reason reason, int status) {
  Shard& s = shards_[shard % shard_count_];
  std::lock_guard lock(s.mu);
  const auto key = std::tuple<std::string_view, std::string_view, Reason, int>(system, interface, reason, status);
  auto it = s.requests.find(key);
  if (it == s.requests.end()) it = s.requests.emplace(RequestKey(system, interface, reason, status), 0).first;
  ++it->second;
}

void Metrics::observe_decision(std::size_t shard, Nanos duration) {
  Shard& s = shards_[shard % shard_count_];
  std::size_t b = 0;
  while (b < kBuckets.size() && duration.count() > kBuckets[b]) ++b;
  std::lock_guard lock(s.mu);
  ++s.buckets[b];
  ++s.decisions;
  s.decision_ns += duration.count();
}

void Metrics::count_shadow_rejection(std::size_t shard, const CompiledLimit& limit) {
  Shard& s = shards_[shard % shard_count_];
  std::lock_guard lock(s.mu);
  ++s.shadow[ShadowKey{limit.scope, limit.owner, limit.name}];
}

void Metrics::count_breaker_transition(const std::string& upstream, BreakerState to) {
  std::lock_guard lock(transitions_mu_);
  ++transitions_[{upstream, to}];
}

void Metrics::count_connect_failure(const std::string& upstream, const config::Target& target) {
  std::lock_guard lock(connect_failures_mu_);
  ++connect_failures_[{upstream, config::to_string(target)}];
}

bool store_up(std::span<const BreakerState> store_breakers) {
  return std::all_of(store_breakers.begin(), store_breakers.end(), [](BreakerState s) {
    return s == BreakerState::kClosed || s == BreakerState::kForcedClosed || s == BreakerState::kDisabled;
  });
}

std::string Metrics::render(const Snapshot& snapshot, std::span<const BreakerState> store_breakers) const {
  std::map<RequestKey, std::uint64_t> requests;
  std::map<ShadowKey, std::uint64_t> shadow;
  std::array<std::uint64_t, kBuckets.size() + 1> buckets{};
  std::uint64_t decisions = 0;
  std::int64_t decision_ns = 0;
  for (std::size_t i = 0; i < shard_count_; ++i) {
    const Shard& s = shards_[i];
    std::lock_guard lock(s.mu);
    for (const auto& [k, n] : s.requests) requests[k] += n;
    for (const auto& [k, n] : s.shadow) shadow[k] += n;
    for (std::size_t b = 0; b < buckets.size(); ++b) buckets[b] += s.buckets[b];
    decisions += s.decisions;
    decision_ns += s.decision_ns;
  }

  std::string out;
  out += "# HELP sluice_requests_total Requests answered, by system, interface, reason and status sent.\n";
  out += "# TYPE sluice_requests_total counter\n";
  for (const auto& [k, n] : requests) {
    const auto& [system, interface, reason, status] = k;
    out += "sluice_requests_total{system=\"" + label(system) + "\",interface=\"" + label(interface) +
           "\",reason=\"" + to_string(reason) + "\",status=\"" + std::to_string(status) + "\"} " +
           std::to_string(n) + "\n";
  }
  out += "# HELP sluice_decision_duration_seconds Time to check access and limits for one request.\n";
  out += "# TYPE sluice_decision_duration_seconds histogram\n";
  std::uint64_t cumulative = 0;
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    cumulative += buckets[b];
    const std::string le = b < kBuckets.size() ? seconds(kBuckets[b]) : "+Inf";
    out += "sluice_decision_duration_seconds_bucket{le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += "sluice_decision_duration_seconds_sum " + seconds(decision_ns) + "\n";
  out += "sluice_decision_duration_seconds_count " + std::to_string(decisions) + "\n";

  out += "# HELP sluice_shadow_rejections_total Requests a shadow limit would have rejected.\n";
  out += "# TYPE sluice_shadow_rejections_total counter\n";
  for (const auto& [k, n] : shadow) {
    const auto& [scope, owner, name] = k;
    out += std::string("sluice_shadow_rejections_total{scope=\"") + scope_name(scope) + "\",owner=\"" +
           label(owner) + "\",limit=\"" + label(name) + "\"} " + std::to_string(n) + "\n";
  }

  out += "# HELP sluice_breaker_state The state of each upstream's circuit breaker (1 for the current one).\n";
  out += "# TYPE sluice_breaker_state gauge\n";
  static constexpr BreakerState kStates[] = {BreakerState::kClosed, BreakerState::kOpen,
                                             BreakerState::kHalfOpen, BreakerState::kForcedOpen,
                                             BreakerState::kForcedClosed, BreakerState::kDisabled};
  for (const UpstreamEntry& u : snapshot.upstreams()) {
    // As the next request would find it (stats(), not state(): an open breaker whose time is up,
    // with no request since, is half-open to that request).
    const BreakerState current = u.breaker ? u.breaker->stats().state : BreakerState::kDisabled;
    for (BreakerState s : kStates) {
      out += "sluice_breaker_state{upstream=\"" + label(u.upstream->name) + "\",state=\"" + to_string(s) +
             "\"} " + (s == current ? "1" : "0") + "\n";
    }
  }
  out += "# HELP sluice_breaker_transitions_total Breaker state changes, by upstream and new state.\n";
  out += "# TYPE sluice_breaker_transitions_total counter\n";
  {
    std::lock_guard lock(transitions_mu_);
    for (const auto& [k, n] : transitions_) {
      out += "sluice_breaker_transitions_total{upstream=\"" + label(k.first) + "\",state=\"" +
             to_string(k.second) + "\"} " + std::to_string(n) + "\n";
    }
  }
  out += "# HELP sluice_upstream_connect_failures_total Connections to an upstream's target that could not be "
         "opened (refused, unreachable, timed out), by upstream and target.\n";
  out += "# TYPE sluice_upstream_connect_failures_total counter\n";
  {
    std::lock_guard lock(connect_failures_mu_);
    for (const auto& [k, n] : connect_failures_) {
      out += "sluice_upstream_connect_failures_total{upstream=\"" + label(k.first) + "\",target=\"" +
             label(k.second) + "\"} " + std::to_string(n) + "\n";
    }
  }
  out += "# HELP sluice_upstream_resolutions_total Upstream host name lookups, by result (ok; failed: no "
         "address; timeout: requests that gave up waiting for a first lookup).\n";
  out += "# TYPE sluice_upstream_resolutions_total counter\n";
  for (const auto& [result, name] : {std::pair{Resolution::kOk, "ok"}, std::pair{Resolution::kFailed, "failed"},
                                     std::pair{Resolution::kTimeout, "timeout"}}) {
    out += std::string("sluice_upstream_resolutions_total{result=\"") + name + "\"} " +
           std::to_string(resolutions_[static_cast<std::size_t>(result)].load(std::memory_order_relaxed)) + "\n";
  }
  out += "# HELP sluice_store_errors_total Requests whose limits the limit store could not decide, and lease "
         "releases that failed.\n";
  out += "# TYPE sluice_store_errors_total counter\n";
  out += "sluice_store_errors_total " + std::to_string(store_errors_.load(std::memory_order_relaxed)) + "\n";
  out += "# HELP sluice_store_fallbacks_total Limit decisions made by on_store_failure, the store unable to decide.\n";
  out += "# TYPE sluice_store_fallbacks_total counter\n";
  for (const auto& [policy, name] : {std::pair{OnStoreFailure::kAllow, "allow"}, std::pair{OnStoreFailure::kDeny, "deny"},
                                     std::pair{OnStoreFailure::kLocal, "local"}}) {
    out += std::string("sluice_store_fallbacks_total{policy=\"") + name + "\"} " +
           std::to_string(fallbacks_[static_cast<std::size_t>(policy)].load(std::memory_order_relaxed)) + "\n";
  }
  const bool up = store_up(store_breakers);
  out += "# HELP sluice_store_up 1 while the limit store decides (the local store always does), 0 while "
         "limits follow on_store_failure.\n";
  out += "# TYPE sluice_store_up gauge\n";
  out += std::string("sluice_store_up ") + (up ? "1" : "0") + "\n";
  if (!store_breakers.empty()) {
    out += "# HELP sluice_store_breakers Breakers around the limit store (one per worker thread), by state.\n";
    out += "# TYPE sluice_store_breakers gauge\n";
    for (BreakerState s : {BreakerState::kClosed, BreakerState::kOpen, BreakerState::kHalfOpen}) {
      out += std::string("sluice_store_breakers{state=\"") + to_string(s) + "\"} " +
             std::to_string(std::count(store_breakers.begin(), store_breakers.end(), s)) + "\n";
    }
  }
  out += "# HELP sluice_in_flight_requests Requests admitted and not yet answered.\n";
  out += "# TYPE sluice_in_flight_requests gauge\n";
  out += "sluice_in_flight_requests " + std::to_string(in_flight()) + "\n";
  out += "# HELP sluice_config_reloads_total Configuration reloads, by result.\n";
  out += "# TYPE sluice_config_reloads_total counter\n";
  out += "sluice_config_reloads_total{result=\"ok\"} " + std::to_string(reloads_ok_.load()) + "\n";
  out += "sluice_config_reloads_total{result=\"error\"} " + std::to_string(reloads_failed_.load()) + "\n";
  out += "# HELP sluice_config_generation The generation of the configuration being served.\n";
  out += "# TYPE sluice_config_generation gauge\n";
  out += "sluice_config_generation " + std::to_string(snapshot.generation()) + "\n";
  return out;
}

}  // namespace sluice::gateway
