// The admin API as a plain function, without sockets: tokens and roles, CRUD of every entity,
// every validation error refused whole with its field path, ETag / If-Match, the whole
// configuration (export, replace, long poll), the audit log, stats, live limits, breakers,
// credentials and tokens, and a follower's read-only view.
#include <gtest/gtest.h>

#include <atomic>
#include <boost/json.hpp>
#include <sqlite3.h>
#include <functional>
#include <mutex>
#include <thread>
#include <tuple>

#include "config/crypto.h"
#include "config/json.h"
#include "control_test.h"
#include "gateway/admin_api.h"
#include "gateway/limiter.h"
#include "gateway/policy.h"
#include "sluice/local_store.h"

namespace sluice::gateway {
namespace {

namespace json = boost::json;
using control_test::base_yaml;
using control_test::parse;

constexpr Nanos kT0 = std::chrono::seconds(1'800'000'000);

struct Reply {
  int status = 0;
  json::value body;
  AdminResponse raw;

  std::string header(std::string_view name) const {
    for (const auto& [k, v] : raw.headers) {
      if (k == name) return v;
    }
    return "";
  }
  const json::object& obj() const { return body.as_object(); }
  std::string str(std::string_view key) const {
    const auto* v = body.is_object() ? body.as_object().if_contains(key) : nullptr;
    return v != nullptr && v->is_string() ? std::string(v->as_string()) : "";
  }
  // The problems' "path: message" lines.
  std::vector<std::string> problems() const {
    std::vector<std::string> out;
    if (!body.is_object() || !body.as_object().contains("problems")) return out;
    for (const auto& p : body.as_object().at("problems").as_array()) {
      out.push_back(std::string(p.as_object().at("path").as_string()) + ": " +
                    std::string(p.as_object().at("message").as_string()));
    }
    return out;
  }
};

class AdminApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_ = testing::temp_dir() + "/sluice.db";
    store_ = control_test::open_store(db_, &clock_);
    ASSERT_TRUE(store_->replace("setup", "config.import", *parse(base_yaml())).ok());
    admin_ = store_->create_token("setup", config::Role::kAdmin, "ops")->second;
    read_ = store_->create_token("setup", config::Role::kRead, "grafana")->second;
    auth_->set_tokens(*store_->tokens());
    api_ = std::make_unique<AdminApi>(options());
  }

  AdminApiOptions options() {
    AdminApiOptions o;
    o.store = store_.get();
    o.snapshot = [this] { return snapshot(); };
    o.stats = &stats_;
    o.metrics = &metrics_;
    o.limits = &limits_;
    o.auth = auth_;
    o.secret_key = &key_;
    o.clock = &clock_;
    o.tokens_changed = [this] { auth_->set_tokens(*store_->tokens()); };
    o.describe_source = [](json::object& s) { s["source"] = "test"; };
    return o;
  }

  // What a gateway watching the database would serve now.
  std::shared_ptr<const Snapshot> snapshot() {
    auto loaded = store_->load();
    if (loaded.ok() && loaded->revision != served_revision_) {
      served_ = std::make_shared<const Snapshot>(loaded->config, breakers_, static_cast<std::uint64_t>(loaded->revision),
                                                 &key_);
      served_revision_ = loaded->revision;
    }
    return served_;
  }

  Reply call(const std::string& method, const std::string& target, const std::string& body = "",
             std::vector<std::pair<std::string, std::string>> headers = {}, const std::string* token = nullptr) {
    AdminRequest req;
    req.method = method;
    req.target = target;
    req.body = body;
    req.headers = std::move(headers);
    const std::string& t = token != nullptr ? *token : admin_;
    if (!t.empty()) req.headers.emplace_back("authorization", "Bearer " + t);
    Reply r;
    r.raw = api_->handle(req);
    r.status = r.raw.status;
    boost::system::error_code ec;
    if (!r.raw.body.empty()) r.body = json::parse(r.raw.body, ec);
    return r;
  }

  std::int64_t revision() { return *store_->revision(); }
  Reason decide(const std::string& system, const std::string& path, const std::string& client_ip = "10.0.0.1");

  ManualClock clock_{kT0};
  std::string db_;
  std::unique_ptr<config::ConfigStore> store_;
  std::shared_ptr<AdminAuth> auth_ = std::make_shared<AdminAuth>(&clock_);
  config::SecretKey key_ = *config::SecretKey::parse(config::to_hex(config::random_bytes(32)));
  BreakerRegistry breakers_{{}};
  std::shared_ptr<const Snapshot> served_;
  std::int64_t served_revision_ = -1;
  Stats stats_{1, clock_};
  Metrics metrics_{1};
  LocalStore limits_{{.clock = &clock_}};
  std::string admin_;
  std::string read_;
  std::unique_ptr<AdminApi> api_;
};

// --- authentication -------------------------------------------------------------------------------

TEST_F(AdminApiTest, WithoutAValidTokenEveryRouteIs401WithTheProjectsErrorShape) {
  const std::string none;
  const std::string wrong = "sluice_at_made_up";
  for (const std::string* token : {&none, &wrong}) {
    const Reply r = call("GET", "/admin/v1/systems", "", {}, token);
    EXPECT_EQ(r.status, 401);
    EXPECT_EQ(r.str("reason"), "unauthorized");
    EXPECT_EQ(r.obj().at("code").as_int64(), 401);
    EXPECT_FALSE(r.str("msg").empty());
    EXPECT_EQ(r.header("WWW-Authenticate"), "Bearer realm=\"sluice\"");
  }
  EXPECT_EQ(call("PUT", "/admin/v1/config", "{}", {}, &none).status, 401);
  EXPECT_EQ(call("GET", "/admin/v1/no/such/route", "", {}, &none).status, 401);
  // The message says which: none, one not known, one given twice.
  EXPECT_EQ(call("GET", "/admin/v1/systems", "", {}, &none).str("msg"),
            "This needs a token (sluice token create): Authorization: Bearer <token>.");
  EXPECT_EQ(call("GET", "/admin/v1/systems", "", {}, &wrong).str("msg"),
            "The token is not one of this admin API's (revoked, or mistyped): Authorization: Bearer <token>.");
  const Reply twice = call("GET", "/admin/v1/systems", "", {{"Authorization", "Bearer " + admin_}});
  EXPECT_EQ(twice.status, 401);
  EXPECT_EQ(twice.str("msg"), "Give Authorization once: Authorization: Bearer <token>.");
}

TEST_F(AdminApiTest, AReadTokenReadsButChangesNothing) {
  EXPECT_EQ(call("GET", "/admin/v1/systems", "", {}, &read_).status, 200);
  EXPECT_EQ(call("GET", "/admin/v1/config", "", {}, &read_).status, 200);
  const Reply put = call("PUT", "/admin/v1/systems/crm", R"({"interfaces":["orders"]})", {}, &read_);
  EXPECT_EQ(put.status, 403);
  EXPECT_EQ(put.str("reason"), "forbidden");
  EXPECT_EQ(call("GET", "/admin/v1/tokens", "", {}, &read_).status, 403);
  EXPECT_EQ(call("POST", "/admin/v1/limits/reset?key=system:crm", "", {}, &read_).status, 403);
  EXPECT_EQ(call("GET", "/admin/v1/whoami", "", {}, &read_).str("role"), "read");
}

TEST_F(AdminApiTest, TheBearerSchemeIsCaseInsensitiveAndTheTokenIsNot) {
  AdminRequest req;
  req.method = "GET";
  req.target = "/admin/v1/whoami";
  req.headers = {{"Authorization", "bearer " + admin_}};
  EXPECT_EQ(api_->handle(req).status, 200);
  std::string upper = admin_;
  upper.back() = upper.back() == 'A' ? 'B' : 'A';
  req.headers = {{"Authorization", "Bearer " + upper}};
  EXPECT_EQ(api_->handle(req).status, 401);
}

// Two Authorization fields are refused whichever comes first, as the data plane refuses a caller
// named twice: a proxy in front may have read the other one.
TEST_F(AdminApiTest, ATokenGivenTwiceIsRefusedInEitherOrder) {
  AdminRequest req;
  req.method = "GET";
  req.target = "/admin/v1/whoami";
  req.headers = {{"Authorization", "Bearer " + admin_}, {"authorization", "Bearer nobody"}};
  EXPECT_EQ(api_->handle(req).status, 401);
  req.headers = {{"Authorization", "Bearer nobody"}, {"Authorization", "Bearer " + admin_}};
  EXPECT_EQ(api_->handle(req).status, 401);
  req.headers = {{"Authorization", "Bearer " + admin_}, {"Authorization", "Bearer " + admin_}};
  EXPECT_EQ(api_->handle(req).status, 401);
  req.headers = {{"X-Other", "1"}, {"Authorization", "Bearer " + admin_}};
  EXPECT_EQ(api_->handle(req).status, 200);
}

TEST(AdminListenTest, AnAddressOffLoopbackNeedsATokenToExist) {
  EXPECT_TRUE(check_admin_listen("127.0.0.1:9090", false).ok());
  EXPECT_TRUE(check_admin_listen("localhost:9090", false).ok());
  EXPECT_TRUE(check_admin_listen("[::1]:9090", false).ok());
  EXPECT_TRUE(check_admin_listen("off", false).ok());
  EXPECT_FALSE(check_admin_listen("0.0.0.0:9090", false).ok());
  EXPECT_FALSE(check_admin_listen("10.1.2.3:9090", false).ok());
  EXPECT_TRUE(check_admin_listen("127.8.9.10:9090", false).ok());
  EXPECT_FALSE(check_admin_listen("127.0.0.1.example.com:9090", false).ok());  // a name, not an address
  EXPECT_FALSE(check_admin_listen("[::]:9090", false).ok());
  EXPECT_TRUE(check_admin_listen("0.0.0.0:9090", true).ok());
}

// --- CRUD -----------------------------------------------------------------------------------------

TEST_F(AdminApiTest, SystemsAreCreatedReadUpdatedListedAndDeleted) {
  const Reply created = call("POST", "/admin/v1/systems",
                             R"({"key":"billing","description":"Billing","interfaces":["users"],
                                 "limits":[{"algorithm":"token_bucket","capacity":10,"rate":1,"per":"1s"}]})");
  ASSERT_EQ(created.status, 201) << created.raw.body;
  EXPECT_EQ(created.header("Location"), "/admin/v1/systems/billing");
  EXPECT_FALSE(created.header("ETag").empty());
  EXPECT_EQ(created.str("description"), "Billing");

  const Reply got = call("GET", "/admin/v1/systems/billing");
  EXPECT_EQ(got.status, 200);
  EXPECT_EQ(got.header("ETag"), created.header("ETag"));
  EXPECT_EQ(got.obj().at("limits").as_array()[0].as_object().at("capacity").as_int64(), 10);

  const Reply updated = call("PUT", "/admin/v1/systems/billing", R"({"description":"Billing v2","interfaces":["users"]})");
  EXPECT_EQ(updated.status, 200) << updated.raw.body;
  EXPECT_EQ(updated.str("key"), "billing");
  EXPECT_NE(updated.header("ETag"), created.header("ETag"));
  EXPECT_TRUE(updated.obj().at("limits").as_array().empty());

  const Reply list = call("GET", "/admin/v1/systems");
  EXPECT_EQ(list.obj().at("items").as_array().size(), 3u);
  EXPECT_EQ(list.header("ETag"), "\"r" + std::to_string(revision()) + "\"");

  EXPECT_EQ(call("DELETE", "/admin/v1/systems/billing").status, 204);
  EXPECT_EQ(call("GET", "/admin/v1/systems/billing").status, 404);
  EXPECT_EQ(call("DELETE", "/admin/v1/systems/billing").status, 404);
}

TEST_F(AdminApiTest, InterfacesUpstreamsAndGrantsHaveTheSameRoutes) {
  EXPECT_EQ(call("POST", "/admin/v1/upstreams", R"({"name":"reports","targets":["127.0.0.1:9"]})").status, 201);
  EXPECT_EQ(call("POST", "/admin/v1/interfaces",
                 R"({"id":"reports","methods":["GET"],"path":"/reports/{id}","upstream":"reports"})").status, 201);
  EXPECT_EQ(call("PUT", "/admin/v1/systems/erp", R"({"interfaces":["orders","reports"]})").status, 200);
  const Reply grant = call("PUT", "/admin/v1/grants/erp/reports",
                           R"({"limits":[{"algorithm":"fixed_window","limit":10,"period":"1m"}]})");
  ASSERT_EQ(grant.status, 201) << grant.raw.body;
  EXPECT_EQ(grant.header("Location"), "/admin/v1/grants/erp/reports");
  EXPECT_EQ(call("GET", "/admin/v1/grants/erp/reports").str("interface"), "reports");
  EXPECT_EQ(call("GET", "/admin/v1/interfaces/reports").str("path"), "/reports/{id}");
  EXPECT_EQ(call("GET", "/admin/v1/upstreams/reports").obj().at("targets").as_array()[0].as_string(), "127.0.0.1:9");
  EXPECT_EQ(call("GET", "/admin/v1/grants").obj().at("items").as_array().size(), 2u);
  EXPECT_EQ(call("DELETE", "/admin/v1/grants/erp/reports").status, 204);
  EXPECT_EQ(call("GET", "/admin/v1/grants/erp/reports").status, 404);
}

