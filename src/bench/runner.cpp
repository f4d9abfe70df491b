#include "bench/runner.h"

#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>

#include "core/duration.h"

namespace sluice::bench {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;
using boost::system::error_code;
using namespace std::chrono_literals;
using beast_string_view = boost::beast::string_view;

constexpr std::size_t kReadBuffer = 16 * 1024;
constexpr std::uint32_t kMaxHeader = 64 * 1024;
constexpr std::int64_t kAbort = -1;  // Shared::go when the run is called off during setup
constexpr Nanos kBurstLead = 10ms;   // from "all connected" to the burst's instant
constexpr Nanos kBurstSpin = 300us;  // spin, rather than sleep, this close to the instant
constexpr Nanos kStopPoll = 50ms;    // how often the opening of connections looks for a stop
constexpr Nanos kFirstConnectBackoff = 1ms;  // closed loop, after a connect fails (see on_connect)
constexpr Nanos kMaxConnectBackoff = 100ms;

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto x = static_cast<unsigned char>(a[i]);
    const auto y = static_cast<unsigned char>(b[i]);
    if (x != y && std::tolower(x) != std::tolower(y)) return false;
  }
  return true;
}

std::int64_t unix_now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::optional<std::int64_t> parse_count(std::string_view value) {
  return parse_seconds(value);  // the same grammar: digits only
}

// What a response's header said that the report cares about; filled by ResponseParser.
struct ResponseFields {
  int status = 0;
  int bad_status = 0;  // a status line's code outside 100..599, which makes it a bad response
  std::optional<std::int64_t> retry_after_s;
  std::string invalid_retry_after;        // a Retry-After that was neither seconds nor a date
  std::vector<QuotaSeen> quotas;          // from RateLimit
  std::optional<std::int64_t> remaining;  // from RateLimit-Remaining / X-RateLimit-Remaining
  std::optional<std::int64_t> reset;      // from RateLimit-Reset / X-RateLimit-Reset

  void clear() {
    status = 0;
    bad_status = 0;
    retry_after_s.reset();
    invalid_retry_after.clear();
    quotas.clear();
    remaining.reset();
    reset.reset();
  }
};

// A response parser that keeps nothing but the status and the rate-limit fields, and discards the
// body as it streams by: no allocation per response.
class ResponseParser final : public http::basic_parser<false> {
 public:
  ResponseParser(bool head, ResponseFields& fields, RateLimitSummary& summary)
      : fields_(fields), summary_(summary) {
    body_limit(boost::none);
    header_limit(kMaxHeader);
    eager(true);
    skip(head);
  }

 private:
  void on_request_impl(http::verb, beast_string_view, beast_string_view, int,
                       error_code&) override {}
  void on_response_impl(int code, beast_string_view, int, error_code& ec) override {
    // Beast takes any three digits; a status is 100 to 599 (RFC 9110 15). Anything else cannot be
    // counted as admitted, rejected or other: it is a bad response, and the run's counts agree.
    if (code < 100 || code > 599) {
      fields_.bad_status = code;
      ec = http::error::bad_status;
      return;
    }
    fields_.status = code;
  }
  void on_field_impl(http::field f, beast_string_view name_bsv, beast_string_view value_bsv,
                     error_code&) override {
    const std::string_view value(value_bsv.data(), value_bsv.size());
    if (f == http::field::retry_after) {
      fields_.retry_after_s = parse_retry_after(value, unix_now_s());
      if (!fields_.retry_after_s) fields_.invalid_retry_after = printable_sample(value);
      return;
    }
    if (f != http::field::unknown || name_bsv.size() < 9) return;
    std::string_view name(name_bsv.data(), name_bsv.size());
    if (name[0] == 'x' || name[0] == 'X') {
      if (name.size() < 2 || name[1] != '-') return;
      name.remove_prefix(2);
    } else if (name[0] != 'r' && name[0] != 'R') {
      return;
    }
    if (iequals(name, "RateLimit")) {
      parse_ratelimit_field(value, fields_.quotas);
    } else if (iequals(name, "RateLimit-Policy")) {
      summary_.add_policy(value);
    } else if (iequals(name, "RateLimit-Remaining")) {
      fields_.remaining = parse_count(value);
    } else if (iequals(name, "RateLimit-Reset")) {
      fields_.reset = parse_count(value);
    }
  }
  void on_header_impl(error_code&) override {}
  void on_body_init_impl(const boost::optional<std::uint64_t>&, error_code&) override {}
  std::size_t on_body_impl(beast_string_view body, error_code&) override { return body.size(); }
  void on_chunk_header_impl(std::uint64_t, beast_string_view, error_code&) override {}
  std::size_t on_chunk_body_impl(std::uint64_t, beast_string_view body, error_code&) override {
    return body.size();
  }
  void on_finish_impl(error_code&) override {}

