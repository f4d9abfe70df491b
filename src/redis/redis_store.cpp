#include "sluice/redis/redis_store.h"

#include <boost/asio/any_completion_executor.hpp>
#include <boost/asio/append.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/container/small_vector.hpp>

#include <atomic>
#include <deque>
#include <future>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <thread>
#include <unordered_map>

#include "redis/client.h"
#include "redis/scripts.h"
#include "sluice/local_store.h"

namespace sluice::redis {

namespace asio = boost::asio;
using detail::Callback;
using detail::Client;
using detail::Command;
using detail::Reply;
using detail::Script;

namespace {

std::int64_t to_us(Nanos t) { return t.count() > 0 ? t.count() / 1000 : 0; }

Nanos from_us(std::int64_t us) { return Nanos{us * 1000}; }

// How the scripts know each algorithm: its code, its keys, its ARGV and its one-limit script.
struct Kind {
  const char* code;    // in acquire.lua's ARGV
  const char* suffix;  // key suffix: one state per key and kind, as in LocalStore
  bool two_keys;
  std::size_t args;    // ARGV per limit, after the code, the refund value last
  const Script* one;   // the script for a call with this one limit
};

Kind kind_of(const Limit& limit) {
  switch (limit.algorithm()) {
    case Algorithm::kTokenBucket:
      if (limit.params().refill == Refill::kInterval) {
        return {"tbi", "tbi", false, 5, &detail::kAcquireIntervalScript};
      }
      // The continuous bucket shares GCRA's meter, and so its state, as in LocalStore.
      return {"tb", "gcra", false, 9, &detail::kAcquireMeterScript};
    case Algorithm::kGcra: return {"gcra", "gcra", false, 9, &detail::kAcquireMeterScript};
    case Algorithm::kFixedWindow: return {"fw", "fw", false, 4, &detail::kAcquireFixedScript};
    case Algorithm::kSlidingWindow: return {"sw", "sw", false, 4, &detail::kAcquireSlidingScript};
    case Algorithm::kSlidingLog: return {"sl", "sl", true, 4, &detail::kAcquireLogScript};
    case Algorithm::kConcurrency: return {"cc", "cc", true, 5, &detail::kAcquireLeasesScript};
  }
  return {"gcra", "gcra", false, 9, &detail::kAcquireMeterScript};
}

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// One limit of a call, copied so that the call owns everything it needs.
struct Request {
  std::string state;    // the Redis key of the state, which holds the caller's key (see key())
  std::string state2;   // the second key of a sliding log or concurrency state
  int slot = 0;
  Limit limit;
  std::int64_t cost = 1;
  std::uint64_t lease = 0;
  OnStoreFailure policy = OnStoreFailure::kError;
  std::int64_t extra = 0;  // what the admitting decision returned for a refund
  bool release = false;    // gives `lease` back instead of deciding (a concurrency limit)
  std::size_t key_at = 0;  // where the caller's key is in `state`, and its size
  std::size_t key_size = 0;

  std::string_view key() const { return std::string_view(state).substr(key_at, key_size); }
};

// A call's limits: inline for the usual call of one or two, so that a decision does not allocate
// for them.
using Requests = boost::container::small_vector<Request, 2>;

// The limits of a call that one script call decides: all of them on one node, one slot's on a
// cluster.
struct Batch {
  int slot = 0;
  // Inline for the usual call of a few limits, so that a decision does not allocate for it.
  boost::container::small_vector<std::size_t, 4> members;
  std::string command;
  bool admitted = false;  // answered, and every member admitted
};

Error protocol_error(std::string what) { return Error{ErrorCode::kProtocol, "redis: " + what}; }

// Errors a script reply can carry that mean "Redis cannot serve now", not "we sent nonsense".
bool unavailable_reply(std::string_view m) {
  return m.starts_with("BUSY") || m.starts_with("LOADING") || m.starts_with("READONLY") ||
         m.starts_with("OOM") || m.starts_with("MASTERDOWN") || m.starts_with("NOREPLICAS");
}

// Errors an FCALL gets from a server that cannot call sluice's function library: a Redis before 7
// (no FCALL), a user the ACL does not let call functions, a library not loaded there (refused at
// connect, or removed since by FUNCTION FLUSH). The call goes again by its script (EVAL).
bool no_function_reply(std::string_view m) {
  return m.starts_with("ERR Function not found") || m.starts_with("ERR unknown command") ||
         (m.starts_with("NOPERM") && m.find("'fcall'") != std::string_view::npos);
}

// `cluster`: whether the store was given a cluster's address (redis-cluster://), whose client
// follows MOVED and ASK itself.
Error reply_error(std::string_view message, bool cluster) {
  if (!cluster && (message.starts_with("MOVED ") || message.starts_with("ASK ") || message.starts_with("CROSSSLOT"))) {
    // A cluster's node given as redis://: the keys of its slots work, the others never do (nor a
    // call whose keys are in several slots).
    return Error{ErrorCode::kStoreUnavailable,
                 "redis: " + std::string(message) +
                     " (the server is a node of a Redis Cluster: give its address as redis-cluster://host:port)"};
  }
  return Error{unavailable_reply(message) ? ErrorCode::kStoreUnavailable : ErrorCode::kProtocol,
               "redis: " + std::string(message)};
}

// The limit divided among the fleet, for OnStoreFailure::kLocal.
Limit divided(const Limit& limit, int fleet) {
  if (fleet <= 1) return limit;
  const sluice::detail::LimitParams& p = limit.params();
  auto div = [fleet](std::int64_t v) { return std::max<std::int64_t>(1, v / fleet); };
  const Nanos period = from_us(p.period_us);
  Result<Limit> r = limit;
  switch (p.algorithm) {
    // A rate is divided exactly, its period made fleet times longer ("at least 1" of 1 token per 2 s
    // would give each of 3 gateways the whole rate); failing that (a period past the longest), as
    // the counts are.
    case Algorithm::kTokenBucket:
      if (period <= kMaxPeriod / fleet) r = Limit::token_bucket({div(p.quota), p.rate, period * fleet, p.refill});
      if (period > kMaxPeriod / fleet || !r.ok()) r = Limit::token_bucket({div(p.quota), div(p.rate), period, p.refill});
      break;
    case Algorithm::kGcra:
      if (period <= kMaxPeriod / fleet) r = Limit::gcra({p.rate, period * fleet, div(p.quota)});
      if (period > kMaxPeriod / fleet || !r.ok()) r = Limit::gcra({div(p.rate), period, div(p.quota)});
      break;
    case Algorithm::kSlidingLog: r = Limit::sliding_log({div(p.quota), period}); break;
    case Algorithm::kSlidingWindow: r = Limit::sliding_window({div(p.quota), period}); break;
    case Algorithm::kFixedWindow: r = Limit::fixed_window({div(p.quota), period}); break;
    case Algorithm::kConcurrency: r = Limit::concurrency({div(p.quota), period}); break;
  }
  return r.ok() ? *r : limit;
}

// Where answers go when their handler has no executor of its own: the store's executor, twice.
// A handler's associated executor is asked for with this fallback, and an any_completion_handler
// (every handler, once the public API has erased it) makes its answer an any_completion_executor:
// from an any_io_executor that is an allocation per answer, from the same type a copy. Made from
// the concrete executor when it is an io_context's, which then fits in the object.
struct AnswerExecutors {
  explicit AnswerExecutors(asio::any_io_executor ex)
      : io(std::move(ex)),
        completion(io.target<asio::io_context::executor_type>() != nullptr
                       ? asio::any_completion_executor(*io.target<asio::io_context::executor_type>())
                       : asio::any_completion_executor(io)) {}
  asio::any_io_executor io;  // to post to (any_completion_executor cannot promise never to block)
  asio::any_completion_executor completion;  // to dispatch to
};

// Runs the handler with the value on its associated executor, if it has one, else on the store's.
// Posted by default, and always from inside the initiating call (a call that fails at once), so
// that the handler does not run before that call has returned. Decisions read from a reply are
// dispatched (`post` false): run at once when already on that executor, which saves a trip
// through its queue per decision (see Acquire::deliver()).
template <class Handler, class Value>
void complete(Handler handler, const AnswerExecutors& ex, Value value, bool post = true) {
  if (post) {
    asio::post(ex.io, asio::append(std::move(handler), std::move(value)));
  } else {
    asio::dispatch(ex.completion, asio::append(std::move(handler), std::move(value)));
  }
}

}  // namespace

struct RedisStore::OwnThread {
  asio::io_context io{1};
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  std::thread thread;

