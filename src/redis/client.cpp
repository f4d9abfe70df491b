#include "redis/client.h"

#include <boost/asio/ip/address.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <sstream>
#include <set>
#include <vector>

namespace sluice::redis::detail {

namespace asio = boost::asio;

namespace {

ConnectionOptions connection_options(const ClientOptions& o, const Endpoint& endpoint) {
  ConnectionOptions c;
  c.endpoint = endpoint;
  c.user = o.address.user;
  c.password = o.address.password;
  c.escaped_credentials = o.address.escaped_credentials;
  c.db = o.address.db;
  c.connect_timeout = o.connect_timeout;
  c.command_timeout = o.command_timeout;
  c.reconnect_min = o.reconnect_min;
  c.reconnect_max = o.reconnect_max;
  c.on_connect = o.on_connect;
  c.on_attempt_failed = o.on_attempt_failed;
  return c;
}

// One node: every slot is there.
class SingleClient final : public Client {
 public:
  SingleClient(Strand strand, const ClientOptions& options)
      : connection_(std::make_shared<Connection>(
            std::move(strand), connection_options(options, options.address.nodes.front()))) {}

  void start() override { connection_->start(); }
  void stop() override { connection_->stop(); }
  void when_connected(UniqueFunction<void(Status)> f) override {
    connection_->when_attempted(std::move(f));
  }
  void send(int, std::string_view command, Callback callback, SteadyTime deadline) override {
    connection_->send(command, std::move(callback), deadline);
  }
  bool cluster() const override { return false; }
  Readiness readiness(int) const override {
    return {.level = connection_->ready() ? Readiness::kReady : Readiness::kNotConnected};
  }
  bool a_master_answering() const override { return true; }

 private:
  std::shared_ptr<Connection> connection_;
};

constexpr auto kRefreshInterval = std::chrono::milliseconds(100);
// Redirections a command follows. After the first two, each waits longer (1 ms, then doubling),
// within the command's deadline: a slot being handed over between two masters is redirected back
// and forth (the old owner, told first, points to the new one, which is still importing and points
// back) until the new owner is told, a few milliseconds later.
constexpr int kMaxRedirects = 12;
constexpr int kRedirectsAtOnce = 2;

// A Redis Cluster: the slot map from CLUSTER NODES, one connection per node (replicas too, so that
// a promoted replica is ready at once; their failed reconnections do not count as Redis failing,
// see node()). MOVED updates the slot and refreshes the map; ASK is
// followed for that one command. While any slot has no connected master the map is refreshed
// every 100ms, which is how decisions resume after a failover; and at least every
// ClientOptions::map_refresh.
class ClusterClient final : public Client, public std::enable_shared_from_this<ClusterClient> {
 public:
  ClusterClient(Strand strand, const ClientOptions& options)
      : strand_(std::move(strand)),
        options_(options),
        refresh_timer_(strand_),
        map_timer_(strand_),
        probe_timer_(strand_),
        connect_timer_(strand_),
        slots_(kSlots, nullptr) {}

  void start() override {
    for (const Endpoint& seed : options_.address.nodes) node(seed);
    arm_connect_timer();
  }

  void stop() override {
    stopped_ = true;
    refresh_timer_.cancel();
    map_timer_.cancel();
    probe_timer_.cancel();
    connect_timer_.cancel();
    for (const auto& t : pauses_) {
      if (auto timer = t.lock()) timer->cancel();
    }
    std::fill(slots_.begin(), slots_.end(), nullptr);
    for (auto& [name, c] : std::exchange(nodes_, {})) c->stop();
    gates_.clear();
    finish_connect(Error{ErrorCode::kStoreUnavailable, "redis cluster: closed"});
  }

  void when_connected(UniqueFunction<void(Status)> f) override {
    if (connected()) return f(Status{});
    if (stopped_) return f(Error{ErrorCode::kStoreUnavailable, "redis cluster: closed"});
    connect_waiters_.push_back(std::move(f));
    if (!connect_timer_armed_) arm_connect_timer();  // a waiter after the first ones gave up
  }

