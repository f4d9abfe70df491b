// Gateway: `sluice serve` — the data-plane listener (caller authentication, policy, proxy,
// /_sluice/v1/decide, healthz), the admin listener (/metrics, /config and routes later layers add,
// which run on a thread of their own), reload and drain.
// Thread-safe: every public member may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config.h"
#include "config/crypto.h"
#include "gateway/limiter.h"
#include "gateway/metrics.h"
#include "gateway/snapshot.h"
#include "gateway/stats.h"
#include "sluice/clock.h"
#include "sluice/result.h"

namespace sluice::gateway {

// A request to the admin listener, and the answer to it (for routes other layers add).
struct AdminRequest {
  std::string method;
  std::string target;  // path and query
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers{};
  // The peer's address is 127.0.0.0/8 or ::1, and the request asks for itself: it names the listener
  // by an address or localhost, and carries no Forwarded, X-Forwarded-For or X-Real-IP.
  bool from_loopback = false;

  // A header field's value by name (case-insensitive); empty when absent.
  std::string_view header(std::string_view name) const;
  // The field's value when it is given once; empty when absent or given more than once (an
  // Authorization field given twice would mean one token here and perhaps another to a proxy).
  std::string_view single(std::string_view name) const;
  // A list field's values, each field line of that name in turn joined by ", " (RFC 9110 5.3: the
  // same as one line); empty when absent.
  std::string list(std::string_view name) const;
  // Whether the request has a field of that name, even an empty one.
  bool has(std::string_view name) const;
};
struct AdminResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers{};
  // A long poll: when positive, nothing has changed yet. The listener asks the handler again (every
  // 50 ms, without blocking anything) until it answers with hold zero or this long has passed since
  // the first answer, then sends the last answer.
  Nanos hold{0};
};
using AdminHandler = std::function<AdminResponse(const AdminRequest&)>;
// What a route answers from a request's head alone (its body empty), when that answer needs no
// body: a refusal (401 without a token); nullopt when it needs the body. Asked for a request that
// waits for "100 Continue" (Expect: 100-continue) before it sends its body: a refusal is sent
// instead of the 100, and the body is not read.
using AdminScreen = std::function<std::optional<AdminResponse>(const AdminRequest&)>;

// "<time> sluice: <message>" on stderr: the time it was said, UTC to the millisecond (a log kept in
// a file says when the store went down and came back).
void log_to_stderr(std::string_view message);

struct GatewayOptions {
  // Override the configuration's addresses when not empty; "host:0" picks a free port.
  std::string listen;
  std::string admin_listen;
  int threads = 1;  // worker threads, each with its own event loop and upstream connection pools
  // Runs worker i on one CPU, the i-th (in turn) of those the process may use, as nginx's
  // worker_cpu_affinity auto does; the threads are named sluice-w0, sluice-w1, ... either way. Left
  // free, the kernel can put two busy workers on one CPU while the other serves the client and the
  // upstream: one worker then waits for the other to use up its time slice, a scheduling tick (4 ms
  // at HZ=250) for every request it holds. For a host that runs the gateway alone: a pinned worker
  // cannot move away from a CPU that other work keeps busy.
  bool pin_workers = false;
  // The file the configuration came from: reloaded when it changes (checked every watch_interval)
  // and on SIGHUP. Empty: reload() only.
  std::string config_path;
  Nanos watch_interval = std::chrono::seconds(1);
  // SIGHUP reloads; SIGTERM and SIGINT drain, after the configuration's drain_delay (during which
  // healthz says draining; a second one ends it).
  bool handle_signals = false;
  // The clock of the limits and the breakers (tests pass a ManualClock); nullptr: the real ones.
  const Clock* clock = nullptr;
  // Where limits are decided: make_limiter, when set, is called for each worker thread with that
  // worker's executor, and the worker uses the limiter it returns (a store that does I/O runs it on
  // the worker's own event loop); otherwise every worker uses `limiter`; nullptr: an in-process
  // LocalStore. Either way each limiter is connected before the first request is accepted.
  LimiterFactory make_limiter;
  std::shared_ptr<Limiter> limiter;
  std::string access_log;  // overrides the configuration's access_log when not empty
  // The limit store's address and fleet size that make_limiter was made with, when a flag gave
  // them rather than the configuration (empty, 0: the configuration's). /config shows them.
  std::string store;
  int fleet_size = 0;
  // Where operational messages go (startup, reloads, breaker changes, drain); nullptr: stderr
  // (log_to_stderr).
  std::function<void(std::string_view)> log;
  // Opens the signing secrets of systems whose auth is hmac (SLUICE_SECRET_KEY).
  std::optional<config::SecretKey> secret_key;
  // How many signed requests' nonces the gateway remembers at once (see NonceCache).
  std::size_t nonce_capacity = NonceCache::kDefaultCapacity;
  // Whether a request from off loopback may read /metrics, /healthz and /config (e.g. it carries a
  // valid admin token). nullptr: any may.
  std::function<bool(const AdminRequest&)> admin_guard;
};

class Gateway {
 public:
  // Binds both listeners and starts serving; an error says which address could not be bound.
  static Result<std::unique_ptr<Gateway>> start(GatewayOptions options,
                                                std::shared_ptr<const config::Config> config);
  ~Gateway();  // stops at once if still running
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  std::uint16_t port() const;
  std::uint16_t admin_port() const;

  // Swaps in a new configuration; requests in flight finish on the one they started with. Counters
  // of limits that did not change, and breakers whose settings did not, carry over.
  Status reload(std::shared_ptr<const config::Config> config);
  // Reloads from options.config_path; on problems logs them and keeps the current configuration.
  Status reload_from_file();

  // Stops accepting, closes idle connections, lets requests in flight finish (up to the
  // configuration's drain_timeout), then stops. Returns at once. It begins at once: drain_delay is
  // the stop signal's (handle_signals); called during that delay, it ends it.
  void drain();
  // Stops at once.
  void stop();
  // Blocks until the gateway has stopped.
  void wait();

  // Adds a route to the admin listener: requests whose path starts with prefix and whose method
  // matches ("*": any) go to handler, on the admin listener's own thread (a slow handler delays
  // other admin requests, never proxied ones). Where several match, the longest prefix wins.
  // screen, when set, is asked first for a request that expects "100 Continue" (see AdminScreen);
  // without it such a request gets its 100 at once.
  void add_admin_route(std::string method, std::string prefix, AdminHandler handler, AdminScreen screen = {});

  std::shared_ptr<const Snapshot> snapshot() const;
  Metrics& metrics();
  Stats& stats();
  // The state of the breaker around a shared limit store, one per worker's store (empty for the
  // in-process store).
  std::vector<BreakerState> store_breakers() const;

  struct Impl;

 private:
  explicit Gateway(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::gateway