  OwnThread() : thread([this] { io.run(); }) {}
  void join() {
    work.reset();
    if (thread.joinable()) thread.join();
  }
};

struct RedisStore::Impl : std::enable_shared_from_this<RedisStore::Impl> {
  struct Acquire;
  // A batch of an acquire (or a release), queued until the call in flight before it has answered.
  struct Waiting {
    std::shared_ptr<Acquire> op;
    std::size_t batch;
  };
  // The acquires and releases that wait for one node (a cluster: one slot), and how many calls
  // are in flight.
  struct Queue {
    int busy = 0;
    std::deque<Waiting> waiting;
  };

  Impl(asio::any_io_executor ex, RedisStoreOptions o, detail::ClientOptions co)
      : options(std::move(o)),
        executor(std::move(ex)),
        answer(executor),
        strand(asio::make_strand(executor)),
        client(detail::make_client(strand, co)),
        breaker(options.breaker),
        local(options.local_store ? options.local_store : std::make_shared<LocalStore>()),
        probe_timer(strand) {
    std::random_device random;
    lease_seed = (static_cast<std::uint64_t>(random()) << 32) ^ random();
  }

  std::string pinned() const {
    return options.pinned_clock == nullptr ? std::string()
                                           : std::to_string(to_us(options.pinned_clock->now()));
  }

  std::uint64_t next_lease() {
    for (;;) {
      const std::uint64_t id = splitmix64(lease_seed + lease_counter.fetch_add(1));
      if (id != 0) return id;
    }
  }

  Request make_request(const LimitRequest& r) {
    const Kind kind = kind_of(*r.limit);
    Request q{{}, {}, 0, *r.limit, r.cost, 0, r.on_store_failure, 0};
    q.state.reserve(options.prefix.size() + r.key.size() + 8);
    // The key is the hash tag. Redis ignores an empty tag ("{}", also "{}x}") and hashes the whole
    // name, which would part a state from its meta key: such keys, and those starting with the '='
    // that marks them (so that no two keys meet), get "{=" instead of "{".
    const bool escape = r.key.empty() || r.key.front() == '}' || r.key.front() == '=';
    q.state.append(options.prefix).append(escape ? "{=" : "{");
    q.key_at = q.state.size();
    q.key_size = r.key.size();
    q.state.append(r.key).append("}:").append(kind.suffix);
    if (kind.two_keys) q.state2 = q.state + ":meta";
    // Only a cluster routes by slot (a hash of the key): one node takes every call.
    if (client->cluster()) q.slot = detail::key_slot(q.state);
    if (r.limit->algorithm() == Algorithm::kConcurrency && r.cost > 0) q.lease = next_lease();
    return q;
  }

  // The script that decides these requests: the one-limit script of the algorithm for one, else
  // acquire.lua.
  static const Script& script_for(std::span<const Request> requests,
                                  std::span<const std::size_t> members) {
    if (members.size() == 1) return *kind_of(requests[members.front()].limit).one;
    return detail::kAcquireScript;
  }

  // EVALSHA of `script` over some of the requests: KEYS, then the pinned time, then for acquire.lua
  // and refund.lua the number of limits and each one's code and ARGV, for a one-limit script its
  // ARGV alone, without the refund value that only a refund reads.
  std::string script_call(const Script& script, std::span<const Request> requests,
                          std::span<const std::size_t> members, const std::string& pinned) {
    const bool one = &script != &detail::kAcquireScript && &script != &detail::kRefundScript;
    std::size_t keys = 0;
    std::size_t args = one ? 1 : 2;
    for (const std::size_t i : members) {
      const Kind kind = kind_of(requests[i].limit);
      keys += kind.two_keys ? 2 : 1;
      args += one ? kind.args - 1 : kind.args + 1;
    }
    Command c(3 + keys + args);
    call_head(c, script);
    c.arg(static_cast<std::int64_t>(keys));
    for (const std::size_t i : members) {
      c.arg(requests[i].state);
      if (!requests[i].state2.empty()) c.arg(requests[i].state2);
    }
    c.arg(pinned);
    if (!one) c.arg(static_cast<std::int64_t>(members.size()));
    for (const std::size_t i : members) {
      const Request& r = requests[i];
      const Kind kind = kind_of(r.limit);
      if (!one) c.arg(kind.code);
      append_args(c, r, !one);
    }
    return std::move(c).take();
  }

  // The call's first two arguments: FCALL and the script's function while servers have the function
  // library, else EVALSHA and the script's SHA1.
  void call_head(Command& c, const Script& script) const {
    if (script.function != nullptr &&
        std::chrono::steady_clock::now().time_since_epoch().count() >= functions_again_at.load(std::memory_order_relaxed)) {
      c.arg("FCALL").arg(script.function);
    } else {
      c.arg("EVALSHA").arg(script.sha1);
    }
  }

  // EVALSHA of release.lua: a release that goes alone.
  static std::string release_call(const Request& r, const std::string& pinned) {
    Command c(7);
    c.arg("EVALSHA").arg(detail::kReleaseScript.sha1).arg(2).arg(r.state).arg(r.state2);
    c.arg(pinned).arg(lease_arg(r));
    return std::move(c).take();
  }

  // A concurrency limit's lease id, as the scripts read it.
  static std::string lease_arg(const Request& r) {
    return r.lease == 0 ? std::string("0") : std::to_string(r.lease);
  }

  // One limit's ARGV, as its algorithm's *_params() in scripts/ reads it: without a concurrency
  // limit's lease id unless `lease` (many.lua sends it with each call), then the refund value
  // (dispatch.lua's each_limit reads it) when `refund_value`.
  static void append_args(Command& c, const Request& r, bool refund_value, bool lease = true) {
    const sluice::detail::LimitParams& p = r.limit.params();
    c.arg(r.cost).arg(p.quota);
    switch (p.algorithm) {
      case Algorithm::kTokenBucket:
        if (p.refill == Refill::kInterval) {
          c.arg(p.rate).arg(p.period_us);
          break;
        }
        [[fallthrough]];
      case Algorithm::kGcra: {
        // The capacity and the cost as whole microseconds plus a fraction in units: exact here in
        // 128 bits, so that the script needs no product beyond 2^53 for them.
        using i128 = __int128;
        const i128 cap = static_cast<i128>(p.quota) * p.units_per_token;
        const i128 cost = r.cost <= p.quota ? static_cast<i128>(r.cost) * p.units_per_token : 0;
        c.arg(p.units_per_us).arg(p.units_per_token);
        c.arg(static_cast<std::int64_t>(cap / p.units_per_us));
        c.arg(static_cast<std::int64_t>(cap % p.units_per_us));
        c.arg(static_cast<std::int64_t>(cost / p.units_per_us));
        c.arg(static_cast<std::int64_t>(cost % p.units_per_us));
        break;
      }
      case Algorithm::kFixedWindow:
      case Algorithm::kSlidingWindow:
      case Algorithm::kSlidingLog: c.arg(p.period_us); break;
      case Algorithm::kConcurrency:
        c.arg(p.period_us);
        if (lease) c.arg(lease_arg(r));
        break;
    }
    if (refund_value) c.arg(r.extra);
  }

  // Sends an EVALSHA or FCALL (see call_head). On NOSCRIPT (a restarted or flushed server) sends it
  // once more as EVAL with the script's source, which loads the script into the cache of the node
  // that runs it (wherever MOVED or ASK lead) and runs it; so too when an FCALL finds no function
  // (see no_function_reply), after which the store calls scripts by EVALSHA for a minute (and loads
  // the library again where it was not found), then tries FCALL again. Never resends
  // after a timeout or a lost connection: the script may have run. A template, so that the callback
  // is held by value in the one that is sent and both fit in its inline storage (no allocation per
  // call).
  template <class F>
  void eval(int slot, const Script& script, std::string_view command, F callback,
            detail::SteadyTime deadline) {
    client->send(slot, command, [self = shared_from_this(), slot, &script, command, deadline,
                                 callback = std::move(callback)](Result<Reply> r) mutable {
      bool by_source = false;
      if (r.ok() && detail::is_error(*r)) {
        const std::string_view message = detail::text(*r);
        by_source = message.starts_with("NOSCRIPT");
        if (by_function(command) && no_function_reply(message)) {
          const auto again = std::chrono::steady_clock::now() + kFunctionsAgainAfter;
          self->functions_again_at.store(again.time_since_epoch().count(), std::memory_order_relaxed);
          if (message.starts_with("ERR Function not found")) {  // flushed: load it again there
            self->client->send(slot, detail::encode({"FUNCTION", "LOAD", detail::kLibrary}), [](Result<Reply>) {},
                               deadline);
          }
          by_source = true;
        }
      }
      if (by_source) {
        auto with_source = std::make_unique<std::string>(as_eval(command, script));
        const std::string_view view = *with_source;
        return self->client->send(slot, view, [with_source = std::move(with_source),
                                               callback = std::move(callback)](
                                                  Result<Reply> again) mutable {
          callback(std::move(again));
        }, deadline);
      }
      callback(std::move(r));
    }, deadline);
  }