  void send(int slot, std::string_view command, Callback callback, SteadyTime deadline) override {
    if (!connected_once_ && !first_wait_over_ && !stopped_) {
      // Just started: the command waits for the slot map (as a Connection waits for its first
      // attempt), instead of failing for want of a master.
      // A wait that ended without every master (one lost at start) still sends the command, to its
      // slot's master or failing as that slot's alone (which the breaker does not count).
      return when_connected([self = shared_from_this(), slot, command = std::string(command),
                             callback = std::move(callback), deadline](Status s) mutable {
        if (!s.ok() && self->stopped_) return callback(s.error());
        if (std::chrono::steady_clock::now() >= deadline) {
          return callback(Error{ErrorCode::kStoreUnavailable, "redis cluster: no slot map within the command's deadline"});
        }
        self->send(slot, command, std::move(callback), deadline);
      });
    }
    Connection* c = slots_[static_cast<std::size_t>(slot)];
    if (c == nullptr || !c->ready()) {
      refresh_soon();
      return callback(Error{ErrorCode::kStoreUnavailable, std::string(kNoMasterForSlot) + std::to_string(slot)});
    }
    send_to(c->shared_from_this(), slot, command, std::move(callback), deadline, 0, false);
  }

  bool cluster() const override { return true; }
  Readiness readiness(int slot) const override {
    const Connection* c = slots_[static_cast<std::size_t>(slot)];
    if (c == nullptr || !c->ready()) return {};
    const auto gate = gates_.find(c);
    if (gate == gates_.end()) return {.level = Readiness::kReady};  // not called yet: nothing against it
    Readiness r{.failed = gate->second->failed};
    // The state a call would find now: an open breaker whose open period is over lets one through.
    switch (gate->second->breaker.stats().state) {
      case BreakerState::kOpen:
      case BreakerState::kForcedOpen:
        r.level = Readiness::kNotAnswering;
        break;
      case BreakerState::kHalfOpen:
        r.level = Readiness::kProbing;
        break;
      default:
        r.level = Readiness::kReady;
    }
    return r;
  }
  bool a_master_answering() const override {
    const Nanos recently = clock().now() - std::chrono::seconds(1);
    const Connection* last = nullptr;  // slots come in ranges of one master: each range looked at once
    for (const Connection* c : slots_) {
      if (c == last || c == nullptr) continue;
      last = c;
      if (!c->ready()) continue;
      const auto gate = gates_.find(c);
      if (gate == gates_.end()) continue;  // not called yet: nothing known
      if (gate->second->answered >= recently && gate->second->breaker.state() != BreakerState::kOpen) return true;
    }
    return false;
  }

 private:
  // Gives the waiters for a complete slot map 5 connect timeouts.
  void arm_connect_timer() {
    connect_timer_armed_ = true;
    connect_timer_.expires_after(options_.connect_timeout * 5);
    connect_timer_.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (ec || !self) return;
      self->connect_timer_armed_ = false;
      self->finish_connect(Error{ErrorCode::kStoreUnavailable,
                                 "redis cluster: not connected to every master in time" + self->a_node_failure()});
    });
  }

  // Why a node that is not connected failed last ("; redis host:port: ..."), if one did: a password
  // the cluster refuses, say, which would otherwise go unsaid.
  std::string a_node_failure() const {
    if (!refused_map_.empty()) return "; " + refused_map_;
    if (!map_problem_.empty()) return "; " + map_problem_;
    for (const auto& [name, c] : nodes_) {
      if (!c->ready() && !c->last_error().empty()) return "; " + c->last_error();
    }
    return "";
  }

