// Caller authentication as plain functions over a snapshot: API keys (known, unknown, expired,
// rotated), HMAC signatures (valid, tampered, expired, replayed, malformed), and the nonce cache.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "config/crypto.h"
#include "control_test.h"
#include "gateway/caller_auth.h"
#include "gateway/snapshot.h"

namespace sluice::gateway {
namespace {

constexpr std::int64_t kNow = 1'800'000'000;

class Headers final : public HeaderLookup {
 public:
  std::map<std::string, std::string> values;
  std::string_view get(std::string_view name) const override {
    for (const auto& [k, v] : values) {
      if (k.size() == name.size() && std::equal(k.begin(), k.end(), name.begin(), [](char a, char b) {
            return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
          })) {
        return v;
      }
    }
    return {};
  }
  bool repeated(std::string_view name) const override { return twice.count(std::string(name)) != 0; }
  std::set<std::string> twice;  // the names given (as if) more than once
};

class CallerAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    key_ = *config::SecretKey::parse(config::to_hex(config::random_bytes(32)));
    config::Config c = *control_test::parse(control_test::base_yaml());
    // crm: API keys, one rotating out (valid until kNow + 100) and its successor.
    c.systems[0].auth = config::Auth::kApiKey;
    c.systems[0].credentials = {credential("ak_old", config::sha256_hex(kOldKey), kNow + 100),
                                credential("ak_new", config::sha256_hex(kNewKey), std::nullopt)};
    // erp: signed requests.
    c.systems[1].auth = config::Auth::kHmac;
    config::Credential signing;
    signing.id = "hs_1";
    signing.kind = config::Auth::kHmac;
    signing.sealed_secret = key_.seal(kSecret);
    c.systems[1].credentials = {signing};
    // ops: plain key auth, though it holds an API key (not accepted while its auth is key).
    config::System ops;
    ops.key = "ops";
    ops.interfaces = {"orders"};
    ops.credentials = {credential("ak_ops", config::sha256_hex(kOpsKey), std::nullopt)};
    c.systems.push_back(ops);
    config_ = std::make_shared<const config::Config>(std::move(c));
    snapshot_ = std::make_unique<Snapshot>(config_, breakers_, 1, &key_);
  }

  static config::Credential credential(std::string id, std::string hash, std::optional<std::int64_t> expires) {
    config::Credential k;
    k.id = std::move(id);
    k.api_key_sha256 = std::move(hash);
    k.created = kNow - 1000;
    k.expires = expires;
    return k;
  }

  // A request naming system (none when empty); the name is kept in system_ for the request's views.
  Request request(const std::string& system = "") {
    system_ = system;
    Request r;
    r.method = "POST";
    r.path = "/orders/1";
    r.has_system_key = !system_.empty();
    r.system_key = system_;
    r.headers = &headers_;
    return r;
  }

  Reason identify(const std::string& system, std::int64_t now = kNow) {
    Request r = request(system);
    const CallerCheck c = identify_caller(r, *snapshot_, now);
    identified_ = std::string(r.system_key);
    needs_signature_ = c.needs_signature;
    return c.reason;
  }

  void sign(const std::string& target, const std::string& body, std::int64_t at, const std::string& nonce,
            const std::string& secret = kSecret) {
    headers_.values[std::string(kTimestampHeader)] = std::to_string(at);
    headers_.values[std::string(kNonceHeader)] = nonce;
    headers_.values[std::string(kSignatureHeader)] = sign_request(secret, "POST", target, std::to_string(at), nonce, body);
  }

  Reason verify(const std::string& target, const std::string& body, std::int64_t now = kNow) {
    Request r = request("erp");
    return verify_signature(r, target, config::sha256_hex(body), *snapshot_, nonces_, now).reason;
  }

  static constexpr const char* kOldKey = "sluice_ak_old";
  static constexpr const char* kNewKey = "sluice_ak_new";
  static constexpr const char* kOpsKey = "sluice_ak_ops";
  static constexpr const char* kSecret = "sluice_hs_secret";

  config::SecretKey key_ = *config::SecretKey::parse(std::string(64, '0'));
  BreakerRegistry breakers_{{}};
  std::shared_ptr<const config::Config> config_;
  std::unique_ptr<Snapshot> snapshot_;
  Headers headers_;
  NonceCache nonces_;
  std::string system_;
  std::string identified_;
  bool needs_signature_ = false;
};

