#include "cli/serve_command.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "cli/not_empty.h"
#include "cli/serve_control.h"
#include "cli/token_file.h"
#include "config/store.h"
#include "config/yaml.h"
#include "gateway/admin_api.h"
#include "gateway/demo.h"
#include "gateway/gateway.h"

namespace sluice::cli {
namespace {

struct ServeOptions {
  std::string config_path;
  bool demo = false;
  std::string listen;
  std::string admin_listen;
  int threads = 1;
  bool pin_workers = false;
  std::string store;
  int fleet_size = 0;  // 0: the file's
  std::string access_log;
  bool check = false;
  bool print_config = false;
  std::string db;
  std::string config_from;
  std::string token;
  std::string token_file;
};

// The host of a listen address as a URL a client on this host can use: a wildcard as loopback, an
// IPv6 address in brackets.
std::string url_host(const std::string& address) {
  const auto target = config::parse_listen_address(address);
  if (!target || target->host == "0.0.0.0") return "127.0.0.1";
  if (target->host == "::") return "[::1]";
  return target->host.find(':') != std::string::npos ? "[" + target->host + "]" : target->host;
}

void print_demo_help(const std::string& host, std::uint16_t port, const std::string& admin_host,
                     std::uint16_t admin_port, const std::string& token) {
  const std::string base = "http://" + host + ":" + std::to_string(port);
  const std::string admin = "http://" + admin_host + ":" + std::to_string(admin_port);
  std::printf(
      "sluice serve --demo: the demo configuration in front of a built-in echo upstream.\n"
      "  systems: crm (orders and users; 50 requests per 15 s), erp (disabled)\n"
      "  interfaces: orders GET/POST /api/orders/* (10 at once, then 1 a second), users GET /api/users/{id},\n"
      "              login POST /api/login (public)\n"
      "Try:\n"
      "  curl -i -H 'X-System-Key: crm' %s/api/orders/7\n"
      "  curl -i -H 'X-System-Key: crm' %s/api/users/42\n"
      "  curl -i -X POST %s/api/login                    # public: no key needed, 5 per minute per address\n"
      "  curl -i -H 'X-System-Key: erp' %s/api/orders/7  # 403 system_disabled\n"
      "  curl -i %s/api/orders/7                         # 401 system_key_missing\n"
      "  for i in $(seq 12); do curl -s -o /dev/null -w '%%{http_code} ' -H 'X-System-Key: crm' %s/api/orders/1; done; echo"
      "  # 429 past 10\n"
      "  curl -s -X POST %s/_sluice/v1/decide -d '{\"system\":\"crm\",\"method\":\"GET\",\"path\":\"/api/users/1\"}'\n",
      base.c_str(), base.c_str(), base.c_str(), base.c_str(), base.c_str(), base.c_str(), base.c_str());
  if (admin_port != 0) {  // else --admin-listen off
    std::printf(
        "  curl -s %s/metrics | grep sluice_requests_total\n"
        "  curl -s %s/config                # the configuration as YAML\n"
        "The web console: %s/ — sign in with the admin token %s (made for this run)\n",
        admin.c_str(), admin.c_str(), admin.c_str(), token.c_str());
  }
  std::fflush(stdout);
}

// The demo's configuration in the database: written there on the first run; on later runs (which
// keep what was edited meanwhile) only the demo upstream moves to this run's echo server. *own is set
// when the database holds a configuration with no demo upstream: one of its own, served as it is.
Status seed_demo(config::ConfigStore& store, std::uint16_t upstream_port, bool* own) {
  const auto demo = gateway::demo_config(upstream_port);
  auto stored = store.load();
  if (!stored.ok()) return stored.error();
  config::Config current = *stored->config;
  config::WriteResult written;
  if (current.systems.empty() && current.interfaces.empty() && current.upstreams.empty()) {
    written = store.replace("demo", "config.import", *demo);
  } else {
    bool moved = false;
    *own = true;
    for (config::Upstream& u : current.upstreams) {
      if (u.name != demo->upstreams.front().name) continue;
      *own = false;
      if (u.targets != demo->upstreams.front().targets) {
        u.targets = demo->upstreams.front().targets;
        moved = true;
      }
    }
    if (moved) written = store.replace("demo", "config.import", current);
  }
  if (!written.ok()) return Error{ErrorCode::kInvalidArgument, written.refusal->message};
  return {};
}

// Whether this run could listen where it will: a second `make run` beside a first must fail before
// it moves the demo upstream to its own echo server or replaces the first's token. "off" and port 0
// always can.
Status can_listen(const std::string& address, const char* what) {
  const auto target = config::parse_listen_address(address);
  if (address == "off" || !target || target->port == 0) return {};
  boost::system::error_code ec;
  const auto ip = boost::asio::ip::make_address(target->host == "localhost" ? "127.0.0.1" : target->host, ec);
  if (ec) return {};
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor acceptor(io);
  const boost::asio::ip::tcp::endpoint endpoint(ip, target->port);
  if (!acceptor.open(endpoint.protocol(), ec) && !acceptor.set_option(boost::asio::socket_base::reuse_address(true), ec)) {
    (void)acceptor.bind(endpoint, ec);
  }
  if (ec) return invalid_argument("cannot listen on " + address + " (" + what + "): " + ec.message());
  return {};
}

// A fresh admin token for this run's console, in place of the previous run's.
Result<std::string> demo_token(config::ConfigStore& store) {
  auto tokens = store.tokens();
  if (!tokens.ok()) return tokens.error();
  for (const config::TokenInfo& t : *tokens) {
    if (t.name == "demo") (void)store.delete_token("demo", t.id);
  }
  auto made = store.create_token("demo", config::Role::kAdmin, "demo");
  if (!made.ok()) return made.error();
  return std::move(made->second);
}

// A demo run's hold on its database: <db>.demo-lock, locked (flock) while it runs and removed when
// it ends. A second demo on the same database would point the demo upstream at its own echo server
// and revoke the first's console token, and the first would answer 502 once the second stopped. (A
// file of its own: closing any descriptor of the database would drop SQLite's locks on it.)
class DemoLock {
 public:
  static Result<DemoLock> take(const std::string& db) {
    const std::string path = db + ".demo-lock";
    while (true) {
      const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
      if (fd < 0) return invalid_argument("cannot make " + path + ": " + std::strerror(errno));
      if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const int e = errno;
        ::close(fd);  // not ours: left where it is
        return invalid_argument(e == EWOULDBLOCK ? "another sluice serve --demo is serving this database (it holds " +
                                                       path + "): stop it, or give this one another --db"
                                                 : "cannot lock " + path + ": " + std::strerror(e));
      }
      // Locked the file a run that ended had just removed: another may lock the one in its place.
      struct stat held {}, named {};
      if (::fstat(fd, &held) == 0 && ::stat(path.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
          held.st_dev == named.st_dev) {
        DemoLock lock(path);
        lock.fd_ = fd;
        return lock;
      }
      ::close(fd);
    }
  }
  DemoLock(DemoLock&& other) noexcept : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)) {}
  DemoLock(const DemoLock&) = delete;
  DemoLock& operator=(const DemoLock&) = delete;
  DemoLock& operator=(DemoLock&&) = delete;
  ~DemoLock() {
    if (fd_ < 0) return;
    ::unlink(path_.c_str());  // while held: a run waiting for it finds it gone and makes its own
    ::close(fd_);
  }

