// Histogram: latencies in nanoseconds in log-linear buckets (HdrHistogram's layout), within 0.4%.
// Not synchronised: each load thread records into its own and they are merged at the end.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

namespace sluice::bench {

// Values below 256 are kept exactly; above, each power of two is split into 128 equal buckets, so a
// bucket is at most 1/128 of its values wide and its midpoint, which value_at() reports, is within
// 0.4% of any value recorded in it. min() and max() are exact. 7424 counters cover all of uint64.
class Histogram {
 public:
  Histogram();
  Histogram(const Histogram& other);
  Histogram& operator=(const Histogram& other);
  Histogram(Histogram&&) noexcept = default;
  Histogram& operator=(Histogram&&) noexcept = default;
  ~Histogram() = default;

  void record(std::uint64_t value) noexcept {
    ++(*counts_)[index_of(value)];
    ++count_;
    sum_ += static_cast<double>(value);
    if (value < min_) min_ = value;
    if (value > max_) max_ = value;
  }
  void merge(const Histogram& other) noexcept;

  std::uint64_t count() const noexcept { return count_; }
  std::uint64_t min() const noexcept { return count_ == 0 ? 0 : min_; }
  std::uint64_t max() const noexcept { return max_; }
  double mean() const noexcept { return count_ == 0 ? 0.0 : sum_ / static_cast<double>(count_); }
  // The value at percentile p (0 to 100) by nearest rank: the smallest recorded value that at least
  // p% of all values are at or below. 0 when empty.
  std::uint64_t value_at(double percentile) const noexcept;
  // Every bucket that holds values: the value it reports (its midpoint) and how many it holds.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> buckets() const;

  static constexpr int kSubBits = 7;                                 // 128 buckets per octave
  static constexpr std::size_t kExact = std::size_t{2} << kSubBits;  // 256 exact values
  static constexpr std::size_t kBuckets = kExact + (64 - kSubBits - 1) * (kExact / 2);

  static std::size_t index_of(std::uint64_t value) noexcept;
  // The smallest value in a bucket, and its width.
  static std::uint64_t lowest_in(std::size_t index) noexcept;
  static std::uint64_t width_of(std::size_t index) noexcept;

 private:
  std::unique_ptr<std::array<std::uint64_t, kBuckets>> counts_;  // on the heap: 58 KiB
  std::uint64_t count_ = 0;
  double sum_ = 0;
  std::uint64_t min_ = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t max_ = 0;
};

}  // namespace sluice::bench
