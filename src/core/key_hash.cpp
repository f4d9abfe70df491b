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

// Bytes [at, at + 7) as a chunk below 2^56 (reads the byte after them too, which the caller has).
std::uint64_t full_chunk(const char* at) {
  std::uint64_t chunk;
  std::memcpy(&chunk, at, 8);
  return chunk & 0x00ffffffffffffffULL;
}

// The key's last n bytes (1 to 7) as a chunk, with n in bits 56-58.
std::uint64_t last_chunk(std::string_view key, std::size_t n) {
  const char* p = key.data() + key.size() - n;
  std::uint64_t chunk = 0;
  if (key.size() >= 8) {  // load the 8 bytes that end the key and drop those already absorbed
    std::memcpy(&chunk, p + n - 8, 8);
    chunk >>= 8 * (8 - n);
  } else if (n >= 4) {  // two overlapping 4-byte loads
    std::uint32_t first, last;
    std::memcpy(&first, p, 4);
    std::memcpy(&last, p + n - 4, 4);
    chunk = first | (static_cast<std::uint64_t>(last) << (8 * (n - 4)));
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      chunk |= static_cast<std::uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
    }
  }
  return chunk | (static_cast<std::uint64_t>(n) << 56);
}

std::uint64_t nonzero_point(std::uint64_t x) {
  x = reduce(x);
  return x == 0 ? 1 : x;
}

std::uint64_t random_point() {
  std::random_device random;
  return nonzero_point((static_cast<std::uint64_t>(random()) << 32) ^ random());
}

}  // namespace

KeyHash::KeyHash() : KeyHash(random_point(), random_point()) {}

KeyHash::KeyHash(std::uint64_t point1, std::uint64_t point2)
    : k1_(nonzero_point(point1)),
      k2_(nonzero_point(point2)),
      k1_squared_(mul_mod(k1_, k1_)),
      k2_squared_(mul_mod(k2_, k2_)) {}

// Horner's rule from 1 over 7-byte chunks (each below 2^56), the last chunk (1 to 7 bytes) carrying
// its byte count in bits 56-58. The key is then the polynomial (1 + c1) k^m + c2 k^(m-1) + ... + cm k:
// its leading coefficient is never 0, so keys with different numbers of chunks are polynomials of
// different degrees, and keys with the same number differ in some chunk — in the last one when only
// their lengths differ. The empty key is the constant 1. Both hashes share the chunks.
Hash128 KeyHash::operator()(std::string_view key) const {
  const char* p = key.data();
  std::size_t n = key.size();
  std::uint64_t h1 = 1;
  std::uint64_t h2 = 1;
  auto absorb = [&](std::uint64_t chunk) {
    h1 = mul_mod(h1 + chunk, k1_);  // h + chunk < 2^61 + 2^59: fits, and mul_mod reduces it
    h2 = mul_mod(h2 + chunk, k2_);
  };
  // Two Horner steps at once, (h + a) k^2 + b k: the products are independent, so the chain of
  // dependent multiplications is half as long. Each product is reduced, so their sum is below 2^62.
  auto absorb_pair = [&](std::uint64_t a, std::uint64_t b) {
    h1 = reduce(mul_mod(h1 + a, k1_squared_) + mul_mod(b, k1_));
    h2 = reduce(mul_mod(h2 + a, k2_squared_) + mul_mod(b, k2_));
  };
  for (; n >= 15; n -= 14, p += 14) absorb_pair(full_chunk(p), full_chunk(p + 7));
  if (n >= 8) {
    absorb_pair(full_chunk(p), last_chunk(key, n - 7));
  } else if (n > 0) {
    absorb(last_chunk(key, n));
  }
  // Spread the 61-bit values over the top bits the tables and shards use, without creating
  // collisions: a xor-shift, then an odd multiplier, both bijections on 64 bits. The multiplier
  // alone maps keys that differ only in their last chunk (user:1, user:2, ...), an arithmetic
  // progression mod 2^61 - 1, to one mod 2^64, whose top bits bunch up for about one point in 70
  // (a bucket of 256 off by up to 44% over a million such keys); the xor-shift first breaks that.
  h1 ^= h1 >> 29;
  h2 ^= h2 >> 29;
  return Hash128{h1 * 0x9e3779b97f4a7c15ULL, h2 * 0xc2b2ae3d27d4eb4fULL};
}

}  // namespace sluice::detail