  // When a call that starts now must have been answered.
  detail::SteadyTime deadline() const {
    return std::chrono::steady_clock::now() + options.command_timeout;
  }

  // Whether a command call_head() began is an FCALL.
  static bool by_function(std::string_view command) {
    return command.substr(command.find("\r\n") + 2).starts_with("$5\r\nFCALL\r\n");
  }

  // "*N $7 EVALSHA $40 <sha> rest" or "*N $5 FCALL $len <function> rest" -> "*N $4 EVAL $len
  // <source> rest": the same call, by source.
  static std::string as_eval(std::string_view call, const Script& script) {
    const std::size_t header = call.find("\r\n") + 2;
    const bool fcall = by_function(call);
    const std::size_t name = fcall ? std::string_view(script.function).size() : 40;
    const std::size_t rest = header + (fcall ? std::string_view("$5\r\nFCALL\r\n").size()
                                             : std::string_view("$7\r\nEVALSHA\r\n").size()) +
                             1 + std::to_string(name).size() + 2 + name + 2;
    const std::string_view source = script.source;
    std::string out(call.substr(0, header));
    out.append("$4\r\nEVAL\r\n$").append(std::to_string(source.size())).append("\r\n");
    out.append(source).append("\r\n").append(call.substr(rest));
    return out;
  }

  // The decision a failure policy gives, or nothing for kLocal (decided by the caller).
  Decision policy_decision(const Request& r) const {
    Decision d;
    d.limit = r.limit.quota();
    d.fallback = true;
    if (r.policy == OnStoreFailure::kAllow) {
      d.allowed = true;
      d.remaining = std::max<std::int64_t>(0, r.limit.quota() - r.cost);
    } else {
      d.retry_after = options.deny_retry_after;
    }
    return d;
  }

  // Decides the requests by their failure policies, since the store could not: kError anywhere
  // reports the error; otherwise kAllow admits, kDeny rejects and kLocal asks the local store (all
  // or nothing among them, and only when nothing else rejects).
  Result<std::vector<Decision>> on_failure(std::span<const Request> requests, const Error& error) {
    std::vector<Decision> decisions(requests.size());
    std::vector<std::size_t> local_members;
    bool denied = false;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      const Request& r = requests[i];
      switch (r.policy) {
        case OnStoreFailure::kError: return error;
        case OnStoreFailure::kLocal: local_members.push_back(i); break;
        case OnStoreFailure::kAllow:
        case OnStoreFailure::kDeny:
          decisions[i] = policy_decision(r);
          denied = denied || !decisions[i].allowed;
          break;
      }
    }
    if (local_members.empty()) return decisions;
    std::vector<Limit> limits;
    limits.reserve(local_members.size());
    for (const std::size_t i : local_members) {
      limits.push_back(divided(requests[i].limit, options.fleet_size));
    }
    std::vector<LimitRequest> local_requests;
    for (std::size_t j = 0; j < local_members.size(); ++j) {
      const Request& r = requests[local_members[j]];
      local_requests.push_back({r.key(), &limits[j], r.cost == 0 ? 1 : r.cost});
    }
    std::vector<Decision> local_decisions(local_members.size());
    for (std::size_t j = 0; j < local_members.size(); ++j) {
      const Request& r = requests[local_members[j]];
      if (denied || r.cost == 0) {
        auto d = local->peek(r.key(), limits[j]);
        if (!d.ok()) continue;
        local_decisions[j] = *d;
        // Beside a refusal, only looked at; but a share this request's cost would overrun refuses
        // it too, and as a real limit: its retry_after, for want of one for that cost, is when the
        // share is whole again; none for a cost beyond the whole share, which no wait admits.
        if (denied && r.cost > d->remaining) {
          Decision& refused = local_decisions[j];
          refused.allowed = false;
          refused.cost_exceeds_limit = r.cost > d->limit;
          refused.retry_after = refused.cost_exceeds_limit ? Nanos{0} : d->reset_after;
        }
      }
    }
    bool any_peek = denied;
    for (const std::size_t i : local_members) any_peek = any_peek || requests[i].cost == 0;
    if (!any_peek) {
      if (Status s = local->acquire_all(local_requests, local_decisions); !s) return s.error();
    }
    for (std::size_t j = 0; j < local_members.size(); ++j) {
      local_decisions[j].fallback = true;
      decisions[local_members[j]] = local_decisions[j];
    }
    return decisions;
  }

  // Asks the breaker whether to call Redis; the error to report when not.
  std::optional<Error> admit(BreakerPermit& permit) {
    permit = breaker.try_acquire();
    if (permit.admitted()) return std::nullopt;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(permit.retry_after());
    return Error{ErrorCode::kCircuitOpen,
                 "redis: circuit breaker open (next try in " + std::to_string(ms.count()) + "ms)"};
  }

  // Tells the breaker how a call went: only a Redis that cannot answer is a failure. On a cluster, a
  // call that failed for its slot alone (no master serves it, until a replica is promoted; it is
  // moving), or for its node alone while another master answers (a timeout there, its node breaker
  // open: see ClientOptions::node_breaker; CLUSTERDOWN from it), is not counted either way: as a
  // failure it would open the one breaker, and every limit on the other masters would follow its
  // on_store_failure too; as a success it would hide an outage of every master (which opens the
  // breaker through the failed reconnections, see attempt_failed, or through its nodes' failures
  // once none answers: a cluster down answers CLUSTERDOWN from every node). As a probe (half-open),
  // it frees its place for another call, which may show the store deciding.
  void record(const BreakerPermit& permit, const std::optional<Error>& error) {
    const bool transient =
        error && (error->code == ErrorCode::kStoreUnavailable || error->code == ErrorCode::kTimeout);
    if (error && (detail::slot_failure(*error) ||
                  (client->cluster() && detail::node_failure(*error) && client->a_master_answering()))) {
      breaker.release(permit);
      if (breaker.state() == BreakerState::kHalfOpen) probe_later();  // another probe, another slot
      return;
    }
    if (transient) last_failure = error->message;
    const BreakerState before = breaker.state();
    const bool counted = breaker.record(permit, transient);
    const BreakerState now = breaker.state();
    if (now == BreakerState::kOpen) {
      // The call that opened it may have been a success that made the failures' share too large:
      // the last failure says why.
      if (before == BreakerState::kClosed && availability) availability(false, last_failure);
      probe_later();
    } else if (now == BreakerState::kHalfOpen && counted && !transient) {
      probe_later();  // a probe passed, and the breaker wants more (half_open_probes)
    } else if (now == BreakerState::kClosed && before == BreakerState::kHalfOpen && availability) {
      availability(true, std::string());
    }
  }

  // A failed attempt to connect, as a failed call (not while the breaker keeps calls away), whatever
  // its error: a server that answers what is not Redis's protocol cannot decide either.
  void attempt_failed(const Error& e) {
    if (breaker.state() != BreakerState::kClosed) return;
    BreakerPermit permit = breaker.try_acquire();
    if (permit.admitted()) record(permit, Error{ErrorCode::kStoreUnavailable, e.message});
  }

