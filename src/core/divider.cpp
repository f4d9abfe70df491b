#include "sluice/divider.h"

#include <bit>
#include <cassert>

namespace sluice::detail {

Divider::Divider(std::uint64_t d) : d_(d) {
  assert(d >= 1);
  const auto log2 = static_cast<std::uint8_t>(63 - std::countl_zero(d));
  shift_ = log2;
  if ((d & (d - 1)) == 0) return;  // a power of two
  // m = floor(2^(64 + log2) / d), which fits in 64 bits because d > 2^log2.
  const unsigned __int128 numerator = static_cast<unsigned __int128>(1) << (64 + log2);
  auto m = static_cast<std::uint64_t>(numerator / d);
  const auto rem = static_cast<std::uint64_t>(numerator % d);
  if (d - rem < (std::uint64_t{1} << log2)) {
    magic_ = m + 1;
    return;
  }
  // The 64-bit magic number is not precise enough: use 2m + 1 (a 65-bit number, its top bit
  // implied) and add the numerator back when dividing.
  m += m;
  const std::uint64_t twice_rem = rem + rem;
  if (twice_rem >= d || twice_rem < rem) m += 1;
  magic_ = m + 1;
  add_ = true;
}

}  // namespace sluice::detail