TEST_F(CallerAuthTest, AnApiKeyAloneNamesItsSystem) {
  headers_.values["X-Api-Key"] = kNewKey;
  EXPECT_EQ(identify(""), Reason::kOk);
  EXPECT_EQ(identified_, "crm");
  EXPECT_EQ(identify("crm"), Reason::kOk);
}

TEST_F(CallerAuthTest, AnUnknownApiKeyIsRefused) {
  headers_.values["X-Api-Key"] = "sluice_ak_made_up";
  EXPECT_EQ(identify(""), Reason::kApiKeyInvalid);
  EXPECT_EQ(status_of(Reason::kApiKeyInvalid), 401);
  EXPECT_STREQ(to_string(Reason::kApiKeyInvalid), "api_key_invalid");
}

TEST_F(CallerAuthTest, ARotatedOutKeyWorksUntilItsOverlapEndsAndItsSuccessorAfter) {
  headers_.values["X-Api-Key"] = kOldKey;
  EXPECT_EQ(identify("", kNow + 99), Reason::kOk);
  EXPECT_EQ(identify("", kNow + 100), Reason::kApiKeyInvalid);
  headers_.values["X-Api-Key"] = kNewKey;
  EXPECT_EQ(identify("", kNow + 100), Reason::kOk);
}

TEST_F(CallerAuthTest, ASystemUsingApiKeysCannotBeNamedWithoutOne) {
  EXPECT_EQ(identify("crm"), Reason::kApiKeyInvalid);
}

TEST_F(CallerAuthTest, AKeyPresentedUnderAnotherSystemsNameIsRefused) {
  headers_.values["X-Api-Key"] = kNewKey;
  EXPECT_EQ(identify("erp"), Reason::kApiKeyInvalid);
}

TEST_F(CallerAuthTest, KeysOfASystemWhoseAuthIsKeyAreNotAccepted) {
  headers_.values["X-Api-Key"] = kOpsKey;
  EXPECT_EQ(identify(""), Reason::kApiKeyInvalid);
  headers_.values.clear();
  EXPECT_EQ(identify("ops"), Reason::kOk);
  EXPECT_FALSE(needs_signature_);
}

TEST_F(CallerAuthTest, ASigningSystemNeedsASignature) {
  EXPECT_EQ(identify("erp"), Reason::kOk);
  EXPECT_TRUE(needs_signature_);
}

TEST_F(CallerAuthTest, TheStringToSignIsTheIssuesScheme) {
  const std::string body_hash = config::sha256_hex("{\"a\":1}");
  EXPECT_EQ(string_to_sign("POST", "/orders/1?x=2", "1800000000", "n-1", body_hash),
            "POST\n/orders/1?x=2\n1800000000\nn-1\n" + body_hash);
  EXPECT_EQ(sign_request(kSecret, "POST", "/orders/1?x=2", "1800000000", "n-1", "{\"a\":1}"),
            config::base64(config::hmac_sha256(kSecret, "POST\n/orders/1?x=2\n1800000000\nn-1\n" + body_hash)));
}

TEST_F(CallerAuthTest, AValidSignatureIsAccepted) {
  sign("/orders/1?x=2", "{\"a\":1}", kNow, "n-1");
  EXPECT_EQ(verify("/orders/1?x=2", "{\"a\":1}"), Reason::kOk);
}

TEST_F(CallerAuthTest, ATamperedBodyTargetOrSecretIsAnInvalidSignature) {
  sign("/orders/1", "{\"amount\":1}", kNow, "n-1");
  EXPECT_EQ(verify("/orders/1", "{\"amount\":1000}"), Reason::kSignatureInvalid);
  EXPECT_EQ(verify("/orders/2", "{\"amount\":1}"), Reason::kSignatureInvalid);
  sign("/orders/1", "{\"amount\":1}", kNow, "n-2", "sluice_hs_guessed");
  EXPECT_EQ(verify("/orders/1", "{\"amount\":1}"), Reason::kSignatureInvalid);
  sign("/orders/1", "{\"amount\":1}", kNow, "n-3");
  headers_.values[std::string(kTimestampHeader)] = std::to_string(kNow + 1);  // timestamp changed after signing
  EXPECT_EQ(verify("/orders/1", "{\"amount\":1}"), Reason::kSignatureInvalid);
}

