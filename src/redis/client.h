// Client: sends commands to the node that holds a slot — one node, or a Redis Cluster's slot map.
// Not thread-safe: every call and every callback runs on the strand the client was made with.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "redis/connection.h"
#include "sluice/circuit_breaker.h"
#include "sluice/redis/address.h"
#include "sluice/redis/cluster_news.h"

namespace sluice::redis::detail {

// How ready a slot's node is to take a command now: the store's probe goes to the readiest (see
// RedisStore::Impl::probe).
struct Readiness {
  enum Level : std::uint8_t {
    kNotConnected,  // no connected node serves the slot
    kNotAnswering,  // a cluster: its master's node breaker is open, and fails its calls at once
    kProbing,       // a cluster: its master's node breaker, opened lately, lets a call through to see
    kReady,         // connected, and on a cluster its master's node breaker closed
  };
  Level level = kNotConnected;
  // A cluster: when its master last failed a call (a timeout, a lost connection), on the node
  // breakers' clock; never: Nanos::min().
  Nanos failed = Nanos::min();

  // A better level, or the same with the last failure longer ago: of two masters whose node breakers
  // both let a call through, the one that failed a call later is the likelier to fail the next.
  bool readier_than(const Readiness& other) const {
    return level != other.level ? level > other.level : failed < other.failed;
  }
};

class Client {
 public:
  virtual ~Client() = default;
  // Connects (and keeps reconnecting until stop()).
  virtual void start() = 0;
  virtual void stop() = 0;
  // Calls `f` once connected (a cluster: its slot map known and every master connected), or with
  // the error of the first attempt that failed.
  virtual void when_connected(UniqueFunction<void(Status)> f) = 0;
  // Sends a command about keys of `slot` to the node that serves it; the callback runs by the
  // deadline at the latest (see Connection::send). `command` must stay valid until the callback
  // has run (a cluster may send it again, to where MOVED or ASK points, within the same deadline).
  virtual void send(int slot, std::string_view command, Callback callback, SteadyTime deadline) = 0;
  // Whether every command of a call must stay within one slot.
  virtual bool cluster() const = 0;
  // How ready the node that serves `slot` is to take a command now (see Readiness).
  virtual Readiness readiness(int slot) const = 0;
  // A cluster: whether some master that serves a slot is connected, answered a call within the last
  // second, and is let called by its node breaker (see ClientOptions::node_breaker). One node:
  // always.
  virtual bool a_master_answering() const = 0;
};

struct ClientOptions {
  Address address;
  std::chrono::milliseconds connect_timeout{200};
  std::chrono::milliseconds command_timeout{50};
  std::chrono::milliseconds reconnect_min{10};
  std::chrono::milliseconds reconnect_max{500};
  // A cluster: the slot map is read again at least this often (0: only when a call or connection
  // calls for it).
  std::chrono::milliseconds map_refresh{30'000};
  std::vector<std::string> on_connect;  // see ConnectionOptions
  std::function<void(const Error&)> on_attempt_failed;  // see ConnectionOptions: any node's
  // A cluster: each node's calls go through a breaker of their own, which a node that stops
  // answering (hung, paused, cut off without a FIN) opens, so that its slots' calls fail at once
  // (kNodeNotAnswering) while the other masters' are decided as ever. Its clock (nullptr:
  // SteadyClock) also times "within the last second" of Client::a_master_answering.
  CircuitBreakerOptions node_breaker;
  // A cluster: told when a node's breaker opens, closes again, or goes with a node not answering
  // (see RedisStore::on_node_change), with the node as host:port.
  std::function<void(const std::string& node, NodeState state, const std::string& why)> on_node_change;
  // A cluster: told what an operator should know that fails no call (see RedisStore::on_notice).
  std::function<void(Notice notice, const std::string& text)> on_notice;
};

std::shared_ptr<Client> make_client(Strand strand, const ClientOptions& options);

// How a cluster's call fails at once when no connected master serves its slot (a master lost,
// until its replica is promoted).
inline constexpr std::string_view kNoMasterForSlot = "redis cluster: no connected master serves slot ";

// How a cluster's call fails at once while its slot's master does not answer (its node breaker
// open: see ClientOptions::node_breaker), and how one redirected to a node fails when no
// connection to it is made within its deadline.
inline constexpr std::string_view kNodeNotAnswering = "redis cluster: not calling a master that does not answer: ";
inline constexpr std::string_view kNodeNotConnected = "redis cluster: no connection in time to ";

// Whether a call was refused because its slot is moving with the call's keys on either side
// (TRYAGAIN: nothing ran).
inline bool try_again(const Error& e) { return e.message.starts_with("redis cluster: TRYAGAIN"); }

// How a cluster's call fails when it was redirected until no time or redirection was left: its slot
// is being handed over between two masters.
inline constexpr std::string_view kSlotStillMoving = " still being moved: ";

// How a cluster node answers a call for a slot that no master serves, and the error it becomes.
inline constexpr std::string_view kSlotNotServed = "CLUSTERDOWN Hash slot not served";
inline constexpr std::string_view kSlotNotServedError = "redis cluster: CLUSTERDOWN Hash slot not served";

// Whether an error reply is a cluster node refusing every call it gets, whatever the slot: it sees
// the cluster down (CLUSTERDOWN, but for a slot not served: a node cut off from the majority, or one
// that requires full coverage while some slot is not served), or is a replica whose master is lost
// (MASTERDOWN).
inline bool node_refusing(std::string_view error_reply) {
  return (error_reply.starts_with("CLUSTERDOWN") && !error_reply.starts_with(kSlotNotServed)) ||
         error_reply.starts_with("MASTERDOWN");
}

// Whether a cluster's call failed for one node: it timed out there, its node breaker is open, no
// connection to the node it was redirected to came in time, or the node refused it (node_refusing).
// (Whether the others answer is for Client::a_master_answering to say.)
inline bool node_failure(const Error& e) {
  constexpr std::string_view kPrefix = "redis cluster: ";
  return e.code == ErrorCode::kTimeout || e.message.starts_with(kNodeNotAnswering) ||
         e.message.starts_with(kNodeNotConnected) ||
         (e.message.starts_with(kPrefix) && node_refusing(std::string_view(e.message).substr(kPrefix.size())));
}

// Whether a call failed for its slot alone, while the cluster's other slots may answer: no master
// serves it (as the map says, or as its node answers), or it is moving (try_again, or redirected to
// the end).
inline bool slot_failure(const Error& e) {
  return e.message.starts_with(kNoMasterForSlot) || try_again(e) ||
         e.message.starts_with(kSlotNotServedError) ||
         (e.message.starts_with("redis cluster: slot ") && e.message.find(kSlotStillMoving) != std::string::npos);
}


}  // namespace sluice::redis::detail
