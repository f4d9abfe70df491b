// Metrics: the gateway's counters and histograms, rendered in the Prometheus text format. Thread-safe:
// each worker thread writes its own shard (one uncontended lock per request); a scrape sums them.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <tuple>

#include "gateway/policy.h"
#include "gateway/snapshot.h"

namespace sluice::gateway {

// Whether a limit store decides: every breaker around it lets calls through (a half-open one is
// still probing). True for none (the in-process store).
bool store_up(std::span<const BreakerState> store_breakers);

class Metrics {
 public:
  // Upper bounds of the decision latency histogram, in nanoseconds.
  static constexpr std::array<std::int64_t, 12> kBuckets{
      10'000, 25'000, 50'000, 100'000, 250'000, 500'000, 1'000'000, 2'500'000, 5'000'000,
      10'000'000, 50'000'000, 250'000'000};

  explicit Metrics(std::size_t shards);

  // One answered request: its system (empty when none was identified), interface (empty when none
  // matched), reason, and the status sent (the upstream's, when proxied).
  void count_request(std::size_t shard, std::string_view system, std::string_view interface,
                     Reason reason, int status);
  // How long the access checks and the limits took for one request.
  void observe_decision(std::size_t shard, Nanos duration);
  void count_shadow_rejection(std::size_t shard, const CompiledLimit& limit);
  // A request whose limits the store could not decide (they followed on_store_failure), counted
  // once however many calls failed for it; or a lease's release that failed.
  void count_store_error() { store_errors_.fetch_add(1, std::memory_order_relaxed); }
  // A limit decided by its on_store_failure because the store could not decide.
  void count_fallback(OnStoreFailure policy) {
    fallbacks_[static_cast<std::size_t>(policy)].fetch_add(1, std::memory_order_relaxed);
  }
  std::uint64_t store_errors() const { return store_errors_.load(std::memory_order_relaxed); }
  void count_reload(bool ok) { (ok ? reloads_ok_ : reloads_failed_).fetch_add(1, std::memory_order_relaxed); }
  void count_breaker_transition(const std::string& upstream, BreakerState to);
  // A connection to an upstream's target that could not be opened (refused, unreachable, timed out).
  void count_connect_failure(const std::string& upstream, const config::Target& target);
  // An upstream host name looked up (getaddrinfo): to addresses, or to none; or a request that gave
  // up waiting for a first lookup (connect_timeout).
  enum class Resolution : std::uint8_t { kOk, kFailed, kTimeout };
  void count_resolution(Resolution result) {
    resolutions_[static_cast<std::size_t>(result)].fetch_add(1, std::memory_order_relaxed);
  }

  void add_in_flight(std::int64_t delta) { in_flight_.fetch_add(delta, std::memory_order_relaxed); }
  std::int64_t in_flight() const { return in_flight_.load(std::memory_order_relaxed); }

  // Everything, with breaker states read from the snapshot's breakers now.
  // store_breakers: the state of the breaker around a shared limit store, one per limiter (empty for
  // the in-process store, which cannot fail).
  std::string render(const Snapshot& snapshot, std::span<const BreakerState> store_breakers = {}) const;

 private:
  using RequestKey = std::tuple<std::string, std::string, Reason, int>;
  using ShadowKey = std::tuple<Scope, std::string, std::string>;  // scope, owner, limit name
  struct alignas(64) Shard {
    mutable std::mutex mu;
    // All guarded by mu:
    std::map<RequestKey, std::uint64_t, std::less<>> requests;  // found by views: no key built per request
    std::map<ShadowKey, std::uint64_t> shadow;
    std::array<std::uint64_t, kBuckets.size() + 1> buckets{};
    std::uint64_t decisions = 0;
    std::int64_t decision_ns = 0;
  };

  std::unique_ptr<Shard[]> shards_;
  std::size_t shard_count_;
  std::atomic<std::uint64_t> store_errors_{0};
  std::array<std::atomic<std::uint64_t>, 4> fallbacks_{};  // by OnStoreFailure
  std::array<std::atomic<std::uint64_t>, 3> resolutions_{};  // by Resolution
  std::atomic<std::uint64_t> reloads_ok_{0};
  std::atomic<std::uint64_t> reloads_failed_{0};
  std::atomic<std::int64_t> in_flight_{0};
  mutable std::mutex connect_failures_mu_;
  std::map<std::pair<std::string, std::string>, std::uint64_t> connect_failures_;  // guarded; by upstream, target
  mutable std::mutex transitions_mu_;
  std::map<std::pair<std::string, BreakerState>, std::uint64_t> transitions_;  // guarded by transitions_mu_
};

}  // namespace sluice::gateway