  ResponseFields& fields_;
  RateLimitSummary& summary_;
};

// What the threads share. The plan and endpoints are set before the threads start and not changed.
struct Shared {
  Shared(const Plan& p, std::vector<tcp::endpoint> e) : plan(p), endpoints(std::move(e)) {}

  const Plan& plan;
  const std::vector<tcp::endpoint> endpoints;
  const int workers = plan.threads;

  std::mutex mu;
  std::condition_variable cv;
  int connected = 0;        // workers done opening their connections; guarded by mu
  int finished = 0;         // workers done with the load; guarded by mu
  std::string setup_error;  // the first connection that could not be opened; guarded by mu

  std::atomic<std::int64_t> go{0};       // the load's start, steady-clock ns; kAbort: give up
  std::atomic<bool> stop{false};         // no new requests (Ctrl-C)
  std::atomic<std::uint64_t> issued{0};  // Mode::kRequests: requests handed out so far
};

// Counters for the progress line: each written by its worker only, read by the main thread.
struct alignas(64) LiveCounters {
  std::atomic<std::uint64_t> responses{0};
  std::atomic<std::uint64_t> admitted{0};
  std::atomic<std::uint64_t> rejected{0};
  std::atomic<std::uint64_t> errors{0};

  // A single writer: a plain load and store is enough, and cheaper than an atomic increment.
  static void bump(std::atomic<std::uint64_t>& c) {
    c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
};

struct Conn {
  explicit Conn(asio::io_context& io) : socket(io), pause(io), buffer(new char[kReadBuffer]) {}

  tcp::socket socket;
  // Closed loop: while connecting fails, the next request waits connect_backoff (see on_connect).
  asio::steady_timer pause;
  Nanos connect_backoff{0};
  std::unique_ptr<char[]> buffer;
  std::size_t begin = 0;  // unparsed bytes are buffer[begin, end)
  std::size_t end = 0;
  std::optional<ResponseParser> parser;
  ResponseFields fields;
  WindowCheck window;

  bool busy = false;  // a request is under way (connecting, writing or awaiting its response)
  bool connecting = false;
  bool timed_out = false;  // the sweep gave up on it; the aborted operation reports the timeout
  int exchanges = 0;       // responses received on the socket since it was opened
  bool reused = false;     // the request under way was written after an earlier response
  bool retried = false;    // the request under way is on its second attempt
  bool got_bytes = false;  // some of a response to the request under way has arrived
  error_code write_failed;  // writing the request under way failed: its answer may have come first
  Nanos busy_since{0};     // when this request began, for the timeout
  Nanos intended{0};       // when it was meant to leave: the latency's start outside closed loops
  Nanos sent{0};           // when it was written
  std::uint32_t variant = 0;  // which value of the varied header
};

class Worker {
 public:
  Worker(Shared& shared, int index, int first_conn, int conns)
      : shared_(shared),
        plan_(shared.plan),
        index_(index),
        first_conn_(first_conn),
        io_(1),
        sweep_(io_),
        pacer_(io_) {
    conns_.reserve(static_cast<std::size_t>(conns));
    for (int i = 0; i < conns; ++i) conns_.push_back(std::make_unique<Conn>(io_));
    stats_.callers.resize(std::max<std::size_t>(1, plan_.wire.size()));
    if (plan_.schedule) {
      const auto workers = static_cast<std::uint64_t>(shared_.workers);
      const auto me = static_cast<std::uint64_t>(index_);
      my_requests_ = plan_.requests > me ? (plan_.requests - me + workers - 1) / workers : 0;
    }
  }

  void main() {
    open_connections();
    if (!wait_for_go()) return;
    load();
    std::lock_guard lock(shared_.mu);
    ++shared_.finished;
    shared_.cv.notify_all();
  }

  Stats& stats() { return stats_; }
  const LiveCounters& live() const { return live_; }

