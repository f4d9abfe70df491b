#include "core/siphash.h"

#include <bit>
#include <cstring>

namespace sluice::detail {
namespace {

struct State {
  std::uint64_t v0, v1, v2, v3;

  void round() {
    v0 += v1;
    v1 = std::rotl(v1, 13);
    v1 ^= v0;
    v0 = std::rotl(v0, 32);
    v2 += v3;
    v3 = std::rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = std::rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = std::rotl(v1, 17);
    v1 ^= v2;
    v2 = std::rotl(v2, 32);
  }

  void compress(std::uint64_t m) {
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }

  void finalize_rounds() {
    round();
    round();
    round();
    round();
  }

  std::uint64_t fold() const { return v0 ^ v1 ^ v2 ^ v3; }
};

std::uint64_t load_le(const char* p) {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}

State absorb(const std::uint64_t key[2], std::string_view data, bool wide) {
  State s{0x736f6d6570736575ULL ^ key[0], 0x646f72616e646f6dULL ^ key[1],
          0x6c7967656e657261ULL ^ key[0], 0x7465646279746573ULL ^ key[1]};
  if (wide) s.v1 ^= 0xee;
  const char* p = data.data();
  const std::size_t blocks = data.size() / 8;
  for (std::size_t i = 0; i < blocks; ++i, p += 8) s.compress(load_le(p));
  std::uint64_t last = static_cast<std::uint64_t>(data.size()) << 56;
  const std::size_t tail = data.size() % 8;
  for (std::size_t i = 0; i < tail; ++i) {
    last |= static_cast<std::uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  }
  s.compress(last);
  s.v2 ^= wide ? 0xee : 0xff;
  s.finalize_rounds();
  return s;
}

}  // namespace

std::uint64_t siphash64(const std::uint64_t key[2], std::string_view data) {
  return absorb(key, data, false).fold();
}

Hash128 siphash128(const std::uint64_t key[2], std::string_view data) {
  State s = absorb(key, data, true);
  Hash128 h;
  h.lo = s.fold();
  s.v1 ^= 0xdd;
  s.finalize_rounds();
  h.hi = s.fold();
  return h;
}

}  // namespace sluice::detail
