// The secrets caller authentication checks against: CallerKeys holds one configuration's API key
// hashes and opened signing secrets (immutable once built, shared with its Snapshot); NonceCache
// remembers signature nonces across snapshots to refuse replays (thread-safe, sharded locks).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "config/config.h"
#include "config/crypto.h"

namespace sluice::gateway {

class CallerKeys {
 public:
  struct ApiKey {
    std::string system;
    std::optional<std::int64_t> expires;  // Unix seconds
  };
  struct Secret {
    std::string secret;
    std::optional<std::int64_t> expires;
  };

  CallerKeys() = default;
  // The credentials of systems whose auth is api_key or hmac. Signing secrets are opened with key;
  // those that do not open (no key, another key) are left out and described in *problems.
  CallerKeys(const config::Config& config, const config::SecretKey* key, std::vector<std::string>* problems);

  // The owner of the API key whose raw SHA-256 this is, unless unknown or expired at now_seconds.
  const ApiKey* api_key(std::string_view key_sha256, std::int64_t now_seconds) const;
  // The system's signing secrets (expired ones included: the caller checks); null when none.
  const std::vector<Secret>* secrets(std::string_view system) const;

 private:
  std::unordered_map<std::string, ApiKey> api_keys_;             // by raw SHA-256
  std::unordered_map<std::string, std::vector<Secret>> secrets_;  // by system key
};

// Nonces of accepted signatures, each kept until its timestamp leaves the accepted window.
class NonceCache {
 public:
  explicit NonceCache(std::size_t max_entries = std::size_t{1} << 21);

  // Remembers (system, nonce) until `until`. False when it is already remembered (a replay), or
  // when the cache is full of nonces that have not expired (refusing is the safe answer then), or
  // when the system holds half of it already: one system that signs more requests than that within
  // the window (even ones its limits then refuse) has its own refused, not every other's.
  bool insert(std::string_view system, std::string_view nonce, std::int64_t until_seconds,
              std::int64_t now_seconds);
  std::size_t size() const;

 private:
  struct Shard {
    mutable std::mutex mu;
    std::unordered_set<std::string> seen;  // guarded by mu
    std::unordered_map<std::string, std::size_t> held;  // how many of seen each system has; guarded by mu
    // Expiry order: (until, key); guarded by mu.
    std::priority_queue<std::pair<std::int64_t, std::string>, std::vector<std::pair<std::int64_t, std::string>>,
                        std::greater<>>
        expiry;
  };
  static constexpr std::size_t kShards = 16;
  std::size_t per_shard_;
  std::unique_ptr<Shard[]> shards_;
};

}  // namespace sluice::gateway
