// RESP: encoding, reading replies, and cluster key slots, against what Redis documents.
#include "redis/resp.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

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

// Every reply a stream holds, fed in pieces of the given sizes (the last piece takes the rest).
std::vector<Reply> read_all(std::string_view stream, std::vector<std::size_t> pieces = {}) {
  ReplyReader reader;
  std::vector<Reply> replies;
  auto drain = [&] {
    for (;;) {
      auto r = reader.next();
      EXPECT_TRUE(r.ok()) << r.error().message;
      if (!r.ok() || !r->has_value()) return;
      replies.push_back(std::move(**r));
    }
  };
  for (const std::size_t n : pieces) {
    const std::size_t take = std::min(n, stream.size());
    reader.feed(stream.data(), take);
    stream.remove_prefix(take);
    drain();
  }
  reader.feed(stream.data(), stream.size());
  drain();
  return replies;
}

// What a reply holds, written out, to compare replies whole.
std::string show(const Reply& r) {
  switch (r.type()) {
    case Reply::Type::kString: return "$" + std::string(r.text());
    case Reply::Type::kStatus: return "+" + std::string(r.text());
    case Reply::Type::kError: return "-" + std::string(r.text());
    case Reply::Type::kInteger: return ":" + std::to_string(r.integer());
    case Reply::Type::kNil: return "nil";
    case Reply::Type::kArray: {
      std::string out = "[";
      for (const Reply& e : r.elements()) out += show(e) + ",";
      return out + "]";
    }
  }
  return "?";
}

// One of each kind, as Redis writes them: a string holding CRLF, nil string and array, empty ones,
// negative and extreme integers, nested arrays.
constexpr std::string_view kStream =
    "+OK\r\n"
    "-NOSCRIPT No matching script.\r\n"
    ":-9223372036854775808\r\n"
    ":9223372036854775807\r\n"
    ":-999999999999999999\r\n"
    "$5\r\na\r\nbc\r\n"
    "$0\r\n\r\n"
    "$-1\r\n"
    "*-1\r\n"
    "*0\r\n"
    "*3\r\n:1\r\n*2\r\n$1\r\nx\r\n$-1\r\n+QUEUED\r\n";

const std::vector<std::string> kExpected = {
    "+OK", "-NOSCRIPT No matching script.", ":-9223372036854775808", ":9223372036854775807",
    ":-999999999999999999",
    "$a\r\nbc", "$", "nil", "nil", "[]", "[:1,[$x,nil,],+QUEUED,]"};

TEST(ReplyReader, ReadsEveryKindOfReply) {
  const std::vector<Reply> replies = read_all(kStream);
  ASSERT_EQ(replies.size(), kExpected.size());
  for (std::size_t i = 0; i < replies.size(); ++i) EXPECT_EQ(show(replies[i]), kExpected[i]) << i;
  EXPECT_TRUE(replies[1].is_error());
  EXPECT_EQ(replies[5].type(), Reply::Type::kString);
  EXPECT_EQ(replies[10].elements()[1].elements()[0].text(), "x");
}

TEST(ReplyReader, GivesTheSameRepliesHoweverTheBytesAreSplit) {
  for (std::size_t first = 1; first < kStream.size(); ++first) {
    std::vector<std::string> got;
    for (const Reply& r : read_all(kStream, {first})) got.push_back(show(r));
    EXPECT_EQ(got, kExpected) << "split at " << first;
  }
  std::vector<std::size_t> bytes(kStream.size(), 1);
  std::vector<std::string> got;
  for (const Reply& r : read_all(kStream, bytes)) got.push_back(show(r));
  EXPECT_EQ(got, kExpected);
}

// Far more than the reader keeps before it drops what it has read (64 KiB), fed in pieces that
// end inside replies: every reply comes out, in order.
TEST(ReplyReader, ReadsALongStreamInPieces) {
  std::string stream;
  constexpr int kReplies = 20'000;
  for (int i = 0; i < kReplies; ++i) stream += "*2\r\n:" + std::to_string(i) + "\r\n$3\r\nabc\r\n";
  ReplyReader reader;
  int next = 0;
  for (std::size_t at = 0; at < stream.size(); at += 1000) {
    const std::size_t n = std::min<std::size_t>(1000, stream.size() - at);
    reader.feed(stream.data() + at, n);
    for (auto r = reader.next(); r.ok() && r->has_value(); r = reader.next()) {
      ASSERT_TRUE((*r)->type() == Reply::Type::kArray && (*r)->elements().size() == 2u);
      ASSERT_EQ((*r)->elements()[0].integer(), next);
      ASSERT_EQ((*r)->elements()[1].text(), "abc");
      ++next;
    }
  }
  EXPECT_EQ(next, kReplies);
}

