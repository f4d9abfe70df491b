// KeyHash: the 128-bit identity LocalStore gives a key, from two polynomial hashes modulo the prime
// 2^61 - 1 at secret random points (a universal hash family). Immutable after construction, so
// thread-safe.
//
// Two different keys of at most n seven-byte chunks collide with probability at most
// (n / (2^61 - 1))^2 over the choice of the points — below 2^-100 for keys up to 1 KiB —
// whatever the keys are, as long as they are chosen without knowledge of the points, which never
// leave the process (hash values are not exposed).
#pragma once

#include <cstdint>
#include <string_view>

namespace sluice::detail {

struct Hash128 {
  std::uint64_t lo = 0;  // spread over all 64 bits: tables index by its top bits
  std::uint64_t hi = 0;  // likewise: stores pick a shard by its top bits
  friend bool operator==(const Hash128&, const Hash128&) = default;
};

class KeyHash {
 public:
  // Points drawn from std::random_device.
  KeyHash();
  // Fixed points (reduced modulo 2^61 - 1; must not be 0), for tests.
  KeyHash(std::uint64_t point1, std::uint64_t point2);

  Hash128 operator()(std::string_view key) const;

 private:
  std::uint64_t k1_;
  std::uint64_t k2_;
  std::uint64_t k1_squared_;  // mod 2^61 - 1: Horner steps are taken two at a time
  std::uint64_t k2_squared_;
};

}  // namespace sluice::detail