TEST_F(AdminApiTest, NamesWithSlashesAndSpacesArePercentEncodedInTheUrl) {
  EXPECT_EQ(call("POST", "/admin/v1/systems", R"({"key":"team a/b"})").status, 201);
  EXPECT_EQ(call("GET", "/admin/v1/systems/team%20a%2Fb").str("key"), "team a/b");
  // A % that is not an escape is refused, not read as it stands.
  EXPECT_EQ(call("POST", "/admin/v1/systems", R"({"key":"100%"})").status, 201);
  EXPECT_EQ(call("GET", "/admin/v1/systems/100%").status, 400);
  EXPECT_EQ(call("GET", "/admin/v1/systems/100%2").status, 400);
  EXPECT_EQ(call("GET", "/admin/v1/limits?key=system:10%zz").status, 400);
  EXPECT_EQ(call("GET", "/admin/v1/systems/100%25").str("key"), "100%");
  // Escapes that decode to bytes of no UTF-8 text name nothing that could be: 400, not 404.
  EXPECT_EQ(call("GET", "/admin/v1/systems/%C3").status, 400);
  EXPECT_EQ(call("POST", "/admin/v1/systems", R"({"key":"caf\u00e9"})").status, 201);
  EXPECT_EQ(call("GET", "/admin/v1/systems/caf%C3%A9").str("key"), "caf\xC3\xA9");
  // A name's own '/' is %2F: a raw one at the end does not reach the name without it.
  EXPECT_EQ(call("POST", "/admin/v1/systems", R"({"key":"num"})").status, 201);
  EXPECT_EQ(call("POST", "/admin/v1/systems", R"({"key":"num/"})").status, 201);
  EXPECT_EQ(call("DELETE", "/admin/v1/systems/num/").status, 404);
  EXPECT_EQ(call("GET", "/admin/v1/systems/num").status, 200);
  EXPECT_EQ(call("GET", "/admin/v1/systems/").status, 404);
  EXPECT_EQ(call("GET", "/admin/v1/systems/num%2F").str("key"), "num/");
}

TEST_F(AdminApiTest, CreatingWhatExistsIsAConflict) {
  const Reply r = call("POST", "/admin/v1/systems", R"({"key":"crm"})");
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(r.str("reason"), "conflict");
}

TEST_F(AdminApiTest, ABodyNamingAnotherEntityThanItsUrlIsRefused) {
  const Reply r = call("PUT", "/admin/v1/systems/crm", R"({"key":"erp"})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.str("reason"), "bad_request");
}

// A reset changes no configuration but what the gateway enforces: it is audited, with who did it
// and what was reset, at the revision in effect.
TEST_F(AdminApiTest, ResetsOfALimitAndOfABreakerAreAudited) {
  const std::int64_t before = revision();
  ASSERT_EQ(call("POST", "/admin/v1/limits/reset?key=system:crm&value=7").status, 200);
  ASSERT_EQ(call("POST", "/admin/v1/breakers/app/reset").status, 200);
  EXPECT_EQ(revision(), before);
  const Reply audit = call("GET", "/admin/v1/audit?limit=2");
  const auto& items = audit.obj().at("items").as_array();
  ASSERT_EQ(items.size(), 2u) << audit.raw.body;
  const auto& breaker = items[0].as_object();
  const auto& limits = items[1].as_object();
  EXPECT_EQ(limits.at("action").as_string(), "limits.reset");
  EXPECT_EQ(limits.at("after").as_object().at("key").as_string(), "system:crm");
  EXPECT_EQ(limits.at("after").as_object().at("value").as_string(), "7");
  EXPECT_EQ(limits.at("revision").as_int64(), before);
  EXPECT_NE(limits.at("actor").as_string().find("token:"), std::string::npos);
  EXPECT_EQ(breaker.at("action").as_string(), "breaker.reset");
  EXPECT_EQ(breaker.at("target").as_string(), "breakers/app");
  // A reset that found nothing to reset is not.
  EXPECT_EQ(call("POST", "/admin/v1/limits/reset?key=system:crm&limit=nope").status, 404);
  EXPECT_EQ(call("GET", "/admin/v1/audit?limit=1").obj().at("items").as_array()[0].as_object().at("action").as_string(),
            "breaker.reset");
}

TEST_F(AdminApiTest, DeletingASystemTakesItsGrantsWithItAndAuditsEach) {
  EXPECT_EQ(call("DELETE", "/admin/v1/systems/crm").status, 204);
  EXPECT_TRUE(store_->load()->config->grants.empty());
  // Newest first: the grant's row follows the system's, at the same revision.
  const Reply audit = call("GET", "/admin/v1/audit?limit=2");
  const auto& items = audit.obj().at("items").as_array();
  ASSERT_EQ(items.size(), 2u);
  const auto& grant = items[0].as_object();
  const auto& system = items[1].as_object();
  EXPECT_EQ(system.at("action").as_string(), "system.delete");
  EXPECT_EQ(grant.at("action").as_string(), "grant.delete");
  EXPECT_EQ(grant.at("target").as_string(), "grants/crm/orders");
  EXPECT_EQ(grant.at("before").as_object().at("interface").as_string(), "orders");
  EXPECT_TRUE(grant.at("after").is_null());
  EXPECT_EQ(grant.at("revision"), system.at("revision"));
}

TEST_F(AdminApiTest, DeletingAnInterfaceTakesItsGrantsWithItAndAuditsEach) {
  EXPECT_EQ(call("DELETE", "/admin/v1/interfaces/orders").status, 400);  // the systems name it
  ASSERT_EQ(call("PUT", "/admin/v1/systems/crm", R"({"interfaces":["*"]})").status, 200);  // keeps its grant
  ASSERT_EQ(call("PUT", "/admin/v1/systems/erp", R"({"interfaces":["users"]})").status, 200);
  EXPECT_EQ(call("DELETE", "/admin/v1/interfaces/orders").status, 204);
  EXPECT_TRUE(store_->load()->config->grants.empty());
  const Reply audit = call("GET", "/admin/v1/audit?limit=2");
  const auto& items = audit.obj().at("items").as_array();
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].as_object().at("action").as_string(), "grant.delete");
  EXPECT_EQ(items[1].as_object().at("action").as_string(), "interface.delete");
}

TEST_F(AdminApiTest, DeletingWhatOthersStillNameIsRefusedWithTheirPaths) {
  const std::int64_t before = revision();
  const Reply r = call("DELETE", "/admin/v1/upstreams/spare");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.problems(), std::vector<std::string>{"interfaces[2].upstream: names no upstream: \"spare\""});
  // A delete has no body, so no problem has a field in it.
  EXPECT_FALSE(r.obj().at("problems").as_array()[0].as_object().contains("field")) << r.raw.body;
  EXPECT_EQ(revision(), before);
}

TEST_F(AdminApiTest, SystemWritesKeepTheirCredentials) {
  const Reply key = call("POST", "/admin/v1/systems/crm/credentials", R"({"kind":"api_key"})");
  ASSERT_EQ(key.status, 201);
  EXPECT_EQ(call("PUT", "/admin/v1/systems/crm", R"({"interfaces":["orders"],"credentials":[]})").status, 200);
  EXPECT_EQ(store_->load()->config->systems[0].credentials.size(), 1u);
  // A field given twice is named, not answered as a body of the wrong shape.
  const Reply twice = call("POST", "/admin/v1/systems/crm/credentials", R"({"kind":"api_key","kind":"hmac"})");
  EXPECT_EQ(twice.status, 400);
  EXPECT_EQ(twice.str("msg"), "The body gives the field \"kind\" twice: give each field once.");
  EXPECT_EQ(store_->load()->config->systems[0].credentials.size(), 1u);
  EXPECT_EQ(call("POST", "/admin/v1/tokens", R"({"name":"t","name":"u","role":"read"})").str("msg"),
            "The body gives the field \"name\" twice: give each field once.");
}

TEST_F(AdminApiTest, UnknownRoutesAre404AndWrongMethods405WithAllow) {
  EXPECT_EQ(call("GET", "/admin/v1/nothing").status, 404);
  EXPECT_EQ(call("GET", "/admin/v1/systems/crm/extra").status, 404);
  EXPECT_EQ(call("GET", "/admin/v1/grants/crm").status, 404);
  const Reply r = call("PATCH", "/admin/v1/systems/crm");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.header("Allow"), "GET, PUT, DELETE");
  EXPECT_EQ(call("DELETE", "/admin/v1/systems").header("Allow"), "GET, POST");
}

// --- validation -----------------------------------------------------------------------------------

struct InvalidCase {
  const char* name;
  std::function<void(config::Config&)> mutate;
  const char* path;
  const char* message;  // a part of it
};

TEST_F(AdminApiTest, EveryValidationErrorIsRefusedWholeWithItsFieldPath) {
  using config::Config;
  const std::vector<InvalidCase> cases = {
      {"listen", [](Config& c) { c.listen = "nowhere"; }, "listen", "must be host:port"},
      {"admin_listen", [](Config& c) { c.admin_listen = "nowhere"; }, "admin_listen", "must be host:port"},
      {"store", [](Config& c) { c.store = "memcached://x"; }, "store", "must be local"},
      {"system_key_header", [](Config& c) { c.system_key_header = "X Key"; }, "system_key_header", "header name"},
      {"max_body_bytes", [](Config& c) { c.max_body_bytes = -1; }, "max_body_bytes", "must not be negative"},
      {"header_timeout", [](Config& c) { c.header_timeout = Nanos{0}; }, "header_timeout", "at least 1ms"},
      {"send_timeout", [](Config& c) { c.send_timeout = Nanos{0}; }, "send_timeout", "at least 1ms"},
      {"drain_delay", [](Config& c) { c.drain_delay = std::chrono::hours(2); }, "drain_delay", "between 0s and 1h"},
      {"access_log", [](Config& c) { c.access_log = ""; }, "access_log", "stdout, off or a file path"},
      {"upstream name", [](Config& c) { c.upstreams[1].name = ""; }, "upstreams[1].name", "is required"},
      {"upstream twice", [](Config& c) { c.upstreams[1].name = "app"; }, "upstreams[1].name", "another upstream"},
      {"targets", [](Config& c) { c.upstreams[0].targets.clear(); }, "upstreams[0].targets", "at least one"},
      {"connect_timeout", [](Config& c) { c.upstreams[0].connect_timeout = Nanos{0}; }, "upstreams[0].connect_timeout",
       "at least 1ms"},
      {"timeout", [](Config& c) { c.upstreams[0].timeout = Nanos{0}; }, "upstreams[0].timeout", "at least 1ms"},
      {"max_idle", [](Config& c) { c.upstreams[0].max_idle_connections = -1; }, "upstreams[0].max_idle_connections",
       "must not be negative"},
      {"failure status", [](Config& c) { c.upstreams[0].failure_statuses = {700}; }, "upstreams[0].failure_statuses[0]",
       "from 100 to 599"},
      {"breaker", [](Config& c) { c.upstreams[0].breaker.options.failure_rate = 101; }, "upstreams[0].breaker.failure_rate",
       ""},
      {"interface id", [](Config& c) { c.interfaces[2].id = ""; }, "interfaces[2].id", "is required"},
      {"interface star", [](Config& c) { c.interfaces[2].id = "*"; }, "interfaces[2].id", "cannot be an id"},
      {"interface twice", [](Config& c) { c.interfaces[2].id = "users"; }, "interfaces[2].id", "another interface"},
      {"path", [](Config& c) { c.interfaces[2].path = "health"; }, "interfaces[2].path", ""},
      {"method", [](Config& c) { c.interfaces[2].methods = {"get"}; }, "interfaces[2].methods[0]", "in capitals"},
      {"upstream missing", [](Config& c) { c.interfaces[2].upstream = ""; }, "interfaces[2].upstream", "is required"},
      {"upstream unknown", [](Config& c) { c.interfaces[2].upstream = "gone"; }, "interfaces[2].upstream",
       "names no upstream"},
      {"concurrency", [](Config& c) { c.interfaces[2].concurrency = 0; }, "interfaces[2].concurrency", "between 1"},
      {"interface timeout", [](Config& c) { c.interfaces[2].timeout = Nanos{0}; }, "interfaces[2].timeout", "at least 1ms"},
      {"limit names", [](Config& c) { c.interfaces[0].limits.push_back(c.interfaces[0].limits[0]);
                                      c.interfaces[0].limits[0].name = c.interfaces[0].limits[1].name = "same"; },
       "interfaces[0].limits[1].name", "names another limit"},
      {"limit name quote", [](Config& c) { c.interfaces[0].limits[0].name = "a\"b"; }, "interfaces[0].limits[0].name",
       "must not contain quotes"},
      {"limit name control", [](Config& c) { c.interfaces[0].limits[0].name = std::string("a\0b", 3); },
       "interfaces[0].limits[0].name", "control characters"},
      {"upstream name control", [](Config& c) { c.upstreams[1].name = "sp\tare"; for (auto& i : c.interfaces) {
                                                  if (i.upstream == "spare") i.upstream = "sp\tare"; } },
       "upstreams[1].name", "control characters"},
      {"interface id control", [](Config& c) { c.interfaces[2].id = std::string("hea\0lth", 7); }, "interfaces[2].id",
       "control characters"},
      {"interface id C1 control", [](Config& c) { c.interfaces[2].id = "hea\xc2\x85lth"; }, "interfaces[2].id",
       "control characters"},
      {"interface description", [](Config& c) { c.interfaces[2].description.assign(4097, 'd'); },
       "interfaces[2].description", "at most 4096 bytes long, got 4097"},
      {"system description", [](Config& c) { c.systems[1].description.assign(1 << 20, 'd'); },
       "systems[1].description", "at most 4096 bytes long, got 1048576"},
      {"interface id zero-width space", [](Config& c) { c.interfaces[2].id = "hea\u200blth"; }, "interfaces[2].id",
       "must not hold invisible characters"},
      {"key_by", [](Config& c) { c.interfaces[0].limits[0].key_by = config::KeyBy::kHeader;
                                 c.interfaces[0].limits[0].key_name = "X User"; },
       "interfaces[0].limits[0].key_by", "names no header"},
      {"routes", [](Config& c) { c.interfaces[2].path = "/users/{name}"; }, "interfaces[2].path",
       "claims the same requests"},
      {"system key", [](Config& c) { c.systems[1].key = ""; }, "systems[1].key", "is required"},
      {"system twice", [](Config& c) { c.systems[1].key = "crm"; }, "systems[1].key", "another system"},
      {"system interface", [](Config& c) { c.systems[1].interfaces = {"gone"}; }, "systems[1].interfaces[0]",
       "names no interface"},
      {"credential id", [](Config& c) { c.systems[1].credentials.resize(1); c.systems[1].credentials[0].api_key_sha256 =
                                            config::sha256_hex("k"); }, "systems[1].credentials[0].id", "is required"},
      {"credential hash", [](Config& c) { c.systems[1].credentials.resize(1); c.systems[1].credentials[0].id = "k"; },
       "systems[1].credentials[0].api_key_sha256", "64 hex digits"},
      {"credential sealed", [](Config& c) { c.systems[1].credentials.resize(1); c.systems[1].credentials[0].id = "k";
                                            c.systems[1].credentials[0].kind = config::Auth::kHmac; },
       "systems[1].credentials[0].sealed_secret", "sealed"},
      {"grant system", [](Config& c) { c.grants[0].system = "gone"; }, "grants[0].system", "names no system"},
      {"grant interface", [](Config& c) { c.grants[0].interface = "gone"; }, "grants[0].interface", "names no interface"},
      {"grant permission", [](Config& c) { c.grants[0].interface = "users"; c.systems[0].interfaces = {"orders"}; },
       "grants[0]", "may not call"},
      {"grant twice", [](Config& c) { c.grants.push_back(c.grants[0]); }, "grants[1]", "same system and interface"},
  };
  const std::int64_t before = revision();
  for (const InvalidCase& k : cases) {
    SCOPED_TRACE(k.name);
    config::Config c = *store_->load()->config;
    k.mutate(c);
    const Reply r = call("PUT", "/admin/v1/config", json::serialize(config::to_json(c)));
    ASSERT_EQ(r.status, 400) << r.raw.body;
    EXPECT_EQ(r.str("reason"), "invalid_config");
    bool found = false;
    for (const std::string& p : r.problems()) {
      found = found || (p.starts_with(std::string(k.path) + ": ") && p.find(k.message) != std::string::npos);
    }
    EXPECT_TRUE(found) << ::testing::PrintToString(r.problems());
  }
  EXPECT_EQ(revision(), before);
}