TEST(ReplyReader, WaitsForAnArrayWithoutAllocatingForWhatItClaims) {
  ReplyReader reader;
  const std::string_view head = "*1000000000\r\n:1\r\n";
  reader.feed(head.data(), head.size());
  auto r = reader.next();
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());
}

TEST(ReplyReader, KnowsAnArrayOfIntegers) {
  const std::vector<Reply> replies = read_all("*2\r\n:1\r\n:2\r\n*2\r\n:1\r\n$1\r\n2\r\n");
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_TRUE(replies[0].integers(2));
  EXPECT_FALSE(replies[0].integers(3));
  EXPECT_FALSE(replies[1].integers(2));
}

TEST(ReplyReader, RefusesWhatIsNotRespAndStaysRefused) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"HTTP/1.1 400 Bad Request\r\n", "starts with byte 72 ('H': the server answers HTTP, not Redis's protocol"},
      {":12x\r\n", "an integer that is not one: \"12x\""},
      {":\r\n", "an integer that is not one"},
      {"$3\r\nabcd\r\n", "a string longer than its length"},
      {"$-2\r\n", "a bad string length"},
      {"$999999999999\r\n", "a bad string length"},
      {"*-5\r\n", "a bad array length"},
      {"+OK\rX\n", "a line that does not end in CRLF"},
      {[] {
         std::string s;
         for (int i = 0; i < 17; ++i) s += "*1\r\n";
         return s + ":1\r\n";
       }(),
       "arrays nested deeper than 16"},
  };
  for (const auto& [bytes, why] : cases) {
    ReplyReader reader;
    reader.feed(bytes.data(), bytes.size());
    auto r = reader.next();
    ASSERT_FALSE(r.ok()) << bytes;
    EXPECT_EQ(r.error().code, ErrorCode::kProtocol);
    EXPECT_NE(r.error().message.find(why), std::string::npos) << r.error().message;
    reader.feed("+OK\r\n", 5);
    EXPECT_FALSE(reader.next().ok()) << "a reader that failed reads on: " << bytes;
  }
}

// Where each reply of kStream ends: the shortest prefix that holds one more reply.
std::vector<std::size_t> reply_ends() {
  std::vector<std::size_t> ends;
  for (std::size_t n = 1; n <= kStream.size(); ++n) {
    ReplyReader reader;
    reader.feed(kStream.data(), n);
    std::size_t replies = 0;
    for (auto r = reader.next(); r.ok() && r->has_value(); r = reader.next()) ++replies;
    if (replies > ends.size()) ends.push_back(n);
  }
  return ends;
}

// Bytes that are RESP up to some point and anything after it: every reply that ends before that
// point comes out as written, and the reader then waits, reads on or refuses, without reading out
// of bounds (the tests run under ASan too).
TEST(ReplyReader, ReadsTheWholeRepliesBeforeAnyDamage) {
  const std::vector<std::size_t> ends = reply_ends();
  ASSERT_EQ(ends.size(), kExpected.size());
  std::mt19937 rng(7);
  const std::string alphabet = "+-:$*\r\n0123456789x ";
  for (int round = 0; round < 3000; ++round) {
    std::string bytes(kStream);
    const std::size_t at = rng() % bytes.size();
    for (std::size_t i = at; i < bytes.size(); ++i) {
      if (rng() % 3 == 0) bytes[i] = alphabet[rng() % alphabet.size()];
    }
    ReplyReader reader;
    reader.feed(bytes.data(), bytes.size());
    std::vector<std::string> got;
    for (auto r = reader.next(); r.ok() && r->has_value() && got.size() < 100; r = reader.next()) {
      got.push_back(show(**r));
    }
    const auto whole = static_cast<std::size_t>(
        std::upper_bound(ends.begin(), ends.end(), at) - ends.begin());
    ASSERT_GE(got.size(), whole) << "round " << round;
    for (std::size_t i = 0; i < whole; ++i) EXPECT_EQ(got[i], kExpected[i]) << "round " << round;
  }
}

}  // namespace
}  // namespace sluice::redis::detail
