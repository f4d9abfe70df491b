// The secrets caller authentication checks against: CallerKeys holds one configuration's API key
// hashes and opened signing secrets (immutable once built, shared with its Snapshot); NonceCache
// remembers signature nonces across snapshots to refuse replays (thread-safe, sharded locks).
#pragma once

#include <array>
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

// Nonces of accepted signatures, each kept until its timestamp leaves the accepted window. An
// entry is a 128-bit digest of (system, nonce), not the strings: about 76 bytes, whatever the nonce.
class NonceCache {
 public:
  static constexpr std::size_t kDefaultCapacity = std::size_t{1} << 22;  // at most ~300 MB
  explicit NonceCache(std::size_t max_entries = kDefaultCapacity);

  enum class Outcome : std::uint8_t {
    kRemembered,
    kReplayed,  // remembered already
    // No room for the system (refusing is the safe answer: forgetting would let a replay through).
    // A system may take at most half of the room the others leave, so one or a few systems signing
    // more requests within the window than the cache holds (even ones their limits then refuse)
    // have their own refused, not every other system's.
    kNoRoom,
  };
  struct Answer {
    Outcome outcome = Outcome::kRemembered;
    std::int64_t room_at = 0;  // kNoRoom: when the next remembered nonce is forgotten (Unix seconds)
  };
  // Remembers (system, nonce) until `until_seconds` unless it is already remembered or there is
  // no room for the system.
  Answer insert(std::string_view system, std::string_view nonce, std::int64_t until_seconds, std::int64_t now_seconds);
  std::size_t size() const;

 private:
  using Digest = std::array<std::uint64_t, 2>;
  struct DigestHash {
    std::size_t operator()(const Digest& d) const noexcept { return d[0]; }  // already uniform
  };
  using Holders = std::unordered_map<std::string, std::size_t>;  // system -> how many it holds
  struct Entry {
    std::int64_t until;
    Digest digest;
    Holders::value_type* holder;  // stable: a system's count is erased only when it holds none
    bool operator>(const Entry& o) const { return until > o.until; }
  };
  struct Shard {
    mutable std::mutex mu;
    std::unordered_set<Digest, DigestHash> seen;                                // guarded by mu
    Holders held;                                                               // guarded by mu
    std::priority_queue<Entry, std::vector<Entry>, std::greater<>> expiry;  // guarded by mu
  };
  static constexpr std::size_t kShards = 16;
  std::size_t per_shard_;
  std::unique_ptr<Shard[]> shards_;
};

}  // namespace sluice::gateway