TEST_F(AdminApiTest, LimitFieldErrorsInABodyAreRefusedWithTheFieldAndItsLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"algorithm":"leaky"})", "algorithm"},
      {R"({"algorithm":"gcra","period":"1s"})", "limit"},
      {R"({"algorithm":"gcra","limit":"five","period":"1s"})", "limit"},
      {R"({"algorithm":"gcra","limit":5,"period":"1 week"})", "period"},
      {R"({"algorithm":"gcra","limit":0,"period":"1s"})", "limit"},
      {R"({"algorithm":"fixed_window","limit":5,"period":"1s","burst":3})", "burst"},
      {R"({"algorithm":"token_bucket","capacity":5})", "rate"},
      {R"({"algorithm":"concurrency","limit":5})", "lease_timeout"},
      {R"({"algorithm":"gcra","limit":5,"period":"1s","key_by":"cookie"})", "key_by"},
      {R"({"algorithm":"gcra","limit":5,"period":"1s","shadow":"maybe"})", "shadow"},
      {R"({"algorithm":"gcra","limit":5,"period":"1s","on_store_failure":"panic"})", "on_store_failure"},
  };
  for (const auto& [limit, field] : cases) {
    SCOPED_TRACE(limit);
    const Reply r = call("PUT", "/admin/v1/systems/crm", "{\"interfaces\": [\"orders\"],\n\"limits\": [" + limit + "]}");
    ASSERT_EQ(r.status, 400) << r.raw.body;
    const auto& p = r.obj().at("problems").as_array().at(0).as_object();
    EXPECT_EQ(p.at("field").as_string(), "limits[0]." + field);
    EXPECT_EQ(p.at("path").as_string(), "systems[0].limits[0]." + field);
    EXPECT_EQ(p.at("line").as_int64(), 2);
  }
}

TEST_F(AdminApiTest, ProblemsInsideTheBodyCarryTheFieldRelativeToIt) {
  const Reply r = call("PUT", "/admin/v1/systems/erp", R"({"interfaces":["orders","gone"]})");
  ASSERT_EQ(r.status, 400);
  const auto& p = r.obj().at("problems").as_array().at(0).as_object();
  EXPECT_EQ(p.at("path").as_string(), "systems[1].interfaces[1]");
  EXPECT_EQ(p.at("field").as_string(), "interfaces[1]");
}

// A field that does not read does not hide a reference to nothing beside it (as `config check`
// reports both), nor is the rest judged on the defaults standing in for it.
TEST_F(AdminApiTest, AFieldOutOfRangeIsReportedWithTheBodysReferencesToNothing) {
  const std::string bad_limit = R"("limits":[{"algorithm":"fixed_window","limit":-5,"period":"1s"}])";
  const std::int64_t before = revision();
  Reply r = call("PUT", "/admin/v1/systems/erp", R"({"interfaces":["orders","gone"],)" + bad_limit + "}");
  ASSERT_EQ(r.status, 400) << r.raw.body;
  EXPECT_EQ(r.problems(), (std::vector<std::string>{
                              "systems[1].limits[0].limit: limit must be between 1 and 2^40 (1099511627776), got -5",
                              "systems[1].interfaces[1]: names no interface: \"gone\""}));
  r = call("POST", "/admin/v1/grants", R"({"system":"nobody","interface":"orders",)" + bad_limit + "}");
  ASSERT_EQ(r.status, 400) << r.raw.body;
  EXPECT_EQ(r.problems().size(), 2u) << ::testing::PrintToString(r.problems());
  EXPECT_EQ(r.problems().at(1), "grants[1].system: names no system: \"nobody\"");
  // A reference that does not read is not judged by the empty list standing in for it.
  r = call("PUT", "/admin/v1/systems/erp", R"({"interfaces":5,)" + bad_limit + "}");
  ASSERT_EQ(r.status, 400) << r.raw.body;
  EXPECT_EQ(r.problems().size(), 2u) << ::testing::PrintToString(r.problems());
  EXPECT_EQ(revision(), before);
}

// --- ETag / If-Match ------------------------------------------------------------------------------

TEST_F(AdminApiTest, AStaleIfMatchIs412AndChangesNothing) {
  const std::string etag = call("GET", "/admin/v1/systems/crm").header("ETag");
  EXPECT_EQ(call("PUT", "/admin/v1/systems/crm", R"({"description":"first","interfaces":["orders"]})", {{"If-Match", etag}}).status,
            200);
  const std::int64_t before = revision();
  const Reply stale = call("PUT", "/admin/v1/systems/crm", R"({"description":"second","interfaces":["orders"]})",
                           {{"If-Match", etag}});
  EXPECT_EQ(stale.status, 412);
  EXPECT_EQ(stale.str("reason"), "precondition_failed");
  EXPECT_EQ(call("DELETE", "/admin/v1/systems/crm", "", {{"If-Match", etag}}).status, 412);
  // An empty If-Match lists no tag: nothing matches it (it is not taken for no condition).
  EXPECT_EQ(call("PUT", "/admin/v1/systems/crm", R"({"description":"third","interfaces":["orders"]})", {{"If-Match", ""}})
                .status,
            412);
  EXPECT_EQ(call("PUT", "/admin/v1/config", json::serialize(config::to_json(*store_->load()->config)), {{"If-Match", ""}})
                .status,
            412);
  EXPECT_EQ(revision(), before);
  EXPECT_EQ(store_->load()->config->systems[0].description, "first");
}

TEST_F(AdminApiTest, OfConcurrentWritersHoldingOneETagExactlyOneWins) {
  const std::string etag = call("GET", "/admin/v1/systems/crm").header("ETag");
  std::atomic<int> ok{0};
  std::atomic<int> stale{0};
  std::vector<std::thread> writers;
  for (int i = 0; i < 5; ++i) {
    writers.emplace_back([&, i] {
      const Reply r = call("PUT", "/admin/v1/systems/crm",
                           R"({"interfaces":["orders"],"description":"writer )" + std::to_string(i) + "\"}",
                           {{"If-Match", etag}});
      (r.status == 200 ? ok : stale).fetch_add(r.status == 200 || r.status == 412 ? 1 : 0);
    });
  }
  for (auto& t : writers) t.join();
  EXPECT_EQ(ok.load(), 1);
  EXPECT_EQ(stale.load(), 4);
}

// Two If-Match lines are one list (RFC 9110 5.3): either tag may match.
TEST_F(AdminApiTest, IfMatchGivenOnTwoLinesIsOneList) {
  const std::string etag = call("GET", "/admin/v1/systems/erp").header("ETag");
  EXPECT_EQ(call("PUT", "/admin/v1/systems/erp", R"({"interfaces":["users"]})",
                 {{"If-Match", "\"other\""}, {"If-Match", etag}})
                .status,
            200);
  EXPECT_EQ(call("PUT", "/admin/v1/systems/erp", R"({"interfaces":["orders"]})",
                 {{"If-Match", "\"other\""}, {"If-Match", etag}})
                .status,
            412);  // the first write moved it
}

TEST_F(AdminApiTest, TheConfigurationRevisionCanGuardAnEntityWriteToo) {
  const std::string old = "\"r" + std::to_string(revision()) + "\"";
  EXPECT_EQ(call("PUT", "/admin/v1/systems/erp", R"({"interfaces":["users"]})").status, 200);
  EXPECT_EQ(call("PUT", "/admin/v1/systems/crm", R"({"interfaces":["users"]})", {{"If-Match", old}}).status, 412);
  EXPECT_EQ(call("PUT", "/admin/v1/systems/new", R"({})", {{"If-Match", "*"}}).status, 412);
  EXPECT_EQ(call("PUT", "/admin/v1/systems/crm", R"({})", {{"If-None-Match", "*"}}).status, 412);
  EXPECT_EQ(call("PUT", "/admin/v1/systems/new", R"({})", {{"If-None-Match", "*"}}).status, 201);
}

// If-Match holds when any tag it lists matches (RFC 9110 13.1.1), revisions and entities' tags
// alike: a revision tag listed with others used to decide alone, and the last of several.
TEST_F(AdminApiTest, IfMatchHoldsWhenAnyListedTagMatchesRevisionsIncluded) {
  const std::string old = "\"r1\"";
  auto now = [&] { return "\"r" + std::to_string(revision()) + "\""; };
  // A stale revision beside the entity's tag, which holds.
  const std::string erp = call("GET", "/admin/v1/systems/erp").header("ETag");
  EXPECT_EQ(call("PUT", "/admin/v1/systems/erp", R"({"interfaces":["users"]})", {{"If-Match", old + ", " + erp}}).status,
            200);
  // The current revision before or after a stale one, or among others: it holds wherever it is.
  EXPECT_EQ(call("PUT", "/admin/v1/systems/erp", R"({"interfaces":["orders"]})", {{"If-Match", now() + ", " + old}}).status,
            200);
  EXPECT_EQ(call("PUT", "/admin/v1/systems/erp", R"({"interfaces":["users"]})", {{"If-Match", old + ", " + now()}}).status,
            200);
  EXPECT_EQ(call("DELETE", "/admin/v1/grants/crm/orders", "", {{"If-Match", old + ", \"other\", " + now()}}).status, 204);
  EXPECT_EQ(call("POST", "/admin/v1/breakers/app/force", R"({"force":"open"})", {{"If-Match", now() + ", " + old}}).status,
            200);
  EXPECT_EQ(call("PUT", "/admin/v1/config", base_yaml(), {{"If-Match", now() + ", " + old}}).status, 200);

  // None matches: refused, and nothing changed.
  const std::int64_t before = revision();
  const std::string stale = "\"r" + std::to_string(before - 1) + "\"";
  EXPECT_EQ(call("PUT", "/admin/v1/systems/erp", R"({"interfaces":["users"]})", {{"If-Match", old + ", " + stale}}).status,
            412);
  EXPECT_EQ(call("PUT", "/admin/v1/systems/erp", R"({"interfaces":["users"]})", {{"If-Match", old + ", \"other\""}}).status,
            412);
  const Reply whole = call("PUT", "/admin/v1/config", base_yaml(), {{"If-Match", old + ", \"abc\""}});
  EXPECT_EQ(whole.status, 412);
  EXPECT_EQ(whole.str("msg"), "the configuration changed since revision 1 (it is at " + std::to_string(before) +
                                  "): read it again and redo the change");
  EXPECT_EQ(revision(), before);
  // * among them holds as ever.
  EXPECT_EQ(call("PUT", "/admin/v1/systems/erp", R"({"interfaces":["users"]})", {{"If-Match", old + ", *"}}).status, 200);
}

