#include "cli/serve_control.h"

#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <boost/json/object.hpp>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cli/standard_descriptors.h"
#include "config/store.h"
#include "config/yaml.h"
#include "gateway/access_log.h"
#include "gateway/admin_api.h"
#include "gateway/config_source.h"
#include "gateway/console.h"
#include "gateway/gateway.h"
#include "gateway/redis_limiter.h"
#include "sluice/local_store.h"

namespace sluice::cli {
namespace {

void log_line(std::string_view message) { gateway::log_to_stderr(message); }

// SIGTERM and SIGINT held back (blocked) while it lives, to be waited for: a process that has no
// handler of its own yet would die of them, where it should stop as a drain does (exit 0).
class StopSignals {
 public:
  StopSignals() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGTERM);
    sigaddset(&set_, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set_, &before_);
  }
  ~StopSignals() { release(); }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // Whether one came, or comes within `wait`.
  bool within(std::chrono::seconds wait) {
    const timespec ts{static_cast<time_t>(wait.count()), 0};
    return sigtimedwait(&set_, nullptr, &ts) > 0;
  }
  // No longer held back (before the gateway's threads start: they would inherit the mask).
  void release() {
    if (released_) return;
    released_ = true;
    pthread_sigmask(SIG_SETMASK, &before_, nullptr);
  }

 private:
  sigset_t set_{};
  sigset_t before_{};
  bool released_ = false;
};

// The parts every mode shares: the limit store, the gateway and the admin API on its listener.
struct Running {
  std::unique_ptr<Store> limits;  // what the admin API reads and resets limits in
  std::string limit_store;        // its kind, for /stats
  std::unique_ptr<gateway::Gateway> gateway;
  std::unique_ptr<gateway::AdminApi> api;
  std::mutex install_mu;
  bool stopping = false;  // guarded by install_mu

  // Installs a configuration from the watcher's or the follower's thread, unless shutting down.
  void install(const config::StoredConfig& c) {
    std::lock_guard lock(install_mu);
    if (stopping) return;
    (void)gateway->reload(c.config);
    log_line("configuration revision " + std::to_string(c.revision) + " installed");
  }

  // Counts a configuration the watcher refused as a failed reload, unless shutting down.
  void refused() {
    std::lock_guard lock(install_mu);
    if (!stopping) gateway->metrics().count_reload(false);
  }

  // After the gateway stopped: no more installs, then the gateway goes (joining its threads, which
  // may be in the admin API).
  void shut_down() {
    {
      std::lock_guard lock(install_mu);
      stopping = true;
    }
    gateway.reset();
  }
};

// Whether the admin API may listen where it would (off loopback only with a token to guard it), as
// a start and --check both find; false, having said why on stderr.
bool admin_listen_ok(const ServeSettings& s, const config::Config& cfg, bool tokens_exist) {
  const std::string admin = s.admin_listen.empty() ? cfg.admin_listen : s.admin_listen;
  Status ok = gateway::check_admin_listen(admin, tokens_exist);
  if (ok) return true;
  if (!config::parse_target(admin) || !s.primary.empty()) {
    std::fprintf(stderr, "sluice serve: %s\n", ok.error().message.c_str());
  } else {
    std::fprintf(stderr,
                 "sluice serve: refusing to serve the admin API on %s, off loopback, while no admin token exists (of "
                 "either role): create one first (sluice token create --role admin --db %s), or listen on "
                 "127.0.0.1\n",
                 admin.c_str(), s.db.c_str());
  }
  return false;
}

