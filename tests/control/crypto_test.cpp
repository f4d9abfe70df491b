// The control plane's cryptography: digests and MACs against published vectors, encodings, and
// secrets sealed at rest.
#include <gtest/gtest.h>

#include "config/crypto.h"

namespace sluice::config {
namespace {

TEST(CryptoTest, Sha256MatchesThePublishedVector) {
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256("abc").size(), 32u);
}

TEST(CryptoTest, HmacSha256MatchesRfc4231TestCase2) {
  EXPECT_EQ(to_hex(hmac_sha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(CryptoTest, ConstantTimeEqualComparesContentAndLength) {
  EXPECT_TRUE(constant_time_equal("secret", "secret"));
  EXPECT_FALSE(constant_time_equal("secret", "secreT"));
  EXPECT_FALSE(constant_time_equal("secret", "secrets"));
  EXPECT_TRUE(constant_time_equal("", ""));
}

TEST(CryptoTest, Base64EncodesWithPaddingAndDecodesWithOrWithout) {
  EXPECT_EQ(base64("f"), "Zg==");
  EXPECT_EQ(base64("fo"), "Zm8=");
  EXPECT_EQ(base64("foobar"), "Zm9vYmFy");
  EXPECT_EQ(from_base64("Zm8="), "fo");
  EXPECT_EQ(from_base64("Zm8"), "fo");
  EXPECT_FALSE(from_base64("Zm8*").has_value());
  const std::string all = random_bytes(257);
  EXPECT_EQ(from_base64(base64(all)), all);
}

TEST(CryptoTest, HexRoundTripsAndRefusesOddOrForeignDigits) {
  EXPECT_EQ(to_hex("\x01\xab"), "01ab");
  EXPECT_EQ(from_hex("01AB"), std::string("\x01\xab"));
  EXPECT_FALSE(from_hex("abc").has_value());
  EXPECT_FALSE(from_hex("zz").has_value());
}

TEST(CryptoTest, RandomTokensAreLongDistinctAndUrlSafe) {
  const std::string a = random_token("sluice_at_");
  const std::string b = random_token("sluice_at_");
  EXPECT_NE(a, b);
  EXPECT_EQ(a.size(), 10u + 43u);
  EXPECT_EQ(a.find_first_of("+/="), std::string::npos);
  EXPECT_EQ(random_id("ak_").size(), 3u + 12u);
}

TEST(CryptoTest, SecretKeysParseFromHexOrBase64AndRefuseAnythingElse) {
  const std::string raw = random_bytes(32);
  EXPECT_TRUE(SecretKey::parse(to_hex(raw)).ok());
  EXPECT_TRUE(SecretKey::parse(base64(raw)).ok());
  EXPECT_FALSE(SecretKey::parse("too short").ok());
  EXPECT_FALSE(SecretKey::parse(to_hex(random_bytes(16))).ok());
}

TEST(CryptoTest, ASealedSecretOpensWithItsKeyOnly) {
  const SecretKey key = *SecretKey::parse(to_hex(random_bytes(32)));
  const SecretKey other = *SecretKey::parse(to_hex(random_bytes(32)));
  const std::string sealed = key.seal("sluice_hs_signing-secret");
  EXPECT_TRUE(sealed.starts_with("v1:"));
  EXPECT_EQ(sealed.find("signing-secret"), std::string::npos);
  EXPECT_EQ(*key.open(sealed), "sluice_hs_signing-secret");
  EXPECT_FALSE(other.open(sealed).ok());
  EXPECT_NE(key.seal("same"), key.seal("same"));  // a fresh nonce each time
}

TEST(CryptoTest, AnAlteredSealedSecretDoesNotOpen) {
  const SecretKey key = *SecretKey::parse(to_hex(random_bytes(32)));
  std::string raw = *from_base64(key.seal("secret").substr(3));
  raw[14] = static_cast<char>(raw[14] ^ 1);
  EXPECT_FALSE(key.open("v1:" + base64(raw)).ok());
  EXPECT_FALSE(key.open("v2:" + key.seal("secret").substr(3)).ok());
}

}  // namespace
}  // namespace sluice::config