  // While the breaker is open, or half-open wanting more probes, a call of the store's own at each
  // open_for takes the probe a caller's would have taken, so that the breaker closes once Redis
  // decides again even when no call comes (a worker with no requests would otherwise report Redis
  // down for as long as it has none).
  void probe_later() {
    if (closing || probe_armed) return;
    probe_armed = true;
    probe_timer.expires_after(options.breaker.open_for);
    probe_timer.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
      const auto self = weak.lock();
      if (!self) return;
      self->probe_armed = false;
      if (ec || self->closing || self->breaker.state() == BreakerState::kClosed) return;
      self->probe();
    });
  }
  void probe();

  void submit(std::shared_ptr<Acquire> op, std::size_t batch);
  void send_alone(int queue, std::shared_ptr<Acquire> op, std::size_t batch);
  void send_many(int queue, std::vector<Waiting> calls);
  void send_waiting(int queue);
  void next(int queue);
  void after_failure(int queue, const Error& error);
  // Fails what waits in every queue (a call that waits for the end of a turn of a loop that has
  // stopped, say), so that nothing is left holding the store.
  void fail_waiting(const Error& error);

  RedisStoreOptions options;
  asio::any_io_executor executor;
  AnswerExecutors answer;  // see complete()
  detail::Strand strand;
  std::shared_ptr<Client> client;
  CircuitBreaker breaker;
  std::string last_failure;  // the message of the last call that counted as a failure
  std::shared_ptr<LocalStore> local;  // where kLocal decides
  std::uint64_t lease_seed = 0;
  std::atomic<std::uint64_t> lease_counter{0};
  // When calls go by FCALL to the function library again (steady clock; see call_head and eval).
  std::atomic<std::int64_t> functions_again_at{0};
  static constexpr auto kFunctionsAgainAfter = std::chrono::seconds(60);
  // Give-backs under way (see Acquire::give_back_leases()), at most kMaxGiveBacks.
  std::size_t give_backs = 0;
  static constexpr std::size_t kMaxGiveBacks = 1024;
  std::unordered_map<int, Queue> queues;  // by slot on a cluster; one, 0, on a single node
  AvailabilityListener availability;       // see RedisStore::on_availability
  RefusalListener refusal;                 // see RedisStore::on_refusal
  NodeListener node_change;                // see RedisStore::on_node_change
  NoticeListener notice;                   // see RedisStore::on_notice
  asio::steady_timer probe_timer;
  bool probe_armed = false;
  bool closing = false;  // the store is being closed: no more probes
  // The timers of releases to send again (see Acquire::release_again()), cancelled on closing.
  std::vector<std::weak_ptr<asio::steady_timer>> retry_timers;
};

// One acquire or acquire_all: its requests grouped into batches (one per slot on a cluster), sent at
// once; when every batch has answered, refunds what admitted batches took if another rejected.
// Also a release, as one request with `release` set, whose decision's `allowed` says whether the
// lease was held. Runs on the strand.
struct RedisStore::Impl::Acquire : std::enable_shared_from_this<Acquire> {
  // Given the decisions (valid during the call), and whether to post the answer (see complete())
  // rather than dispatch it. Only the Acquire, which holds the Impl, calls it: it may point into it.
  using Done = detail::UniqueFunction<void(Result<std::span<const Decision>>, bool post)>;

  // The deadline counts from here, when the caller asked.
  Acquire(std::shared_ptr<Impl> i, Requests r, Done d)
      : impl(std::move(i)),
        requests(std::move(r)),
        decisions(requests.size()),
        deadline(impl->deadline()),
        pinned(impl->pinned()),
        done(std::move(d)) {}

  void start() {
    if (!give_back && (error = impl->admit(permit))) return deliver();
    if (!impl->client->cluster()) {
      batches.resize(1);
      for (std::size_t i = 0; i < requests.size(); ++i) batches[0].members.push_back(i);
    } else {
      std::map<int, std::size_t> by_slot;
      for (std::size_t i = 0; i < requests.size(); ++i) {
        const auto [it, added] = by_slot.emplace(requests[i].slot, batches.size());
        if (added) batches.push_back(Batch{requests[i].slot, {}, {}, false});
        batches[it->second].members.push_back(i);
      }
    }
    outstanding = batches.size();
    for (std::size_t b = 0; b < batches.size(); ++b) impl->submit(shared_from_this(), b);
    started = true;
  }

  // The reply to a call of batch b alone.
  void on_reply(std::size_t b, const Result<Reply>& r) {
    if (!r.ok()) return on_error(r.error());
    if (detail::is_error(*r)) return on_error(reply_error(detail::text(*r), impl->client->cluster()));
    if (requests.front().release) {  // release.lua's answer: 1 when the lease was held
      if (r->type() != Reply::Type::kInteger) {
        return on_error(protocol_error("unexpected reply to the release script"));
      }
      decisions.front().allowed = r->integer() == 1;
      if (--outstanding == 0) finish();
      return;
    }
    if (!r->integers(6 * batches[b].members.size())) {
      return on_error(protocol_error("unexpected reply to the acquire script"));
    }
    on_values(b, r->elements().data());
  }

  void on_error(Error e) {
    error = std::move(e);
    if (--outstanding == 0) finish();
  }

  // Batch b's answer: six integers per member (allowed, cost_exceeds_limit, remaining,
  // retry_after_us, reset_after_us, and what a refund needs; for a release, whether the lease was
  // held, then zeros); -1 for each when many.lua caught an error in this call's decisions, -2 when
  // that error was Redis refusing a command for a state it is in (out of memory, read-only: see
  // unavailable_reply).
  void on_values(std::size_t b, const Reply* values) {
    if (values[0].integer() == -2) {
      return on_error(Error{ErrorCode::kStoreUnavailable,
                            "redis: refused a command of the acquire script for a state it is in (out of memory, "
                            "or read-only, say; the Redis log says which)"});
    }
    if (values[0].integer() == -1) {
      return on_error(protocol_error(
          std::string(requests.front().release ? "the release failed in the acquire script"
                                               : "the acquire script failed for this call") +
          " (the Redis log says why)"));
    }
    parse(batches[b], values);
    if (--outstanding == 0) finish();
  }

  void parse(Batch& batch, const Reply* values) {
    batch.admitted = true;
    for (std::size_t j = 0; j < batch.members.size(); ++j) {
      Request& q = requests[batch.members[j]];
      const Reply* e = values + 6 * j;
      Decision& d = decisions[batch.members[j]];
      d.allowed = e[0].integer() == 1;
      if (q.release) continue;
      d.cost_exceeds_limit = e[1].integer() == 1;
      d.limit = q.limit.quota();
      d.remaining = e[2].integer();
      d.retry_after = from_us(e[3].integer());
      d.reset_after = from_us(e[4].integer());
      d.lease = d.allowed ? q.lease : 0;
      q.extra = e[5].integer();
      batch.admitted = batch.admitted && d.allowed;
    }
  }

  void finish() {
    if (!give_back) impl->record(permit, error);
    const bool all = !error && std::all_of(decisions.begin(), decisions.end(),
                                           [](const Decision& d) { return d.allowed; });
    if (!all && batches.size() > 1) {
      // A cluster: other slots admitted what this call as a whole rejects. Give it back, then
      // answer (so that the caller's next call sees it given back). A refund to a node that is
      // not connected completes inside eval(): the count starts at one for this loop, so that
      // such a completion cannot answer before the loop is over, and the answer goes out once.
      // A refund that failed (unsent, or unanswered: it may have run) or that Redis refused (an
      // error reply: TRYAGAIN while its slot moves, OOM) leaves the leases it held taken: they go
      // back as give-backs, which change nothing if the refund did run.
      outstanding = 1;
      for (std::size_t b = 0; b < batches.size(); ++b) {
        Batch& batch = batches[b];
        if (!batch.admitted) continue;
        ++outstanding;
        batch.command = impl->script_call(detail::kRefundScript, requests, batch.members, pinned);
        impl->eval(batch.slot, detail::kRefundScript, batch.command,
                   [self = shared_from_this(), b](Result<Reply> r) {
                     if ((!r || detail::is_error(*r)) && !self->impl->closing) {
                       for (const std::size_t i : self->batches[b].members) {
                         if (self->requests[i].lease != 0) self->give_back_lease(self->requests[i]);
                       }
                     }
                     if (--self->outstanding == 0) self->deliver();
                   },
                   impl->deadline());
      }
      if (--outstanding > 0) return;
    }
    deliver();
  }

  // Decisions read from a reply are dispatched: the caller's handler may run at once, on the
  // store's strand, until it suspends (and start more acquires, which queue). That happens only
  // once the queue's bookkeeping for the reply is done (see send_alone() and send_many()). An
  // answer from start() itself, or any failure, is posted: failures come from inside next() and
  // after_failure(), where a handler that acquired again at once would run in the middle of the
  // queue's bookkeeping, and, while Redis is down, fail and acquire again ever deeper.
  void deliver() {
    if (error && release_again()) return;
    if (give_back) {
      --impl->give_backs;  // done, one way or the other
    } else if (error) {
      give_back_leases();
    }
    if (error && (error->code == ErrorCode::kProtocol || detail::try_again(*error)) && impl->refusal) {
      // Redis does not say which key held what sluice did not write (or which keys are on which
      // side of a moving slot): every key of the call.
      std::string keys;
      for (const Request& q : requests) {
        for (const std::string* k : {&q.state, &q.state2}) {
          if (!k->empty()) keys += (keys.empty() ? "" : ", ") + *k;
        }
      }
      impl->refusal(error->message + " (keys " + keys + ")");
    }
    if (error) {
      const Result<std::vector<Decision>> decided = impl->on_failure(requests, *error);
      if (!decided) return done(decided.error(), true);
      return done(std::span<const Decision>(*decided), true);
    }
    done(std::span<const Decision>(decisions), !started);
  }