  // From another thread, on a stop while connections are being opened: gives up on those still
  // opening, so that setup ends now rather than when --timeout runs out.
  void abandon_setup() {
    asio::post(io_, [this] {
      if (!setup_) return;  // setup is over: the load is not to be touched
      for (auto& c : conns_) {
        error_code ignored;
        if (c->connecting) c->socket.close(ignored);
      }
    });
  }

 private:
  // --- Setup: every connection is opened before the load starts. ---

  void open_connections() {
    setup_ = true;
    pending_connects_ = conns_.size();
    for (auto& c : conns_) connect(*c);
    sweep_.expires_after(plan_.timeout);
    sweep_.async_wait([this](error_code ec) {
      if (ec) return;
      for (auto& c : conns_) {
        if (c->connecting) {
          c->timed_out = true;
          c->socket.close(ec);
        }
      }
    });
    io_.run();
    io_.restart();
    setup_ = false;
    std::lock_guard lock(shared_.mu);
    if (!setup_error_.empty() && shared_.setup_error.empty()) shared_.setup_error = setup_error_;
    ++shared_.connected;
    shared_.cv.notify_all();
  }

  bool wait_for_go() {
    std::int64_t go = 0;
    while ((go = shared_.go.load(std::memory_order_acquire)) == 0) {
      shared_.go.wait(0, std::memory_order_acquire);
    }
    if (go == kAbort) return false;
    start_ = SteadyClock::time_point(Nanos{go});
    return true;
  }

  void connect(Conn& c) {
    c.connecting = true;
    asio::async_connect(c.socket, shared_.endpoints,
                        [this, &c](error_code ec, const tcp::endpoint&) { on_connect(c, ec); });
  }

  void on_connect(Conn& c, error_code ec) {
    c.connecting = false;
    if (!ec) reregister(c.socket, ec);
    if (!ec) c.socket.set_option(tcp::no_delay(true), ec);
    if (!ec) c.socket.non_blocking(true, ec);
    if (setup_) {
      if (ec && setup_error_.empty()) setup_error_ = connect_error(c, ec);
      if (--pending_connects_ == 0) sweep_.cancel();
      return;
    }
    if (ec) {
      // The next request on the connection (closed loop) waits 1 ms, then twice as long after each
      // connect that fails, up to 100 ms: a server gone mid-run is not tried thousands of times a
      // second, each a request counted as failed.
      c.connect_backoff = std::clamp(2 * c.connect_backoff, Nanos{kFirstConnectBackoff}, Nanos{kMaxConnectBackoff});
      if (c.timed_out) return fail(c, "connect: no answer within " + timeout_text());
      return fail(c, "connect: " + ec.message());
    }
    c.connect_backoff = Nanos{0};
    write(c);
  }

  // Waiting for the connection left the socket registered for writability too, and with edge-
  // triggered epoll every ACK of a request would then wake the loop for nothing. A fresh
  // registration of the same descriptor waits for reading only (writes are attempted directly).
  static void reregister(tcp::socket& socket, error_code& ec) {
    const tcp protocol = socket.local_endpoint(ec).protocol();
    if (ec) return;
    const tcp::socket::native_handle_type fd = socket.release(ec);
    if (ec) return;
    socket.assign(protocol, fd, ec);
  }

