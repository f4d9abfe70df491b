// `sluice serve` with its configuration in a database (--db, the default) or pulled from a primary
// (--config-from): the gateway, the admin API, and the watcher or follower that keeps the
// configuration current. Not thread-safe (each runs once, from main).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "config/config.h"
#include "config/crypto.h"
#include "sluice/redis/redis_store.h"

namespace sluice::gateway {
class Gateway;
struct GatewayOptions;
}
#include "config/store.h"

namespace sluice::cli {

struct ServeSettings {
  std::string listen;
  std::string admin_listen;
  int threads = 1;
  bool pin_workers = false;  // --pin-workers
  std::string store;       // --store: where limits are counted
  std::string access_log;
  bool check = false;
  bool print_config = false;
  std::string db;          // --db
  std::string primary;     // --config-from
  std::string token;       // --token
  int fleet_size = 0;      // --fleet-size; 0: the configuration's
};

// The configuration as it would be served: the flags that override settings, over it.
config::Config with_flags(const ServeSettings& s, config::Config c);

// Serves the configuration kept in settings.db until a signal stops it. `on_serving`, when given,
// is told the ports listened on once the gateway serves (port 0 in --listen picks one).
int serve_database(const ServeSettings& settings,
                   const std::function<void(std::uint16_t port, std::uint16_t admin_port)>& on_serving = {});
int serve_follower(const ServeSettings& settings);

// Whether --listen and --admin-listen, when given, are addresses to listen on ("off" for the
// admin listener), as --check must find before a start does; false, having said why on stderr.
bool listen_flags_ok(const ServeSettings& settings);

// Whether the access log (--access-log, else the configuration's) can be opened (stdout: was open
// when the process started), as --check must find before a start does; false, having said why on
// stderr.
bool access_log_ok(const ServeSettings& settings, const config::Config& cfg);

// access_log_ok's refusal of a closed stdout, found before the database is made or written: with no
// --access-log, a database that does not exist yet would hold the default configuration, whose
// access log goes to stdout; one that exists is judged once its configuration is read.
bool access_log_ok_before_database(const ServeSettings& settings);

// "<time> sluice: serving on port P (admin on port A), ..." on stderr, with `source` (where the
// configuration comes from) after it when not empty.
void say_serving(const gateway::Gateway& gw, int threads, const std::string& limits, const std::string& source = "");

// Where limits are counted: --store, or else the configuration's store, with its store_timeout and
// fleet_size (or --fleet-size). A Redis address sets options.make_limiter (a RedisStore per worker);
// local leaves options alone. False, having said why on stderr (naming `source`, where the
// configuration came from, or --store), when the address is not one.
bool limit_store(const ServeSettings& settings, const config::Config& cfg, const std::string& source,
                 gateway::GatewayOptions& options);

// Whether the limit store's password is given (--store, or a configuration whose store's password
// is not the placeholder a read token is shown); false, having said why on stderr.
bool store_password_given(const ServeSettings& settings, const config::Config& cfg, const std::string& source);

// The Redis store's options for a Redis address in --store or the configuration's store.
redis::RedisStoreOptions redis_options(const ServeSettings& settings, const config::Config& cfg);

// Where limits are counted, for the startup line: "this process" or the Redis address without its
// password.
std::string limits_where(const ServeSettings& settings, const config::Config& cfg);

// SLUICE_SECRET_KEY into out (left empty when unset); false, having said why on stderr, when it is set
// to something that is not a key.
bool secret_key_from_environment(std::optional<config::SecretKey>& out);

// Who is at the keyboard, for the audit log: "cli:" and the user's name ($USER, $LOGNAME, or the
// uid's name).
std::string cli_actor();

// For the config and token commands: the database at db, opened as access says (created when missing
// only with kCreate; written to not at all with kReadOnly). On failure says why on stderr ("sluice
// <command>: ...") and exits 1 (throws CLI::RuntimeError).
std::unique_ptr<config::ConfigStore> open_store_or_exit(const std::string& db, std::string_view command,
                                                        config::StoreOptions::Access access);

}  // namespace sluice::cli