  // A call that failed may still hold places of concurrency limits in Redis: an acquire sent and
  // not answered (a timeout, a lost connection: detail::may_have_run) may have run and taken leases
  // its caller never got, and a release that could not be sent, or had no answer, may have left its
  // lease there. Nobody else would give them back, and each would keep its place taken, for the
  // whole fleet, until it timed out (10 minutes by default). So each goes back in a release of its
  // own, a give-back, sent whatever the breaker says and again while Redis cannot answer, until it
  // does or the lease has timed out by itself; at most kMaxGiveBacks at once (past that, a lease
  // times out by itself, as it did before). A lease id is this store's own random number: releasing
  // one Redis does not hold changes nothing. So does a release the open breaker kept (a lease taken
  // on Redis, given back while it blinked: the leases of kLocal's fallback never come here, see
  // start_release()). Not given back: an acquire that was never sent (the breaker open, no
  // connection, its deadline past in the queue), or a release Redis refused for what it is
  // (kProtocol).
  void give_back_leases() {
    if (impl->closing) return;
    const bool transient = error->code == ErrorCode::kTimeout || error->code == ErrorCode::kStoreUnavailable ||
                           error->code == ErrorCode::kCircuitOpen;
    if (requests.front().release ? !transient : !detail::may_have_run(*error)) return;
    for (const Request& q : requests) {
      if (q.lease != 0) give_back_lease(q);
    }
  }

  void give_back_lease(const Request& q) {
    if (impl->give_backs >= Impl::kMaxGiveBacks) return;
    ++impl->give_backs;
    Requests one{q};
    one.front().cost = 1;
    one.front().release = true;
    one.front().policy = OnStoreFailure::kError;  // nothing to decide in its place
    auto op = std::make_shared<Acquire>(impl, std::move(one), [](Result<std::span<const Decision>>, bool) {});
    op->give_back = true;
    // Posted: this may run inside a queue's bookkeeping (see deliver()).
    asio::post(impl->strand, [op] { op->start(); });
  }

  // A release that Redis refused with TRYAGAIN (its slot moving, the lease set and its meta key on
  // either side: the script did not run) goes again every kReleaseRetryEvery until the slot has
  // moved, for up to kReleaseRetryFor, then as a give-back. A give-back goes again while Redis cannot
  // answer (kTimeout, kStoreUnavailable), at growing intervals, until its lease has timed out.
  bool release_again() {
    if (!requests.front().release || impl->closing) return false;
    if (give_back ? error->code != ErrorCode::kTimeout && error->code != ErrorCode::kStoreUnavailable
                  : !detail::try_again(*error)) {
      return false;
    }
    const auto now = std::chrono::steady_clock::now();
    if (retry_until == detail::SteadyTime{}) {
      retry_until = now + (give_back ? std::chrono::microseconds(requests.front().limit.params().period_us)
                                     : kReleaseRetryFor);
    }
    if (now >= retry_until) return false;
    auto timer = std::make_shared<asio::steady_timer>(impl->strand, retry_every);
    if (give_back) retry_every = std::min(2 * retry_every, kGiveBackRetryAtMost);
    std::erase_if(impl->retry_timers, [](const std::weak_ptr<asio::steady_timer>& t) { return t.expired(); });
    impl->retry_timers.push_back(timer);
    timer->async_wait([self = shared_from_this(), timer](const boost::system::error_code& ec) {
      if (ec || self->impl->closing) {  // not sent again: the store is closing
        self->error = Error{ErrorCode::kStoreUnavailable, "redis: the store was closed"};
        return self->deliver();
      }
      self->batches.clear();
      self->error.reset();
      self->started = false;
      self->deadline = self->impl->deadline();
      self->start();
    });
    return true;
  }
  static constexpr auto kReleaseRetryEvery = std::chrono::milliseconds(100);
  static constexpr auto kReleaseRetryFor = std::chrono::seconds(30);
  static constexpr auto kGiveBackRetryAtMost = std::chrono::milliseconds(5000);

  std::shared_ptr<Impl> impl;
  Requests requests;
  boost::container::small_vector<Decision, 2> decisions;  // one per request
  boost::container::small_vector<Batch, 1> batches;  // inline on a single node
  std::size_t outstanding = 0;
  bool started = false;  // start() has returned: decisions now come from a reply
  std::optional<Error> error;
  detail::SteadyTime deadline;
  std::string pinned;  // the time a test pins, as the scripts read it
  BreakerPermit permit;
  detail::SteadyTime retry_until{};  // a release sent again after TRYAGAIN: until when
  std::chrono::milliseconds retry_every = kReleaseRetryEvery;
  bool give_back = false;  // a release of a lease a failed call may hold (see give_back_leases())
  Done done;
};

// The probe is an acquire as a caller's is, on a key of its own that it leaves for at most a second:
// what fails a caller's call fails it too (a Redis out of memory or read-only refuses its write,
// which a PING, or a peek that writes nothing, would not show). On a cluster, its key is the first
// of 64 on the readiest master (Client::readiness): a connected one whose node breaker is closed,
// else one whose node breaker lets a call through, and of those alike the one that failed a call
// longest ago. A master lost with its replicas, or one that hangs (its node breaker open), fails
// its own slots' calls, not the store (see record()); but while the breaker is open no caller's
// call reaches the other masters, so that after a second none has answered lately, and a probe sent
// to the lost or hung master (failing for its slot, or counted as Redis failing) would keep the
// breaker open for every key for as long as that master is lost or hangs. (A hung master's node breaker, reopened by a probe that failed there, lets a
// call through again just as the next probe comes: having failed last, it goes after the others.)
void RedisStore::Impl::probe() {
  static const Limit kProbeLimit = *Limit::fixed_window({.limit = kMaxLimit, .period = std::chrono::seconds(1)});
  constexpr int kProbeKeys = 64;
  Requests requests;
  requests.push_back(make_request(LimitRequest{"sluice-probe", &kProbeLimit, 1, OnStoreFailure::kError}));
  if (client->cluster()) {
    const auto flawless = [](const detail::Readiness& r) {
      return r.level == detail::Readiness::kReady && r.failed == Nanos::min();
    };
    detail::Readiness best = client->readiness(requests.back().slot);
    for (int i = 1; i < kProbeKeys && !flawless(best); ++i) {
      Request other =
          make_request(LimitRequest{"sluice-probe-" + std::to_string(i), &kProbeLimit, 1, OnStoreFailure::kError});
      const detail::Readiness readiness = client->readiness(other.slot);
      if (readiness.readier_than(best)) {
        best = readiness;
        requests.back() = std::move(other);
      }
    }
  }
  auto op = std::make_shared<Acquire>(shared_from_this(), std::move(requests),
                                      [](Result<std::span<const Decision>>, bool) {});
  op->start();
  if (breaker.state() == BreakerState::kOpen) probe_later();  // not let through yet (jitter, backoff)
}

// A call for an idle queue goes at the end of this turn of the event loop, with the calls that
// come during the turn (the requests of every socket that was ready together); those that come
// while one is in flight wait, and go together when it answers. A full batch goes at once. The end
// of the turn is a next() of its own: it counts as a call in flight until then, and a turn slow
// enough to outlast a call's deadline fails that call rather than send it late.
void RedisStore::Impl::submit(std::shared_ptr<Acquire> op, std::size_t batch) {
  const int queue = client->cluster() ? op->batches[batch].slot : 0;
  if (options.max_batch <= 1) return send_alone(-1, std::move(op), batch);
  Queue& q = queues[queue];
  q.waiting.push_back({std::move(op), batch});
  if (q.busy == 0) {
    q.busy = 1;
    // Posted to the loop, not the strand, which would run it before the calls that queue in the
    // strand behind it.
    asio::post(executor, [self = shared_from_this(), queue] {
      asio::dispatch(self->strand, [self, queue] { self->next(queue); });
    });
  } else if (q.waiting.size() >= static_cast<std::size_t>(options.max_batch)) {
    ++q.busy;
    send_waiting(queue);
  }
}

// A batch in a call of its own (queue -1: in none), by its one-limit script, acquire.lua, or for a
// release release.lua.
void RedisStore::Impl::send_alone(int queue, std::shared_ptr<Acquire> op, std::size_t batch) {
  Batch& b = op->batches[batch];
  const Request& first = op->requests[b.members.front()];
  const Script& script =
      first.release ? detail::kReleaseScript : script_for(op->requests, b.members);
  b.command = first.release ? release_call(first, op->pinned)
                            : script_call(script, op->requests, b.members, op->pinned);
  const std::string_view command = b.command;
  const detail::SteadyTime deadline = op->deadline;
  eval(b.slot, script, command,
       [self = shared_from_this(), queue, op = std::move(op), batch](Result<Reply> r) {
         if (!r.ok()) {
           op->on_reply(batch, r);
           if (queue >= 0) self->after_failure(queue, r.error());
           return;
         }
         // What waited goes first: its write is then queued ahead of the work this answer
         // resumes, rather than after it.
         if (queue >= 0) self->next(queue);
         op->on_reply(batch, r);
       },
       deadline);
}

