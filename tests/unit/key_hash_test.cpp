// KeyHash: the two polynomials match a plain reference evaluation, distinct keys get distinct
// identities (lengths, trailing zero bytes, a million random keys), and the top bits the tables and
// shards use are evenly spread.
#include "core/key_hash.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace sluice::detail {
namespace {

constexpr unsigned __int128 kP = (static_cast<unsigned __int128>(1) << 61) - 1;

// The definition, evaluated the slow way: Horner from 1 over 7-byte little-endian chunks, the last
// one carrying its byte count in bits 56-58.
std::uint64_t reference(std::string_view key, std::uint64_t k) {
  unsigned __int128 h = 1;
  for (std::size_t i = 0; i < key.size(); i += 7) {
    unsigned __int128 chunk = 0;
    std::size_t j = 0;
    for (; j < 7 && i + j < key.size(); ++j) {
      chunk |= static_cast<unsigned __int128>(static_cast<unsigned char>(key[i + j])) << (8 * j);
    }
    if (i + j == key.size()) chunk |= static_cast<unsigned __int128>(j) << 56;
    h = (h + chunk) * k % kP;
  }
  return static_cast<std::uint64_t>(h);
}

// The finish: a xor-shift, then an odd multiplier.
std::uint64_t spread(std::uint64_t h, std::uint64_t multiplier) { return (h ^ (h >> 29)) * multiplier; }

TEST(KeyHash, MatchesTheReferenceEvaluation) {
  const std::uint64_t k1 = 0x1234567890abcdeULL;
  const std::uint64_t k2 = (std::uint64_t{1} << 61) - 2;  // the largest point
  const KeyHash hash(k1, k2);
  std::mt19937_64 rng(5);
  for (std::size_t len = 0; len < 100; ++len) {
    std::string key(len, '\0');
    for (char& c : key) c = static_cast<char>(rng());
    const Hash128 h = hash(key);
    EXPECT_EQ(h.lo, spread(reference(key, k1), 0x9e3779b97f4a7c15ULL)) << len;
    EXPECT_EQ(h.hi, spread(reference(key, k2), 0xc2b2ae3d27d4eb4fULL)) << len;
  }
}

TEST(KeyHash, DistinguishesLengthsAndTrailingZeros) {
  const KeyHash hash;
  std::set<std::pair<std::uint64_t, std::uint64_t>> seen;
  for (std::size_t len = 0; len < 64; ++len) {
    const Hash128 h = hash(std::string(len, '\0'));
    EXPECT_TRUE(seen.insert({h.lo, h.hi}).second) << len;
  }
  EXPECT_NE(hash("a"), hash(std::string("a\0", 2)));
  EXPECT_NE(hash("user:1"), hash("user:10"));
}

// Keys that differ only at their end (user:0 ... user:999999) spread evenly over the top bits, at
// random points and at ones where a multiplier alone bunched them (one bucket off by 44%).
TEST(KeyHash, AMillionKeysGetAMillionIdentitiesAndEvenTopBits) {
  const std::pair<std::uint64_t, std::uint64_t> bunched{0xad36d900623292cbULL, 0xd375611a2c390b4eULL};
  for (const KeyHash& hash : {KeyHash(), KeyHash(bunched.first, bunched.second)}) {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> all;
    std::vector<int> lo_buckets(256), hi_buckets(256);
    for (int i = 0; i < 1'000'000; ++i) {
      const Hash128 h = hash("user:" + std::to_string(i));
      all.emplace_back(h.lo, h.hi);
      ++lo_buckets[h.lo >> 56];
      ++hi_buckets[h.hi >> 56];
    }
    std::sort(all.begin(), all.end());
    EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end());
    // 3906 expected per bucket; a uniform spread stays well within 10% of it.
    for (int b = 0; b < 256; ++b) {
      EXPECT_NEAR(lo_buckets[b], 3906, 390) << b;
      EXPECT_NEAR(hi_buckets[b], 3906, 390) << b;
    }
  }
}

}  // namespace
}  // namespace sluice::detail