// Checks what does not depend on the source, then starts the gateway. False (having said why) on
// failure.
bool start(const ServeSettings& s, const std::shared_ptr<const config::Config>& cfg,
           const std::shared_ptr<gateway::AdminAuth>& auth, std::optional<config::SecretKey> secret_key,
           Running& out) {
  gateway::GatewayOptions options;
  if (!limit_store(s, *cfg, s.primary.empty() ? s.db : s.primary, options)) return false;
  if (!admin_listen_ok(s, *cfg, !auth->empty()) || !access_log_ok(s, *cfg)) return false;
  if (options.make_limiter) {
    // The admin API peeks and resets in Redis from its own thread: a store of its own, with one.
    auto admin_store = redis::RedisStore::open(redis_options(s, *cfg));
    if (!admin_store.ok()) {
      std::fprintf(stderr, "sluice serve: %s\n", admin_store.error().message.c_str());
      return false;
    }
    out.limits = std::move(*admin_store);
    out.limit_store = (s.store.empty() ? cfg->store : s.store).starts_with("redis-cluster://") ? "redis-cluster" : "redis";
  } else {
    auto local = std::make_unique<LocalStore>();
    options.limiter = std::make_shared<gateway::StoreLimiter>(*local);
    out.limits = std::move(local);
    out.limit_store = "local";
  }
  options.listen = s.listen;
  options.admin_listen = s.admin_listen;
  options.threads = s.threads;
  options.pin_workers = s.pin_workers;
  options.handle_signals = true;
  options.access_log = s.access_log;
  options.store = s.store;
  options.fleet_size = s.fleet_size;
  options.secret_key = std::move(secret_key);
  options.admin_guard = [auth](const gateway::AdminRequest& r) {
    return r.from_loopback || auth->authenticate(r.single("Authorization")).has_value();
  };
  auto started = gateway::Gateway::start(std::move(options), cfg);
  if (!started.ok()) {
    std::fprintf(stderr, "sluice serve: %s\n", started.error().message.c_str());
    return false;
  }
  out.gateway = std::move(*started);
  return true;
}

void serve_admin_api(Running& r, gateway::AdminApiOptions options) {
  gateway::Gateway* gw = r.gateway.get();
  options.snapshot = [gw] { return gw->snapshot(); };
  options.stats = &gw->stats();
  options.metrics = &gw->metrics();
  options.limits = r.limits.get();
  options.limit_store = r.limit_store;
  options.store_breakers = [gw] { return gw->store_breakers(); };
  r.api = std::make_unique<gateway::AdminApi>(std::move(options));
  gateway::AdminApi* api = r.api.get();
  gw->add_admin_route(
      "*", "/admin/v1/", [api](const gateway::AdminRequest& req) { return api->handle(req); },
      [api](const gateway::AdminRequest& head) { return api->screen(head); });
  gw->add_admin_route("GET", "/", gateway::serve_console);  // the web console, on the admin API
}

// --check and --print-config: the exit code when one of them was asked for. tokens_exist: whether
// an admin token would guard the admin API.
std::optional<int> check_or_print(const ServeSettings& s, const config::StoredConfig& c, const std::string& source,
                                  bool tokens_exist) {
  if (s.print_config) {
    // As it would be served: not with a password that is not one, which a start refuses.
    if (!store_password_given(s, *c.config, source)) return 1;
    std::fputs(config::to_yaml(with_flags(s, *c.config)).c_str(), stdout);
    return 0;
  }
  if (s.check) {
    // What a start would refuse, a check refuses: a secret key that is not one too.
    gateway::GatewayOptions unused;
    std::optional<config::SecretKey> key;
    if (!listen_flags_ok(s) || !access_log_ok(s, *c.config) || !admin_listen_ok(s, *c.config, tokens_exist) ||
        !limit_store(s, *c.config, source, unused) || !secret_key_from_environment(key)) {
      return 1;
    }
    std::printf("%s: ok (revision %lld)\n", source.c_str(), static_cast<long long>(c.revision));
    return 0;
  }
  return std::nullopt;
}

// What /admin/v1/stats says of the configuration's source: its kind, where it is (field: where) and
// how it is doing.
std::function<void(boost::json::object&)> describe_source(std::string kind, std::string field, std::string where,
                                                          std::function<gateway::SourceHealth()> health) {
  return [kind = std::move(kind), field = std::move(field), where = std::move(where),
          health = std::move(health)](boost::json::object& o) {
    const gateway::SourceHealth h = health();
    o["source"] = kind;
    o[field] = where;
    o["revision"] = h.revision;
    o["ok"] = h.ok;
    o["last_contact"] = h.last_contact > 0 ? boost::json::value(config::format_time(h.last_contact)) : nullptr;
    o["error"] = h.error;
  };
}

}  // namespace

config::Config with_flags(const ServeSettings& s, config::Config c) {
  if (!s.listen.empty()) c.listen = s.listen;
  if (!s.admin_listen.empty()) c.admin_listen = s.admin_listen;
  if (!s.store.empty()) c.store = s.store;
  if (s.fleet_size > 0) c.fleet_size = s.fleet_size;
  if (!s.access_log.empty()) c.access_log = s.access_log;
  return c;
}

