// The configuration's forms: YAML and JSON export read back into the same meaning, import into the
// database and export out of it, entity bodies read on their own, credentials and breaker overrides.
#include <gtest/gtest.h>

#include <cctype>

#include <boost/json.hpp>
#include <fstream>
#include <sstream>

#include "config/crypto.h"
#include "config/json.h"
#include "control_test.h"

namespace sluice::config {
namespace {

using control_test::base_yaml;
using control_test::parse;
using control_test::yaml_of;

std::string fixture() {
  std::ifstream in(std::string(SLUICE_FIXTURES) + "/issue_example.yaml");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A configuration using every feature the control plane added.
Config rich() {
  Config c = *parse(base_yaml());
  c.systems[0].auth = Auth::kApiKey;
  Credential old;
  old.id = "ak_old";
  old.api_key_sha256 = sha256_hex("old key");
  old.created = 1'700'000'000;
  old.expires = 1'700'086'400;
  Credential now = old;
  now.id = "ak_new";
  now.api_key_sha256 = sha256_hex("new key");
  now.expires.reset();
  c.systems[0].credentials = {old, now};
  c.systems[1].auth = Auth::kHmac;
  Credential signing;
  signing.id = "hs_1";
  signing.kind = Auth::kHmac;
  signing.sealed_secret = SecretKey::parse(to_hex(std::string(32, 'k')))->seal("sluice_hs_x");
  signing.created = 1'700'000'000;
  c.systems[1].credentials = {signing};
  c.systems[1].description = "quotes \" and\nnew lines";
  c.upstreams[0].breaker.force = BreakerForce::kOpen;
  return c;
}

TEST(ConfigIoTest, TheJsonExportOfAFileReadsBackToTheSameMeaning) {
  const auto original = parse(fixture());
  const std::string json = boost::json::serialize(to_json(*original));
  const auto again = parse(json);
  EXPECT_EQ(yaml_of(*again), yaml_of(*original));
}

TEST(ConfigIoTest, CredentialsOverridesAndEscapesSurviveYamlAndJson) {
  const Config c = rich();
  const auto from_yaml = parse(to_yaml(c));
  EXPECT_EQ(yaml_of(*from_yaml), yaml_of(c));
  EXPECT_EQ(from_yaml->systems[0].credentials, c.systems[0].credentials);
  EXPECT_EQ(from_yaml->systems[1].credentials, c.systems[1].credentials);
  EXPECT_EQ(from_yaml->systems[1].description, c.systems[1].description);
  EXPECT_EQ(from_yaml->upstreams[0].breaker.force, BreakerForce::kOpen);
  const auto from_json = parse(pretty(to_json(c)));
  EXPECT_EQ(yaml_of(*from_json), yaml_of(c));
}

TEST(ConfigIoTest, ImportingIntoTheDatabaseThenExportingKeepsTheFilesMeaning) {
  auto store = control_test::open_store(testing::temp_dir() + "/sluice.db");
  for (const Config& c : {*parse(fixture()), rich()}) {
    ASSERT_TRUE(store->replace("test", "config.import", c).ok());
    auto loaded = store->load();
    ASSERT_TRUE(loaded.ok()) << loaded.error().message;
    EXPECT_EQ(to_yaml(*loaded->config), to_yaml(c));
    EXPECT_EQ(boost::json::serialize(to_json(*loaded->config)), boost::json::serialize(to_json(c)));
  }
}

TEST(ConfigIoTest, AnEntityBodyIsReadWithPathsRelativeToItselfAndItsLines) {
  auto r = parse_system("{\"key\": \"crm\",\n \"limits\": [{\"algorithm\": \"gcra\", \"limit\": 5, \"period\": \"soon\"}],\n \"colour\": 1}");
  ASSERT_TRUE(std::holds_alternative<std::vector<Problem>>(r));
  const auto& problems = std::get<std::vector<Problem>>(r);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0].path, "colour");
  EXPECT_EQ(problems[0].line, 3);
  EXPECT_EQ(problems[1].path, "limits[0].period");
  EXPECT_EQ(problems[1].line, 2);
  EXPECT_NE(problems[1].message.find("must be a duration"), std::string::npos);
}

TEST(ConfigIoTest, EachEntityKindReadsFromJson) {
  EXPECT_EQ(std::get<Interface>(parse_interface(R"({"id":"a","path":"/a","upstream":"u","concurrency":3})")).concurrency, 3);
  EXPECT_EQ(std::get<Upstream>(parse_upstream(R"({"name":"u","targets":["10.0.0.1:80"]})")).targets[0].port, 80);
  EXPECT_EQ(std::get<Grant>(parse_grant(R"({"system":"s","interface":"i"})")).interface, "i");
  EXPECT_TRUE(std::holds_alternative<std::vector<Problem>>(parse_grant("[1, 2]")));
  EXPECT_TRUE(std::holds_alternative<std::vector<Problem>>(parse_grant("{\"system\": ")));
  EXPECT_TRUE(std::holds_alternative<std::vector<Problem>>(parse_grant("")));
}

TEST(ConfigIoTest, CredentialProblemsNameTheirFields) {
  Config c = rich();
  c.systems[0].credentials[0].api_key_sha256 = "not hex";
  c.systems[0].credentials[1].id = "ak_old";
  c.systems[1].credentials[0].sealed_secret = "plain text secret";
  Credential twin;
  twin.id = "ak_twin";
  twin.api_key_sha256 = sha256_hex("new key");  // the same key as crm's, in capitals
  for (char& ch : twin.api_key_sha256) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  c.systems[1].credentials.push_back(twin);
  std::vector<std::string> paths;
  for (const Problem& p : validate(c)) paths.push_back(p.path);
  EXPECT_EQ(paths, (std::vector<std::string>{
                       "systems[0].credentials[0].api_key_sha256",
                       "systems[0].credentials[1].id",
                       "systems[1].credentials[0].sealed_secret",
                       "systems[1].credentials[1].api_key_sha256",
                   }));
}

// A file caught half-written, or a body that came out empty, is refused rather than served as a
// configuration with nothing in it; "{}" still asks for the defaults.
TEST(ConfigIoTest, AnEmptyDocumentIsRefused) {
  for (const char* text : {"", "\n", "# nothing but a comment\n"}) {
    const auto r = load_yaml(text, "sluice.yaml");
    ASSERT_TRUE(std::holds_alternative<std::vector<Problem>>(r)) << "'" << text << "'";
    EXPECT_NE(std::get<std::vector<Problem>>(r).front().message.find("is empty"), std::string::npos);
  }
  EXPECT_TRUE((std::holds_alternative<std::shared_ptr<const Config>>(load_yaml("{}", "sluice.yaml"))));
}

// Text after the configuration is refused, not dropped, and said to be what it is: after a JSON
// value it is no "---" line's second YAML document.
TEST(ConfigIoTest, TextAfterTheConfigurationIsRefusedForWhatItIs) {
  auto problem = [](const char* text) {
    const auto r = load_yaml(text, "b");
    return std::holds_alternative<std::vector<Problem>>(r) ? std::get<std::vector<Problem>>(r).front().to_string()
                                                           : std::string("loaded");
  };
  EXPECT_EQ(problem("{\"listen\": \"127.0.0.1:1\"}\n{\"listen\": \"127.0.0.1:2\"}\n"),
            "b:2:1: text goes on here after the configuration ended: a configuration is one JSON value or YAML document");
  EXPECT_EQ(problem("{\"listen\": \"127.0.0.1:1\"} trailing\n"),
            "b:1:27: text goes on here after the configuration ended: a configuration is one JSON value or YAML document");
  EXPECT_EQ(problem("listen: 127.0.0.1:1\n---\n# the next\nlisten: 127.0.0.1:2\n"),
            "b:4:1: a second YAML document (after a \"---\" line) begins here: a configuration is one document");
  EXPECT_EQ(problem("listen: 127.0.0.1:1\n--- {listen: 127.0.0.1:2}\n"),
            "b:2:5: a second YAML document (after a \"---\" line) begins here: a configuration is one document");
}

TEST(ConfigIoTest, BadCredentialAndForceFieldsInAFileAreReportedWithLines) {
  auto r = load_yaml("systems:\n  - key: a\n    auth: password\n    credentials:\n      - {id: x, kind: key, created: yesterday}\n"
                     "upstreams:\n  - {name: u, targets: [\"h:1\"], breaker: {force: half}}\n",
                     "f.yaml");
  ASSERT_TRUE(std::holds_alternative<std::vector<Problem>>(r));
  std::vector<std::string> where;
  for (const Problem& p : std::get<std::vector<Problem>>(r)) where.push_back(p.to_string());
  const std::string all = ::testing::PrintToString(where);
  EXPECT_NE(all.find("f.yaml:3:11: systems[0].auth: must be key, api_key or hmac"), std::string::npos) << all;
  EXPECT_NE(all.find("f.yaml:5:23: systems[0].credentials[0].kind: must be api_key or hmac"), std::string::npos) << all;
  EXPECT_NE(all.find("f.yaml:5:37: systems[0].credentials[0].created: must be a UTC time"), std::string::npos) << all;
  EXPECT_NE(all.find("f.yaml:7:50: upstreams[0].breaker.force: must be open, closed or none"), std::string::npos) << all;
}

TEST(ConfigIoTest, TimesAreRfc3339InUtc) {
  EXPECT_EQ(format_time(1'700'000'000), "2023-11-14T22:13:20Z");
  EXPECT_EQ(parse_time("2023-11-14T22:13:20Z"), 1'700'000'000);
  EXPECT_FALSE(parse_time("2023-11-14 22:13:20").has_value());
  EXPECT_FALSE(parse_time("2023-13-14T22:13:20Z").has_value());
  EXPECT_FALSE(parse_time("2023-11-14T22:13:20Zjunk").has_value());
}

TEST(ConfigIoTest, SecretsAreRedactedFromAuditText) {
  const std::string text = boost::json::serialize(to_json(rich()));
  const std::string redacted = redact_credentials(text);
  EXPECT_EQ(redacted.find(sha256_hex("new key")), std::string::npos);
  EXPECT_EQ(redacted.find("v1:"), std::string::npos);
  EXPECT_NE(redacted.find("ak_new"), std::string::npos);
}

}  // namespace
}  // namespace sluice::config