TEST_F(CallerAuthTest, ATimestampMoreThan300SecondsOffEitherWayHasExpired) {
  sign("/orders/1", "", kNow - 300, "n-1");
  EXPECT_EQ(verify("/orders/1", ""), Reason::kOk);
  sign("/orders/1", "", kNow - 301, "n-2");
  EXPECT_EQ(verify("/orders/1", ""), Reason::kSignatureExpired);
  sign("/orders/1", "", kNow + 301, "n-3");
  EXPECT_EQ(verify("/orders/1", ""), Reason::kSignatureExpired);
  EXPECT_STREQ(to_string(Reason::kSignatureExpired), "signature_expired");
}

TEST_F(CallerAuthTest, ANonceSeenWithinTheWindowIsAReplay) {
  sign("/orders/1", "body", kNow, "once");
  EXPECT_EQ(verify("/orders/1", "body"), Reason::kOk);
  EXPECT_EQ(verify("/orders/1", "body", kNow + 200), Reason::kSignatureReplayed);
  EXPECT_EQ(status_of(Reason::kSignatureReplayed), 401);
}

// A signature field given twice: an upstream or a log reading the other would see a value never
// checked.
TEST_F(CallerAuthTest, ASignatureFieldGivenTwiceIsABadRequest) {
  for (const std::string_view name : {kTimestampHeader, kNonceHeader, kSignatureHeader}) {
    sign("/orders/1", "", kNow, "n-" + std::string(name));
    headers_.twice = {std::string(name)};
    EXPECT_EQ(verify("/orders/1", ""), Reason::kBadRequest) << name;
  }
  headers_.twice.clear();
  EXPECT_EQ(verify("/orders/1", ""), Reason::kOk);  // its nonce was not taken by the refusals
}

// One request has one signature: base64 without its padding, or with other bits where the last
// character's are not used, decodes to the same bytes and is refused all the same.
TEST_F(CallerAuthTest, OnlyTheCanonicalBase64OfASignatureIsAccepted) {
  static constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  sign("/orders/1", "", kNow, "n-1");
  const std::string canonical = headers_.values[std::string(kSignatureHeader)];
  ASSERT_EQ(canonical.size(), 44u);
  ASSERT_EQ(canonical.back(), '=');
  std::string stray_bits = canonical;
  stray_bits[42] = kAlphabet[kAlphabet.find(canonical[42]) ^ 1];  // its lowest 2 bits are not used
  for (const std::string& other : {canonical.substr(0, 43), stray_bits}) {
    headers_.values[std::string(kSignatureHeader)] = other;
    EXPECT_EQ(verify("/orders/1", ""), Reason::kSignatureInvalid) << other;
  }
  headers_.values[std::string(kSignatureHeader)] = canonical;
  EXPECT_EQ(verify("/orders/1", ""), Reason::kOk);
}

TEST_F(CallerAuthTest, MissingOrMalformedSignatureFieldsAreInvalid) {
  EXPECT_EQ(verify("/orders/1", ""), Reason::kSignatureInvalid);
  sign("/orders/1", "", kNow, "n-1");
  headers_.values[std::string(kTimestampHeader)] = "soon";
  EXPECT_EQ(verify("/orders/1", ""), Reason::kSignatureInvalid);
  sign("/orders/1", "", kNow, std::string(129, 'n'));
  EXPECT_EQ(verify("/orders/1", ""), Reason::kSignatureInvalid);
  sign("/orders/1", "", kNow, "n-2");
  headers_.values[std::string(kSignatureHeader)] = "not base64!";
  EXPECT_EQ(verify("/orders/1", ""), Reason::kSignatureInvalid);
}

TEST_F(CallerAuthTest, ASecretThatDoesNotOpenIsReportedAndItsSignaturesRefused) {
  const config::SecretKey other = *config::SecretKey::parse(config::to_hex(config::random_bytes(32)));
  Snapshot wrong_key(config_, breakers_, 2, &other);
  ASSERT_EQ(wrong_key.caller_problems().size(), 1u);
  EXPECT_NE(wrong_key.caller_problems()[0].find("hs_1"), std::string::npos);
  Snapshot no_key(config_, breakers_, 3, nullptr);
  EXPECT_NE(no_key.caller_problems()[0].find("SLUICE_SECRET_KEY is not set"), std::string::npos);
  sign("/orders/1", "", kNow, "n-1");
  Request r = request("erp");
  EXPECT_EQ(verify_signature(r, "/orders/1", config::sha256_hex(""), wrong_key, nonces_, kNow).reason,
            Reason::kSignatureInvalid);
}

