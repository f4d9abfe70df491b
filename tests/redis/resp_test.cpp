// RESP encoding and cluster key slots, against values Redis documents.
#include "redis/resp.h"

#include <gtest/gtest.h>

namespace sluice::redis::detail {
namespace {

TEST(Resp, EncodesBulkStrings) {
  EXPECT_EQ(encode({"SET", "k", ""}), "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n");
  Command c(3);
  c.arg("INCRBY").arg("x").arg(std::int64_t{-42});
  EXPECT_EQ(std::move(c).take(),
            "*3\r\n$6\r\nINCRBY\r\n$1\r\nx\r\n$3\r\n-42\r\n");
}

TEST(Resp, KeySlotsMatchRedis) {
  // CLUSTER KEYSLOT answers: foo 12182, bar 5061, "" 0.
  EXPECT_EQ(key_slot("foo"), 12182);
  EXPECT_EQ(key_slot("bar"), 5061);
  EXPECT_EQ(key_slot("123456789"), 12739);  // CRC16/XMODEM check value 0x31C3 mod 16384
}

TEST(Resp, HashTagsPickTheSlot) {
  EXPECT_EQ(key_slot("sluice:{user:42}:sl"), key_slot("user:42"));
  EXPECT_EQ(key_slot("sluice:{user:42}:sl:meta"), key_slot("sluice:{user:42}:sl"));
  EXPECT_EQ(key_slot("a{}b"), key_slot("a{}b"));  // an empty tag hashes the whole key
  EXPECT_NE(key_slot("a{}b"), key_slot(""));
}

}  // namespace
}  // namespace sluice::redis::detail