redis::RedisStoreOptions redis_options(const ServeSettings& s, const config::Config& cfg) {
  return {.address = s.store.empty() ? cfg.store : s.store,
          .command_timeout = std::chrono::ceil<std::chrono::milliseconds>(cfg.store_timeout),
          .fleet_size = s.fleet_size > 0 ? s.fleet_size : cfg.fleet_size};
}

bool store_password_given(const ServeSettings& s, const config::Config& cfg, const std::string& source) {
  if (s.store.empty() && config::has_redacted_password(cfg.store)) {
    if (!s.primary.empty()) {
      // A follower whose token has the read role is not given the store's password.
      std::fprintf(stderr,
                   "sluice serve: %s gives the limit store's password to admin tokens only: follow it with an "
                   "admin token, or name the store here with --store\n",
                   source.c_str());
    } else {
      // A file, or a database written before the placeholder was refused: it is no password.
      std::fprintf(stderr,
                   "sluice serve: %s: store: the password %s is the placeholder shown in place of the real one "
                   "(to read tokens, in /config and the console), not a password: set the real one (sluice config "
                   "import, or PUT /admin/v1/config with an admin token), or name the store with --store\n",
                   source.c_str(), std::string(config::kRedactedPassword).c_str());
    }
    return false;
  }
  return true;
}

bool limit_store(const ServeSettings& s, const config::Config& cfg, const std::string& source,
                 gateway::GatewayOptions& options) {
  if ((s.store.empty() ? cfg.store : s.store) == "local") return true;
  if (!store_password_given(s, cfg, source)) return false;
  auto made = gateway::redis_limiters(redis_options(s, cfg));
  if (!made.ok()) {
    std::fprintf(stderr,
                 "sluice serve: %s: %s (expected local, redis://[:password@]host:port[/db] or "
                 "redis-cluster://host:port,host:port,...)\n",
                 s.store.empty() ? (source + ": store").c_str() : "--store", made.error().message.c_str());
    return false;
  }
  options.make_limiter = std::move(*made);
  return true;
}

std::string limits_where(const ServeSettings& s, const config::Config& cfg) {
  const std::string& store = s.store.empty() ? cfg.store : s.store;
  return store == "local" ? "this process" : gateway::describe_store(store);
}

bool secret_key_from_environment(std::optional<config::SecretKey>& out) {
  auto key = config::SecretKey::from_environment();
  if (!key.ok()) {
    std::fprintf(stderr, "sluice: %s\n", key.error().message.c_str());
    return false;
  }
  out = *key;
  return true;
}

bool listen_flags_ok(const ServeSettings& s) {
  const auto bad = [](const char* flag, const std::string& value) {
    std::fprintf(stderr, "sluice serve: %s must be host:port with an IP address or localhost, got \"%s\"\n", flag,
                 value.c_str());
    return false;
  };
  if (!s.listen.empty() && !config::parse_listen_address(s.listen)) return bad("--listen", s.listen);
  if (!s.admin_listen.empty() && s.admin_listen != "off" && !config::parse_listen_address(s.admin_listen)) {
    return bad("--admin-listen", s.admin_listen);
  }
  return true;
}

namespace {

// Refused rather than written to /dev/null, which stands in for it: whoever closed stdout did not
// mean the access log to go nowhere without a word (it went into a socket before).
bool logs_to_closed_stdout(const std::string& where) {
  if ((where != "stdout" && where != "/dev/stdout") || !stdout_was_closed()) return false;
  std::fprintf(stderr,
               "sluice serve: the access log goes to stdout, which was closed when sluice started: start it "
               "with stdout open (>/dev/null to drop the log), or give --access-log FILE or off\n");
  return true;
}

}  // namespace

bool access_log_ok_before_database(const ServeSettings& s) {
  if (!s.access_log.empty()) return !logs_to_closed_stdout(s.access_log);
  struct stat st {};
  if (::stat(s.db.c_str(), &st) == 0) return true;  // its configuration decides, once read
  return !logs_to_closed_stdout(config::Config{}.access_log);
}

bool access_log_ok(const ServeSettings& s, const config::Config& cfg) {
  const std::string& where = s.access_log.empty() ? cfg.access_log : s.access_log;
  if (logs_to_closed_stdout(where)) return false;
  const Status ok = gateway::AccessLog::check(where);
  if (!ok) std::fprintf(stderr, "sluice serve: %s\n", ok.error().message.c_str());
  return ok.ok();
}