// If-None-Match listing the configuration's revision holds on an entity's write as on a
// replacement: only once the configuration has moved since.
TEST_F(AdminApiTest, IfNoneMatchOfTheCurrentRevisionRefusesAnEntitysWrite) {
  const std::string now = "\"r" + std::to_string(revision()) + "\"";
  const std::int64_t before = revision();
  const Reply put = call("PUT", "/admin/v1/systems/erp", R"({"interfaces":["users"]})", {{"If-None-Match", now}});
  EXPECT_EQ(put.status, 412);
  EXPECT_EQ(put.str("msg"), "If-None-Match: the configuration is at " + now + ".");
  EXPECT_EQ(call("DELETE", "/admin/v1/systems/erp", "", {{"If-None-Match", "\"other\", " + now}}).status, 412);
  EXPECT_EQ(call("POST", "/admin/v1/breakers/app/force", R"({"force":"open"})", {{"If-None-Match", now}}).status, 412);
  EXPECT_EQ(revision(), before);
  // Once it has moved, it holds.
  const std::string stale = now;
  ASSERT_EQ(call("PUT", "/admin/v1/systems/crm", R"({"interfaces":["orders"],"description":"moved"})").status, 200);
  EXPECT_EQ(call("PUT", "/admin/v1/systems/erp", R"({"interfaces":["users"]})", {{"If-None-Match", stale}}).status, 200);
}

// A delete checks If-None-Match as a replacement does; If-Match compares strongly, so a weak tag
// matches nothing (RFC 9110 13.1.1).
TEST_F(AdminApiTest, ADeleteHoldsToIfNoneMatchAndIfMatchTakesNoWeakTag) {
  const std::string etag = call("GET", "/admin/v1/systems/erp").header("ETag");
  const std::int64_t before = revision();
  EXPECT_EQ(call("DELETE", "/admin/v1/systems/erp", "", {{"If-None-Match", "*"}}).status, 412);
  EXPECT_EQ(call("DELETE", "/admin/v1/systems/erp", "", {{"If-None-Match", etag}}).status, 412);
  EXPECT_EQ(call("DELETE", "/admin/v1/systems/erp", "", {{"If-Match", "W/" + etag}}).status, 412);
  EXPECT_EQ(call("PUT", "/admin/v1/systems/erp", R"({"interfaces":["users"]})", {{"If-Match", "W/" + etag}}).status,
            412);
  EXPECT_EQ(revision(), before);
  EXPECT_EQ(call("DELETE", "/admin/v1/systems/erp", "", {{"If-None-Match", "\"other\""}, {"If-Match", etag}}).status,
            204);
  EXPECT_EQ(call("DELETE", "/admin/v1/systems/erp", "", {{"If-None-Match", "*"}}).status, 404);
}

// The writes made inside an entity are conditional on that entity (a credential on its system, a
// breaker's force on its upstream) or on the revision; what has no ETag refuses a precondition
// rather than ignore it.
TEST_F(AdminApiTest, EveryWriteHoldsToItsPreconditionsOrRefusesThem) {
  const std::string stale = "\"r" + std::to_string(revision() - 1) + "\"";
  const std::int64_t before = revision();
  const std::size_t tokens = call("GET", "/admin/v1/tokens").obj().at("items").as_array().size();
  EXPECT_EQ(call("POST", "/admin/v1/systems/crm/credentials", R"({"kind":"api_key"})", {{"If-Match", stale}}).status,
            412);
  EXPECT_EQ(call("POST", "/admin/v1/systems/crm/credentials", R"({"kind":"api_key"})", {{"If-Match", "\"x\""}}).status,
            412);
  EXPECT_EQ(call("POST", "/admin/v1/breakers/app/force", R"({"force":"open"})", {{"If-Match", stale}}).status, 412);
  EXPECT_EQ(call("POST", "/admin/v1/breakers/app/force", R"({"force":"open"})", {{"If-None-Match", "*"}}).status, 412);
  EXPECT_EQ(revision(), before);
  EXPECT_EQ(call("POST", "/admin/v1/tokens", R"({"name":"t","role":"read"})", {{"If-Match", stale}}).status, 412);
  EXPECT_EQ(call("POST", "/admin/v1/breakers/app/reset", "", {{"If-Match", stale}}).status, 412);
  EXPECT_EQ(call("POST", "/admin/v1/limits/reset?key=system:crm", "", {{"If-None-Match", "*"}}).status, 412);
  EXPECT_EQ(call("GET", "/admin/v1/tokens").obj().at("items").as_array().size(), tokens);

  const std::string system = call("GET", "/admin/v1/systems/crm").header("ETag");
  const Reply made = call("POST", "/admin/v1/systems/crm/credentials", R"({"kind":"api_key"})", {{"If-Match", system}});
  ASSERT_EQ(made.status, 201) << made.raw.body;
  EXPECT_EQ(call("DELETE", "/admin/v1/systems/crm/credentials/" + made.str("id"), "", {{"If-Match", system}}).status,
            412);  // the credential made changed the system
  EXPECT_EQ(call("DELETE", "/admin/v1/systems/crm/credentials/nope", "", {{"If-Match", "*"}}).status, 404);
  EXPECT_EQ(call("DELETE", "/admin/v1/systems/nobody/credentials/nope", "", {{"If-Match", "*"}}).status, 412);
  // The whole configuration always exists, at its revision.
  const std::string now = "\"r" + std::to_string(revision()) + "\"";
  EXPECT_EQ(call("PUT", "/admin/v1/config", base_yaml(), {{"If-None-Match", "*"}}).status, 412);
  EXPECT_EQ(call("PUT", "/admin/v1/config", base_yaml(), {{"If-None-Match", now}}).status, 412);
  EXPECT_EQ(call("PUT", "/admin/v1/config", base_yaml(), {{"If-None-Match", stale}}).status, 200);
  const std::string upstream = call("GET", "/admin/v1/upstreams/app").header("ETag");
  EXPECT_EQ(call("POST", "/admin/v1/breakers/app/force", R"({"force":"open"})", {{"If-Match", upstream}}).status, 200);
  EXPECT_EQ(call("POST", "/admin/v1/breakers/app/force", R"({"force":"none"})",
                 {{"If-Match", "\"r" + std::to_string(revision()) + "\""}})
                .status,
            200);
}

// --- the whole configuration ----------------------------------------------------------------------

TEST_F(AdminApiTest, TheConfigurationExportsAsJsonOrYamlWithItsRevisionAsETag) {
  const Reply j = call("GET", "/admin/v1/config");
  EXPECT_EQ(j.status, 200);
  EXPECT_EQ(j.raw.content_type, "application/json");
  EXPECT_EQ(j.header("ETag"), "\"r" + std::to_string(revision()) + "\"");
  EXPECT_EQ(control_test::yaml_of(*parse(j.raw.body)), control_test::yaml_of(*store_->load()->config));
  const Reply y = call("GET", "/admin/v1/config", "", {{"Accept", "application/yaml"}});
  EXPECT_EQ(y.raw.content_type, "application/yaml");
  EXPECT_EQ(y.raw.body, config::to_yaml(*store_->load()->config));
  EXPECT_EQ(call("GET", "/admin/v1/config?format=yaml").raw.content_type, "application/yaml");
  EXPECT_EQ(call("GET", "/admin/v1/config?format=xml").status, 400);
}

// The limit store's password goes to admin tokens (a follower needs it) and to nobody else: not
// to a read token, not into the audit log.
TEST_F(AdminApiTest, TheStoresPasswordIsForAdminTokensOnly) {
  config::Config c = *store_->load()->config;
  c.store = "redis://:s3cret@127.0.0.1:6379/2";
  ASSERT_TRUE(store_->replace("setup", "config.replace", c).ok());
  const Reply admin = call("GET", "/admin/v1/config");
  EXPECT_EQ(admin.str("store"), "redis://:s3cret@127.0.0.1:6379/2");
  const Reply read = call("GET", "/admin/v1/config", "", {}, &read_);
  EXPECT_EQ(read.status, 200);
  EXPECT_EQ(read.str("store"), "redis://:REDACTED@127.0.0.1:6379/2");
  EXPECT_EQ(call("GET", "/admin/v1/config?format=yaml", "", {}, &read_).raw.body.find("s3cret"), std::string::npos);
  const Reply audit = call("GET", "/admin/v1/audit");
  EXPECT_EQ(audit.status, 200);
  EXPECT_NE(audit.raw.body.find("REDACTED"), std::string::npos) << audit.raw.body;
  EXPECT_EQ(audit.raw.body.find("s3cret"), std::string::npos) << audit.raw.body;
  // Rows written before the password was redacted on the way in are redacted on the way out.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_.c_str(), &db), SQLITE_OK);
  EXPECT_EQ(sqlite3_exec(db, R"(UPDATE audit SET after = '{"store":"redis://:0ld@127.0.0.1:6379"}')", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  const Reply old = call("GET", "/admin/v1/audit", "", {}, &read_);
  EXPECT_EQ(old.status, 200);
  EXPECT_EQ(old.raw.body.find("0ld"), std::string::npos) << old.raw.body;
}

// What a read token is shown, sent back as it is, changes nothing: the password placeholder keeps
// the stored password. It stands for no other address's, and is refused there, naming store.
TEST_F(AdminApiTest, ThePasswordPlaceholderKeepsTheStoredPasswordInTheSameAddressOnly) {
  config::Config c = *store_->load()->config;
  c.store = "redis://:s3cret@127.0.0.1:6379/2";
  ASSERT_TRUE(store_->replace("setup", "config.replace", c).ok());
  const std::int64_t before = revision();
  for (const std::string format : {"json", "yaml"}) {
    SCOPED_TRACE(format);
    const Reply read = call("GET", "/admin/v1/config?format=" + format, "", {}, &read_);
    ASSERT_EQ(read.status, 200);
    ASSERT_NE(read.raw.body.find("redis://:REDACTED@127.0.0.1:6379/2"), std::string::npos) << read.raw.body;
    const Reply put = call("PUT", "/admin/v1/config", read.raw.body);
    ASSERT_EQ(put.status, 200) << put.raw.body;
    EXPECT_EQ(put.obj().at("revision").as_int64(), before);  // nothing changed, nothing committed
    EXPECT_EQ(store_->load()->config->store, "redis://:s3cret@127.0.0.1:6379/2");
  }
  // Edited, the rest kept: only the edit is committed.
  std::string edited = call("GET", "/admin/v1/config?format=yaml", "", {}, &read_).raw.body;
  edited.replace(edited.find("fleet_size: 1"), 13, "fleet_size: 2");
  ASSERT_EQ(call("PUT", "/admin/v1/config", edited).status, 200);
  EXPECT_EQ(store_->load()->config->fleet_size, 2);
  EXPECT_EQ(store_->load()->config->store, "redis://:s3cret@127.0.0.1:6379/2");
  const std::int64_t at = revision();
  for (const std::string other : {"redis://:REDACTED@127.0.0.1:6380/2", "redis://:REDACTED@127.0.0.1:6379/3",
                                  "redis://user:REDACTED@127.0.0.1:6379/2", "redis://REDACTED@127.0.0.1:6379/2"}) {
    SCOPED_TRACE(other);
    const Reply refused = call("PUT", "/admin/v1/config", "store: \"" + other + "\"\n" + base_yaml());
    EXPECT_EQ(refused.status, 400) << refused.raw.body;
    EXPECT_EQ(refused.str("reason"), "invalid_config");
    ASSERT_EQ(refused.problems().size(), 1u) << refused.raw.body;
    EXPECT_TRUE(refused.problems()[0].starts_with("store: the password REDACTED is the placeholder")) << refused.raw.body;
    EXPECT_NE(refused.problems()[0].find("(redis://:REDACTED@127.0.0.1:6379/2)"), std::string::npos) << refused.raw.body;
    EXPECT_EQ(refused.raw.body.find("s3cret"), std::string::npos) << refused.raw.body;
  }
  EXPECT_EQ(revision(), at);
  EXPECT_EQ(store_->load()->config->store, "redis://:s3cret@127.0.0.1:6379/2");
  // A stored store without a password has none to keep.
  c.store = "redis://127.0.0.1:6379/2";
  ASSERT_TRUE(store_->replace("setup", "config.replace", c).ok());
  const Reply none = call("PUT", "/admin/v1/config", "store: \"redis://:REDACTED@127.0.0.1:6379/2\"\n" + base_yaml());
  EXPECT_EQ(none.status, 400) << none.raw.body;
  EXPECT_EQ(store_->load()->config->store, "redis://127.0.0.1:6379/2");
}

TEST(RedactStorePasswordTest, OnlyThePasswordIsReplaced) {
  EXPECT_EQ(config::redact_store_password("redis://:pw@h:1"), "redis://:REDACTED@h:1");
  EXPECT_EQ(config::redact_store_password("redis://user:p@ss:w@h:1/3"), "redis://user:REDACTED@h:1/3");
  EXPECT_EQ(config::redact_store_password("redis://pw@h"), "redis://REDACTED@h");
  EXPECT_EQ(config::redact_store_password("redis-cluster://:pw@a:1,b:2"), "redis-cluster://:REDACTED@a:1,b:2");
  for (const char* unchanged : {"redis://h:1", "redis://user:@h", "local", "redis-cluster://a:1,b:2"}) {
    EXPECT_EQ(config::redact_store_password(unchanged), unchanged);
    EXPECT_FALSE(config::has_redacted_password(unchanged));
  }
  EXPECT_TRUE(config::has_redacted_password("redis://:REDACTED@h:1"));
  EXPECT_TRUE(config::has_redacted_password("redis://REDACTED@h:1"));
  EXPECT_FALSE(config::has_redacted_password("redis://:REDACTEDx@h:1"));
  EXPECT_FALSE(config::has_redacted_password("redis://REDACTED:pw@h:1"));  // a user called REDACTED
}

TEST_F(AdminApiTest, PuttingTheConfigurationReplacesAllOfItOrNothing) {
  const std::int64_t before = revision();
  const Reply bad = call("PUT", "/admin/v1/config",
                         "systems:\n  - key: only\n    enabled: perhaps\ninterfaces:\n  - {id: a, path: /a, upstream: none}\n",
                         {{"Content-Type", "application/yaml"}});
  ASSERT_EQ(bad.status, 400);
  EXPECT_EQ(bad.problems(), (std::vector<std::string>{"systems[0].enabled: must be true or false, got \"perhaps\"",
                                                       "interfaces[0].upstream: names no upstream: \"none\""}));
  EXPECT_EQ(bad.obj().at("problems").as_array()[0].as_object().at("line").as_int64(), 3);
  EXPECT_EQ(revision(), before);
  const Reply good = call("PUT", "/admin/v1/config",
                          "upstreams: [{name: u, targets: [\"127.0.0.1:9\"]}]\ninterfaces: [{id: a, path: /a, upstream: u}]\n",
                          {{"If-Match", "\"r" + std::to_string(before) + "\""}});
  ASSERT_EQ(good.status, 200) << good.raw.body;
  EXPECT_EQ(good.obj().at("revision").as_int64(), before + 1);
  EXPECT_EQ(store_->load()->config->interfaces.size(), 1u);
  EXPECT_EQ(call("PUT", "/admin/v1/config", "{}", {{"If-Match", "\"r" + std::to_string(before) + "\""}}).status, 412);
}

// A configuration sent as JSON that is not JSON is refused in JSON's terms, where it stops (the
// YAML parser said "end of map flow not found" at line 1, column 1).
TEST_F(AdminApiTest, AConfigurationThatIsBrokenJsonIsRefusedAsJson) {
  const std::int64_t before = revision();
  const Reply cut = call("PUT", "/admin/v1/config", "{\"listen\":", {{"Content-Type", "application/json"}});
  ASSERT_EQ(cut.status, 400) << cut.raw.body;
  EXPECT_EQ(cut.problems(), (std::vector<std::string>{": is not valid JSON: incomplete JSON"}));
  const Reply comma = call("PUT", "/admin/v1/config", "{\n  \"listen\": \"127.0.0.1:0\",,\n}");
  ASSERT_EQ(comma.status, 400) << comma.raw.body;
  const auto& p = comma.obj().at("problems").as_array()[0].as_object();
  EXPECT_EQ(p.at("line").as_int64(), 2) << comma.raw.body;
  EXPECT_EQ(p.at("column").as_int64(), 27) << comma.raw.body;  // the second comma
  // YAML in flow style (not JSON) that parses is judged as configuration.
  const Reply flow = call("PUT", "/admin/v1/config", "{upstreams: [{name: u, targets: [\"127.0.0.1:9\"]}], "
                                                     "interfaces: [{id: a, path: /a, upstream: nope}]}");
  ASSERT_EQ(flow.status, 400) << flow.raw.body;
  EXPECT_EQ(flow.problems(), (std::vector<std::string>{"interfaces[0].upstream: names no upstream: \"nope\""}));
  EXPECT_EQ(revision(), before);
}

// What the API takes it must give back as JSON: a body that is not UTF-8 is refused, and nothing
// is changed.
TEST_F(AdminApiTest, ABodyThatIsNotUtf8IsRefusedWhereItStops) {
  const std::int64_t before = revision();
  for (const auto& [method, target, body] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"POST", "/admin/v1/systems", "{\"key\":\"ok\",\"description\":\"x\xff\"}"},
           {"PUT", "/admin/v1/systems/crm", "{\"description\":\"\xc3(\"}"},
           {"PUT", "/admin/v1/config", base_yaml() + "# \xff\n"}}) {
    const Reply r = call(method, target, body);
    ASSERT_EQ(r.status, 400) << method << " " << target << ": " << r.raw.body;
    ASSERT_EQ(r.obj().at("problems").as_array().size(), 1u) << r.raw.body;
    const auto& p = r.obj().at("problems").as_array()[0].as_object();
    EXPECT_EQ(p.at("message").as_string(), "is not valid UTF-8 text") << r.raw.body;
    EXPECT_EQ(p.at("line").as_int64(), method == "PUT" && target == "/admin/v1/config" ? 19 : 1) << r.raw.body;
  }
  EXPECT_EQ(revision(), before);
}

