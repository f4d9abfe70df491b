// Connection: one pipelined TCP connection to one Redis node. A command is written at once when no
// write is in flight; those that come meanwhile go together in the next write. Replies are matched
// to them in order. Each command has a deadline; a lost connection is re-established with backoff,
// and while it is down commands fail at once (no offline queue). Not thread-safe: every call and
// every callback runs on its strand.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/any_io_executor.hpp>

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "redis/resp.h"
#include "sluice/redis/address.h"

namespace sluice::redis::detail {

// How a connection fails a command it sent and had no answer to (a timeout, a lost connection):
// Redis may have run it.
inline constexpr std::string_view kMayHaveRun = "; the command may have run";
inline bool may_have_run(const Error& e) { return e.message.find(kMayHaveRun) != std::string::npos; }

using Strand = boost::asio::strand<boost::asio::any_io_executor>;
using SteadyTime = std::chrono::steady_clock::time_point;

struct ConnectionOptions {
  Endpoint endpoint;
  std::string user;
  std::string password;
  bool escaped_credentials = false;  // see Address::escaped_credentials
  int db = 0;
  std::chrono::milliseconds connect_timeout{200};
  std::chrono::milliseconds command_timeout{50};
  std::chrono::milliseconds reconnect_min{10};
  std::chrono::milliseconds reconnect_max{500};
  // Encoded commands sent on every new connection once it is ready, ahead of any other (the
  // scripts' SCRIPT LOAD); their replies are not waited for.
  std::vector<std::string> on_connect;
  // Told of each attempt to connect that failed (on the strand).
  std::function<void(const Error&)> on_attempt_failed;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // Told when the connection becomes ready (true) or is lost (false, with why).
  using Listener = std::function<void(bool ready, const std::string& why)>;

  Connection(Strand strand, ConnectionOptions options, Listener listener = {});
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Connects, and reconnects whenever the connection is lost, until stop().
  void start();
  // Closes the connection for good; what is pending fails.
  void stop();

  bool ready() const { return state_ == State::kReady; }
  // Why the last attempt to connect failed; empty before any did.
  const std::string& last_error() const { return last_error_; }
  const Endpoint& endpoint() const { return options_.endpoint; }

  // Sends one encoded command. The callback gets the reply (an error reply too), or kTimeout at the
  // deadline (by default the command timeout from now), or kStoreUnavailable at once when not
  // connected or when the connection is lost first. Until the first connection attempt has ended,
  // the command waits for it (sent when it connects, failed when it fails).
  void send(std::string_view command, Callback callback, SteadyTime deadline);
  void send(std::string_view command, Callback callback);

  // Calls `f` once the current or next connection attempt has ended: ok when connected.
  void when_attempted(UniqueFunction<void(Status)> f);

 private:
  enum class State { kIdle, kConnecting, kHandshake, kReady, kStopped };
  // How long a server may send nothing while a command waits past its deadline before the
  // connection is made again (at least two command timeouts; see on_timer).
  static constexpr auto kSilentFor = std::chrono::seconds(1);
  struct Pending {
    Callback callback;  // empty once completed by a timeout: its reply is discarded
    SteadyTime deadline;
  };

  void connect();
  void on_connect(std::uint64_t generation, const boost::system::error_code& ec,
                  const boost::asio::ip::tcp::endpoint& ep);
  void handshake();
  void set_ready();
  void enqueue(std::string_view command, Callback callback, SteadyTime deadline);
  void flush();
  void read();
  void on_read(std::uint64_t generation, std::size_t n);
  void arm_timer();
  void on_timer(std::uint64_t generation);
  void disconnect(Error why);
  void retry_later();
  Error unavailable(std::string what) const;

  Strand strand_;
  ConnectionOptions options_;
  Listener listener_;
  boost::asio::ip::tcp::resolver resolver_;
  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer connect_timer_;
  boost::asio::steady_timer command_timer_;
  boost::asio::steady_timer retry_timer_;
  State state_ = State::kIdle;
  bool stopping_ = false;
  std::uint64_t generation_ = 0;  // one per socket; completions of an older socket are ignored
  int failures_ = 0;              // consecutive failed attempts, for the backoff
  bool answered_ = false;         // the server has answered since the connection became ready
  bool first_attempt_ = true;     // no attempt has ended yet: commands wait for it
  std::vector<UniqueFunction<void(Status)>> attempt_waiters_;
  std::string last_error_;

  std::deque<Pending> pending_;  // in the order the replies will come
  std::size_t dead_ = 0;         // how many of pending_'s first entries timed out
  SteadyTime last_heard_{};      // when the server last sent anything (or the connection became ready)
  bool timer_armed_ = false;
  SteadyTime timer_expiry_{};    // when command_timer_ fires, while armed
  std::string out_;              // what is yet to be written
  std::string writing_;          // what is being written
  bool writing_now_ = false;
  std::vector<char> in_;
  ReplyReader reader_;
};

}  // namespace sluice::redis::detail