  std::shared_ptr<Connection> node(const Endpoint& endpoint) {
    const std::string name = endpoint.to_string();
    auto it = nodes_.find(name);
    if (it != nodes_.end()) return it->second;
    ConnectionOptions co = connection_options(options_, endpoint);
    // A node that serves no slot (a replica, kept connected to be ready when it is promoted; a
    // failed master whose slots a replica has taken) failing to connect is not Redis failing to
    // decide, nor is one master while another is connected (its slots fail alone, as
    // slot_failure says): only a master's failed attempts with no master connected count (and any
    // before the map is known).
    if (co.on_attempt_failed) {
      co.on_attempt_failed = [weak = weak_from_this(), name, counted = std::move(co.on_attempt_failed)](
                                 const Error& e) {
        const auto self = weak.lock();
        if (self && self->loaded_ && (!self->serves_a_slot(name) || self->a_master_ready())) return;
        counted(e);
      };
    }
    auto c = std::make_shared<Connection>(
        strand_, std::move(co),
        [weak = weak_from_this(), name](bool ready, const std::string& why) {
          if (auto self = weak.lock()) {
            self->tell_connection_state(name, ready, why);
            self->refresh_soon();
            self->check_connected();
          }
        });
    nodes_.emplace(name, c);
    c->start();
    return c;
  }

  void send_to(std::shared_ptr<Connection> c, int slot, std::string_view command, Callback callback,
               SteadyTime deadline, int hops, bool asking) {
    std::shared_ptr<Gate> gate = gate_of(*c);
    const BreakerPermit permit = gate->breaker.try_acquire();
    if (!permit.admitted()) {
      return callback(Error{ErrorCode::kStoreUnavailable, std::string(kNodeNotAnswering) + c->endpoint().to_string() +
                                                              " (slot " + std::to_string(slot) + ")"});
    }
    if (asking) c->send(encode({"ASKING"}), [](Result<Reply>) {}, deadline);
    c->send(command, [self = shared_from_this(), gate = std::move(gate), permit, slot, command,
                      callback = std::move(callback), deadline, hops](Result<Reply> r) mutable {
      // Any answer, an error reply or a redirection too, is the node answering; but CLUSTERDOWN and
      // MASTERDOWN, the node refusing every slot it has, are it failing, as a timeout is: once its
      // breaker opens, its calls fail at once, and another master answering keeps the store's
      // breaker closed (see node_failure).
      const bool failed = !r.ok() ? r.error().code == ErrorCode::kTimeout || r.error().code == ErrorCode::kStoreUnavailable
                                  : is_error(*r) && node_refusing(text(*r));
      gate->breaker.record(permit, failed);
      (failed ? gate->failed : gate->answered) = self->clock().now();
      if (failed) gate->last_failure = r.ok() ? std::string(text(*r)) : without_may_have_run(r.error().message);
      self->tell_node_state(*gate);
      self->on_reply(slot, command, std::move(callback), deadline, hops, std::move(r));
    }, deadline);
  }

  // A node's breaker, and when it last answered and last failed a call (on the breaker's clock;
  // never: Nanos::min()).
  struct Gate {
    Gate(const CircuitBreakerOptions& options, std::string host_port) : breaker(options), node(std::move(host_port)) {}
    CircuitBreaker breaker;
    std::string node;  // host:port
    Nanos answered = Nanos::min();
    Nanos failed = Nanos::min();
    std::string last_failure;  // why the last failed call failed, or the connection was lost
    bool said_open = false;    // on_node_change was last told kNotAnswering
    bool dropped = false;      // its node left the map: the calls still holding it tell nothing
  };

  // What a failure says of the node: "did not answer within 50ms", without what it meant for the
  // call it failed ("the command may have run").
  static std::string without_may_have_run(const std::string& why) { return why.substr(0, why.find(kMayHaveRun)); }

  // Tells on_node_change that a master's connection was lost (it does not answer, as when its
  // breaker opens), or that a master said not to answer is connected again with its breaker closed.
  void tell_connection_state(const std::string& name, bool ready, const std::string& why) {
    if (!options_.on_node_change || !loaded_ || stopped_) return;
    const auto it = nodes_.find(name);
    if (it == nodes_.end()) return;
    if (!ready && !serves_a_slot(name)) return;  // a replica
    Gate& gate = *gate_of(*it->second);
    // "connection closed by the server", without what it meant for the calls it failed.
    if (!ready) gate.last_failure = without_may_have_run(why);
    if (!ready && !gate.said_open) {
      gate.said_open = true;
      options_.on_node_change(gate.node, NodeState::kNotAnswering, gate.last_failure);
      arm_probe_timer();
    } else if (ready) {
      tell_node_state(gate);
    }
  }