TEST_F(AdminApiTest, WhileTheStoredConfigurationIsInvalidOnlyAWholeReplacementIsTakenAndEveryRefusalSaysWhy) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE interfaces SET upstream = 'gone' WHERE id = 'users'", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  const std::int64_t broken = revision();
  for (const auto& [method, target, body] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"GET", "/admin/v1/config", ""},
           {"GET", "/admin/v1/systems", ""},
           {"GET", "/admin/v1/systems/crm/credentials", ""},
           {"PUT", "/admin/v1/systems/erp", R"({"enabled":false})"},
           {"DELETE", "/admin/v1/grants/crm/orders", ""},
           {"POST", "/admin/v1/systems/crm/credentials", R"({"kind":"api_key"})"}}) {
    const Reply r = call(method, target, body);
    EXPECT_EQ(r.status, 409) << method << " " << target << ": " << r.raw.body;
    EXPECT_EQ(r.str("reason"), "stored_config_invalid") << method << " " << target;
    EXPECT_NE(r.str("msg").find("interfaces[1].upstream"), std::string::npos) << r.str("msg");
    EXPECT_NE(r.str("msg").find("PUT /admin/v1/config"), std::string::npos) << r.str("msg");
    // Each problem listed as a change's are, with no `field`: none is in the request's body.
    EXPECT_EQ(r.problems(), std::vector<std::string>{"interfaces[1].upstream: names no upstream: \"gone\""})
        << method << " " << target << ": " << r.raw.body;
    EXPECT_FALSE(r.obj().at("problems").as_array().at(0).as_object().contains("field")) << r.raw.body;
  }
  EXPECT_EQ(revision(), broken);
  // The configuration's 409 says the revision it is at, for a replacement made conditional on it.
  const std::string tag = call("GET", "/admin/v1/config").header("ETag");
  EXPECT_EQ(tag, "\"r" + std::to_string(broken) + "\"");
  const Reply fixed = call("PUT", "/admin/v1/config", base_yaml(), {{"If-Match", tag}});
  ASSERT_EQ(fixed.status, 200) << fixed.raw.body;
  // The audit row keeps what was replaced: the rows as they were, not an empty configuration.
  const Reply audit = call("GET", "/admin/v1/audit?limit=1");
  const auto& replaced = audit.obj().at("items").as_array().at(0).as_object();
  EXPECT_EQ(replaced.at("action").as_string(), "config.replace");
  EXPECT_EQ(replaced.at("before").at("interfaces").as_array().at(1).at("upstream").as_string(), "gone") << audit.raw.body;
  EXPECT_EQ(call("PUT", "/admin/v1/systems/erp", R"({"enabled":false})").status, 200);
  EXPECT_FALSE(store_->load()->config->systems[1].enabled);
}

// A setting that does not read is named, not quoted: it may hold the limit store's password, which
// is for admin tokens only.
TEST_F(AdminApiTest, ASettingThatDoesNotReadIsNamedNotQuoted) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "INSERT OR REPLACE INTO settings (name, value) VALUES ('store', 'redis://:s3cret@h:6379')",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  const Reply r = call("GET", "/admin/v1/config", "", {}, &read_);
  EXPECT_EQ(r.status, 409);
  EXPECT_NE(r.str("msg").find("store: is not valid JSON"), std::string::npos) << r.str("msg");
  EXPECT_EQ(r.raw.body.find("s3cret"), std::string::npos) << r.raw.body;
  // Nor does the audit row of the replacement show it, whatever the type the hand edit gave it.
  ASSERT_EQ(sqlite3_open(db_.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, R"(UPDATE settings SET value = '{"url":["redis://:s3cret@h:6379"]}' WHERE name = 'store')",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  ASSERT_EQ(call("PUT", "/admin/v1/config", base_yaml()).status, 200);
  const Reply audit = call("GET", "/admin/v1/audit?limit=1", "", {}, &read_);
  EXPECT_EQ(audit.status, 200);
  EXPECT_NE(audit.raw.body.find("REDACTED"), std::string::npos) << audit.raw.body;
  EXPECT_EQ(audit.raw.body.find("s3cret"), std::string::npos) << audit.raw.body;
}

TEST_F(AdminApiTest, ALongPollHoldsWhileNothingChangesAndAnswersOnceSomethingDoes) {
  const std::string etag = call("GET", "/admin/v1/config").header("ETag");
  const Reply waiting = call("GET", "/admin/v1/config?wait=30s", "", {{"If-None-Match", etag}});
  EXPECT_EQ(waiting.status, 304);
  EXPECT_EQ(waiting.raw.hold, std::chrono::seconds(30));
  EXPECT_EQ(call("GET", "/admin/v1/config?wait=600", "", {{"If-None-Match", etag}}).raw.hold, std::chrono::seconds(60));
  // However long: seconds that would wrap around as nanoseconds, or past 64 bits.
  for (const char* huge : {"9223372037", "18446744074", "99999999999999999999999"}) {
    EXPECT_EQ(call("GET", std::string("/admin/v1/config?wait=") + huge, "", {{"If-None-Match", etag}}).raw.hold,
              std::chrono::seconds(60))
        << huge;
  }
  EXPECT_EQ(call("GET", "/admin/v1/config?wait=-99999999999999999999999", "", {{"If-None-Match", etag}}).status, 400);
  EXPECT_EQ(call("GET", "/admin/v1/config", "", {{"If-None-Match", etag}}).raw.hold, Nanos{0});
  EXPECT_EQ(call("GET", "/admin/v1/config", "", {{"If-None-Match", "W/" + etag}}).status, 304);  // compared weakly
  EXPECT_EQ(call("PUT", "/admin/v1/systems/erp", R"({"interfaces":["users"]})").status, 200);
  const Reply news = call("GET", "/admin/v1/config?wait=30s", "", {{"If-None-Match", etag}});
  EXPECT_EQ(news.status, 200);
  EXPECT_EQ(news.raw.hold, Nanos{0});
  EXPECT_NE(news.header("ETag"), etag);
}

// Rows changed behind the revision's back (as only sluice's own writes do, with meta.writing set):
// what reads the database again sees the change, what answers from what it read does not.
void edit_without_moving_the_revision(const std::string& db_path, const std::string& description) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_path.c_str(), &db), SQLITE_OK);
  const std::string sql = "UPDATE meta SET value = 1 WHERE name = 'writing'; UPDATE systems SET description = '" +
                          description + "' WHERE key = 'crm'; UPDATE meta SET value = 0 WHERE name = 'writing'";
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
}

// Followers' long polls all answer when the revision moves: the configuration is read once per
// revision and its answer built once, not once per poll (3000 systems took the admin thread 4 s
// for 20 followers).
TEST_F(AdminApiTest, TheConfigurationIsReadAndItsAnswerBuiltOncePerRevision) {
  const std::string etag = call("GET", "/admin/v1/config").header("ETag");
  ASSERT_EQ(call("PUT", "/admin/v1/systems/erp", R"({"interfaces":["users"]})").status, 200);
  const Reply first = call("GET", "/admin/v1/config?wait=30s", "", {{"If-None-Match", etag}});
  ASSERT_EQ(first.status, 200);
  edit_without_moving_the_revision(db_, "unseen");
  for (int i = 0; i < 3; ++i) {
    const Reply next = call("GET", "/admin/v1/config?wait=30s", "", {{"If-None-Match", etag}});
    EXPECT_EQ(next.status, 200);
    EXPECT_EQ(next.raw.body, first.raw.body);
    EXPECT_EQ(next.header("ETag"), first.header("ETag"));
  }
  EXPECT_EQ(call("GET", "/admin/v1/systems/crm").str("description"), "");
  // The next revision is read again.
  ASSERT_EQ(call("PUT", "/admin/v1/systems/erp", R"({"interfaces":["orders"]})").status, 200);
  EXPECT_EQ(call("GET", "/admin/v1/systems/crm").str("description"), "unseen");
}

