// SipHash-2-4 against the reference vectors (github.com/veorq/SipHash, vectors.h): key 00..0f,
// message 00..(n-1).
#include "core/siphash.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace sluice::detail {
namespace {

const std::uint64_t kKey[2] = {0x0706050403020100ULL, 0x0f0e0d0c0b0a0908ULL};

std::string message(int n) {
  std::string m;
  for (int i = 0; i < n; ++i) m.push_back(static_cast<char>(i));
  return m;
}

// The tag as the reference prints it: its bytes in order, low word first.
std::string hex128(const Hash128& h) {
  std::string out;
  char buf[3];
  for (std::uint64_t word : {h.lo, h.hi}) {
    for (int i = 0; i < 8; ++i) {
      std::snprintf(buf, sizeof buf, "%02x", static_cast<unsigned>((word >> (8 * i)) & 0xff));
      out += buf;
    }
  }
  return out;
}

TEST(SipHash, SixtyFourBitReferenceVector) {
  EXPECT_EQ(siphash64(kKey, message(0)), 0x726fdb47dd0e0e31ULL);
}

TEST(SipHash, OneHundredTwentyEightBitReferenceVectors) {
  EXPECT_EQ(hex128(siphash128(kKey, message(0))), "a3817f04ba25a8e66df67214c7550293");
  EXPECT_EQ(hex128(siphash128(kKey, message(1))), "da87c1d86b99af44347659119b22fc45");
  EXPECT_EQ(hex128(siphash128(kKey, message(8))), "3b62a9ba6258f5610f83e264f31497b4");
  EXPECT_EQ(hex128(siphash128(kKey, message(9))), "264499060ad9baabc47f8b02bb6d71ed");
}

TEST(SipHash, KeyChangesTheHash) {
  const std::uint64_t other[2] = {1, 2};
  EXPECT_NE(siphash128(kKey, "user:42"), siphash128(other, "user:42"));
}

}  // namespace
}  // namespace sluice::detail