  // Tells on_node_change that a master said not to answer is no longer called.
  void tell_gone(Gate& gate) {
    if (!gate.said_open || !options_.on_node_change) return;
    gate.said_open = false;
    options_.on_node_change(gate.node, NodeState::kGone, std::string());
  }

  // Tells on_node_change that the node's breaker opened, or closed, since it last told. (The call
  // that opened it may have been a success that made the failures' share too large: the last
  // failure says why.)
  void tell_node_state(Gate& gate) {
    if (!options_.on_node_change || gate.dropped || stopped_) return;
    const BreakerState state = gate.breaker.state();
    if (!gate.said_open && state == BreakerState::kOpen && serves_a_slot(gate.node)) {
      gate.said_open = true;
      options_.on_node_change(gate.node, NodeState::kNotAnswering, gate.last_failure);
      arm_probe_timer();
    } else if (gate.said_open && state == BreakerState::kClosed) {
      gate.said_open = false;
      options_.on_node_change(gate.node, NodeState::kAnswering, std::string());
    }
  }

  // While a master is said not to answer, it is asked CLUSTER INFO whenever its breaker lets a call
  // through (node_breaker.open_for after it last opened), so that it is found answering again, and
  // said to, without waiting for a call for its slots: one that gets none would be said not to
  // answer for ever. `restart`: from now, even when armed already (a probe that failed reopened
  // its breaker).
  void arm_probe_timer(bool restart = false) {
    if ((probe_armed_ && !restart) || stopped_) return;
    probe_armed_ = true;
    probe_timer_.expires_after(options_.node_breaker.open_for);  // cancels the wait armed before
    probe_timer_.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
      const auto self = weak.lock();
      if (!self || ec) return;
      self->probe_armed_ = false;
      self->probe_silent_masters();
    });
  }

  void probe_silent_masters() {
    if (stopped_) return;
    bool silent = false;
    for (const auto& [name, c] : nodes_) {
      const auto it = gates_.find(c.get());
      if (it == gates_.end() || !it->second->said_open) continue;
      silent = true;
      if (!c->ready()) continue;  // said when connected again
      std::shared_ptr<Gate> gate = it->second;
      const BreakerPermit permit = gate->breaker.try_acquire();
      if (!permit.admitted()) continue;  // open still, or a call is its probe
      // Not PING: a master cut off from the cluster answers it, but refuses every call for a key
      // (CLUSTERDOWN), as CLUSTER INFO says. Any other answer (NOPERM from a user without it) is
      // the node answering, as for a call.
      c->send(encode({"CLUSTER", "INFO"}), [self = shared_from_this(), gate, permit](Result<Reply> r) {
        const std::string failure =
            !r.ok()          ? without_may_have_run(r.error().message)
            : is_error(*r)   ? (node_refusing(text(*r)) ? std::string(text(*r)) : std::string())
            : text(*r).find("cluster_state:fail") != std::string_view::npos ? "CLUSTER INFO: cluster_state:fail"
                                                                             : std::string();
        gate->breaker.record(permit, !failure.empty());
        (failure.empty() ? gate->answered : gate->failed) = self->clock().now();
        if (!failure.empty()) gate->last_failure = failure;
        self->tell_node_state(*gate);
        if (gate->said_open) self->arm_probe_timer(/*restart=*/true);
      }, std::chrono::steady_clock::now() + options_.command_timeout);
    }
    if (silent) arm_probe_timer();
  }

  // The node breakers' clock, which also says when a node answered (see a_master_answering).
  const Clock& clock() const {
    return options_.node_breaker.clock != nullptr ? *options_.node_breaker.clock : SteadyClock::instance();
  }

  // The gate of the node `c` is a connection to (made with it, dropped with it).
  std::shared_ptr<Gate> gate_of(const Connection& c) {
    std::shared_ptr<Gate>& gate = gates_[&c];
    if (!gate) gate = std::make_shared<Gate>(options_.node_breaker, c.endpoint().to_string());
    return gate;
  }

  void on_reply(int slot, std::string_view command, Callback callback, SteadyTime deadline,
                int hops, Result<Reply> r) {
    if (!r.ok()) {
      // A master that stopped answering may have been replaced (a host lost without a FIN looks
      // like this until TCP gives up): the map says.
      const ErrorCode code = r.error().code;
      if (code == ErrorCode::kStoreUnavailable || code == ErrorCode::kTimeout) refresh_soon();
      return callback(std::move(r));
    }
    if (!is_error(*r)) return callback(std::move(r));
    const std::string_view message = text(*r);
    const bool moved = message.starts_with("MOVED ");
    if ((moved || message.starts_with("ASK ")) && hops < kMaxRedirects && !stopped_) {
      // "MOVED 3999 127.0.0.1:6381"
      const std::string_view target = message.substr(message.rfind(' ') + 1);
      auto endpoint = parse_address("redis://" + std::string(target));
      if (endpoint.ok()) {
        std::shared_ptr<Connection> c = node(endpoint->nodes.front());
        if (moved) {
          slots_[static_cast<std::size_t>(slot)] = c.get();
          refresh_soon();
        }
        return follow(std::move(c), slot, command, std::move(callback), deadline, hops, !moved);
      }
    }
    if (moved || message.starts_with("ASK ")) {
      // Redirected until no time or hops were left: the slot is moving, and it is Redis, not the
      // call, that cannot answer now.
      return callback(Error{ErrorCode::kStoreUnavailable, "redis cluster: slot " + std::to_string(slot) +
                                                              std::string(kSlotStillMoving) + std::string(message)});
    }
    if (message.starts_with("CLUSTERDOWN") || message.starts_with("TRYAGAIN") ||
        message.starts_with("MASTERDOWN")) {
      refresh_soon();
      return callback(Error{ErrorCode::kStoreUnavailable, "redis cluster: " + std::string(message)});
    }
    callback(std::move(r));
  }

  // Sends a redirected call to `c` (ASKING first when `asking`): at once for the first two
  // redirections, then after 1 ms, 2, 4, ... (a slot handed over is redirected back and forth until
  // its new master is told). A node not connected yet (one the map did not list when the client
  // started: added since) is waited for, as long again each time. Within the call's deadline and
  // kMaxRedirects; past either, the call fails as Redis not answering.
  void follow(std::shared_ptr<Connection> c, int slot, std::string_view command, Callback callback,
              SteadyTime deadline, int hops, bool asking) {
    const bool ready = c->ready();
    if (ready && hops < kRedirectsAtOnce) {
      return send_to(std::move(c), slot, command, std::move(callback), deadline, hops + 1, asking);
    }
    const auto pause = std::chrono::milliseconds(1) * (1 << std::max(0, hops - kRedirectsAtOnce));
    if (hops >= kMaxRedirects || std::chrono::steady_clock::now() + pause >= deadline) {
      return callback(Error{ErrorCode::kStoreUnavailable,
                            ready ? "redis cluster: slot " + std::to_string(slot) + std::string(kSlotStillMoving) +
                                        "redirected " + std::to_string(hops) + " times"
                                  : std::string(kNodeNotConnected) + c->endpoint().to_string() + ", where slot " +
                                        std::to_string(slot) + " was redirected"});
    }
    auto timer = std::make_shared<asio::steady_timer>(strand_, pause);
    std::erase_if(pauses_, [](const std::weak_ptr<asio::steady_timer>& t) { return t.expired(); });
    pauses_.push_back(timer);
    timer->async_wait([self = shared_from_this(), timer, c = std::move(c), slot, command, deadline, hops, asking, ready,
                       callback = std::move(callback)](const boost::system::error_code& ec) mutable {
      if (ec || self->stopped_) return callback(Error{ErrorCode::kStoreUnavailable, "redis cluster: closed"});
      if (!ready) return self->follow(std::move(c), slot, command, std::move(callback), deadline, hops + 1, asking);
      self->send_to(std::move(c), slot, command, std::move(callback), deadline, hops + 1, asking);
    });
  }

  // Refreshes the slot map now, or as soon as 100ms have passed since the last refresh.
  void refresh_soon() {
    if (stopped_) return;
    if (refreshing_) {
      again_ = true;
      return;
    }
    if (refresh_scheduled_) return;
    refresh_scheduled_ = true;
    refresh_timer_.expires_at(last_refresh_ + kRefreshInterval);
    refresh_timer_.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (ec || !self) return;
      self->refresh_scheduled_ = false;
      self->refresh();
    });
  }

  // Refreshes the map ClientOptions::map_refresh after this refresh, unless another comes first.
  void arm_map_timer() {
    if (options_.map_refresh.count() == 0) return;
    map_timer_.expires_after(options_.map_refresh);  // cancels the wait for the one before
    map_timer_.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
      if (auto self = weak.lock(); self && !ec) self->refresh_soon();
    });
  }

  // Asks a ready node for the map: the next one after the node asked last, in name order, so that
  // a node that hangs or has lost its view of the cluster is not the only one asked.
  void refresh() {
    if (stopped_) return;
    std::shared_ptr<Connection> c;
    auto it = nodes_.upper_bound(last_asked_);
    for (std::size_t n = 0; n < nodes_.size() && !c; ++n, ++it) {
      if (it == nodes_.end()) it = nodes_.begin();
      if (it->second->ready()) {
        c = it->second;
        last_asked_ = it->first;
      }
    }
    if (!c) return;  // a connection that becomes ready asks again
    refreshing_ = true;
    last_refresh_ = std::chrono::steady_clock::now();
    arm_map_timer();
    c->send(encode({"CLUSTER", "NODES"}), [self = shared_from_this(), endpoint = c->endpoint()](
                                               Result<Reply> r) {
      self->refreshing_ = false;
      if (r.ok() && !is_error(*r)) {
        self->refused_map_.clear();
        self->apply(*r, endpoint.host);
      } else if (r.ok() && !self->complete()) {
        // A node that will not give the map (a Redis without cluster support, given as a cluster's)
        // leaves calls nowhere to go: an attempt failed, said as it was.
        self->refused_map_ = "redis " + endpoint.to_string() + ": CLUSTER NODES: " + std::string(text(*r));
        if (self->options_.on_attempt_failed) {
          self->options_.on_attempt_failed(Error{ErrorCode::kStoreUnavailable, self->refused_map_});
        }
      }
      if (self->again_ || !self->complete()) {
        self->again_ = false;
        self->refresh_soon();
      }
    });
  }

  // Applies a CLUSTER NODES reply, one line per node (CLUSTER SLOTS leaves out replicas that have
  // no data yet, and we want a connection to each before it is promoted):
  // "<id> <ip:port@bus> <flags> <master> <ping> <pong> <epoch> <link> <slot ranges>..."
  void apply(const Reply& r, const std::string& asked_host) {
    if (stopped_ || r.type() != Reply::Type::kString) return;
    std::vector<std::string> owner(kSlots);
    std::map<std::string, Endpoint> listed;
    std::istringstream lines{std::string(text(r))};
    for (std::string line; std::getline(lines, line);) {
      std::istringstream fields(line);
      std::string id, address, flags, master, ping, pong, epoch, link;
      if (!(fields >> id >> address >> flags >> master >> ping >> pong >> epoch >> link)) continue;
      if (flags.find("noaddr") != std::string::npos || flags.find("handshake") != std::string::npos) {
        continue;
      }
      const auto colon = address.rfind(':', address.find('@'));
      if (colon == std::string::npos) continue;
      auto endpoint = parse_address("redis://" + (colon == 0 ? asked_host : "") +
                                    address.substr(0, address.find('@')));
      if (!endpoint.ok()) continue;
      const std::string name = endpoint->nodes.front().to_string();
      listed.emplace(name, endpoint->nodes.front());
      if (flags.find("master") == std::string::npos) continue;
      for (std::string range; fields >> range;) {
        if (range.front() == '[') continue;  // a slot being migrated or imported
        const auto dash = range.find('-');
        const int first = std::atoi(range.c_str());
        const int last = dash == std::string::npos ? first : std::atoi(range.c_str() + dash + 1);
        for (int slot = std::max(0, first); slot <= last && slot < kSlots; ++slot) {
          owner[static_cast<std::size_t>(slot)] = name;
        }
      }
    }
    // A node that was reset or lost its nodes.conf knows only itself and owns no slot: a view that
    // covers fewer slots than the map has is not taken (a failover moves slots, it keeps them all).
    const auto covered = std::count_if(owner.begin(), owner.end(), [](const std::string& o) { return !o.empty(); });
    map_problem_ = covered == 0 ? "the nodes " + last_asked_ + " knows serve no slot (a cluster not made yet? redis-cli "
                                  "--cluster create)"
                   : covered < kSlots ? std::to_string(kSlots - covered) + " of " + std::to_string(kSlots) +
                                            " slots have no master in the map of " + last_asked_
                                      : std::string();
    const auto covered_now = kSlots - std::count(slots_.begin(), slots_.end(), nullptr);
    if (listed.empty() || covered == 0 || (loaded_ && covered < covered_now)) return;
    for (const auto& [name, endpoint] : listed) node(endpoint);
    for (auto it = nodes_.begin(); it != nodes_.end();) {
      if (listed.count(it->first) != 0) {
        ++it;
        continue;
      }
      // Out of the map before it stops, so that the calls and the connection state it fails as it
      // stops are told of no node.
      const std::shared_ptr<Connection> gone = std::move(it->second);
      it = nodes_.erase(it);
      if (const auto gate = gates_.find(gone.get()); gate != gates_.end()) {
        tell_gone(*gate->second);
        gate->second->dropped = true;
        gates_.erase(gate);
      }
      gone->stop();
    }
    for (std::size_t slot = 0; slot < kSlots; ++slot) {
      const auto it = owner[slot].empty() ? nodes_.end() : nodes_.find(owner[slot]);
      slots_[slot] = it == nodes_.end() ? nullptr : it->second.get();
    }
    // A master said not to answer whose slots another serves now (its replica, promoted).
    for (const auto& [c, gate] : gates_) {
      if (gate->said_open && std::find(slots_.begin(), slots_.end(), c) == slots_.end()) tell_gone(*gate);
    }
    check_seeds(listed);
    loaded_ = true;
    check_connected();
  }

  // Tells on_notice when none of the addresses the client was made with is a node of the cluster
  // any more (all of them removed since, or replaced): the client goes on by the nodes it knows, but
  // a restart with those addresses would find no cluster. And when one is a node again. Only
  // addresses given as IP addresses can be told: a node is listed by its address, not by a name.
  // Nor can they when the first map lists none of them: the nodes are known to each other by
  // other addresses than those that reached them (another interface, a forwarded port).
  void check_seeds(const std::map<std::string, Endpoint>& listed) {
    if (!options_.on_notice) return;
    std::string seeds;
    bool one_listed = false;
    for (const Endpoint& seed : options_.address.nodes) {
      boost::system::error_code not_an_address;
      asio::ip::make_address(seed.host, not_an_address);
      if (not_an_address) return;
      one_listed = one_listed || listed.contains(seed.to_string());
      seeds += (seeds.empty() ? "" : ",") + seed.to_string();
    }
    if (seeds_ == Seeds::kNotSeen) seeds_ = one_listed ? Seeds::kListed : Seeds::kNotListedAtFirst;
    if (seeds_ == Seeds::kNotListedAtFirst || one_listed == (seeds_ == Seeds::kListed)) {  // as said
      seeds_maps_against_ = 0;
      return;
    }
    // One node's map may be behind the others' (a node removed is forgotten by each in turn): a
    // change is said once two maps in a row, from two nodes, show it. The next comes soon.
    if (++seeds_maps_against_ < 2) return refresh_soon();
    seeds_maps_against_ = 0;
    seeds_ = one_listed ? Seeds::kListed : Seeds::kGone;
    if (one_listed) {
      options_.on_notice(Notice::kSeedsBack, "redis cluster: an address the store was opened with (" + seeds +
                         ") is a node of the cluster again");
      return;
    }
    std::string nodes;
    for (const auto& [name, endpoint] : listed) nodes += (nodes.empty() ? "" : ",") + name;
    options_.on_notice(Notice::kSeedsGone, "redis cluster: none of the addresses the store was opened with (" + seeds +
                       ") is a node of the cluster any more; it goes on by the nodes it knows, but a restart with "
                       "them would find no cluster: give it the nodes now in it (" + nodes + ")");
  }

  // Whether some master in the map is connected.
  bool a_master_ready() const {
    return std::any_of(slots_.begin(), slots_.end(), [](const Connection* c) { return c != nullptr && c->ready(); });
  }

  // Whether the node named `name` is the master of a slot in the map.
  bool serves_a_slot(const std::string& name) const {
    const auto it = nodes_.find(name);
    return it != nodes_.end() && std::find(slots_.begin(), slots_.end(), it->second.get()) != slots_.end();
  }

  // Every slot has a master, and every master is connected.
  bool complete() const {
    if (!loaded_) return false;
    return std::all_of(slots_.begin(), slots_.end(),
                       [](const Connection* c) { return c != nullptr && c->ready(); });
  }

  bool connected() const { return connected_once_; }

  void check_connected() {
    if (!connected_once_ && complete()) {
      connected_once_ = true;
      connect_timer_.cancel();
      finish_connect(Status{});
    }
  }

  void finish_connect(Status status) {
    first_wait_over_ = true;
    for (auto& f : std::exchange(connect_waiters_, {})) f(status);
  }

  Strand strand_;
  ClientOptions options_;
  asio::steady_timer refresh_timer_;
  asio::steady_timer map_timer_;  // see arm_map_timer
  asio::steady_timer probe_timer_;  // see arm_probe_timer
  asio::steady_timer connect_timer_;
  std::map<std::string, std::shared_ptr<Connection>> nodes_;  // by host:port
  std::vector<Connection*> slots_;  // the master of each slot (owned by nodes_), or nullptr
  // Each node's gate, by its connection (see ClientOptions::node_breaker); a call holds its own.
  std::map<const Connection*, std::shared_ptr<Gate>> gates_;
  std::vector<UniqueFunction<void(Status)>> connect_waiters_;
  std::vector<std::weak_ptr<asio::steady_timer>> pauses_;  // of redirected calls (on_reply), cancelled by stop()
  SteadyTime last_refresh_{};
  std::string last_asked_;  // the node the last refresh asked
  std::string refused_map_;  // why the last refresh got no map, when it was refused
  std::string map_problem_;  // what the last map said that leaves slots without a master
  bool connect_timer_armed_ = false;
  bool loaded_ = false;
  // What the maps said of the addresses the client was made with (see check_seeds).
  enum class Seeds { kNotSeen, kListed, kGone, kNotListedAtFirst } seeds_ = Seeds::kNotSeen;
  int seeds_maps_against_ = 0;  // maps in a row that said otherwise
  bool connected_once_ = false;
  bool first_wait_over_ = false;  // the first wait for a slot map has ended: commands no longer wait
  bool refreshing_ = false;
  bool refresh_scheduled_ = false;
  bool probe_armed_ = false;
  bool again_ = false;
  bool stopped_ = false;
};

}  // namespace

std::shared_ptr<Client> make_client(Strand strand, const ClientOptions& options) {
  if (options.address.cluster) {
    auto c = std::make_shared<ClusterClient>(std::move(strand), options);
    return c;
  }
  return std::make_shared<SingleClient>(std::move(strand), options);
}

}  // namespace sluice::redis::detail