// With a gateway's watcher reading each revision to serve it, the admin API answers from what the
// watcher read, and a long poll waits (304 with hold, asked again) until the watcher has read the
// new revision rather than read it on the admin thread.
TEST_F(AdminApiTest, ALongPollWaitsForTheWatcherToReadANewRevisionAndAnswersFromIt) {
  std::mutex mu;
  WatchedConfig watched;  // guarded by mu
  {
    std::lock_guard lock(mu);
    watched = WatchedConfig{store_->generation(), revision(), *store_->load()};
  }
  AdminApiOptions o = options();
  o.watched = [&] {
    std::lock_guard lock(mu);
    return watched;
  };
  api_ = std::make_unique<AdminApi>(o);
  const std::string etag = call("GET", "/admin/v1/config").header("ETag");
  ASSERT_EQ(call("PUT", "/admin/v1/systems/erp", R"({"interfaces":["users"]})").status, 200);
  const std::string moved = "\"r" + std::to_string(revision()) + "\"";
  const Reply unread = call("GET", "/admin/v1/config?wait=30s", "", {{"If-None-Match", etag}});
  EXPECT_EQ(unread.status, 304);
  EXPECT_EQ(unread.raw.hold, std::chrono::seconds(30));
  EXPECT_EQ(unread.header("ETag"), etag);
  // Without wait, or asked for the revision as such, it is read here.
  EXPECT_EQ(call("GET", "/admin/v1/config", "", {{"If-None-Match", etag}}).header("ETag"), moved);
  // Read by the watcher: answered from what it read, not from the database.
  config::StoredConfig read = *store_->load();
  auto shown = std::make_shared<config::Config>(*read.config);
  shown->systems.at(0).description = "as the watcher read it";
  {
    std::lock_guard lock(mu);
    watched = WatchedConfig{store_->generation(), read.revision, {shown, read.revision}};
  }
  const Reply news = call("GET", "/admin/v1/config?wait=30s", "", {{"If-None-Match", etag}});
  EXPECT_EQ(news.status, 200);
  EXPECT_EQ(news.raw.hold, Nanos{0});
  EXPECT_EQ(news.header("ETag"), moved);
  EXPECT_EQ(news.obj().at("systems").as_array().at(0).as_object().at("description").as_string(), "as the watcher read it");
  // A revision the watcher looked at and refused is read here, to say why.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE interfaces SET upstream = 'gone' WHERE id = 'users'", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  {
    std::lock_guard lock(mu);
    watched.looked = revision();
  }
  const Reply refused = call("GET", "/admin/v1/config?wait=30s", "", {{"If-None-Match", moved}});
  EXPECT_EQ(refused.status, 409);
  EXPECT_EQ(refused.str("reason"), "stored_config_invalid");
}

// --- audit, stats, limits, breakers -----------------------------------------------------------------