 private:
  explicit DemoLock(std::string path) : path_(std::move(path)) {}
  std::string path_;
  int fd_ = -1;
};

// --demo: the demo configuration, kept in the database like any other, in front of a built-in echo
// upstream, with a token for the web console.
int serve_demo(const ServeSettings& settings) {
  if (!access_log_ok_before_database(settings)) return 1;
  auto lock = DemoLock::take(settings.db);
  if (!lock.ok()) {
    std::fprintf(stderr, "sluice serve --demo: %s: %s\n", settings.db.c_str(), lock.error().message.c_str());
    return 1;
  }
  auto upstream = gateway::DemoUpstream::start(0);
  bool own = false;  // the database holds a configuration of its own
  std::string token;
  std::string listen;
  std::string admin_listen;
  Status ready = upstream.ok() ? Status{} : Status(upstream.error());
  if (ready.ok()) {
    auto store = config::ConfigStore::open({.path = settings.db});
    if (!store.ok()) ready = store.error();
    if (ready.ok()) {
      auto stored = (*store)->load();
      const bool fresh = stored.ok() && stored->config->upstreams.empty() && stored->config->systems.empty();
      const std::shared_ptr<const config::Config> config =
          !stored.ok() || fresh ? gateway::demo_config(0) : stored->config;
      listen = settings.listen.empty() ? config->listen : settings.listen;
      admin_listen = settings.admin_listen.empty() ? config->admin_listen : settings.admin_listen;
      ready = can_listen(listen, "listen");
      if (ready.ok()) ready = can_listen(admin_listen, "admin_listen");
      if (ready.ok() && !access_log_ok(settings, *config)) return 1;  // said why; before the demo is seeded
    }
    if (ready.ok()) ready = seed_demo(**store, (*upstream)->port(), &own);
    if (ready.ok()) {
      auto made = demo_token(**store);
      if (made.ok()) token = std::move(*made);
      else ready = made.error();
    }
  }
  if (!ready.ok()) {
    std::fprintf(stderr, "sluice serve --demo: %s: %s\n", settings.db.c_str(), ready.error().message.c_str());
    return 1;
  }
  // Once serving, with the ports listened on (which --listen 127.0.0.1:0 leaves to the system).
  const int rc = serve_database(settings, [&](std::uint16_t port, std::uint16_t admin_port) {
    if (!own) return print_demo_help(url_host(listen), port, url_host(admin_listen), admin_port, token);
    std::printf("sluice serve --demo: %s holds a configuration of its own (no demo upstream): it is served as it "
                "is, and the demo's lines to try do not apply to it (give another --db for the demo).\n",
                settings.db.c_str());
    if (admin_port != 0) {
      std::printf("The web console: http://%s:%u/ — sign in with the admin token %s (made for this run)\n",
                  url_host(admin_listen).c_str(), static_cast<unsigned>(admin_port), token.c_str());
    }
    std::fflush(stdout);
  });
  // The token was printed for this run: it goes with it, so that it does not outlive the demo on a
  // database served for real later (one left by a run killed outright goes at the next --demo).
  if (auto store = config::ConfigStore::open({.path = settings.db}); store.ok()) {
    if (auto tokens = (*store)->tokens(); tokens.ok()) {
      for (const config::TokenInfo& t : *tokens) {
        if (t.name == "demo" && t.token_sha256 == config::sha256_hex(token)) (void)(*store)->delete_token("demo", t.id);
      }
    }
  }
  return rc;
}

