// The admin API (/admin/v1/...) as a plain function from request to response, without sockets: the
// configuration's systems, interfaces, upstreams and grants (CRUD with ETag / If-Match), the whole
// configuration (export, atomic replace, long poll for followers), credentials, admin tokens, the
// audit log, stats, live limit state and breakers. docs/admin-api.md describes every route.
// Thread-safe: AdminAuth locks; AdminApi's one mutable part, the configuration at its last revision
// and its answers (built once however many ask), is guarded by a mutex.
#pragma once

#include <boost/json/object.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/crypto.h"
#include "config/store.h"
#include "gateway/config_source.h"
#include "gateway/gateway.h"
#include "gateway/snapshot.h"
#include "gateway/stats.h"
#include "sluice/store.h"

namespace sluice::gateway {

// The admin tokens, checked against "Authorization: Bearer <token>" by SHA-256 in constant time.
class AdminAuth {
 public:
  struct Principal {
    std::string id;
    std::string name;
    config::Role role = config::Role::kRead;
    std::int64_t expires = 0;  // Unix seconds; 0: never
  };

  // clock: what expiries are judged by; nullptr: SystemClock.
  explicit AdminAuth(const Clock* clock = nullptr) : clock_(clock) {}

  void set_tokens(std::vector<config::TokenInfo> tokens);
  // Reads the tokens again (from the database): called for a token not known, at most every
  // kReloadEvery, so that one another process made a moment ago (sluice token create) is known at
  // once rather than once the database's watcher has seen it.
  void set_reload(std::function<std::optional<std::vector<config::TokenInfo>>()> reload);
  static constexpr auto kReloadEvery = std::chrono::milliseconds(1);
  bool empty() const;
  // Who holds the token in an Authorization header value; nullopt for none, an unknown one or one
  // past its expiry (then *expired, when given, is set to that expiry's Unix seconds).
  std::optional<Principal> authenticate(std::string_view authorization, std::int64_t* expired = nullptr) const;

 private:
  const Clock* clock_;
  mutable std::mutex mu_;
  mutable std::vector<config::TokenInfo> tokens_;  // guarded by mu_; read again by authenticate()
  std::function<std::optional<std::vector<config::TokenInfo>>()> reload_;  // guarded by mu_
  mutable std::chrono::steady_clock::time_point reloaded_{};  // guarded by mu_
  mutable std::uint64_t generation_ = 0;  // guarded by mu_; counts the times tokens_ was set
};

// Whether the admin listener may bind address (host:port): a loopback address always; another one
// only when a token of the admin API exists, of either role, since everything there but /metrics
// and /healthz on loopback needs one. A read token suffices on purpose: a host whose metrics are
// scraped from elsewhere and that is administered by `sluice` on the host itself needs no admin
// token at all.
Status check_admin_listen(std::string_view address, bool tokens_exist);

struct AdminApiOptions {
  // Where the configuration lives. nullptr on a follower: it serves what it pulled, read-only.
  config::ConfigStore* store = nullptr;
  // What the gateway's database watcher read last (DatabaseWatcher::last): at its revision the
  // configuration is answered from it rather than read again, and a long poll that a new revision
  // would answer waits (without blocking) for the watcher to read that. Unset: read the database.
  std::function<WatchedConfig()> watched{};
  // A follower's configuration and its primary's revision of it; and the primary, for messages.
  std::function<config::StoredConfig()> pulled{};
  std::string primary{};
  // The running gateway: what it serves (breakers included), its stats and metrics.
  std::function<std::shared_ptr<const Snapshot>()> snapshot{};
  Stats* stats = nullptr;
  const Metrics* metrics = nullptr;
  // Live limit state (peek, reset); nullptr: /limits answers 503.
  sluice::Store* limits = nullptr;
  std::string limit_store = "local";  // its kind, for /stats
  // The breakers around a shared limit store (Gateway::store_breakers), for /stats; unset: none.
  std::function<std::vector<BreakerState>()> store_breakers{};
  std::shared_ptr<AdminAuth> auth{};
  // Seals new signing secrets; nullptr: hmac credentials cannot be created here.
  const config::SecretKey* secret_key = nullptr;
  const Clock* clock = nullptr;  // the wall clock; nullptr: SystemClock
  // Called after a token was created or deleted here, to refresh auth.
  std::function<void()> tokens_changed{};
  // Adds what /stats says about where the configuration comes from (health of the source).
  std::function<void(boost::json::object&)> describe_source{};
  Nanos max_wait = std::chrono::seconds(60);  // the longest long poll
};

class AdminApi {
 public:
  explicit AdminApi(AdminApiOptions options);

  AdminResponse handle(const AdminRequest& request) const;
  // What handle() would refuse a request with before it reads the body (a 401 without a token, a
  // 403 for a read token's change, a malformed URL), from its head alone; nullopt when the body is
  // needed to answer. The admin listener asks it before it answers "100 Continue".
  std::optional<AdminResponse> screen(const AdminRequest& head) const;

 private:
  struct Call;
  std::optional<AdminResponse> admit(Call& call) const;
  AdminResponse config_route(Call& call) const;
  AdminResponse audit_route(Call& call) const;
  AdminResponse stats_route(Call& call) const;
  AdminResponse limits_route(Call& call) const;
  AdminResponse breakers_route(Call& call) const;
  std::optional<AdminResponse> note(const Call& call, std::string action, std::string target,
                                    const boost::json::object& what) const;
  AdminResponse tokens_route(Call& call) const;
  AdminResponse credentials_route(Call& call) const;
  template <class T>
  AdminResponse entity_route(Call& call) const;

  // The configuration now: the database's, or on a follower what it pulled. problems, when given,
  // gets what is wrong with the database's when it does not validate. The database is read once
  // per revision: until it moves, the configuration read last is the answer.
  Result<config::StoredConfig> current(std::vector<config::Problem>* problems = nullptr) const;
  // GET /admin/v1/config's body for `stored` (from current()), as JSON or YAML, with the store's
  // password or without: built once per configuration and shared by all who ask for it (followers'
  // long polls all answer at once when the revision moves).
  std::shared_ptr<const std::string> config_body(const config::StoredConfig& stored, bool admin, bool yaml) const;
  std::int64_t now_seconds() const;

  AdminApiOptions options_;

  // The configuration as the database held it at one revision of one file, and the answers made of
  // a configuration (the database's or a follower's) so far.
  struct Cache {
    std::uint64_t generation = 0;  // ConfigStore::generation() when read
    config::StoredConfig stored{};  // no config: nothing read yet
    std::shared_ptr<const config::Config> answered{};  // what bodies are of
    std::shared_ptr<const std::string> bodies[4]{};   // [admin * 2 + yaml]; null until asked for
  };
  mutable std::mutex cache_mu_;
  mutable Cache cache_;  // guarded by cache_mu_
};

}  // namespace sluice::gateway
