#include "bench/histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace sluice::bench {
namespace {

constexpr std::uint64_t kHalf = Histogram::kExact / 2;  // 128

}  // namespace

Histogram::Histogram() : counts_(std::make_unique<std::array<std::uint64_t, kBuckets>>()) {}

Histogram::Histogram(const Histogram& other)
    : counts_(std::make_unique<std::array<std::uint64_t, kBuckets>>(*other.counts_)),
      count_(other.count_),
      sum_(other.sum_),
      min_(other.min_),
      max_(other.max_) {}

Histogram& Histogram::operator=(const Histogram& other) {
  if (this != &other) *this = Histogram(other);
  return *this;
}

std::size_t Histogram::index_of(std::uint64_t value) noexcept {
  if (value < kExact) return static_cast<std::size_t>(value);
  // value has its highest bit at position msb >= 8; shifting it right by msb - 7 leaves 128..255.
  const int msb = std::bit_width(value) - 1;
  const int shift = msb - kSubBits;
  return kExact + static_cast<std::size_t>(shift - 1) * kHalf +
         static_cast<std::size_t>((value >> shift) - kHalf);
}

std::uint64_t Histogram::lowest_in(std::size_t index) noexcept {
  if (index < kExact) return index;
  const std::size_t shift = (index - kExact) / kHalf + 1;
  const std::uint64_t sub = (index - kExact) % kHalf + kHalf;
  return sub << shift;
}

std::uint64_t Histogram::width_of(std::size_t index) noexcept {
  if (index < kExact) return 1;
  return std::uint64_t{1} << ((index - kExact) / kHalf + 1);
}

void Histogram::merge(const Histogram& other) noexcept {
  if (other.count_ == 0) return;
  for (std::size_t i = 0; i < kBuckets; ++i) (*counts_)[i] += (*other.counts_)[i];
  count_ += other.count_;
  sum_ += other.sum_;
  min_ = std::min(min_, other.min_);
  max_ = std::max(max_, other.max_);
}

std::vector<std::pair<std::uint64_t, std::uint64_t>> Histogram::buckets() const {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
  for (std::size_t i = 0; i < kBuckets; ++i) {
    if ((*counts_)[i] == 0) continue;
    out.emplace_back(std::clamp(lowest_in(i) + (width_of(i) - 1) / 2, min(), max_), (*counts_)[i]);
  }
  return out;
}

std::uint64_t Histogram::value_at(double percentile) const noexcept {
  if (count_ == 0) return 0;
  const double p = std::clamp(percentile, 0.0, 100.0);
  const auto wanted = std::max<std::uint64_t>(
      1, static_cast<std::uint64_t>(std::ceil(p / 100.0 * static_cast<double>(count_))));
  if (wanted >= count_) return max_;
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < kBuckets; ++i) {
    seen += (*counts_)[i];
    if (seen >= wanted) {
      const std::uint64_t mid = lowest_in(i) + (width_of(i) - 1) / 2;
      return std::clamp(mid, min(), max_);
    }
  }
  return max_;
}

}  // namespace sluice::bench