int run(ServeOptions o) {
  if (!o.token_file.empty()) {
    auto token = read_token_file(o.token_file);
    if (!token.ok()) {
      std::fprintf(stderr, "sluice serve: --token-file: %s\n", token.error().message.c_str());
      return 2;
    }
    o.token = std::move(*token);
  }
  const int sources = int{!o.config_path.empty()} + int{o.demo || !o.db.empty()} + int{!o.config_from.empty()};
  if (sources > 1) {
    std::fprintf(stderr, "sluice serve: give one of --db FILE (with --demo or not), --config FILE or --config-from URL\n");
    return 2;
  }
  const ServeSettings settings{o.listen, o.admin_listen, o.threads, o.pin_workers, o.store, o.access_log, o.check,
                               o.print_config, o.db.empty() ? "./sluice.db" : o.db, o.config_from, o.token,
                               o.fleet_size};
  if (o.demo && !o.check && !o.print_config) return serve_demo(settings);
  if (o.config_path.empty() && !o.demo) {
    return o.config_from.empty() ? serve_database(settings) : serve_follower(settings);
  }
  std::shared_ptr<const config::Config> cfg;
  std::unique_ptr<gateway::DemoUpstream> upstream;
  if (o.demo) {
    auto started = gateway::DemoUpstream::start(0);
    if (!started.ok()) {
      std::fprintf(stderr, "sluice serve: %s\n", started.error().message.c_str());
      return 1;
    }
    upstream = std::move(*started);
    cfg = gateway::demo_config(upstream->port());
  } else {
    auto loaded = config::load_yaml_file(o.config_path);
    if (auto* problems = std::get_if<std::vector<config::Problem>>(&loaded)) {
      for (const auto& p : *problems) std::fprintf(stderr, "%s\n", p.to_string().c_str());
      std::fprintf(stderr, "sluice serve: %zu problem%s in %s; not started\n", problems->size(),
                   problems->size() == 1 ? "" : "s", o.config_path.c_str());
      return 1;
    }
    cfg = std::get<std::shared_ptr<const config::Config>>(std::move(loaded));
  }
  if (o.print_config) {
    std::fputs(config::to_yaml(with_flags(settings, *cfg)).c_str(), stdout);
    return 0;
  }
  gateway::GatewayOptions options;
  if (!limit_store(settings, *cfg, o.demo ? "the demo configuration" : o.config_path, options)) return 1;
  if (!listen_flags_ok(settings) || !access_log_ok(settings, *cfg)) return 1;
  // A file brings no admin tokens: the admin listener stays on loopback. (Here the demo is only
  // checked: served, it is from a database with a token made for it.)
  const std::string admin = o.admin_listen.empty() ? cfg->admin_listen : o.admin_listen;
  if (Status ok = gateway::check_admin_listen(admin, o.demo); !ok) {
    if (!config::parse_target(admin)) {
      std::fprintf(stderr, "sluice serve: %s\n", ok.error().message.c_str());
    } else {
      std::fprintf(stderr,
                   "sluice serve: refusing to serve the admin API on %s, off loopback: a configuration served "
                   "from a file has no admin tokens to guard it. Listen on 127.0.0.1, or import the file into a "
                   "database (sluice config import) and serve that (--db) with an admin token\n",
                   admin.c_str());
    }
    return 1;
  }
  if (!secret_key_from_environment(options.secret_key)) return 1;
  if (o.check) {  // what a start would refuse, a check has refused
    std::printf("%s: ok\n", o.demo ? "the demo configuration" : o.config_path.c_str());
    return 0;
  }
  options.listen = o.listen;
  options.admin_listen = o.admin_listen;
  options.threads = o.threads;
  options.pin_workers = o.pin_workers;
  options.config_path = o.config_path;
  options.handle_signals = true;
  options.access_log = o.access_log;
  options.store = o.store;
  options.fleet_size = o.fleet_size;
  auto started = gateway::Gateway::start(options, cfg);
  if (!started.ok()) {
    std::fprintf(stderr, "sluice serve: %s\n", started.error().message.c_str());
    return 1;
  }
  auto& gw = *started;
  say_serving(*gw, o.threads, limits_where(settings, *cfg));
  gw->wait();
  gateway::log_to_stderr("stopped");
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* serve = app.add_subcommand(
      "serve",
      "Run the gateway: identify the calling system, check its permissions and limits, then proxy "
      "to the upstream.\nThe configuration comes from a database (--db, the default ./sluice.db; "
      "changes are served within a second), a YAML file (--config; SIGHUP or a change to the file "
      "reloads it) or a primary (--config-from). SIGTERM drains and exits 0; with the configuration's "
      "drain_delay, /_sluice/healthz says draining for that long first while requests are still served (a "
      "second SIGTERM ends the delay).");
  serve->add_option("--db", o->db, "The configuration database (SQLite; default ./sluice.db), edited with "
                                   "the admin API or sluice config import")
      ->check(kNotEmpty);
  serve->add_option("-c,--config", o->config_path, "The YAML configuration (see docs/configuration.md)")
      ->check(kNotEmpty);
  CLI::Option* config_from = serve->add_option("--config-from", o->config_from,
                                               "Follow a primary: http://host:port of its admin listener (needs --token)")
                                 ->check(kNotEmpty);
  CLI::Option* token = serve->add_option("--token", o->token,
                                         "With --config-from: an admin token of the primary (read role suffices)")
                            ->check(kNotEmpty)
                            ->needs(config_from);
  serve->add_option("--token-file", o->token_file,
                    "With --config-from: a file whose first line is that token (kept out of the command line, "
                    "which other users of the host can read)")
      ->check(kNotEmpty)
      ->needs(config_from)
      ->excludes(token);
  serve->add_flag("--demo", o->demo,
                  "Run the built-in demo configuration, kept in the database (--db; written there on the first "
                  "run), in front of a built-in echo upstream, with an admin token for the web console");
  serve->add_option("--listen", o->listen,
                    "host:port for requests (default: the configuration's listen, 127.0.0.1:8080)")
      ->check(kNotEmpty);
  serve->add_option("--admin-listen", o->admin_listen,
                    "host:port for the admin API, /metrics and /config, or off (default: the configuration's "
                    "admin_listen, 127.0.0.1:9090)")
      ->check(kNotEmpty);
  serve->add_option("-t,--threads", o->threads, "Worker threads (default 1)")
      ->check(CLI::Validator(
          [](std::string& v) {
            const bool whole = !v.empty() && v.size() <= 3 && v.find_first_not_of("0123456789") == std::string::npos;
            return whole && std::stoi(v) >= 1 && std::stoi(v) <= 256
                       ? std::string()
                       : "must be a whole number from 1 to 256, got \"" + v + "\"";
          },
          "1-256"));
  serve->add_flag("--pin-workers", o->pin_workers,
                  "Run each worker thread on a CPU of its own (the i-th the process may use, in turn), as nginx's "
                  "worker_cpu_affinity auto: for a host that runs the gateway alone");
  serve->add_option("--store", o->store,
                    "Where limits are counted: local, redis://[:password@]host:port[/db] or "
                    "redis-cluster://host:port,host:port,... (default: the configuration's store)")
      ->check(kNotEmpty);
  serve->add_option("--fleet-size", o->fleet_size,
                    "Gateways sharing the Redis store: on_store_failure: local divides each limit by it "
                    "(default: the configuration's fleet_size, 1)")
      ->check(CLI::Range(1, config::Config::kMaxFleetSize));
  serve->add_option("--access-log", o->access_log,
                    "stdout, off or a file path (default: the configuration's access_log)")
      ->check(kNotEmpty);
  serve->add_flag("--check", o->check, "Validate the configuration and exit");
  serve->add_flag("--print-config", o->print_config, "Print the configuration as it would be served (the flags over it, defaults filled in) as YAML, and exit");
  serve->footer(
      "Examples:\n"
      "  sluice token create --role admin --db ./sluice.db    # first: a token for the admin API (printed once)\n"
      "  sluice serve --db ./sluice.db                        # then edit it: docs/admin-api.md\n"
      "  sluice serve --config-from http://primary:9090 --token T    # a follower of that instance\n"
      "  sluice serve --config sluice.yaml --check            # validate a file and exit\n"
      "  sluice serve --demo --db demo.db                     # a built-in demo, with curl lines to try and the console\n"
      "Environment: SLUICE_SECRET_KEY (32 bytes as 64 hex digits or base64, e.g. openssl rand -hex 32) seals\n"
      "and opens the signing secrets of systems whose auth is hmac.\n"
      "The admin listener refuses an address off loopback until an admin token exists.\n"
      "Docs: docs/gateway.md, docs/configuration.md, docs/admin-api.md");
  serve->callback([o] {
    if (const int rc = run(*o); rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace sluice::cli
