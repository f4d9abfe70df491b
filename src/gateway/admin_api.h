// The admin API (/admin/v1/...) as a plain function from request to response, without sockets: the
// configuration's systems, interfaces, upstreams and grants (CRUD with ETag / If-Match), the whole
// configuration (export, atomic replace, long poll for followers), credentials, admin tokens, the
// audit log, stats, live limit state and breakers. docs/admin-api.md describes every route.
// Thread-safe: AdminAuth locks; AdminApi holds no mutable state of its own.
#pragma once

#include <boost/json/object.hpp>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/crypto.h"
#include "config/store.h"
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
  };

  void set_tokens(std::vector<config::TokenInfo> tokens);
  bool empty() const;
  // Who holds the token in an Authorization header value; nullopt for none or an unknown one.
  std::optional<Principal> authenticate(std::string_view authorization) const;

 private:
  mutable std::mutex mu_;
  std::vector<config::TokenInfo> tokens_;  // guarded by mu_
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

 private:
  struct Call;
  AdminResponse config_route(Call& call) const;
  AdminResponse audit_route(Call& call) const;
  AdminResponse stats_route(Call& call) const;
  AdminResponse limits_route(Call& call) const;
  AdminResponse breakers_route(Call& call) const;
  AdminResponse tokens_route(Call& call) const;
  AdminResponse credentials_route(Call& call) const;
  template <class T>
  AdminResponse entity_route(Call& call) const;

  // The configuration now: the database's, or on a follower what it pulled. problems, when given,
  // gets what is wrong with the database's when it does not validate.
  Result<config::StoredConfig> current(std::vector<config::Problem>* problems = nullptr) const;
  std::int64_t now_seconds() const;

  AdminApiOptions options_;
};

}  // namespace sluice::gateway