// Several acquires' batches in one call of many.lua, each thing in it once however many calls
// share it: KEYS, each state once (a two-key state's second key after it); then the distinct
// limits (limit and cost), each with its code and ARGV; the entries, each a limit on a state (its
// limit's and its first key's index); and the runs of calls, each a count of like calls (same
// pinned time and entries; releases with releases) with their pinned time, number of entries
// (releases: -1) and entries, then each call's lease ids (one per concurrency limit).
// Under load a batch is mostly many calls of one or two limits on one key, which this sends as one
// run: Redis then makes and parses a few strings for the whole batch rather than several per call.
// The call's deadline is the latest of theirs: they queued during one round trip, and an earlier
// one is not to cut the others' time short.
void RedisStore::Impl::send_many(int queue, std::vector<Waiting> calls) {
  using boost::container::small_vector;
  small_vector<const Request*, 4> states;  // distinct by their state key
  small_vector<const Request*, 4> limits;  // distinct by limit and cost
  small_vector<std::pair<std::size_t, std::size_t>, 4> entries;  // (limit, state), from 0
  small_vector<std::size_t, 64> listed;  // each call's entries, call after call
  // The index of `value` in `list`, added at its end when not there; and whether it was added.
  auto index_of = [](auto& list, const auto& value, auto same) {
    const auto it = std::find_if(list.begin(), list.end(), [&](const auto& x) { return same(x, value); });
    const auto index = static_cast<std::size_t>(it - list.begin());
    const bool added = it == list.end();
    if (added) list.push_back(value);
    return std::pair{index, added};
  };
  std::size_t keys = 0;
  std::size_t args = 3;  // the numbers of limits, entries and runs
  detail::SteadyTime deadline = calls.front().op->deadline;
  for (const Waiting& w : calls) {
    for (const std::size_t i : w.op->batches[w.batch].members) {
      const Request* r = &w.op->requests[i];
      const auto [state, new_state] =
          index_of(states, r, [](const Request* a, const Request* b) { return a->state == b->state; });
      if (new_state) keys += r->state2.empty() ? 1 : 2;
      const auto [limit, new_limit] = index_of(limits, r, [](const Request* a, const Request* b) {
        return a->cost == b->cost && a->limit == b->limit;
      });
      if (new_limit) {
        // Its code and ARGV, without the refund value and a lease id.
        args += kind_of(r->limit).args - (r->limit.algorithm() == Algorithm::kConcurrency ? 1 : 0);
      }
      listed.push_back(index_of(entries, std::pair{limit, state}, std::equal_to<>()).first);
    }
    deadline = std::max(deadline, w.op->deadline);
  }
  args += 2 * entries.size();
  // The runs: [first call, end) of like calls.
  small_vector<std::pair<std::size_t, std::size_t>, 4> runs;
  small_vector<std::size_t, 64> first_listed;  // where each call's entries start in `listed`
  for (std::size_t call = 0, at = 0; call < calls.size(); ++call) {
    first_listed.push_back(at);
    const Waiting& w = calls[call];
    const auto& members = w.op->batches[w.batch].members;
    const std::size_t n = members.size();
    // Each lease id comes after the run's entries, call after call.
    const auto leases = static_cast<std::size_t>(std::count_if(members.begin(), members.end(), [&w](std::size_t i) {
      return w.op->requests[i].limit.algorithm() == Algorithm::kConcurrency;
    }));
    const bool release = w.op->requests[members.front()].release;
    bool joins = false;
    if (!runs.empty()) {
      const Waiting& prev = calls[runs.back().first];
      const std::size_t prev_at = first_listed[runs.back().first];
      joins = prev.op->pinned == w.op->pinned && prev.op->batches[prev.batch].members.size() == n &&
              prev.op->requests[prev.op->batches[prev.batch].members.front()].release == release &&
              std::equal(listed.begin() + static_cast<std::ptrdiff_t>(at),
                         listed.begin() + static_cast<std::ptrdiff_t>(at + n),
                         listed.begin() + static_cast<std::ptrdiff_t>(prev_at));
    }
    if (joins) {
      ++runs.back().second;
    } else {
      runs.push_back({call, call + 1});
      args += 3 + n;
    }
    args += leases;
    at += n;
  }
  Command c(3 + keys + args);
  call_head(c, detail::kAcquireManyScript);
  c.arg(static_cast<std::int64_t>(keys));
  for (const Request* r : states) {
    c.arg(r->state);
    if (!r->state2.empty()) c.arg(r->state2);
  }
  c.arg(static_cast<std::int64_t>(limits.size()));
  for (const Request* r : limits) {
    c.arg(kind_of(r->limit).code);
    append_args(c, *r, false, false);
  }
  // Each entry names its state by the index of its first key in KEYS, from 1.
  small_vector<std::int64_t, 4> key_index;
  for (std::size_t i = 0, k = 1; i < states.size(); ++i) {
    key_index.push_back(static_cast<std::int64_t>(k));
    k += states[i]->state2.empty() ? 1 : 2;
  }
  c.arg(static_cast<std::int64_t>(entries.size()));
  for (const auto& [limit, state] : entries) {
    c.arg(static_cast<std::int64_t>(limit + 1)).arg(key_index[state]);
  }
  c.arg(static_cast<std::int64_t>(runs.size()));
  for (const auto& [first, end] : runs) {
    const Waiting& w = calls[first];
    const auto& members = w.op->batches[w.batch].members;
    c.arg(static_cast<std::int64_t>(end - first)).arg(w.op->pinned);
    // Releases: -1 for their number of entries, then their entry and lease ids.
    c.arg(w.op->requests[members.front()].release ? std::int64_t{-1}
                                                   : static_cast<std::int64_t>(members.size()));
    for (std::size_t j = 0; j < members.size(); ++j) {
      c.arg(static_cast<std::int64_t>(listed[first_listed[first] + j] + 1));
    }
    for (std::size_t call = first; call < end; ++call) {
      const Waiting& v = calls[call];
      for (const std::size_t i : v.op->batches[v.batch].members) {
        const Request& r = v.op->requests[i];
        if (r.limit.algorithm() == Algorithm::kConcurrency) c.arg(lease_arg(r));
      }
    }
  }
  struct Many {
    std::vector<Waiting> calls;
    std::string command;
  };
  auto many = std::make_shared<Many>(Many{std::move(calls), std::move(c).take()});
  const std::string_view command = many->command;
  const int slot = many->calls.front().op->batches[many->calls.front().batch].slot;
  eval(slot, detail::kAcquireManyScript, command,
       [self = shared_from_this(), queue, many](Result<Reply> r) {
         std::size_t values = 0;
         for (const Waiting& w : many->calls) values += 6 * w.op->batches[w.batch].members.size();
         if (r.ok() && detail::is_error(*r) && detail::text(*r).starts_with("TRYAGAIN")) {
           // A cluster slot moving: some of the keys are on either side, and the script has not
           // run. Each goes again on its own, which a moving slot does not refuse.
           for (Waiting& w : many->calls) self->send_alone(-1, std::move(w.op), w.batch);
           return self->next(queue);
         }
         std::optional<Error> error;
         if (!r.ok()) error = r.error();
         else if (detail::is_error(*r)) error = reply_error(detail::text(*r), self->client->cluster());
         else if (!r->integers(values)) error = protocol_error("unexpected reply to the acquire script");
         if (!error) self->next(queue);  // first, as in send_alone()
         std::size_t at = 0;
         for (const Waiting& w : many->calls) {
           if (error) {
             w.op->on_error(*error);
           } else {
             w.op->on_values(w.batch, r->elements().data() + at);
             at += 6 * w.op->batches[w.batch].members.size();
           }
         }
         if (error) self->after_failure(queue, *error);
       },
       deadline);
}

