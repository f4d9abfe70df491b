// Divider: unsigned 64-bit division by a divisor fixed in advance, as a multiply and a shift
// (Granlund and Montgomery; the scheme libdivide uses). Limits precompute one per divisor so that
// decisions do no hardware division. An immutable value.
#pragma once

#include <cstdint>

namespace sluice::detail {

// A GCC and Clang extension: __extension__ keeps -Wpedantic quiet in the programs that include this.
__extension__ using UInt128 = unsigned __int128;

class Divider {
 public:
  Divider() = default;
  explicit Divider(std::uint64_t d);  // d >= 1

  std::uint64_t divisor() const { return d_; }

  std::uint64_t divide(std::uint64_t n) const {
    if (magic_ == 0) return n >> shift_;
    const auto q = static_cast<std::uint64_t>((static_cast<UInt128>(magic_) * n) >> 64);
    if (add_) return (((n - q) >> 1) + q) >> shift_;
    return q >> shift_;
  }

  // ceil(n / d)
  std::uint64_t divide_up(std::uint64_t n) const {
    const std::uint64_t q = divide(n);
    return q + (q * d_ != n ? 1 : 0);
  }

 private:
  std::uint64_t d_ = 1;
  std::uint64_t magic_ = 0;  // 0: d is a power of two; divide by shifting
  std::uint8_t shift_ = 0;
  bool add_ = false;  // the magic number needed 65 bits: add back n
};

}  // namespace sluice::detail
