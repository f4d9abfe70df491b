// Address parsing: the forms docs/redis.md lists, and what is refused.
#include "sluice/redis/address.h"

#include <gtest/gtest.h>

namespace sluice::redis {
namespace {

TEST(Address, SingleNodeWithPortAndDatabase) {
  auto a = parse_address("redis://10.0.0.5:6380/3");
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_FALSE(a->cluster);
  ASSERT_EQ(a->nodes.size(), 1u);
  EXPECT_EQ(a->nodes[0], (Endpoint{"10.0.0.5", 6380}));
  EXPECT_EQ(a->db, 3);
  EXPECT_TRUE(a->password.empty());
}

TEST(Address, DefaultsPortAndDatabase) {
  auto a = parse_address("redis://cache");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->nodes[0], (Endpoint{"cache", 6379}));
  EXPECT_EQ(a->db, 0);
}

TEST(Address, PasswordAndUser) {
  auto a = parse_address("redis://:s3cr:et@host:1");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->user, "");
  EXPECT_EQ(a->password, "s3cr:et");
  auto b = parse_address("redis://app:pw@host:1");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->user, "app");
  EXPECT_EQ(b->password, "pw");
}

// The user and password are percent-decoded, as in any URL (RFC 3986) and as redis-cli reads them:
// a password may hold '@', ':', '/' or '%'. Without a ':' the credentials are a password.
TEST(Address, PercentDecodesTheUserAndPassword) {
  auto a = parse_address("redis://:p%40ss@host:1");
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_EQ(a->user, "");
  EXPECT_EQ(a->password, "p@ss");
  auto b = parse_address("redis://app%3a1:p%2Fw%25d%3A@host:1");
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(b->user, "app:1");
  EXPECT_EQ(b->password, "p/w%d:");
  auto c = parse_address("redis-cluster://s%40cret@a:1,b:2");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->user, "");
  EXPECT_EQ(c->password, "s@cret");
  EXPECT_EQ(c->nodes.size(), 2u);
  // Each said to hold an escape, for the hint a refused AUTH gets (see connection.cpp).
  EXPECT_TRUE(a->escaped_credentials && b->escaped_credentials && c->escaped_credentials);
  EXPECT_FALSE(parse_address("redis://app:pw@host:1")->escaped_credentials);
}

TEST(Address, ClusterSeeds) {
  auto a = parse_address("redis-cluster://127.0.0.1:7000,127.0.0.1:7001,[::1]:7002");
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_TRUE(a->cluster);
  ASSERT_EQ(a->nodes.size(), 3u);
  EXPECT_EQ(a->nodes[2], (Endpoint{"::1", 7002}));
  EXPECT_EQ(a->nodes[2].to_string(), "[::1]:7002");
}

TEST(Address, RefusesWhatItCannotUse) {
  EXPECT_FALSE(parse_address("http://host:1").ok());
  EXPECT_FALSE(parse_address("redis://host:0").ok());
  EXPECT_FALSE(parse_address("redis://host:70000").ok());
  EXPECT_FALSE(parse_address("redis://host:1/x").ok());
  EXPECT_FALSE(parse_address("redis://a:1,b:2").ok());
  EXPECT_FALSE(parse_address("redis-cluster://a:1/2").ok());
  EXPECT_FALSE(parse_address("redis://").ok());
}

TEST(Address, SaysWhatIsWrongWithoutShowingThePassword) {
  auto message = [](std::string_view text) { return parse_address(text).error().message; };
  EXPECT_EQ(message("rediss://:s3cret@host:1"), "redis address: TLS (rediss://) is not supported, got 'rediss://...@host:1'");
  EXPECT_EQ(message("http://u:s3cret@host:1"),
            "redis address must start with redis:// or redis-cluster://, got 'http://...@host:1'");
  EXPECT_EQ(message("redis://::1:6379"), "redis address: an IPv6 host goes in brackets, as [::1]:6379");
  EXPECT_EQ(message("redis-cluster://a:1,"), "redis address: an empty host in the list");
  EXPECT_EQ(message("redis-cluster://,a:1"), "redis address: an empty host in the list");
  EXPECT_EQ(message("redis-cluster://a:1,,b:2"), "redis address: an empty host in the list");
  EXPECT_EQ(message("redis://:@host:1"), "redis address: an empty password before '@'");
  // Credentials per node would be read as one password holding the first host: said, not dropped.
  EXPECT_EQ(message("redis-cluster://:pw@h1:7301,:pw@h2:7302"),
            "redis address: the credentials go once, before the first host "
            "(redis-cluster://:password@host:port,host:port)");
  EXPECT_EQ(message("redis://h :1"), "redis address: a space or control character in the host 'h '");
  // A '%' that begins no escape: the part is named, the text (a password) is not shown.
  const std::string bad_password =
      "redis address: the password has a '%' that is not followed by two hex digits (write '%' as %25)";
  EXPECT_EQ(message("redis://:s3cret%@host:1"), bad_password);
  EXPECT_EQ(message("redis://:s3cret%4@host:1"), bad_password);
  EXPECT_EQ(message("redis://:s3%zzcret@host:1"), bad_password);
  EXPECT_EQ(message("redis://s3cret%g1@host:1"), bad_password);
  EXPECT_EQ(message("redis://app%:s3cret@host:1"),
            "redis address: the user has a '%' that is not followed by two hex digits (write '%' as %25)");
}

}  // namespace
}  // namespace sluice::redis