void say_serving(const gateway::Gateway& gw, int threads, const std::string& limits, const std::string& source) {
  const std::string admin =
      gw.admin_port() == 0 ? "admin listener off" : "admin on port " + std::to_string(gw.admin_port());
  const std::string from = source.empty() ? "" : "; " + source;
  log_line("serving on port " + std::to_string(gw.port()) + " (" + admin + "), " + std::to_string(threads) +
           (threads == 1 ? " thread" : " threads") + ", limits in " + limits + from);
}

std::string cli_actor() {
  // $USER, else $LOGNAME (what login and cron set), else the name of the uid (a service or a
  // container may set neither).
  for (const char* variable : {"USER", "LOGNAME"}) {
    const char* user = std::getenv(variable);
    if (user != nullptr && *user != '\0') return std::string("cli:") + user;
  }
  std::vector<char> buffer(16384);
  passwd entry{};
  passwd* found = nullptr;
  if (::getpwuid_r(::getuid(), &entry, buffer.data(), buffer.size(), &found) == 0 && found != nullptr &&
      found->pw_name != nullptr && *found->pw_name != '\0') {
    return std::string("cli:") + found->pw_name;
  }
  return "cli:uid " + std::to_string(::getuid());
}

std::unique_ptr<config::ConfigStore> open_store_or_exit(const std::string& db, std::string_view command,
                                                        config::StoreOptions::Access access) {
  auto store = config::ConfigStore::open({.path = db, .access = access});
  if (!store.ok()) {
    std::fprintf(stderr, "sluice %.*s: %s\n", static_cast<int>(command.size()), command.data(),
                 store.error().message.c_str());
    throw CLI::RuntimeError(1);
  }
  return std::move(*store);
}

int serve_database(const ServeSettings& s,
                   const std::function<void(std::uint16_t port, std::uint16_t admin_port)>& on_serving) {
  // Only serving makes the database when it is missing: a check of a mistyped path must not pass.
  // A check or a print writes nothing to it.
  const bool looks = s.check || s.print_config;
  if (!looks && !access_log_ok_before_database(s)) return 1;
  auto opened = config::ConfigStore::open(
      {.path = s.db, .access = looks ? config::StoreOptions::Access::kReadOnly : config::StoreOptions::Access::kCreate});
  if (!opened.ok()) {
    std::fprintf(stderr, "sluice serve: %s\n", opened.error().message.c_str());
    return 1;
  }
  config::ConfigStore& store = **opened;
  auto loaded = store.load();
  if (!loaded.ok()) {
    std::fprintf(stderr, "sluice serve: %s\nnot started\n", loaded.error().message.c_str());
    return 1;
  }
  const auto stored_tokens = store.tokens();
  if (auto done = check_or_print(s, *loaded, s.db, stored_tokens.ok() && !stored_tokens->empty())) return *done;
  std::optional<config::SecretKey> secret_key;
  if (!secret_key_from_environment(secret_key)) return 1;
  auto auth = std::make_shared<gateway::AdminAuth>();
  auto refresh_tokens = [&store, auth] {
    if (auto tokens = store.tokens(); tokens.ok()) auth->set_tokens(std::move(*tokens));
  };
  refresh_tokens();
  auth->set_reload([&store]() -> std::optional<std::vector<config::TokenInfo>> {
    auto tokens = store.tokens();
    if (!tokens.ok()) return std::nullopt;
    return std::move(*tokens);
  });
  Running r;
  if (!start(s, loaded->config, auth, secret_key, r)) return 1;
  gateway::Gateway& gw = *r.gateway;

  // A change committed by any process (this one's admin API, `sluice config import`, another
  // gateway, a hand edit) is served within interval plus the time to load it.
  gateway::DatabaseWatcher watcher({.store = &store,
                                    .install = [&r](const config::StoredConfig& c) { r.install(c); },
                                    .changed = refresh_tokens,
                                    .refused = [&r] { r.refused(); },
                                    .log = log_line},
                                   loaded->revision);
  serve_admin_api(r, {.store = &store,
                      .watched = [&watcher] { return watcher.last(); },
                      .auth = auth,
                      .secret_key = secret_key ? &*secret_key : nullptr,
                      .tokens_changed = refresh_tokens,
                      .describe_source = describe_source("database", "path", s.db, [&watcher] { return watcher.health(); })});
  if (on_serving) on_serving(gw.port(), gw.admin_port());
  say_serving(gw, s.threads, limits_where(s, *loaded->config),
              "configuration from " + s.db + " (revision " + std::to_string(loaded->revision) + ")");
  if (auth->empty() && gw.admin_port() != 0) {
    log_line("no admin token yet: the admin API answers 401 until you create one with sluice token create --role "
             "admin --db " + s.db);
  }
  gw.wait();
  r.shut_down();
  log_line("stopped");
  return 0;
}