TEST_F(AdminApiTest, TheAuditLogSaysWhoChangedWhatWhenWithBeforeAndAfter) {
  clock_.advance(std::chrono::seconds(5));
  ASSERT_EQ(call("PUT", "/admin/v1/systems/erp", R"({"description":"audited","interfaces":["orders"]})").status, 200);
  const Reply r = call("GET", "/admin/v1/audit?limit=2");
  ASSERT_EQ(r.status, 200);
  const auto& items = r.obj().at("items").as_array();
  ASSERT_EQ(items.size(), 2u);
  const auto& e = items[0].as_object();
  EXPECT_EQ(e.at("actor").as_string(), "token:ops (" + auth_->authenticate("Bearer " + admin_)->id + ")");
  EXPECT_EQ(e.at("action").as_string(), "system.update");
  EXPECT_EQ(e.at("target").as_string(), "systems/erp");
  EXPECT_EQ(e.at("at").as_string(), config::format_time(1'800'000'005));
  EXPECT_EQ(e.at("before").as_object().at("description").as_string(), "");
  EXPECT_EQ(e.at("after").as_object().at("description").as_string(), "audited");
  const std::int64_t next = r.obj().at("next_before").as_int64();
  // Older: the two tokens' creation and the import (newest first).
  const Reply page = call("GET", "/admin/v1/audit?before=" + std::to_string(next));
  const auto& older = page.obj().at("items").as_array();
  ASSERT_EQ(older.size(), 2u);
  EXPECT_EQ(older[1].as_object().at("action").as_string(), "config.import");
  for (const char* bad : {"limit=1e2", "limit=0", "limit=1001", "limit=2x", "before=1e1", "before=-1", "before=0",
                          "before=x"}) {
    EXPECT_EQ(call("GET", std::string("/admin/v1/audit?") + bad).status, 400) << bad;
  }
}

// next_before is null on the last page, also when that page is full: it used to send the reader
// on to an empty one.
TEST_F(AdminApiTest, TheLastPageOfTheAuditLogSaysThereIsNoOther) {
  // Three rows: the import and the two tokens.
  const Reply first = call("GET", "/admin/v1/audit?limit=2");
  ASSERT_EQ(first.obj().at("items").as_array().size(), 2u);
  const std::int64_t next = first.obj().at("next_before").as_int64();
  EXPECT_EQ(next, first.obj().at("items").as_array().at(1).as_object().at("id").as_int64());
  const Reply last = call("GET", "/admin/v1/audit?limit=1&before=" + std::to_string(next));
  ASSERT_EQ(last.obj().at("items").as_array().size(), 1u);
  EXPECT_TRUE(last.obj().at("next_before").is_null()) << last.raw.body;
  const Reply all = call("GET", "/admin/v1/audit?limit=3");
  ASSERT_EQ(all.obj().at("items").as_array().size(), 3u);
  EXPECT_TRUE(all.obj().at("next_before").is_null()) << all.raw.body;
}

TEST_F(AdminApiTest, StatsShowEachSecondOfTheLastMinuteBySystemAndInterface) {
  stats_.count(0, "crm", "orders", Reason::kOk);
  stats_.count(0, "crm", "orders", Reason::kOk);
  clock_.advance(std::chrono::seconds(1));
  stats_.count(0, "crm", "orders", Reason::kGrantRateLimited);
  stats_.count(0, "", "health", Reason::kOk);
  stats_.count(0, "", "", Reason::kBadRequest);  // refused before a system or an interface was known
  const Reply r = call("GET", "/admin/v1/stats");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.obj().at("seconds").as_int64(), 60);
  const auto& crm = r.obj().at("systems").as_array()[0].as_object();
  EXPECT_EQ(crm.at("key").as_string(), "crm");
  const auto& admitted = crm.at("admitted").as_array();
  ASSERT_EQ(admitted.size(), 60u);
  EXPECT_EQ(admitted[58].as_int64(), 2);
  EXPECT_EQ(admitted[59].as_int64(), 0);
  EXPECT_EQ(crm.at("rejected").as_object().at("grant_rate_limited").as_array()[59].as_int64(), 1);
  EXPECT_EQ(crm.at("admitted_total").as_int64(), 2);
  EXPECT_EQ(crm.at("rejected_total").as_int64(), 1);
  const auto& interfaces = r.obj().at("interfaces").as_array();
  EXPECT_EQ(interfaces[2].as_object().at("id").as_string(), "health");
  EXPECT_EQ(interfaces[2].as_object().at("admitted_total").as_int64(), 1);
  // The whole instance counts each request once, the one that counts for neither too.
  const auto& total = r.obj().at("total").as_object();
  EXPECT_EQ(total.at("admitted_total").as_int64(), 3);
  EXPECT_EQ(total.at("rejected_total").as_int64(), 2);
  EXPECT_EQ(total.at("rejected").as_object().at("bad_request").as_array()[59].as_int64(), 1);
  EXPECT_EQ(total.at("admitted").as_array()[58].as_int64(), 2);
  EXPECT_EQ(r.obj().at("breakers").as_array()[0].as_object().at("state").as_string(), "closed");
  EXPECT_EQ(r.obj().at("store").as_object().at("kind").as_string(), "local");
  EXPECT_EQ(r.obj().at("config").as_object().at("source").as_string(), "test");
  clock_.advance(std::chrono::seconds(60));
  EXPECT_EQ(call("GET", "/admin/v1/stats").obj().at("systems").as_array()[0].as_object().at("admitted_total").as_int64(), 0);
}

TEST_F(AdminApiTest, LimitsShowTheirLiveStateAndResetClearsIt) {
  const auto snap = snapshot();
  const CompiledLimit& hourly = snap->system("crm")->limits[0];
  ASSERT_TRUE(limits_.acquire(hourly.key, hourly.rule->limit, 30).ok());
  const Reply r = call("GET", "/admin/v1/limits?key=system:crm");
  ASSERT_EQ(r.status, 200) << r.raw.body;
  const auto& item = r.obj().at("items").as_array()[0].as_object();
  EXPECT_EQ(item.at("name").as_string(), "crm-hour");
  EXPECT_EQ(item.at("state").as_object().at("remaining").as_int64(), 70);
  EXPECT_EQ(item.at("state").as_object().at("limit").as_int64(), 100);
  EXPECT_GT(item.at("state").as_object().at("reset_after_ms").as_int64(), 0);
  const Reply reset = call("POST", "/admin/v1/limits/reset?key=system:crm&limit=crm-hour");
  EXPECT_EQ(reset.obj().at("items").as_array()[0].as_object().at("state").as_object().at("remaining").as_int64(), 100);
}

TEST_F(AdminApiTest, KeyedLimitsNeedAValueAndGrantsAndInFlightLimitsAreFound) {
  const auto orders = call("GET", "/admin/v1/limits?key=interface:orders");
  ASSERT_EQ(orders.status, 200);
  const auto& items = orders.obj().at("items").as_array();
  ASSERT_EQ(items.size(), 2u);  // the client_ip window and the in-flight limit
  EXPECT_TRUE(items[0].as_object().at("state").is_null());
  EXPECT_EQ(items[1].as_object().at("scope").as_string(), "in_flight");
  const auto by_ip = call("GET", "/admin/v1/limits?key=interface:orders&value=10.0.0.1");
  EXPECT_EQ(by_ip.obj().at("items").as_array()[0].as_object().at("state").as_object().at("remaining").as_int64(), 20);
  EXPECT_EQ(call("GET", "/admin/v1/limits?key=grant:crm/orders").obj().at("items").as_array().size(), 1u);
  EXPECT_EQ(call("GET", "/admin/v1/limits?key=system:nobody").status, 404);
  EXPECT_EQ(call("GET", "/admin/v1/limits?key=crm").status, 400);
  // A value of bytes that are not UTF-8 (a counter keyed by a query parameter counts any): read and
  // reset, and said in JSON that parses (each such byte as U+FFFD), in the answer and the audit log.
  ASSERT_EQ(call("POST", "/admin/v1/interfaces",
                 R"({"id":"search","path":"/search","upstream":"app",)"
                 R"("limits":[{"algorithm":"fixed_window","limit":5,"period":"1h","key_by":"query:q"}]})").status,
            201);
  const auto odd = call("GET", "/admin/v1/limits?key=interface:search&value=%FF");
  ASSERT_EQ(odd.status, 200) << odd.raw.body;
  EXPECT_EQ(odd.str("value"), "\xEF\xBF\xBD");
  ASSERT_EQ(call("POST", "/admin/v1/limits/reset?key=interface:search&value=%FF").status, 200);
  const auto audit = store_->audit(1);
  ASSERT_TRUE(audit.ok());
  boost::system::error_code ec;
  (void)json::parse(audit->at(0).after, ec);
  EXPECT_FALSE(ec) << audit->at(0).after;
  const auto nobody = call("GET", "/admin/v1/limits?key=system:%FF");
  EXPECT_EQ(nobody.status, 404);
  EXPECT_NE(nobody.str("msg").find("\xEF\xBF\xBD"), std::string::npos) << nobody.raw.body;
}

// What the gateway's policy decides for a request of system `system` to `path` from `client_ip`,
// counting in limits_ as a gateway on this snapshot would.
Reason AdminApiTest::decide(const std::string& system, const std::string& path, const std::string& client_ip) {
  const auto snap = snapshot();
  StoreLimiter limiter(limits_);
  Context ctx;
  Request r;
  r.method = "GET";
  r.path = path;
  r.has_system_key = true;
  r.system_key = system;
  r.client_ip = client_ip;
  return decide_now(r, *snap, ctx, limiter).reason;
}

// key_by: header:X-User counts the requests without X-User (or with it empty) in one count: value=
// given empty is that count, to read and to reset; no value at all names no count, and a reset
// without one is refused, saying what the limit is keyed by, rather than answered 200 unreset.
TEST_F(AdminApiTest, AnEmptyValueIsTheCountOfRequestsWithoutOneAndAResetWithoutAValueIsRefused) {
  ASSERT_EQ(call("POST", "/admin/v1/systems", R"({"key":"s","interfaces":["*"]})").status, 201);
  ASSERT_EQ(call("POST", "/admin/v1/interfaces",
                 R"({"id":"kq","path":"/kq","upstream":"app",)"
                 R"("limits":[{"algorithm":"fixed_window","limit":1,"period":"1h","key_by":"header:X-User"}]})").status,
            201);
  ASSERT_EQ(decide("s", "/kq"), Reason::kOk);
  ASSERT_EQ(decide("s", "/kq"), Reason::kInterfaceRateLimited);
  const auto state = [](const Reply& r) { return r.obj().at("items").as_array().at(0).as_object().at("state"); };

  const Reply peek = call("GET", "/admin/v1/limits?key=interface:kq&value=");
  ASSERT_EQ(peek.status, 200) << peek.raw.body;
  ASSERT_TRUE(state(peek).is_object()) << peek.raw.body;
  EXPECT_EQ(state(peek).as_object().at("remaining").as_int64(), 0);
  EXPECT_EQ(peek.str("value"), "");
  // No value: no one count to show, and the answer says how to name one.
  const Reply none = call("GET", "/admin/v1/limits?key=interface:kq");
  ASSERT_EQ(none.status, 200);
  EXPECT_TRUE(state(none).is_null());
  EXPECT_TRUE(none.obj().at("value").is_null()) << none.raw.body;
  const std::string note(none.obj().at("items").as_array().at(0).as_object().at("note").as_string());
  EXPECT_NE(note.find("header X-User"), std::string::npos) << note;
  EXPECT_NE(note.find("value= left empty"), std::string::npos) << note;

  const Reply refused = call("POST", "/admin/v1/limits/reset?key=interface:kq");
  EXPECT_EQ(refused.status, 400);
  EXPECT_EQ(refused.str("reason"), "bad_request");
  for (const char* said : {"\"kq\"", "header X-User", "key_by: header:X-User", "value=", "requests without header X-User",
                           "nothing was reset"}) {
    EXPECT_NE(refused.str("msg").find(said), std::string::npos) << said << " in " << refused.str("msg");
  }
  EXPECT_EQ(decide("s", "/kq"), Reason::kInterfaceRateLimited);  // still

  const Reply reset = call("POST", "/admin/v1/limits/reset?key=interface:kq&value=");
  ASSERT_EQ(reset.status, 200) << reset.raw.body;
  EXPECT_EQ(state(reset).as_object().at("remaining").as_int64(), 1);
  EXPECT_EQ(decide("s", "/kq"), Reason::kOk);
  // The audit log tells the count of requests without a value ("") from no value given (null).
  const auto audit = store_->audit(1);
  ASSERT_TRUE(audit.ok());
  EXPECT_EQ(json::parse(audit->at(0).after).as_object().at("value"), json::value(""));
  ASSERT_EQ(call("POST", "/admin/v1/limits/reset?key=system:crm").status, 200);
  EXPECT_TRUE(json::parse(store_->audit(1)->at(0).after).as_object().at("value").is_null());
}

// The gateway counts a client by its address in one form (lower case, zeros compressed, an IPv4
// client of a dual-stack listener as IPv4): a value for a client_ip limit is read as an address and
// put in that form, and one that is no address is refused, naming it.
TEST_F(AdminApiTest, AClientIpValueIsReadAsTheAddressTheGatewayCounts) {
  ASSERT_EQ(decide("crm", "/orders/1", "2001:db8::1"), Reason::kOk);
  ASSERT_EQ(decide("crm", "/orders/1", "10.1.1.1"), Reason::kOk);
  const auto window = [&](const std::string& value) {
    const Reply r = call("GET", "/admin/v1/limits?key=interface:orders&limit=orders&value=" + value);
    EXPECT_EQ(r.status, 200) << value << ": " << r.raw.body;
    const auto& item = r.obj().at("items").as_array().at(0).as_object();
    EXPECT_TRUE(item.at("state").is_object()) << value << ": " << r.raw.body;
    return std::make_pair(std::string(item.at("store_key").as_string()),
                          item.at("state").is_object() ? item.at("state").as_object().at("remaining").as_int64() : -1);
  };
  for (const char* v : {"2001:db8::1", "2001:DB8::1", "2001:db8:0::1", "2001:0db8:0000:0000:0000:0000:0000:0001"}) {
    const auto [key, remaining] = window(v);
    EXPECT_TRUE(key.ends_with("|2001:db8::1")) << v << ": " << key;
    EXPECT_EQ(remaining, 19) << v;
  }
  for (const char* v : {"10.1.1.1", "::ffff:10.1.1.1", "::FFFF:10.1.1.1", "::ffff:a01:101"}) {
    const auto [key, remaining] = window(v);
    EXPECT_TRUE(key.ends_with("|10.1.1.1")) << v << ": " << key;
    EXPECT_EQ(remaining, 19) << v;
  }
  const Reply reset = call("POST", "/admin/v1/limits/reset?key=interface:orders&limit=orders&value=2001:DB8:0::1");
  ASSERT_EQ(reset.status, 200) << reset.raw.body;
  EXPECT_EQ(window("2001:db8::1").second, 20);
  for (const std::string v : {"nope", "10.1.1", "10.1.1.1 ", ""}) {
    for (const std::string route : {"GET /admin/v1/limits", "POST /admin/v1/limits/reset"}) {
      const Reply r = call(route.substr(0, route.find(' ')), route.substr(route.find(' ') + 1) +
                                                                 "?key=interface:orders&value=" + v);
      EXPECT_EQ(r.status, 400) << route << " " << v << ": " << r.raw.body;
      EXPECT_NE(r.str("msg").find("\"" + v + "\" is not an IP address"), std::string::npos) << r.str("msg");
      EXPECT_NE(r.str("msg").find("\"orders\""), std::string::npos) << r.str("msg");
    }
  }
  // (An address and a NUL is none: what follows the NUL is not ignored.)
  EXPECT_EQ(call("GET", "/admin/v1/limits?key=interface:orders&value=10.1.1.1%00x").status, 400);
  EXPECT_EQ(window("10.1.1.1").second, 19);  // the refused resets reset nothing
}

// A value is for the limits keyed by something: the others ignore it (as they always have). Beside
// a header limit, a value that is no address leaves a client_ip limit without a state (said why)
// rather than refuse the look; a reset must reset every limit it selects, or is refused.
TEST_F(AdminApiTest, AValueAClientIpLimitCannotCountIsSaidBesideTheLimitsItNames) {
  const Reply plain = call("GET", "/admin/v1/limits?key=system:crm&value=anything");
  ASSERT_EQ(plain.status, 200);
  EXPECT_EQ(plain.obj().at("items").as_array().at(0).as_object().at("state").as_object().at("remaining").as_int64(), 100);
  ASSERT_EQ(call("POST", "/admin/v1/interfaces",
                 R"({"id":"both","path":"/both","upstream":"app","limits":[)"
                 R"({"name":"per-ip","algorithm":"fixed_window","limit":5,"period":"1h","key_by":"client_ip"},)"
                 R"({"name":"per-user","algorithm":"fixed_window","limit":5,"period":"1h","key_by":"header:X-User"}]})")
                .status,
            201);
  const Reply look = call("GET", "/admin/v1/limits?key=interface:both&value=alice");
  ASSERT_EQ(look.status, 200) << look.raw.body;
  const auto& items = look.obj().at("items").as_array();
  ASSERT_EQ(items.size(), 2u);
  EXPECT_TRUE(items[0].as_object().at("state").is_null()) << look.raw.body;
  EXPECT_NE(std::string(items[0].as_object().at("note").as_string()).find("\"alice\" is not an IP address"),
            std::string::npos) << look.raw.body;
  EXPECT_EQ(items[1].as_object().at("state").as_object().at("remaining").as_int64(), 5);
  const Reply all = call("POST", "/admin/v1/limits/reset?key=interface:both&value=alice");
  EXPECT_EQ(all.status, 400);
  EXPECT_NE(all.str("msg").find("limit=NAME"), std::string::npos) << all.str("msg");
  EXPECT_EQ(call("POST", "/admin/v1/limits/reset?key=interface:both&value=alice&limit=per-user").status, 200);
}

TEST_F(AdminApiTest, AGrantKeyThatCouldNameTwoGrantsIsRefusedUntilTheSystemIsGiven) {
  for (const char* system : {R"({"key":"a/b","interfaces":["*"]})", R"({"key":"a","interfaces":["*"]})"}) {
    ASSERT_EQ(call("POST", "/admin/v1/systems", system).status, 201);
  }
  for (const char* itf : {R"({"id":"c","path":"/c","upstream":"app"})", R"({"id":"b/c","path":"/bc","upstream":"app"})"}) {
    ASSERT_EQ(call("POST", "/admin/v1/interfaces", itf).status, 201);
  }
  for (const char* grant : {R"({"system":"a/b","interface":"c","limits":[{"algorithm":"fixed_window","limit":7,"period":"1m"}]})",
                            R"({"system":"a","interface":"b/c","limits":[{"algorithm":"fixed_window","limit":9,"period":"1m"}]})"}) {
    ASSERT_EQ(call("POST", "/admin/v1/grants", grant).status, 201);
  }
  const Reply both = call("POST", "/admin/v1/limits/reset?key=grant:a/b/c");
  EXPECT_EQ(both.status, 400);
  EXPECT_NE(both.str("msg").find(R"(system "a/b" with interface "c")"), std::string::npos) << both.str("msg");
  EXPECT_NE(both.str("msg").find(R"(system "a" with interface "b/c")"), std::string::npos) << both.str("msg");
  auto quota = [&](const std::string& system) {
    const Reply r = call("GET", "/admin/v1/limits?key=grant:a/b/c&system=" + system);
    EXPECT_EQ(r.status, 200) << r.raw.body;
    return r.obj().at("items").as_array().at(0).as_object().at("state").as_object().at("limit").as_int64();
  };
  EXPECT_EQ(quota("a%2Fb"), 7);
  EXPECT_EQ(quota("a"), 9);
  const Reply other = call("GET", "/admin/v1/limits?key=grant:a/b/c&system=b");
  EXPECT_EQ(other.status, 404);
  EXPECT_NE(other.str("msg").find(R"(with system "b")"), std::string::npos) << other.str("msg");
}

TEST_F(AdminApiTest, AQueryParameterGivenTwiceOrALimitNamedWrongIsRefused) {
  const Reply twice = call("POST", "/admin/v1/limits/reset?key=system:crm&key=system:erp");
  EXPECT_EQ(twice.status, 400);
  EXPECT_NE(twice.str("msg").find("key is given twice"), std::string::npos) << twice.str("msg");
  const Reply typo = call("POST", "/admin/v1/limits/reset?key=system:crm&limit=crm-hours");
  EXPECT_EQ(typo.status, 404);
  EXPECT_NE(typo.str("msg").find("nothing was reset"), std::string::npos) << typo.str("msg");
  EXPECT_EQ(call("POST", "/admin/v1/limits/reset?key=system:crm&limit=crm-hour").status, 200);
}

TEST_F(AdminApiTest, BreakersAreForcedThroughTheConfigurationAndResetHere) {
  const Reply forced = call("POST", "/admin/v1/breakers/app/force", R"({"force":"open"})");
  ASSERT_EQ(forced.status, 200) << forced.raw.body;
  EXPECT_EQ(store_->load()->config->upstreams[0].breaker.force, config::BreakerForce::kOpen);
  EXPECT_EQ(call("GET", "/admin/v1/breakers/app").str("state"), "forced_open");
  EXPECT_EQ(call("POST", "/admin/v1/breakers/app/reset").status, 409);
  EXPECT_EQ(call("GET", "/admin/v1/audit?limit=1").obj().at("items").as_array()[0].as_object().at("action").as_string(),
            "breaker.force");
  ASSERT_EQ(call("POST", "/admin/v1/breakers/app/force", R"({"force":"none"})").status, 200);
  EXPECT_EQ(call("GET", "/admin/v1/breakers/app").str("state"), "closed");
  const auto breaker = snapshot()->upstreams()[0].breaker;
  for (int i = 0; i < 4; ++i) breaker->record(breaker->try_acquire(), true);
  EXPECT_EQ(call("GET", "/admin/v1/breakers/app").str("state"), "open");
  EXPECT_EQ(call("POST", "/admin/v1/breakers/app/reset").str("state"), "closed");
  EXPECT_EQ(call("POST", "/admin/v1/breakers/app/force", R"({"force":"sideways"})").status, 400);
  EXPECT_EQ(call("POST", "/admin/v1/breakers/app/force", R"({"force":"none","x":1})").status, 400);
  // A force left on a breaker since disabled can be cleared, not set.
  config::Config c = *store_->load()->config;
  c.upstreams[0].breaker.enabled = false;
  c.upstreams[0].breaker.force = config::BreakerForce::kOpen;
  ASSERT_EQ(call("PUT", "/admin/v1/config", json::serialize(config::to_json(c))).status, 200);
  EXPECT_EQ(call("POST", "/admin/v1/breakers/app/force", R"({"force":"closed"})").status, 409);
  EXPECT_EQ(call("POST", "/admin/v1/breakers/app/force", R"({"force":"none"})").status, 200);
  EXPECT_EQ(store_->load()->config->upstreams[0].breaker.force, config::BreakerForce::kNone);
  EXPECT_EQ(call("GET", "/admin/v1/breakers").obj().at("items").as_array().size(), 2u);
}

// --- credentials and tokens -----------------------------------------------------------------------

TEST_F(AdminApiTest, AnApiKeyIsShownOnceAndKeptOnlyAsItsHash) {
  const Reply r = call("POST", "/admin/v1/systems/crm/credentials", R"({"kind":"api_key"})");
  ASSERT_EQ(r.status, 201) << r.raw.body;
  const std::string key = r.str("api_key");
  EXPECT_TRUE(key.starts_with("sluice_ak_"));
  const auto loaded = store_->load();
  const config::Credential& stored = loaded->config->systems[0].credentials.at(0);
  EXPECT_EQ(stored.api_key_sha256, config::sha256_hex(key));
  EXPECT_EQ(stored.created, 1'800'000'000);
  const Reply listed = call("GET", "/admin/v1/systems/crm/credentials");
  EXPECT_EQ(listed.raw.body.find(key), std::string::npos);
  EXPECT_EQ(listed.raw.body.find(stored.api_key_sha256), std::string::npos);
  EXPECT_TRUE(listed.obj().at("items").as_array()[0].as_object().at("active").as_bool());
  EXPECT_EQ(call("GET", "/admin/v1/systems/crm").raw.body.find(stored.api_key_sha256), std::string::npos);
  EXPECT_EQ(call("GET", "/admin/v1/audit?limit=1").raw.body.find(stored.api_key_sha256), std::string::npos);
}

TEST_F(AdminApiTest, RotatingGivesTheOldKeysAnOverlapBeforeTheyExpire) {
  const std::string first = call("POST", "/admin/v1/systems/crm/credentials", R"({"kind":"api_key"})").str("id");
  const Reply second = call("POST", "/admin/v1/systems/crm/credentials", R"({"kind":"api_key","rotate":true,"overlap":"1h"})");
  ASSERT_EQ(second.status, 201);
  EXPECT_EQ(second.obj().at("rotated").as_array()[0].as_object().at("id").as_string(), first);
  const auto loaded = store_->load();
  const auto& creds = loaded->config->systems[0].credentials;
  ASSERT_EQ(creds.size(), 2u);
  EXPECT_EQ(creds[0].expires, 1'800'000'000 + 3600);
  EXPECT_FALSE(creds[1].expires.has_value());
  clock_.advance(std::chrono::hours(2));
  const Reply listed = call("GET", "/admin/v1/systems/crm/credentials");
  const auto& items = listed.obj().at("items").as_array();
  EXPECT_FALSE(items[0].as_object().at("active").as_bool());
  EXPECT_EQ(call("DELETE", "/admin/v1/systems/crm/credentials/" + first).status, 204);
  EXPECT_EQ(store_->load()->config->systems[0].credentials.size(), 1u);
  EXPECT_EQ(call("DELETE", "/admin/v1/systems/crm/credentials/" + first).status, 404);
}

// Expiries are whole seconds: a rotation's overlap is rounded up, never down to less than asked.
TEST_F(AdminApiTest, ARotationsOverlapIsAtLeastWhatWasAsked) {
  call("POST", "/admin/v1/systems/crm/credentials", R"({"kind":"api_key"})");
  clock_.advance(std::chrono::milliseconds(900));
  ASSERT_EQ(call("POST", "/admin/v1/systems/crm/credentials", R"({"kind":"api_key","rotate":true,"overlap":"1s"})")
                .status,
            201);
  EXPECT_EQ(store_->load()->config->systems[0].credentials.at(0).expires, 1'800'000'000 + 2);
}

TEST_F(AdminApiTest, ASigningSecretIsShownOnceAndKeptSealed) {
  const Reply r = call("POST", "/admin/v1/systems/erp/credentials", R"({"kind":"hmac"})");
  ASSERT_EQ(r.status, 201) << r.raw.body;
  const std::string secret = r.str("secret");
  const auto loaded = store_->load();
  const config::Credential& stored = loaded->config->systems[1].credentials.at(0);
  EXPECT_EQ(stored.sealed_secret.find(secret), std::string::npos);
  EXPECT_EQ(*key_.open(stored.sealed_secret), secret);
  AdminApiOptions o = options();
  o.secret_key = nullptr;
  const AdminApi without(o);
  AdminRequest req{"POST", "/admin/v1/systems/erp/credentials", R"({"kind":"hmac"})", {{"Authorization", "Bearer " + admin_}}};
  const AdminResponse refused = without.handle(req);
  EXPECT_EQ(refused.status, 503);
  EXPECT_NE(refused.body.find("secret_key_missing"), std::string::npos);
}

// A write conditional on an entity's ETag answers with that entity's new one, as the others do:
// a credential's on its system's, a breaker's force on its upstream's.
TEST_F(AdminApiTest, CredentialAndForceWritesAnswerWithTheirEntitysNewETag) {
  const Reply created = call("POST", "/admin/v1/systems/crm/credentials", R"({"kind":"api_key"})");
  ASSERT_EQ(created.status, 201);
  EXPECT_FALSE(created.header("ETag").empty());
  EXPECT_EQ(created.header("ETag"), call("GET", "/admin/v1/systems/crm").header("ETag"));
  const Reply deleted = call("DELETE", "/admin/v1/systems/crm/credentials/" + created.str("id"), "",
                             {{"If-Match", created.header("ETag")}});
  ASSERT_EQ(deleted.status, 204);
  EXPECT_EQ(deleted.header("ETag"), call("GET", "/admin/v1/systems/crm").header("ETag"));
  const Reply forced = call("POST", "/admin/v1/breakers/app/force", R"({"force":"open"})");
  ASSERT_EQ(forced.status, 200);
  EXPECT_EQ(forced.header("ETag"), call("GET", "/admin/v1/upstreams/app").header("ETag"));
  EXPECT_FALSE(forced.header("ETag").empty());
}

TEST_F(AdminApiTest, BadCredentialRequestsAreRefusedWithTheirFields) {
  const Reply r = call("POST", "/admin/v1/systems/crm/credentials", R"({"kind":"password","expires":"soon","colour":1})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.problems(), (std::vector<std::string>{"kind: must be api_key or hmac",
                                                    "expires: must be a UTC time like 2026-11-30T10:00:00Z",
                                                    "colour: unknown field (known: kind, expires, rotate, overlap)"}));
  EXPECT_EQ(call("POST", "/admin/v1/systems/nobody/credentials", R"({"kind":"api_key"})").status, 404);
}

// What would make nothing or mean nothing is refused rather than taken: a credential that has
// expired already, an overlap without a rotation.
TEST_F(AdminApiTest, ACredentialExpiredAlreadyOrAnOverlapWithoutARotationIsRefused) {
  const std::int64_t before = revision();
  const std::string now = config::format_time(1'800'000'000);
  for (const std::string& expires : {std::string("2026-01-01T00:00:00Z"), now}) {
    const Reply r = call("POST", "/admin/v1/systems/crm/credentials", R"({"kind":"api_key","expires":")" + expires + "\"}");
    EXPECT_EQ(r.status, 400) << r.raw.body;
    EXPECT_EQ(r.problems(), std::vector<std::string>{"expires: must be in the future (it is " + now +
                                                     " now): a credential is refused from the time it expires"});
  }
  const Reply overlap = call("POST", "/admin/v1/systems/crm/credentials", R"({"kind":"api_key","overlap":"1h"})");
  EXPECT_EQ(overlap.status, 400) << overlap.raw.body;
  EXPECT_EQ(overlap.problems(), std::vector<std::string>{"overlap: applies only with \"rotate\": true"});
  EXPECT_EQ(call("POST", "/admin/v1/systems/crm/credentials", R"({"kind":"api_key","rotate":false,"overlap":"1h"})").status,
            400);
  EXPECT_EQ(revision(), before);
  EXPECT_EQ(call("POST", "/admin/v1/systems/crm/credentials", R"({"kind":"api_key","expires":"2027-02-01T00:00:00Z"})").status,
            201);
  EXPECT_EQ(call("POST", "/admin/v1/systems/crm/credentials", R"({"kind":"api_key","rotate":true,"overlap":"1h"})").status,
            201);
}

TEST_F(AdminApiTest, AdminsCreateListAndRevokeTokens) {
  const Reply created = call("POST", "/admin/v1/tokens", R"({"name":"console","role":"read"})");
  ASSERT_EQ(created.status, 201);
  EXPECT_TRUE(created.str("created_by").starts_with("token:ops")) << created.raw.body;
  const std::string token = created.str("token");
  EXPECT_EQ(call("GET", "/admin/v1/whoami", "", {}, &token).str("name"), "console");
  const Reply list = call("GET", "/admin/v1/tokens");
  EXPECT_EQ(list.obj().at("items").as_array().size(), 3u);
  EXPECT_EQ(list.raw.body.find(config::sha256_hex(token)), std::string::npos);
  EXPECT_EQ(call("DELETE", "/admin/v1/tokens/" + created.str("id")).status, 204);
  EXPECT_EQ(call("GET", "/admin/v1/whoami", "", {}, &token).status, 401);
  EXPECT_EQ(call("POST", "/admin/v1/tokens", R"({"name":"x","role":"root"})").status, 400);
  EXPECT_EQ(call("POST", "/admin/v1/tokens", R"({"name":"a\u0001b","role":"read"})").status, 400);
  // A name that could pass for another token in the audit log's "token:<name> (<id>)": another id
  // in parentheses, pushed off screen by invisible spaces, or text reordered by a direction override.
  for (const std::string& name : std::vector<std::string>{"ops (at_c888723c4f50)", "ops\u00a0\u00a0\u00a0", "ops\u202egnp.exe", "zero\u200bwidth",
                                 "\ufeffops", std::string(129, 'x'), "ops\u202f\u202f", "ops\u3164"}) {
    const Reply r = call("POST", "/admin/v1/tokens", R"({"name":")" + name + R"(","role":"read"})");
    EXPECT_EQ(r.status, 400) << name;
    EXPECT_NE(r.raw.body.find("without control or invisible characters or parentheses"), std::string::npos) << r.raw.body;
  }
  const Reply named = call("POST", "/admin/v1/tokens", R"({"name":"运维 ops-2","role":"read"})");
  ASSERT_EQ(named.status, 201) << named.raw.body;
  EXPECT_EQ(call("DELETE", "/admin/v1/tokens/" + named.str("id")).status, 204);
  // A field given twice is refused, not read as its last value; so is one the route does not know.
  EXPECT_EQ(call("POST", "/admin/v1/tokens", R"({"name":"x","role":"read","role":"admin"})").status, 400);
  EXPECT_EQ(call("POST", "/admin/v1/tokens", R"({"name":"x","role":"read","expires":"2030-01-01T00:00:00Z"})").status,
            400);
  // Each problem names its field.
  const Reply refused = call("POST", "/admin/v1/tokens", R"({"name":"","role":"root","ttl":"1d"})");
  EXPECT_EQ(refused.status, 400);
  std::vector<std::string> fields;
  for (const auto& p : refused.obj().at("problems").as_array()) fields.emplace_back(p.at("field").as_string());
  EXPECT_EQ(fields, (std::vector<std::string>{"name", "role", "ttl"})) << json::serialize(refused.body);
  for (const char* body : {R"({"name":5,"role":"read"})", R"({"name":"a\u0001b","role":"read"})"}) {
    const Reply r = call("POST", "/admin/v1/tokens", body);
    EXPECT_EQ(r.status, 400) << body;
    EXPECT_EQ(r.obj().at("problems").as_array().at(0).at("field").as_string(), "name") << body;
  }
  EXPECT_EQ(call("GET", "/admin/v1/tokens").obj().at("items").as_array().size(), 2u);
}

// A token made with expires_in is refused from its expiry on (by the clock the admin API is given),
// with a 401 that says it expired; the list and whoami show when.
TEST_F(AdminApiTest, ATokenMadeToExpireIsRefusedFromThenOn) {
  using namespace std::chrono_literals;
  const Reply created = call("POST", "/admin/v1/tokens", R"({"name":"contractor","role":"read","expires_in":"1h"})");
  ASSERT_EQ(created.status, 201) << created.raw.body;
  const std::string expires = config::format_time(std::chrono::duration_cast<std::chrono::seconds>(kT0 + 1h).count());
  EXPECT_EQ(created.str("expires"), expires);
  const std::string token = created.str("token");
  const Reply who = call("GET", "/admin/v1/whoami", "", {}, &token);
  EXPECT_EQ(who.status, 200);
  EXPECT_EQ(who.str("expires"), expires);
  EXPECT_TRUE(call("GET", "/admin/v1/whoami").obj().at("expires").is_null()) << "the fixture's token never expires";
  bool listed = false;
  const Reply list = call("GET", "/admin/v1/tokens");
  for (const auto& t : list.obj().at("items").as_array()) {
    if (t.at("name") == "contractor") listed = t.at("expires") == expires.c_str();
  }
  EXPECT_TRUE(listed);
  clock_.advance(1h - 1s);
  EXPECT_EQ(call("GET", "/admin/v1/whoami", "", {}, &token).status, 200);
  clock_.advance(1s);
  const Reply refused = call("GET", "/admin/v1/whoami", "", {}, &token);
  EXPECT_EQ(refused.status, 401);
  EXPECT_EQ(refused.str("msg"), "The token expired at " + expires + ": an admin can create another (sluice token create).");
  EXPECT_EQ(call("GET", "/admin/v1/whoami").status, 200);
  // From a minute to ten years, as a duration; null is never.
  for (const char* lifetime : {R"("30s")", R"("3651d")", R"("soon")", "3600"}) {
    const Reply r = call("POST", "/admin/v1/tokens", std::string(R"({"name":"x","role":"read","expires_in":)") + lifetime + "}");
    EXPECT_EQ(r.status, 400) << lifetime;
    EXPECT_EQ(r.raw.body.find("\"field\":\"expires_in\"") != std::string::npos, true) << r.raw.body;
  }
  const Reply forever = call("POST", "/admin/v1/tokens", R"({"name":"y","role":"read","expires_in":null})");
  ASSERT_EQ(forever.status, 201);
  EXPECT_TRUE(forever.obj().at("expires").is_null());
}

// --- a follower -----------------------------------------------------------------------------------

TEST_F(AdminApiTest, AFollowerServesWhatItPulledAndRefusesChanges) {
  AdminApiOptions o = options();
  o.store = nullptr;
  o.pulled = [this] { return config::StoredConfig{store_->load()->config, 41}; };
  o.primary = "http://primary:9090";
  const AdminApi follower(o);
  auto ask = [&](const std::string& method, const std::string& target, const std::string& body = "") {
    return follower.handle(AdminRequest{method, target, body, {{"Authorization", "Bearer " + admin_}}});
  };
  const AdminResponse got = ask("GET", "/admin/v1/config");
  EXPECT_EQ(got.status, 200);
  EXPECT_NE(std::find(got.headers.begin(), got.headers.end(), std::pair<std::string, std::string>{"ETag", "\"r41\""}),
            got.headers.end());
  EXPECT_EQ(ask("GET", "/admin/v1/systems/crm").status, 200);
  const AdminResponse put = ask("PUT", "/admin/v1/systems/crm", "{}");
  EXPECT_EQ(put.status, 409);
  EXPECT_NE(put.body.find("http://primary:9090"), std::string::npos);
  EXPECT_EQ(ask("POST", "/admin/v1/tokens", R"({"name":"x","role":"read"})").status, 409);
  EXPECT_EQ(ask("GET", "/admin/v1/stats").status, 200);
}

}  // namespace
}  // namespace sluice::gateway
