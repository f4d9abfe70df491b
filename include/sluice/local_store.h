// LocalStore: limiter state for millions of keys in this process. Thread-safe: keys are spread over
// independently locked shards, so decisions on different keys scale across cores.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "sluice/clock.h"
#include "sluice/store.h"

namespace sluice::detail {
struct Hash128;
class KeyHash;
}  // namespace sluice::detail

namespace sluice {

struct LocalStoreOptions {
  const Clock* clock = nullptr;  // nullptr: FastClock (the wall clock, read cheaply)
  // Number of independently locked shards, rounded up to a power of two; 0 picks 16 per core.
  // At most one per 1,024 of max_keys (halved until each shard's share is at least 1,024 keys).
  std::size_t shards = 0;
  // The most keys held at once; 0 is the default. A key whose state is back to full is dropped as
  // soon as it is seen to be (and a sweep looks at a few keys on every insert); when a shard holds
  // its share of max_keys anyway, it evicts, among 16 keys sampled from its largest table, the one
  // whose state is soonest back to full — the one whose loss admits the least extra. See
  // docs/algorithms.md.
  std::size_t max_keys = std::size_t{1} << 22;
};

class LocalStore final : public Store {
 public:
  explicit LocalStore(LocalStoreOptions options = {});
  ~LocalStore() override;
  LocalStore(const LocalStore&) = delete;
  LocalStore& operator=(const LocalStore&) = delete;

  Result<Decision> acquire(std::string_view key, const Limit& limit,
                           std::int64_t cost = 1) override;
  Status acquire_all(std::span<const LimitRequest> requests,
                     std::span<Decision> decisions) override;
  Result<Decision> peek(std::string_view key, const Limit& limit) override;
  Status reset(std::string_view key, const Limit& limit) override;
  Status release(std::string_view key, const Limit& limit, std::uint64_t lease) override;
  // As release, saying whether the lease was held here (false: released already, timed out, or
  // never this store's).
  Result<bool> release_held(std::string_view key, const Limit& limit, std::uint64_t lease);

  // The same, at a time the caller passes in (which a ManualClock would otherwise give).
  Result<Decision> acquire_at(Nanos now, std::string_view key, const Limit& limit,
                              std::int64_t cost = 1);
  Status acquire_all_at(Nanos now, std::span<const LimitRequest> requests,
                        std::span<Decision> decisions);

  // Keys held now, and the bytes the store's shards and tables take (the entries of sliding logs and
  // leases, held on the heap, come on top).
  std::size_t size() const;
  std::size_t memory_bytes() const;

  const Clock& clock() const { return *clock_; }

 private:
  struct Shard;
  detail::Hash128 hash_of(std::string_view key) const;
  Shard& shard_for(std::uint64_t hash_hi) const;

  const Clock* clock_;
  std::size_t shard_bits_;
  std::size_t keys_per_shard_;
  std::unique_ptr<Shard[]> shards_;
  std::unique_ptr<const detail::KeyHash> hash_;  // a key's identity; see src/core/key_hash.h
  const std::uint64_t id_;                        // never reused, unlike an address (for hash_of's memo)
  std::atomic<std::uint64_t> next_lease_{1};
};

}  // namespace sluice