int serve_follower(const ServeSettings& s) {
  if (s.token.empty()) {
    std::fprintf(stderr, "sluice serve: --config-from needs --token or --token-file (an admin token of the primary; read suffices)\n");
    return 2;
  }
  // The admin API's routes go after it: a path would only end in 404s once running.
  if (const auto url = gateway::parse_http_url(s.primary); !url || !url->path.empty()) {
    std::fprintf(stderr, "sluice serve: --config-from must be the primary's admin listener, http://host:port (no path), got \"%s\"\n",
                 s.primary.c_str());
    return 2;
  }
  std::string primary = s.primary;
  while (!primary.empty() && primary.back() == '/') primary.pop_back();
  gateway::Follower::Options follow{.primary = primary, .token = s.token, .log = log_line};
  gateway::HttpFetcher fetcher;
  // The first configuration: a follower needs its primary once to start.
  Result<config::StoredConfig> first = Error{};
  // A refused token or a bad answer does not mend by waiting, but a token made a moment ago is
  // refused until the primary has read it (within a second): those stop after a few tries. --check
  // does not wait for a primary that is away.
  constexpr int kRefusedTries = 5;
  // SIGTERM or SIGINT while it waits (the gateway's own handling comes later) stops it as a drain
  // would: exit 0, said.
  StopSignals stop;
  for (int tries = 1, refused = 0;; ++tries) {
    const bool said = tries > 1;
    first = gateway::Follower::fetch(follow, fetcher);
    if (first.ok()) break;
    const bool give_up = first.error().code == ErrorCode::kInvalidArgument ? ++refused == kRefusedTries : s.check;
    if (give_up) {
      std::fprintf(stderr, "sluice serve: %s: %s\n", primary.c_str(), first.error().message.c_str());
      return 1;
    }
    if (!said || first.error().code != ErrorCode::kStoreUnavailable) {
      log_line("waiting for the primary: " + first.error().message);
    }
    if (stop.within(std::chrono::seconds(1))) {  // the retry interval while the primary is away
      log_line("stopped");
      return 0;
    }
  }
  auto who = gateway::Follower::whoami(follow, fetcher);
  if (!who.ok()) {
    std::fprintf(stderr, "sluice serve: %s\n", who.error().message.c_str());
    return 1;
  }
  if (stop.within(std::chrono::seconds(0))) {
    log_line("stopped");
    return 0;
  }
  if (auto done = check_or_print(s, *first, primary, true)) return *done;  // it has its token
  std::optional<config::SecretKey> secret_key;
  if (!secret_key_from_environment(secret_key)) return 1;
  // Here the admin API knows one token: the one this instance follows with, as the primary knows it
  // (its id, name and role there).
  auto auth = std::make_shared<gateway::AdminAuth>();
  const config::TokenInfo token{who->id, who->name, who->role, 0, "", config::sha256_hex(s.token), who->expires};
  auth->set_tokens({token});
  // Revoked on the primary, it stops working here too.
  follow.token_accepted = [auth, token](bool accepted) {
    auth->set_tokens(accepted ? std::vector<config::TokenInfo>{token} : std::vector<config::TokenInfo>{});
  };
  Running r;
  stop.release();  // the gateway handles them from here (its threads would inherit the mask)
  if (!start(s, first->config, auth, secret_key, r)) return 1;
  gateway::Gateway& gw = *r.gateway;
  follow.install = [&r](const config::StoredConfig& c) { r.install(c); };
  gateway::Follower follower(follow, first->revision);
  serve_admin_api(r, {.pulled = [&gw, &follower] { return config::StoredConfig{gw.snapshot()->config_ptr(),
                                                                                follower.revision()}; },
                      .primary = primary,
                      .auth = auth,
                      .secret_key = secret_key ? &*secret_key : nullptr,
                      .describe_source =
                          describe_source("primary", "primary", primary, [&follower] { return follower.health(); })});
  say_serving(gw, s.threads, limits_where(s, *first->config),
              "following " + primary + " (revision " + std::to_string(first->revision) + ")");
  gw.wait();
  r.shut_down();
  log_line("stopped");
  return 0;
}

}  // namespace sluice::cli
