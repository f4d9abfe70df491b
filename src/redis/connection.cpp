#include "redis/connection.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>

namespace sluice::redis::detail {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

constexpr std::size_t kReadChunk = 64 * 1024;

}  // namespace

Connection::Connection(Strand strand, ConnectionOptions options, Listener listener)
    : strand_(std::move(strand)),
      options_(std::move(options)),
      listener_(std::move(listener)),
      resolver_(strand_),
      socket_(strand_),
      connect_timer_(strand_),
      command_timer_(strand_),
      retry_timer_(strand_),
      in_(kReadChunk) {}

Connection::~Connection() = default;

Error Connection::unavailable(std::string what) const {
  return Error{ErrorCode::kStoreUnavailable,
               "redis " + options_.endpoint.to_string() + ": " + std::move(what)};
}

void Connection::start() {
  if (state_ != State::kIdle) return;
  connect();
}

void Connection::stop() {
  if (state_ == State::kStopped) return;
  stopping_ = true;
  disconnect(unavailable("connection closed"));
  state_ = State::kStopped;
  retry_timer_.cancel();
  for (auto& f : std::exchange(attempt_waiters_, {})) f(unavailable("connection closed"));
}

void Connection::when_attempted(UniqueFunction<void(Status)> f) {
  if (state_ == State::kReady) {
    f(Status{});
  } else if (state_ == State::kStopped) {
    f(unavailable("connection closed"));
  } else {
    attempt_waiters_.push_back(std::move(f));
  }
}

void Connection::connect() {
  state_ = State::kConnecting;
  const std::uint64_t generation = ++generation_;
  auto self = shared_from_this();
  connect_timer_.expires_after(options_.connect_timeout);
  connect_timer_.async_wait([this, self, generation](const boost::system::error_code& ec) {
    if (ec || generation != generation_ || state_ == State::kReady) return;
    const std::string after = std::to_string(options_.connect_timeout.count()) + "ms";
    disconnect(unavailable(state_ == State::kHandshake ? "connected, but no answer within " + after
                                                       : "connect timed out after " + after));
  });
  resolver_.async_resolve(
      options_.endpoint.host, std::to_string(options_.endpoint.port),
      [this, self, generation](const boost::system::error_code& ec,
                               const tcp::resolver::results_type& results) {
        if (generation != generation_) return;
        if (ec) return disconnect(unavailable("cannot resolve: " + ec.message()));
        asio::async_connect(socket_, results,
                            [this, self, generation](const boost::system::error_code& e,
                                                     const tcp::endpoint& ep) {
                              on_connect(generation, e, ep);
                            });
      });
}

void Connection::on_connect(std::uint64_t generation, const boost::system::error_code& ec,
                            const tcp::endpoint&) {
  if (generation != generation_) return;
  if (ec) return disconnect(unavailable("cannot connect: " + ec.message()));
  boost::system::error_code ignored;
  socket_.set_option(tcp::no_delay(true), ignored);
  state_ = State::kHandshake;
  read();
  handshake();
}

// AUTH and SELECT, pipelined, or a PING when neither is needed; the connection is ready once each
// has answered OK. Something is always asked and waited for: a server that accepts connections
// but does not answer (stopped, or a host that is not Redis) is not taken for ready, and one that
// wants a password says so here (NOAUTH) rather than by closing on the scripts sent next (it
// refuses a long argument from a client that has not authenticated).
void Connection::handshake() {
  std::vector<std::string> commands;
  if (!options_.password.empty()) {
    commands.push_back(options_.user.empty() ? encode({"AUTH", options_.password})
                                             : encode({"AUTH", options_.user, options_.password}));
  }
  if (options_.db != 0) commands.push_back(encode({"SELECT", std::to_string(options_.db)}));
  const bool ping = commands.empty();
  if (ping) commands.push_back(encode({"PING"}));
  auto left = std::make_shared<std::size_t>(commands.size());
  const std::uint64_t generation = generation_;
  const SteadyTime deadline = std::chrono::steady_clock::now() + options_.connect_timeout;
  const bool auth = !options_.password.empty();
  for (std::size_t i = 0; i < commands.size(); ++i) {
    const bool is_auth = auth && i == 0;
    enqueue(commands[i], [this, left, generation, ping, is_auth](Result<Reply> r) {
      if (generation != generation_) return;
      if (!r.ok()) return disconnect(r.error());
      // A user whose ACL leaves PING out (NOPERM) has been answered, and may still run the scripts.
      if (is_error(*r) && !(ping && text(*r).starts_with("NOPERM"))) {
        const std::string_view why = text(*r);
        std::string hint;
        if (why.starts_with("NOAUTH")) {
          hint = " (give the password in the address: redis://:password@host:port, "
                 "or redis-cluster://:password@host:port,host:port)";
        } else if (is_auth && options_.escaped_credentials &&
                   (why.starts_with("WRONGPASS") || why.find("invalid") != std::string_view::npos)) {
          // Sent decoded: an address written for a version that sent a '%' as written now
          // authenticates with another password. Said without the user or password.
          hint = " (the address's user or password holds a '%', which sluice reads as an escape, as "
                 "in any URL: %41 is 'A'; versions before percent-decoding sent it as written; "
                 "write a '%' itself as %25)";
        }
        return disconnect(unavailable("refused the handshake: " + std::string(why) + hint));
      }
      if (--*left == 0) set_ready();
    }, deadline);
  }
}