  std::string connect_error(const Conn& c, error_code ec) const {
    const std::string& host = plan_.target.host;
    const std::string where =
        (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + plan_.target.port;  // [::1]:80
    if (c.timed_out) return "cannot connect to " + where + ": no answer within " + timeout_text();
    return "cannot connect to " + where + ": " + ec.message();
  }

  std::string timeout_text() const { return format_duration(plan_.timeout); }

  // --- The load. ---

  void load() {
    const Nanos now = since_start();
    sweep_every_ = std::clamp<Nanos>(plan_.timeout / 10, 1ms, 100ms);
    arm_sweep();
    starting_ = true;  // a request that fails at once must not end the loop before it has begun
    switch (plan_.mode) {
      case Mode::kBurst:
        burst();
        break;
      case Mode::kRequests:
      case Mode::kDuration:
        for (auto& c : conns_) {
          if (!take_closed_loop_request(*c, now)) break;
          ++busy_;
          begin_request(*c, now);
        }
        break;
      case Mode::kRate:
        for (auto& c : conns_) idle_.push_back(c.get());
        dispatch();
        break;
    }
    starting_ = false;
    if (busy_ == 0 && !more_to_send()) return;
    io_.run();
  }

  void burst() {
    // Everything but the writes is done before the instant, and the writes go back to back: the
    // responses are read once every request is out.
    for (std::size_t i = 0; i < conns_.size(); ++i) {
      Conn& c = *conns_[i];
      c.variant = variant_of(static_cast<std::uint64_t>(first_conn_) + i);
      c.busy = true;
      c.busy_since = Nanos{0};
      c.intended = Nanos{0};
      c.write_failed = {};
      c.fields.clear();
      c.parser.emplace(plan_.head, c.fields, stats_.rate_limit);
    }
    busy_ = conns_.size();
    std::vector<std::size_t> written(conns_.size(), 0);
    std::vector<error_code> errors(conns_.size());
    // Sleep until just before the instant, then spin, so that every thread writes at the same time.
    std::this_thread::sleep_until(start_ - kBurstSpin);
    while (SteadyClock::now() < start_) {
    }
    const Nanos first = since_start();
    for (std::size_t i = 0; i < conns_.size(); ++i) {
      written[i] =
          conns_[i]->socket.write_some(asio::buffer(plan_.wire[conns_[i]->variant]), errors[i]);
    }
    const Nanos last = since_start();
    stats_.first_write = first;
    stats_.last_write = last;
    for (std::size_t i = 0; i < conns_.size(); ++i) {
      Conn& c = *conns_[i];
      c.sent = first;
      if (errors[i] == asio::error::would_block) {
        errors[i] = {};
        written[i] = 0;
      }
      if (errors[i]) {
        after_failed_write(c, errors[i]);
      } else {
        finish_write(c, written[i]);
      }
    }
  }

  // Closed loop: whether another request is to be sent, and for which variant.
  bool take_closed_loop_request(Conn& c, Nanos now) {
    if (shared_.stop.load(std::memory_order_relaxed)) return false;
    if (plan_.mode == Mode::kRequests) {
      const std::uint64_t i = shared_.issued.fetch_add(1, std::memory_order_relaxed);
      if (i >= plan_.requests) return false;
      c.variant = variant_of(i);
      return true;
    }
    if (now >= plan_.duration) return false;
    c.variant = variant_of(sequence_++ * static_cast<std::uint64_t>(shared_.workers) +
                           static_cast<std::uint64_t>(index_));
    return true;
  }

  std::uint32_t variant_of(std::uint64_t i) const {
    return static_cast<std::uint32_t>(i % plan_.wire.size());
  }

  bool more_to_send() const {
    if (plan_.mode != Mode::kRate) return false;
    return next_ < my_requests_ && !shared_.stop.load(std::memory_order_relaxed);
  }

  // Open loop: sends every request whose time has come on an idle connection, then waits for the
  // next one's time. A request that finds no idle connection waits for one, and its latency still
  // counts from its scheduled time.
  void dispatch() {
    const Nanos now = since_start();
    const auto workers = static_cast<std::uint64_t>(shared_.workers);
    const auto me = static_cast<std::uint64_t>(index_);
    while (more_to_send()) {
      const std::uint64_t i = next_ * workers + me;
      const Nanos due = plan_.schedule->at(i);
      if (due > now) {
        if (!pacer_armed_) {
          pacer_armed_ = true;
          pacer_.expires_at(start_ + due);
          pacer_.async_wait([this](error_code ec) {
            pacer_armed_ = false;
            if (!ec) dispatch();
          });
        }
        busy_since_.reset();  // nothing due waits
        return;
      }
      if (idle_.empty()) {
        if (!busy_since_) busy_since_ = now;
        return;
      }
      Conn& c = *idle_.back();
      idle_.pop_back();
      ++next_;
      const Nanos waited = busy_since_ ? now - std::max(due, *busy_since_) : Nanos{0};
      if (now - due > stats_.max_send_lag) {
        stats_.max_send_lag = now - due;
        stats_.connection_wait_at_max_lag = waited;
      }
      stats_.max_connection_wait = std::max(stats_.max_connection_wait, waited);
      c.variant = variant_of(i);
      c.intended = due;
      ++busy_;
      begin_request(c, now);
    }
    if (busy_ == 0) finish();
  }

  void begin_request(Conn& c, Nanos now) {
    c.busy = true;
    c.busy_since = now;
    c.retried = false;
    if (plan_.mode != Mode::kRate) c.intended = now;
    if (c.socket.is_open() && !reusable(c)) close(c);
    if (!c.socket.is_open()) return connect(c);
    write(c);
  }

  // Whether a kept-alive connection may carry the next request. Bytes the server sent after the
  // last response would be read as this request's response. And an idle connection (open loop:
  // it waited for the next request's time) may have been closed by the server meanwhile (an idle
  // timeout), which a peek that does not wait shows: 0 bytes, or a reset. In a closed loop the
  // next request follows the response at once; there a peek would cost a system call per request
  // to catch a close that races the request anyway, and the retry below covers that.
  bool reusable(Conn& c) const {
    if (c.begin < c.end) return false;
    if (plan_.mode != Mode::kRate) return true;
    char byte = 0;
    const ssize_t n = ::recv(c.socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }

  void write(Conn& c) {
    if (!c.retried) c.sent = since_start();  // a retry's latency counts from the first attempt
    c.reused = c.exchanges > 0;
    c.got_bytes = false;
    c.write_failed = {};
    // Most requests fit in the socket's buffer at once: write now, and wait only for the rest.
    error_code ec;
    const std::size_t n = c.socket.write_some(asio::buffer(plan_.wire[c.variant]), ec);
    if (ec && ec != asio::error::would_block) return after_failed_write(c, ec);
    finish_write(c, ec ? 0 : n);
  }

  // A request written on a reused connection that got nothing back, not a byte, met the server
  // closing that connection (an idle timeout racing the request, which the check before writing
  // cannot rule out), so it almost certainly never reached the application. As browsers and HTTP
  // clients do, it is sent again, once, on a fresh connection. Anything else is an error, and so is
  // a second failure.
  bool may_retry(const Conn& c, error_code ec) const {
    return c.reused && !c.retried && !c.got_bytes && !c.timed_out &&
           (ec == asio::error::eof || ec == asio::error::connection_reset ||
            ec == asio::error::broken_pipe);
  }

  void retry(Conn& c) {
    ++stats_.retries;
    c.retried = true;
    c.parser.reset();
    close(c);
    connect(c);
  }

  // The first `written` bytes of c's request are out: send the rest, then read the response.
  void finish_write(Conn& c, std::size_t written) {
    const std::string& wire = plan_.wire[c.variant];
    if (written == wire.size()) return read(c);
    asio::async_write(c.socket, asio::buffer(wire.data() + written, wire.size() - written),
                      [this, &c](error_code ec, std::size_t) {
                        if (ec) return after_failed_write(c, ec);
                        read(c);
                      });
  }

  // A server that answers before it has the whole request and closes (a 413 for a body too large,
  // a 429 that does not read the body) fails the rest of the write, with a reset when the body was
  // left unread; its answer may still be in the socket (what came before a reset stays readable),
  // and is read as any other. When none came, the request is sent again if it may be (on_read:
  // a reused connection the server closed), else the write's error counts.
  void after_failed_write(Conn& c, error_code ec) {
    if (c.timed_out || (ec != asio::error::broken_pipe && ec != asio::error::connection_reset)) {
      return fail(c, reason(c, "write", ec));
    }
    c.write_failed = ec;
    read(c);
  }

  void read(Conn& c) {
    if (!c.parser) {
      c.fields.clear();
      c.parser.emplace(plan_.head, c.fields, stats_.rate_limit);
    }
    if (c.begin < c.end) return parse(c);  // the server sent more than the last response
    c.begin = c.end = 0;
    receive(c);
  }

  // Waits for the socket to be readable, then reads in the handler. (An async_read_some would have
  // the reactor read every ready socket before any handler runs, so the next requests would leave
  // only after the whole batch had been read; this way each connection reads, parses and writes its
  // next request in turn, and the server gets work sooner.)
  void receive(Conn& c) {
    c.socket.async_wait(tcp::socket::wait_read, [this, &c](error_code ec) {
      if (ec) return on_read(c, ec, 0);
      const std::size_t n =
          c.socket.read_some(asio::buffer(c.buffer.get() + c.end, kReadBuffer - c.end), ec);
      if (ec == asio::error::would_block) return receive(c);
      on_read(c, ec, n);
    });
  }

  void on_read(Conn& c, error_code ec, std::size_t n) {
    if (ec && may_retry(c, ec)) return retry(c);
    if (ec && c.write_failed && !c.got_bytes) return fail(c, reason(c, "write", c.write_failed));
    if (n > 0) c.got_bytes = true;
    if (ec == asio::error::eof && c.parser->need_eof()) {
      c.parser->put_eof(ec);  // a body delimited by the end of the connection
      if (!ec && c.parser->is_done()) return complete(c, /*keep_alive=*/false);
    }
    if (ec == asio::error::eof) {
      return fail(c, c.parser->got_some() ? "connection closed in the middle of a response"
                                          : "connection closed before the response");
    }
    if (ec) return fail(c, reason(c, "read", ec));
    c.end += n;
    parse(c);
  }

  void parse(Conn& c) {
    while (c.begin < c.end && !c.parser->is_done()) {
      error_code ec;
      const std::size_t used =
          c.parser->put(asio::const_buffer(c.buffer.get() + c.begin, c.end - c.begin), ec);
      c.begin += used;
      if (ec == http::error::need_more) {
        if (used == 0) break;
        continue;
      }
      if (ec && c.fields.bad_status != 0) {
        char code[8];
        std::snprintf(code, sizeof code, "%03d", c.fields.bad_status);
        return fail(c, "bad response: status " + std::string(code) + ", not from 100 to 599");
      }
      if (ec) return fail(c, "bad response: " + ec.message());
    }
    if (c.parser->is_done()) return complete(c, c.parser->keep_alive());
    // An incomplete header stays in the buffer; move it to the front to make room for the rest.
    if (c.begin == c.end) {
      c.begin = c.end = 0;
    } else if (c.end == kReadBuffer) {
      if (c.begin == 0) return fail(c, "bad response: header larger than 16 KiB");
      std::memmove(c.buffer.get(), c.buffer.get() + c.begin, c.end - c.begin);
      c.end -= c.begin;
      c.begin = 0;
    }
    receive(c);
  }

  std::string reason(const Conn& c, const char* what, error_code ec) const {
    if (c.timed_out) return "timeout: no response within " + timeout_text();
    return std::string(what) + ": " + ec.message();
  }

  void complete(Conn& c, bool keep_alive) {
    const int status = c.fields.status;
    // An interim response (103 Early Hints): the real one follows. Not 101 Switching Protocols,
    // after which the connection no longer speaks HTTP (RFC 9110 15.2.2): it is the response (a
    // status of its own in the report), and the connection is closed. Waiting for another, a
    // request to a server that switches unasked waited for --timeout.
    if (status >= 100 && status < 200 && status != 101) {
      c.parser.reset();
      return read(c);
    }
    const Nanos now = since_start();
    const Nanos started =
        plan_.mode == Mode::kRequests || plan_.mode == Mode::kDuration ? c.sent : c.intended;
    stats_.latency.record(
        static_cast<std::uint64_t>(std::max<std::int64_t>(0, (now - started).count())));
    if (status >= 0 && static_cast<std::size_t>(status) < stats_.status.size()) {
      ++stats_.status[static_cast<std::size_t>(status)];
    }
    Counts& step = stats_.step_at(now, plan_.bucket);
    Counts& caller = stats_.callers[c.variant];
    switch (outcome_of(status)) {
      case Outcome::kAdmitted:
        ++step.admitted;
        ++caller.admitted;
        LiveCounters::bump(live_.admitted);
        break;
      case Outcome::kRejected:
        ++step.rejected;
        ++caller.rejected;
        LiveCounters::bump(live_.rejected);
        break;
      case Outcome::kOther:
        ++step.other;
        ++caller.other;
        break;
    }
    LiveCounters::bump(live_.responses);
    note_rate_limit_fields(c, now);
    c.parser.reset();
    ++c.exchanges;
    if (!keep_alive || status == 101 || plan_.close_each || c.write_failed) close(c);
    finish_request(c, now);
  }

  void note_rate_limit_fields(Conn& c, Nanos now) {
    RateLimitSummary& summary = stats_.rate_limit;
    const ResponseFields& f = c.fields;
    if (f.remaining) {
      std::optional<std::int64_t> reset;
      if (f.reset) reset = reset_delta(*f.reset, unix_now_s());
      c.fields.quotas.push_back(QuotaSeen{"", f.remaining, reset});
    }
    for (const QuotaSeen& q : f.quotas) {
      if (q.remaining) summary.remaining.add(*q.remaining);
      if (q.reset_s) summary.reset_s.add(*q.reset_s);
      c.window.observe(c.variant, q, c.sent, now, summary);
    }
    if (f.retry_after_s) summary.retry_after_s.add(*f.retry_after_s);
    if (!f.invalid_retry_after.empty()) {
      ++summary.retry_after_invalid;
      if (summary.first_invalid_retry_after.empty()) {
        summary.first_invalid_retry_after = f.invalid_retry_after;
      }
    }
    if (f.status == 429 && !f.retry_after_s) ++summary.rejected_without_retry_after;
  }

  void fail(Conn& c, const std::string& why) {
    const Nanos now = since_start();
    ++stats_.errors[why];
    ++stats_.step_at(now, plan_.bucket).errors;
    ++stats_.callers[c.variant].errors;
    LiveCounters::bump(live_.errors);
    c.parser.reset();
    close(c);
    finish_request(c, now);
  }

  void close(Conn& c) {
    error_code ignored;
    c.socket.close(ignored);
    c.begin = c.end = 0;
    c.exchanges = 0;
  }

  // The request on c is over (answered or failed): start the next one, or wind down.
  void finish_request(Conn& c, Nanos now) {
    c.busy = false;
    c.timed_out = false;
    stats_.last_completion = std::max(stats_.last_completion, now);
    switch (plan_.mode) {
      case Mode::kBurst:
        --busy_;
        break;
      case Mode::kRequests:
      case Mode::kDuration:
        if (take_closed_loop_request(c, now)) {
          if (c.connect_backoff > Nanos{0}) return begin_after_backoff(c);
          return begin_request(c, now);
        }
        --busy_;
        break;
      case Mode::kRate:
        --busy_;
        idle_.push_back(&c);
        return dispatch();
    }
    if (busy_ == 0) finish();
  }

  // Closed loop, after a connect failed: the request taken goes once connect_backoff has passed,
  // unless the run has ended or been stopped meanwhile.
  void begin_after_backoff(Conn& c) {
    c.pause.expires_after(c.connect_backoff);
    c.pause.async_wait([this, &c](error_code) {
      const Nanos now = since_start();
      const bool over = plan_.mode == Mode::kDuration && now >= plan_.duration;
      if (!over && !shared_.stop.load(std::memory_order_relaxed)) return begin_request(c, now);
      if (--busy_ == 0) finish();
    });
  }

  void finish() {
    if (!starting_) io_.stop();
  }

  // Times out requests that have waited too long, and notices a stop.
  void arm_sweep() {
    sweep_.expires_after(sweep_every_);
    sweep_.async_wait([this](error_code ec) {
      if (ec) return;
      const Nanos now = since_start();
      for (auto& c : conns_) {
        if (c->busy && !c->timed_out && now - c->busy_since >= plan_.timeout) {
          c->timed_out = true;
          c->socket.close(ec);  // the pending operation ends with operation_aborted
        }
      }
      if (plan_.mode == Mode::kRate && shared_.stop.load(std::memory_order_relaxed) && busy_ == 0) {
        return finish();
      }
      arm_sweep();
    });
  }

  Nanos since_start() const { return SteadyClock::now() - start_; }

  Shared& shared_;
  const Plan& plan_;
  const int index_;
  const int first_conn_;  // the index, among all connections, of this worker's first
  asio::io_context io_;   // before the connections: they must go first
  std::vector<std::unique_ptr<Conn>> conns_;
  asio::steady_timer sweep_;  // connect timeout during setup, then the request timeouts
  asio::steady_timer pacer_;  // open loop: wakes up when the next request is due
  bool pacer_armed_ = false;
  // Open loop: since when a request due has found every connection busy; unset while none has.
  std::optional<Nanos> busy_since_;
  bool setup_ = false;
  bool starting_ = false;
  std::size_t pending_connects_ = 0;
  std::string setup_error_;
  SteadyClock::time_point start_;
  Nanos sweep_every_{100ms};
  std::size_t busy_ = 0;     // connections with a request under way
  std::vector<Conn*> idle_;  // open loop: connections free for the next request
  std::uint64_t my_requests_ =
      0;                    // open loop: this worker sends requests index_, index_ + workers, ...
  std::uint64_t next_ = 0;  // ... and has sent this many of them
  std::uint64_t sequence_ = 0;  // closed loop for a time: requests sent, to pick the variant
  Stats stats_;
  LiveCounters live_;
};

// Makes sure the process may open enough sockets, raising its soft limit if it can.
Status ensure_file_limit(int connections) {
  const auto needed = static_cast<rlim_t>(connections) + 64;
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return {};
  if (limit.rlim_cur >= needed) return {};
  if (limit.rlim_max != RLIM_INFINITY && limit.rlim_max < needed) {
    return invalid_argument(std::to_string(connections) + " connections need " +
                            std::to_string(needed) + " open files, and the limit is " +
                            std::to_string(limit.rlim_max) + " (see ulimit -n)");
  }
  limit.rlim_cur = needed;
  setrlimit(RLIMIT_NOFILE, &limit);
  return {};
}

Result<std::vector<tcp::endpoint>> resolve(const Target& target) {
  asio::io_context io;
  tcp::resolver resolver(io);
  error_code ec;
  const auto results = resolver.resolve(target.host, target.port, ec);
  if (ec || results.empty()) {
    return Error{ErrorCode::kStoreUnavailable,
                 "cannot resolve '" + target.host + "': " + (ec ? ec.message() : "no address")};
  }
  std::vector<tcp::endpoint> endpoints;
  for (const auto& r : results) endpoints.push_back(r.endpoint());
  return endpoints;
}

}  // namespace

Result<RunResult> run(const Plan& plan, const RunHooks& hooks) {
  if (Status s = ensure_file_limit(plan.connections); !s) return s.error();
  Result<std::vector<tcp::endpoint>> endpoints = resolve(plan.target);
  if (!endpoints) return endpoints.error();

  Shared shared(plan, std::move(endpoints).value());
  std::vector<std::unique_ptr<Worker>> workers;
  const int base = plan.connections / plan.threads;
  const int extra = plan.connections % plan.threads;
  for (int i = 0, first = 0; i < plan.threads; ++i) {
    const int n = base + (i < extra ? 1 : 0);
    workers.push_back(std::make_unique<Worker>(shared, i, first, n));
    first += n;
  }
  std::vector<std::thread> threads;
  for (auto& w : workers) threads.emplace_back([&w] { w->main(); });

  auto release = [&](std::int64_t go) {
    shared.go.store(go, std::memory_order_release);
    shared.go.notify_all();
  };
  {
    // A stop (Ctrl-C) may come while connections are still opening, against a host that does not
    // answer: it must not wait out the timeout.
    auto stopping = [&] { return hooks.stop != nullptr && hooks.stop->load(); };
    bool abandoned = false;
    std::unique_lock lock(shared.mu);
    while (!shared.cv.wait_for(lock, kStopPoll,
                               [&] { return shared.connected == plan.threads; })) {
      if (!abandoned && stopping()) {
        abandoned = true;
        for (auto& w : workers) w->abandon_setup();
      }
    }
    if (abandoned || stopping() || !shared.setup_error.empty()) {
      const std::string setup_error = shared.setup_error;
      lock.unlock();
      release(kAbort);
      for (auto& t : threads) t.join();
      if (abandoned || stopping()) {
        RunResult nothing_sent;
        nothing_sent.stopped_early = true;
        return nothing_sent;
      }
      return Error{ErrorCode::kStoreUnavailable, setup_error};
    }
  }
  const Nanos lead = plan.mode == Mode::kBurst ? kBurstLead : Nanos{0};
  const SteadyClock::time_point start = SteadyClock::now() + lead;
  release(start.time_since_epoch().count());

  RunResult result;
  for (bool done = false; !done;) {
    {
      std::unique_lock lock(shared.mu);
      done = shared.cv.wait_for(lock, hooks.progress_every,
                                [&] { return shared.finished == plan.threads; });
    }
    // A stop that comes once every worker has finished stops nothing: the run was whole.
    if (!done && hooks.stop && hooks.stop->load() && !shared.stop.load()) {
      shared.stop.store(true);
      result.stopped_early = true;
      if (hooks.on_stopping) hooks.on_stopping();
    }
    if (!done && hooks.on_progress) {
      Progress p;
      p.elapsed = std::max(Nanos{0}, SteadyClock::now() - start);
      for (const auto& w : workers) {
        p.responses += w->live().responses.load(std::memory_order_relaxed);
        p.admitted += w->live().admitted.load(std::memory_order_relaxed);
        p.rejected += w->live().rejected.load(std::memory_order_relaxed);
        p.errors += w->live().errors.load(std::memory_order_relaxed);
      }
      hooks.on_progress(p);
    }
  }
  for (auto& t : threads) t.join();
  for (auto& w : workers) result.stats.merge(w->stats());
  result.elapsed = result.stats.last_completion;
  return result;
}

}  // namespace sluice::bench
