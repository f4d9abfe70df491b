// SipHash-2-4 with 64- and 128-bit output (Aumasson and Bernstein): a keyed hash that an attacker who
// does not know the key cannot steer into collisions. Pure functions.
#pragma once

#include <cstdint>
#include <string_view>

namespace sluice::detail {

struct Hash128 {
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  friend bool operator==(const Hash128&, const Hash128&) = default;
};

std::uint64_t siphash64(const std::uint64_t key[2], std::string_view data);
Hash128 siphash128(const std::uint64_t key[2], std::string_view data);

}  // namespace sluice::detail