// The backoff starts over once the server answers a command (see on_read), not here: a server that
// accepts and closes at once (at maxclients, say) would otherwise be retried without pause.
void Connection::set_ready() {
  state_ = State::kReady;
  answered_ = false;
  last_heard_ = std::chrono::steady_clock::now();
  first_attempt_ = false;
  connect_timer_.cancel();
  // Queued ahead of every caller's command; a failure here only means NOSCRIPT later.
  const SteadyTime deadline = std::chrono::steady_clock::now() + options_.command_timeout;
  for (const std::string& c : options_.on_connect) enqueue(c, [](Result<Reply>) {}, deadline);
  for (auto& f : std::exchange(attempt_waiters_, {})) f(Status{});
  if (listener_) listener_(true, std::string());
}

void Connection::send(std::string_view command, Callback callback) {
  send(command, std::move(callback), std::chrono::steady_clock::now() + options_.command_timeout);
}

void Connection::send(std::string_view command, Callback callback, SteadyTime deadline) {
  if (first_attempt_ && state_ != State::kReady && state_ != State::kStopped) {
    // Just started: the command waits for the first attempt to end (at most connect_timeout), as
    // one sent by a caller that opened the store and asked at once must; it is not "not connected".
    attempt_waiters_.push_back([this, self = shared_from_this(), command = std::string(command),
                                callback = std::move(callback), deadline](Status s) mutable {
      if (!s.ok()) return callback(s.error());
      if (std::chrono::steady_clock::now() >= deadline) {  // not sent: it cannot have run
        return callback(unavailable("not connected within the command's deadline"));
      }
      send(command, std::move(callback), deadline);
    });
    return;
  }
  if (state_ != State::kReady) {
    callback(unavailable(state_ == State::kStopped ? "connection closed" : "not connected"));
    return;
  }
  enqueue(command, std::move(callback), deadline);
}

void Connection::enqueue(std::string_view command, Callback callback, SteadyTime deadline) {
  // Deadlines must not decrease along the queue (see on_timer); one set a little earlier than the
  // one before it, by a caller that started first but got here second, waits as long as that one.
  if (!pending_.empty()) deadline = std::max(deadline, pending_.back().deadline);
  pending_.push_back({std::move(callback), deadline});
  out_.append(command);
  // The timer may still wait for a later deadline of a command that has been answered since.
  if (!timer_armed_ || deadline < timer_expiry_) arm_timer();
  // Written at once when no write is in flight: a decision waits for its answer, and a write
  // posted behind the handlers that are ready now waited a whole turn of the event loop (about a
  // fifth of a decision's wait for Redis, under load). Commands that come while a write is in
  // flight go together in the next one.
  if (!writing_now_) flush();
}

void Connection::flush() {
  if (writing_now_ || out_.empty()) return;
  writing_now_ = true;
  writing_.swap(out_);
  out_.clear();
  asio::async_write(socket_, asio::buffer(writing_),
                    [this, self = shared_from_this(), generation = generation_](
                        const boost::system::error_code& ec, std::size_t) {
                      if (generation != generation_) return;
                      writing_now_ = false;
                      writing_.clear();
                      if (ec) return disconnect(unavailable("write failed: " + ec.message()));
                      flush();
                    });
}

void Connection::read() {
  socket_.async_read_some(asio::buffer(in_),
                          [this, self = shared_from_this(), generation = generation_](
                              const boost::system::error_code& ec, std::size_t n) {
                            if (generation != generation_) return;
                            if (ec) {
                              return disconnect(unavailable(
                                  ec == asio::error::eof ? "connection closed by the server"
                                                         : "read failed: " + ec.message()));
                            }
                            on_read(generation, n);
                          });
}