TEST_F(CallerAuthTest, ForgedSignaturesLeaveNoNonceBehind) {
  for (int i = 0; i < 20; ++i) {
    sign("/orders/1", "", kNow, "forged-" + std::to_string(i), "sluice_hs_guessed");
    EXPECT_EQ(verify("/orders/1", ""), Reason::kSignatureInvalid);
  }
  EXPECT_EQ(nonces_.size(), 0u);
}

using Outcome = NonceCache::Outcome;

// How many of `count` nonces (prefix0, prefix1, ...) of a system the cache takes.
int remembered(NonceCache& cache, const std::string& system, const std::string& prefix, int count,
               std::int64_t now = kNow) {
  int n = 0;
  for (int i = 0; i < count; ++i) {
    n += cache.insert(system, prefix + std::to_string(i), now + 300, now).outcome == Outcome::kRemembered ? 1 : 0;
  }
  return n;
}

TEST(NonceCacheTest, ANonceIsForgottenOnceItsWindowHasPassed) {
  NonceCache cache;
  EXPECT_EQ(cache.insert("erp", "n", kNow + 300, kNow).outcome, Outcome::kRemembered);
  EXPECT_EQ(cache.insert("erp", "n", kNow + 300, kNow + 300).outcome, Outcome::kReplayed);
  EXPECT_EQ(cache.insert("crm", "n", kNow + 300, kNow).outcome, Outcome::kRemembered);  // nonces are per system
  EXPECT_EQ(cache.insert("erp", "n", kNow + 700, kNow + 301).outcome, Outcome::kRemembered);
  EXPECT_EQ(cache.size(), 2u);
}

// (system, nonce) is one name: "a" + "b\nc" is not "a\nb" + "c" (whatever a system key may hold).
TEST(NonceCacheTest, NoncesOfDifferentSystemsNeverMeet) {
  NonceCache cache;
  EXPECT_EQ(cache.insert("a", "b\nc", kNow + 300, kNow).outcome, Outcome::kRemembered);
  EXPECT_EQ(cache.insert("a\nb", "c", kNow + 300, kNow).outcome, Outcome::kRemembered);
  EXPECT_EQ(cache.insert("ab", "c", kNow + 300, kNow).outcome, Outcome::kRemembered);
  EXPECT_EQ(cache.insert("a", "bc", kNow + 300, kNow).outcome, Outcome::kRemembered);
  EXPECT_EQ(cache.insert("a", "b\nc", kNow + 300, kNow).outcome, Outcome::kReplayed);
}

TEST(NonceCacheTest, AFullCacheRefusesRatherThanForgetAndSaysWhenRoomComes) {
  NonceCache cache(16);  // one per shard
  EXPECT_EQ(remembered(cache, "erp", "n", 4096), 16);
  const NonceCache::Answer full = cache.insert("erp", "one-more", kNow + 300, kNow);
  EXPECT_EQ(full.outcome, Outcome::kNoRoom);
  EXPECT_EQ(full.room_at, kNow + 301);  // the first moment a remembered nonce's window has passed
  EXPECT_EQ(cache.insert("erp", "later", kNow + 700, kNow + 301).outcome, Outcome::kRemembered);
}

// One system that signs more requests than the cache holds within the window (even ones its limits
// then refuse) fills at most half of it: its own are refused, another system's still go.
TEST(NonceCacheTest, OneSystemHoldsAtMostHalfOfTheCache) {
  NonceCache cache(16 * 64);  // 64 per shard
  EXPECT_EQ(remembered(cache, "flood", "n", 4096), 16 * 32);
  EXPECT_EQ(remembered(cache, "crm", "n", 4096), 16 * 16);  // half of what the flood left
  // Once its nonces expire, the flooding system's count is back to none.
  EXPECT_EQ(remembered(cache, "flood", "m", 4096, kNow + 301), 16 * 32);
}

// Each system takes at most half of what the others leave: several flooding at once still leave
// room for the next (with two at half each, the cache was full for every other system).
TEST(NonceCacheTest, SeveralFloodingSystemsStillLeaveRoomForAnother) {
  NonceCache cache(16 * 64);
  EXPECT_EQ(remembered(cache, "flood-1", "n", 4096), 16 * 32);
  EXPECT_EQ(remembered(cache, "flood-2", "n", 4096), 16 * 16);
  EXPECT_EQ(remembered(cache, "flood-3", "n", 4096), 16 * 8);
  EXPECT_EQ(remembered(cache, "crm", "n", 4096), 16 * 4);  // half of the 8 each shard has left
  EXPECT_EQ(cache.size(), 16u * 60);
}

}  // namespace
}  // namespace sluice::gateway