// A call for the queue has answered or failed, or a turn has ended: what waits goes when no other
// call in flight will take it, and an acquire that waited past its deadline fails without being
// sent (sent, it could still take from a limit after its caller was told it timed out). A release
// that did is sent anyway, with a deadline from now: sent late, it gives back a permit that would
// otherwise stay taken until its lease times out.
void RedisStore::Impl::next(int queue) {
  auto it = queues.find(queue);
  if (it == queues.end()) return;
  Queue& q = it->second;
  --q.busy;
  const auto now = std::chrono::steady_clock::now();
  // The queue is in the order of the deadlines (each is the time asked plus the command timeout),
  // so the late ones are at its front.
  boost::container::small_vector<Waiting, 2> late_releases;
  while (!q.waiting.empty() && q.waiting.front().op->deadline <= now) {
    Waiting w = std::move(q.waiting.front());
    q.waiting.pop_front();
    if (w.op->requests.front().release) {
      w.op->deadline = deadline();
      late_releases.push_back(std::move(w));
    } else {
      w.op->on_error(Error{ErrorCode::kTimeout, "redis: timed out waiting for the call in flight"});
    }
  }
  q.waiting.insert(q.waiting.begin(), std::make_move_iterator(late_releases.begin()),
                   std::make_move_iterator(late_releases.end()));
  if (q.waiting.empty()) {
    if (q.busy == 0 && client->cluster()) queues.erase(it);
    return;
  }
  if (q.busy > 0 && q.waiting.size() < static_cast<std::size_t>(options.max_batch)) return;
  ++q.busy;
  send_waiting(queue);
}

// A call for the queue failed, and its acquires have been answered. When Redis cannot be reached,
// what waits would fail at once too: it fails here, in order, rather than call by call (which
// would recurse through every queued batch).
void RedisStore::Impl::after_failure(int queue, const Error& error) {
  if (error.code == ErrorCode::kStoreUnavailable) {
    auto it = queues.find(queue);
    if (it != queues.end()) {
      std::deque<Waiting> waiting = std::move(it->second.waiting);
      it->second.waiting.clear();
      for (const Waiting& w : waiting) w.op->on_error(error);
    }
  }
  next(queue);
}

void RedisStore::Impl::fail_waiting(const Error& error) {
  for (auto& [queue, q] : queues) {
    std::deque<Waiting> waiting = std::move(q.waiting);
    q.waiting.clear();
    for (const Waiting& w : waiting) w.op->on_error(error);
  }
}

// Sends the oldest waiting batches, up to max_batch, as one call.
void RedisStore::Impl::send_waiting(int queue) {
  std::deque<Waiting>& waiting = queues[queue].waiting;
  const std::size_t n = std::min(waiting.size(), static_cast<std::size_t>(options.max_batch));
  std::vector<Waiting> calls(std::make_move_iterator(waiting.begin()),
                             std::make_move_iterator(waiting.begin() + static_cast<std::ptrdiff_t>(n)));
  waiting.erase(waiting.begin(), waiting.begin() + static_cast<std::ptrdiff_t>(n));
  if (calls.size() == 1) return send_alone(queue, std::move(calls.front().op), calls.front().batch);
  send_many(queue, std::move(calls));
}

Result<std::unique_ptr<RedisStore>> RedisStore::open(RedisStoreOptions options) {
  auto own = std::make_unique<OwnThread>();
  auto executor = own->io.get_executor();
  auto store = open(executor, std::move(options));
  if (!store) {
    own->join();
    return store;
  }
  (*store)->own_ = std::move(own);
  return store;
}

Result<std::unique_ptr<RedisStore>> RedisStore::open(asio::any_io_executor executor,
                                                     RedisStoreOptions options) {
  auto address = parse_address(options.address);
  if (!address) return address.error();
  if (options.fleet_size < 1) return invalid_argument("fleet_size must be at least 1");
  if (options.command_timeout.count() <= 0 || options.connect_timeout.count() <= 0) {
    return invalid_argument("timeouts must be positive");
  }
  if (Status s = options.breaker.validate(); !s) return s.error();
  if (options.max_batch < 1) return invalid_argument("max_batch must be at least 1");
  if (options.reconnect_min.count() < 0 || options.reconnect_min > options.reconnect_max) {
    return invalid_argument("reconnect_min must be from 0 to reconnect_max");
  }
  if (options.deny_retry_after.count() < 0) return invalid_argument("deny_retry_after must not be negative");
  if (options.cluster_map_refresh.count() < 0) return invalid_argument("cluster_map_refresh must not be negative");
  detail::ClientOptions co;
  co.address = std::move(*address);
  co.connect_timeout = options.connect_timeout;
  co.command_timeout = options.command_timeout;
  co.reconnect_min = options.reconnect_min;
  co.reconnect_max = options.reconnect_max;
  co.map_refresh = options.cluster_map_refresh;
  co.node_breaker = options.breaker;
  co.node_breaker.on_state_change = nullptr;  // the store's own breaker is the one reported
  // Every node, replicas too, knows the function library and the scripts from the start, so FCALL
  // and EVALSHA seldom meet a server without them. A library already loaded (by another gateway, or
  // before a reconnect) is refused as existing; a Redis before 7 refuses FUNCTION: both harmless.
  co.on_connect.push_back(detail::encode({"FUNCTION", "LOAD", detail::kLibrary}));
  for (const Script* script :
       {&detail::kAcquireScript, &detail::kAcquireManyScript, &detail::kRefundScript, &detail::kReleaseScript,
        &detail::kAcquireMeterScript, &detail::kAcquireIntervalScript, &detail::kAcquireFixedScript,
        &detail::kAcquireSlidingScript, &detail::kAcquireLogScript, &detail::kAcquireLeasesScript}) {
    co.on_connect.push_back(detail::encode({"SCRIPT", "LOAD", script->source}));
  }
  // A store that cannot connect is as down as one whose calls fail: each failed attempt counts as a
  // failed call, so that the breaker opens (sluice_store_up, the log) before any call is made. The
  // store is not yet made: the callback finds it through a pointer set just after.
  auto found = std::make_shared<std::weak_ptr<Impl>>();
  co.on_attempt_failed = [found](const Error& e) {
    if (auto impl = found->lock()) impl->attempt_failed(e);
  };
  co.on_node_change = [found](const std::string& node, NodeState state, const std::string& why) {
    if (auto impl = found->lock(); impl && impl->node_change) impl->node_change(node, state, why);
  };
  co.on_notice = [found](Notice notice, const std::string& text) {
    if (auto impl = found->lock(); impl && impl->notice) impl->notice(notice, text);
  };
  auto impl = std::make_shared<Impl>(std::move(executor), options, std::move(co));
  *found = impl;
  asio::dispatch(impl->strand, [impl] { impl->client->start(); });
  return std::unique_ptr<RedisStore>(new RedisStore(std::move(options), std::move(impl), nullptr));
}

RedisStore::RedisStore(RedisStoreOptions options, std::shared_ptr<Impl> impl,
                       std::unique_ptr<OwnThread> own)
    : options_(std::move(options)), own_(std::move(own)), impl_(std::move(impl)) {}

RedisStore::~RedisStore() {
  // Closing fails what is pending; its handlers still run, on their executors. It also lets go of
  // the decisions in flight, which hold the store's state while the connection holds them. On an
  // io_context that has stopped (a server shutting down, its threads joined) nothing would run a
  // dispatched close, and those would keep each other alive: close here, no thread is in the loop.
  const auto* loop = impl_->executor.target<asio::io_context::executor_type>();
  if (loop != nullptr && loop->context().stopped()) {
    impl_->closing = true;
    impl_->client->stop();
    impl_->fail_waiting(Error{ErrorCode::kStoreUnavailable, "redis: the store was closed"});
  } else {
    asio::dispatch(impl_->strand, [impl = impl_] {
      impl->closing = true;
      impl->probe_timer.cancel();
      for (const auto& t : impl->retry_timers) {
        if (auto timer = t.lock()) timer->cancel();
      }
      impl->client->stop();
    });
  }
  if (own_) own_->join();
  impl_.reset();
}

CircuitBreaker& RedisStore::breaker() { return impl_->breaker; }

Limit RedisStore::local_share(const Limit& limit) const { return divided(limit, options_.fleet_size); }

void RedisStore::on_refusal(RefusalListener listener) {
  asio::dispatch(impl_->strand, [impl = impl_, listener = std::move(listener)]() mutable {
    impl->refusal = std::move(listener);
  });
}

void RedisStore::on_notice(NoticeListener listener) {
  asio::dispatch(impl_->strand, [impl = impl_, listener = std::move(listener)]() mutable {
    impl->notice = std::move(listener);
  });
}

void RedisStore::on_node_change(NodeListener listener) {
  asio::dispatch(impl_->strand, [impl = impl_, listener = std::move(listener)]() mutable {
    impl->node_change = std::move(listener);
  });
}

void RedisStore::on_availability(AvailabilityListener listener) {
  asio::dispatch(impl_->strand, [impl = impl_, listener = std::move(listener)]() mutable {
    impl->availability = std::move(listener);
  });
}