void Connection::on_read(std::uint64_t generation, std::size_t n) {
  last_heard_ = std::chrono::steady_clock::now();
  reader_.feed(in_.data(), n);
  for (;;) {
    Result<std::optional<Reply>> next = reader_.next();
    if (!next) {
      // Not Redis speaking, most likely (an HTTP server's "HTTP/1.1 400" at a mistyped port): the
      // address says which server.
      Error e = next.error();
      if (e.message.starts_with("redis: ")) e.message.erase(0, 7);
      e.message = "redis " + options_.endpoint.to_string() + ": " + e.message;
      return disconnect(std::move(e));
    }
    if (!next->has_value()) break;
    Reply reply = std::move(**next);
    // An error is no answer: a server at maxclients sends one, then closes.
    if (state_ == State::kReady && !answered_ && !reply.is_error()) {
      answered_ = true;
      failures_ = 0;
    }
    if (pending_.empty()) {
      return disconnect(Error{ErrorCode::kProtocol, "redis: a reply nobody asked for"});
    }
    Callback callback = std::move(pending_.front().callback);
    pending_.pop_front();
    if (dead_ > 0) {
      --dead_;  // a reply that came after its deadline: its caller was told of the timeout
      continue;
    }
    callback(std::move(reply));
    if (generation != generation_) return;  // the callback closed the connection
  }
  read();
}

void Connection::arm_timer() {
  if (dead_ >= pending_.size()) {
    timer_armed_ = false;
    return;
  }
  timer_armed_ = true;
  timer_expiry_ = pending_[dead_].deadline;
  command_timer_.expires_at(timer_expiry_);
  command_timer_.async_wait([this, self = shared_from_this(), generation = generation_](
                                const boost::system::error_code& ec) {
    if (ec || generation != generation_) return;
    on_timer(generation);
  });
}

// Fails the commands whose deadline has passed. Deadlines never decrease along the queue, so the
// timed-out commands are always its first entries.
//
// A connection on which the server has sent nothing for kSilentFor while a command waited past its
// deadline is given up and made again: the path to the server may have died without a FIN or an
// RST (a NAT or firewall that dropped its state, a host gone), which the kernel notices only after
// minutes of retransmits, while a new connection may well get through. (A server that is itself
// stopped keeps failing the new connection's handshake, with backoff, as when it is down.)
void Connection::on_timer(std::uint64_t generation) {
  const auto now = std::chrono::steady_clock::now();
  while (dead_ < pending_.size() && pending_[dead_].deadline <= now) {
    Callback callback = std::move(pending_[dead_].callback);
    ++dead_;
    callback(Error{ErrorCode::kTimeout,
                   "redis " + options_.endpoint.to_string() + " did not answer within " +
                       std::to_string(options_.command_timeout.count()) + "ms" + std::string(kMayHaveRun)});
    if (generation != generation_) return;
  }
  const auto silent_for = std::max<SteadyTime::duration>(kSilentFor, 2 * options_.command_timeout);
  if (dead_ > 0 && now - last_heard_ >= silent_for) {
    return disconnect(unavailable(
        "sent nothing for " +
        std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now - last_heard_).count()) +
        "ms while commands waited: connecting again"));
  }
  arm_timer();
}

void Connection::disconnect(Error why) {
  if (state_ == State::kStopped || state_ == State::kIdle) return;
  const bool was_ready = state_ == State::kReady;
  ++generation_;
  boost::system::error_code ignored;
  socket_.close(ignored);
  resolver_.cancel();
  connect_timer_.cancel();
  command_timer_.cancel();
  timer_armed_ = false;
  writing_now_ = false;
  out_.clear();
  writing_.clear();
  reader_ = ReplyReader();
  std::deque<Pending> pending = std::exchange(pending_, {});
  const std::size_t dead = std::exchange(dead_, 0);
  state_ = State::kIdle;
  if (was_ready) {
    if (why.code == ErrorCode::kStoreUnavailable) why.message += kMayHaveRun;
    if (!answered_) ++failures_;
  } else {
    ++failures_;
    last_error_ = why.message;
    first_attempt_ = false;
    for (auto& f : std::exchange(attempt_waiters_, {})) f(why);
    if (options_.on_attempt_failed) options_.on_attempt_failed(why);
  }
  const std::uint64_t generation = generation_;
  for (std::size_t i = dead; i < pending.size(); ++i) {
    pending[i].callback(why);
    if (generation != generation_) return;
  }
  if (was_ready && listener_) listener_(false, why.message);
  if (!stopping_ && state_ == State::kIdle) retry_later();
}

void Connection::retry_later() {
  // 10ms, 20ms, 40ms ... up to reconnect_max; the first retry after losing a connection that had
  // answered is immediate.
  auto delay = std::chrono::milliseconds(0);
  if (failures_ > 0) {
    const int shift = std::min(failures_ - 1, 16);
    delay = std::min(options_.reconnect_max, options_.reconnect_min * (std::int64_t{1} << shift));
  }
  state_ = State::kConnecting;
  retry_timer_.expires_after(delay);
  retry_timer_.async_wait([this, self = shared_from_this()](const boost::system::error_code& ec) {
    if (ec || state_ == State::kStopped) return;
    connect();
  });
}

}  // namespace sluice::redis::detail
