#include "core/key_hash.h"

#include <cstring>
#include <random>

namespace sluice::detail {
namespace {

constexpr std::uint64_t kP = (std::uint64_t{1} << 61) - 1;

// x mod 2^61 - 1, for any 64-bit x.
std::uint64_t reduce(std::uint64_t x) {
  x = (x & kP) + (x >> 61);
  return x >= kP ? x - kP : x;
}

// a * b mod 2^61 - 1, for a < 2^62 and b < 2^61.
std::uint64_t mul_mod(std::uint64_t a, std::uint64_t b) {
  const unsigned __int128 r = static_cast<unsigned __int128>(a) * b;  // below 2^123
  return reduce((static_cast<std::uint64_t>(r) & kP) + static_cast<std::uint64_t>(r >> 61));
}

std::uint64_t nonzero_point(std::uint64_t x) {
  x = reduce(x);
  return x == 0 ? 1 : x;
}

std::uint64_t random_point(std::random_device& random) {
  return nonzero_point((static_cast<std::uint64_t>(random()) << 32) ^ random());
}

}  // namespace

KeyHash::KeyHash() {
  std::random_device random;
  k1_ = random_point(random);
  k2_ = random_point(random);
}

KeyHash::KeyHash(std::uint64_t point1, std::uint64_t point2)
    : k1_(nonzero_point(point1)), k2_(nonzero_point(point2)) {}

// Horner's rule over 7-byte chunks (each below 2^56 < p), then the length, so that keys of
// different lengths are different polynomials. Both hashes share the chunks.
Hash128 KeyHash::operator()(std::string_view key) const {
  const char* p = key.data();
  std::size_t n = key.size();
  std::uint64_t h1 = 0;
  std::uint64_t h2 = 0;
  auto absorb = [&](std::uint64_t chunk) {
    h1 = mul_mod(h1 + chunk, k1_);  // h + chunk < 2^61 + 2^56: fits, and mul_mod reduces it
    h2 = mul_mod(h2 + chunk, k2_);
  };
  constexpr std::uint64_t kLow56 = 0x00ffffffffffffffULL;
  for (; n >= 8; n -= 7, p += 7) {
    std::uint64_t chunk;
    std::memcpy(&chunk, p, 8);
    absorb(chunk & kLow56);
  }
  if (n > 0) {  // the last 1 to 7 bytes
    std::uint64_t chunk = 0;
    if (key.size() >= 8) {  // load the 8 bytes that end the key and drop those already absorbed
      std::memcpy(&chunk, p + n - 8, 8);
      chunk >>= 8 * (8 - n);
    } else {
      for (std::size_t i = 0; i < n; ++i) {
        chunk |= static_cast<std::uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
      }
    }
    absorb(chunk);
  }
  absorb(key.size());
  // Odd multipliers are bijections on 64 bits: they spread the 61-bit values over the top bits
  // the tables and shards use, without creating collisions.
  return Hash128{h1 * 0x9e3779b97f4a7c15ULL, h2 * 0xc2b2ae3d27d4eb4fULL};
}

}  // namespace sluice::detail