void RedisStore::start_connect(StatusHandler handler) {
  asio::dispatch(impl_->strand, [impl = impl_, handler = std::move(handler)]() mutable {
    impl->client->when_connected(
        [impl, handler = std::move(handler)](Status s) mutable {
          complete(std::move(handler), impl->answer, std::move(s));
        });
  });
}

namespace {

Status check_cost(std::int64_t cost) {
  if (cost < 1 || cost > kMaxLimit) {
    return invalid_argument("cost must be between 1 and 2^40 (1099511627776), got " +
                            std::to_string(cost));
  }
  return {};
}

}  // namespace

void RedisStore::start_decide(const LimitRequest& request, DecisionHandler handler) {
  Requests requests;
  requests.push_back(impl_->make_request(request));
  auto op = std::make_shared<Impl::Acquire>(
      impl_, std::move(requests),
      [ex = &impl_->answer, handler = std::move(handler)](
          Result<std::span<const Decision>> r, bool post) mutable {
        if (!r) return complete(std::move(handler), *ex, Result<Decision>(r.error()), post);
        complete(std::move(handler), *ex, Result<Decision>(r->front()), post);
      });
  asio::dispatch(impl_->strand, [op] { op->start(); });
}

void RedisStore::start_acquire(const LimitRequest& request, DecisionHandler handler) {
  if (request.limit == nullptr) {
    return complete(std::move(handler), impl_->answer,
                    Result<Decision>(invalid_argument("a limit request has no limit")));
  }
  if (Status s = check_cost(request.cost); !s) {
    return complete(std::move(handler), impl_->answer, Result<Decision>(s.error()));
  }
  start_decide(request, std::move(handler));
}

void RedisStore::start_peek(std::string_view key, const Limit& limit, DecisionHandler handler) {
  start_decide(LimitRequest{key, &limit, 0, options_.on_store_failure}, std::move(handler));
}

namespace {

// Starts an acquire of these (valid, not empty) requests, all or nothing.
void start_calls(const std::shared_ptr<RedisStore::Impl>& impl, std::span<const LimitRequest> requests,
                 RedisStore::Impl::Acquire::Done done) {
  Requests copies;
  copies.reserve(requests.size());
  for (const LimitRequest& r : requests) copies.push_back(impl->make_request(r));
  auto op = std::make_shared<RedisStore::Impl::Acquire>(impl, std::move(copies), std::move(done));
  asio::dispatch(impl->strand, [op] { op->start(); });
}

}  // namespace

void RedisStore::start_acquire_all(std::span<const LimitRequest> requests,
                                   DecisionsHandler handler) {
  std::vector<Decision> slots(requests.size());
  if (Status s = validate(requests, slots); !s) {
    return complete(std::move(handler), impl_->answer,
                    Result<std::vector<Decision>>(s.error()));
  }
  if (requests.empty()) {
    return complete(std::move(handler), impl_->answer,
                    Result<std::vector<Decision>>(std::move(slots)));
  }
  start_calls(impl_, requests,
              [ex = &impl_->answer, handler = std::move(handler), slots = std::move(slots)](
                  Result<std::span<const Decision>> r, bool post) mutable {
                if (!r) return complete(std::move(handler), *ex, Result<std::vector<Decision>>(r.error()), post);
                std::copy(r->begin(), r->end(), slots.begin());
                complete(std::move(handler), *ex, Result<std::vector<Decision>>(std::move(slots)), post);
              });
}

void RedisStore::start_acquire_into(std::span<const LimitRequest> requests, std::span<Decision> decisions,
                                    StatusHandler handler) {
  if (Status s = validate(requests, decisions); !s || requests.empty()) {
    return complete(std::move(handler), impl_->answer, std::move(s));
  }
  start_calls(impl_, requests,
              [ex = &impl_->answer, handler = std::move(handler), decisions](
                  Result<std::span<const Decision>> r, bool post) mutable {
                if (!r) return complete(std::move(handler), *ex, Status(r.error()), post);
                std::copy(r->begin(), r->end(), decisions.begin());
                complete(std::move(handler), *ex, Status{}, post);
              });
}

void RedisStore::start_reset(std::string_view key, const Limit& limit, StatusHandler handler) {
  Request r = impl_->make_request(LimitRequest{key, &limit, 0});
  std::string command = r.state2.empty() ? detail::encode({"DEL", r.state})
                                         : detail::encode({"DEL", r.state, r.state2});
  auto owned = std::make_shared<std::string>(std::move(command));
  asio::dispatch(impl_->strand, [impl = impl_, slot = r.slot, owned, deadline = impl_->deadline(),
                                 handler = std::move(handler)]() mutable {
    BreakerPermit permit;
    if (auto refused = impl->admit(permit)) {
      return complete(std::move(handler), impl->answer, Status(*refused));
    }
    impl->client->send(slot, *owned, [impl, permit, owned,
                                      handler = std::move(handler)](Result<Reply> reply) mutable {
      std::optional<Error> error;
      if (!reply.ok()) error = reply.error();
      else if (detail::is_error(*reply)) error = reply_error(detail::text(*reply), impl->client->cluster());
      impl->record(permit, error);
      complete(std::move(handler), impl->answer, error ? Status(*error) : Status());
    }, deadline);
  });
}

void RedisStore::start_release(std::string_view key, const Limit& limit, std::uint64_t lease,
                               ReleaseHandler handler) {
  if (limit.algorithm() != Algorithm::kConcurrency) {
    return complete(std::move(handler), impl_->answer,
                    Result<bool>(invalid_argument(
                        "release applies to concurrency limits only, not " +
                        std::string(to_string(limit.algorithm())))));
  }
  // A lease that OnStoreFailure::kLocal gave is held in the local store: it goes back there, and
  // that is all (Redis's lease ids are random 64-bit numbers: none is both).
  if (const Result<bool> local = impl_->local->release_held(key, local_share(limit), lease);
      local.ok() && *local) {
    return complete(std::move(handler), impl_->answer, Result<bool>(true));
  }
  // Queued and sent as acquires are, so that under load it goes in a batch with them. Its cost is
  // an acquire's usual 1, so that in a batch it shares their limit and entry.
  Requests requests;
  requests.push_back(impl_->make_request(LimitRequest{key, &limit, 0, OnStoreFailure::kError}));
  requests.front().cost = 1;
  requests.front().release = true;
  requests.front().lease = lease;
  auto op = std::make_shared<Impl::Acquire>(
      impl_, std::move(requests),
      [ex = &impl_->answer, handler = std::move(handler)](
          Result<std::span<const Decision>> r, bool post) mutable {
        if (!r) return complete(std::move(handler), *ex, Result<bool>(r.error()), post);
        complete(std::move(handler), *ex, Result<bool>(r->front().allowed), post);
      });
  asio::dispatch(impl_->strand, [op] { op->start(); });
}

// The synchronous calls: the asynchronous ones, waited for.
namespace {

template <class T>
struct Waiter {
  std::promise<T> promise;
  auto handler() {
    return [this](T value) { promise.set_value(std::move(value)); };
  }
  T get() { return promise.get_future().get(); }
};

}  // namespace

Status RedisStore::connect() {
  Waiter<Status> w;
  start_connect(StatusHandler(w.handler()));
  return w.get();
}

Result<Decision> RedisStore::acquire(std::string_view key, const Limit& limit, std::int64_t cost) {
  return acquire(LimitRequest{key, &limit, cost, options_.on_store_failure});
}

Result<Decision> RedisStore::acquire(const LimitRequest& request) {
  Waiter<Result<Decision>> w;
  start_acquire(request, DecisionHandler(w.handler()));
  return w.get();
}

Status RedisStore::acquire_all(std::span<const LimitRequest> requests,
                               std::span<Decision> decisions) {
  Waiter<Status> w;
  start_acquire_into(requests, decisions, StatusHandler(w.handler()));
  return w.get();
}

Result<Decision> RedisStore::peek(std::string_view key, const Limit& limit) {
  Waiter<Result<Decision>> w;
  start_peek(key, limit, DecisionHandler(w.handler()));
  return w.get();
}

Status RedisStore::reset(std::string_view key, const Limit& limit) {
  Waiter<Status> w;
  start_reset(key, limit, StatusHandler(w.handler()));
  return w.get();
}

Status RedisStore::release(std::string_view key, const Limit& limit, std::uint64_t lease) {
  Waiter<Result<bool>> w;
  start_release(key, limit, lease, ReleaseHandler(w.handler()));
  auto r = w.get();
  if (!r) return r.error();
  return {};
}

}  // namespace sluice::redis
