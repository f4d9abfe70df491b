// Divider against the hardware's division: every small divisor over edge numerators, and random
// divisors and numerators across the whole 64-bit range.
#include "sluice/divider.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>

namespace sluice::detail {
namespace {

constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();

void check(std::uint64_t d, std::uint64_t n) {
  const Divider div(d);
  ASSERT_EQ(div.divide(n), n / d) << n << " / " << d;
  if (n <= kMax - d) {
    ASSERT_EQ(div.divide_up(n), (n + d - 1) / d) << n << " / " << d;
  }
}

TEST(Divider, SmallDivisorsOverEdgeNumerators) {
  for (std::uint64_t d = 1; d <= 5000; ++d) {
    for (std::uint64_t n : {std::uint64_t{0}, std::uint64_t{1}, d - 1, d, d + 1, 2 * d - 1, 2 * d,
                            d * 1'000'003, kMax, kMax - 1, kMax / 2, kMax - d}) {
      check(d, n);
    }
  }
}

TEST(Divider, RandomDivisorsAndNumerators) {
  std::mt19937_64 rng(3);
  for (int i = 0; i < 200'000; ++i) {
    const int bits = 1 + static_cast<int>(rng() % 64);
    std::uint64_t d = rng() >> (64 - bits);
    if (d == 0) d = 1;
    check(d, rng() >> (rng() % 64));
  }
}

TEST(Divider, PowersOfTwoAndTheLargestDivisors) {
  for (int k = 0; k < 64; ++k) {
    for (std::uint64_t n : {std::uint64_t{0}, std::uint64_t{12345}, kMax}) check(std::uint64_t{1} << k, n);
  }
  for (std::uint64_t d : {kMax, kMax - 1, kMax / 2 + 1, kMax / 3}) {
    for (std::uint64_t n : {std::uint64_t{0}, d - 1, d, kMax}) check(d, n);
  }
}

}  // namespace
}  // namespace sluice::detail
