// Histogram: exact below 256, every percentile within 1% of the exact one, merging, empty.
#include "bench/histogram.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace sluice::bench {
namespace {

// The exact nearest-rank percentile of sorted values.
std::uint64_t exact(const std::vector<std::uint64_t>& sorted, double p) {
  const auto rank =
      static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  return sorted[std::max<std::size_t>(rank, 1) - 1];
}

TEST(Histogram, SmallValuesAreExact) {
  Histogram h;
  for (std::uint64_t v = 0; v < 256; ++v) h.record(v);
  EXPECT_EQ(h.value_at(50), 127u);
  EXPECT_EQ(h.value_at(100), 255u);
  EXPECT_EQ(h.min(), 0u);
  EXPECT_EQ(h.count(), 256u);
}

TEST(Histogram, BucketsTileEveryValueWithoutGaps) {
  for (std::size_t i = 1; i < Histogram::kBuckets; ++i) {
    ASSERT_EQ(Histogram::lowest_in(i), Histogram::lowest_in(i - 1) + Histogram::width_of(i - 1))
        << "bucket " << i;
  }
  EXPECT_EQ(Histogram::index_of(~std::uint64_t{0}), Histogram::kBuckets - 1);
}

TEST(Histogram, PercentilesOfSpreadValuesAreWithinOnePercent) {
  std::mt19937_64 random(42);
  std::lognormal_distribution<double> latency(std::log(300'000.0), 1.5);  // around 300 us, wide
  Histogram h;
  std::vector<std::uint64_t> values;
  for (int i = 0; i < 200'000; ++i) {
    const auto v = static_cast<std::uint64_t>(latency(random));
    values.push_back(v);
    h.record(v);
  }
  std::sort(values.begin(), values.end());
  for (double p : {1.0, 10.0, 50.0, 90.0, 99.0, 99.9, 99.99}) {
    const double want = static_cast<double>(exact(values, p));
    EXPECT_NEAR(static_cast<double>(h.value_at(p)), want, want * 0.01) << "p" << p;
  }
  EXPECT_EQ(h.min(), values.front());
  EXPECT_EQ(h.max(), values.back());
}

TEST(Histogram, MergeAddsCountsAndKeepsExtremes) {
  Histogram a;
  Histogram b;
  a.record(1000);
  a.record(3000);
  b.record(10);
  b.record(2'000'000);
  a.merge(b);
  EXPECT_EQ(a.count(), 4u);
  EXPECT_EQ(a.min(), 10u);
  EXPECT_EQ(a.max(), 2'000'000u);
  EXPECT_DOUBLE_EQ(a.mean(), (1000 + 3000 + 10 + 2'000'000) / 4.0);
}

TEST(Histogram, BucketsListEveryValueOnceWithItsCount) {
  Histogram h;
  h.record(7);
  h.record(7);
  h.record(1'000'000);
  const auto buckets = h.buckets();
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets[0], (std::pair<std::uint64_t, std::uint64_t>{7, 2}));
  EXPECT_EQ(buckets[1].first, 1'000'000u);  // clamped to the largest value seen
  EXPECT_EQ(buckets[1].second, 1u);
}

TEST(Histogram, EmptyReportsZeros) {
  const Histogram h;
  EXPECT_EQ(h.value_at(99), 0u);
  EXPECT_EQ(h.min(), 0u);
  EXPECT_EQ(h.max(), 0u);
  EXPECT_EQ(h.mean(), 0.0);
}

}  // namespace
}  // namespace sluice::bench
