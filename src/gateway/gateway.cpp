// The gateway's I/O: listeners, sessions, the proxy, the admin listener, reload and drain. Sessions
// only move bytes; every decision is made by policy.h's functions.
//
// Threads: one event loop per worker thread. One acceptor hands each new connection to the workers
// in turn; a connection stays on its worker, and so do the upstream connections it uses (each
// worker has its own pools), so a request takes no lock but the limit store's shard and its
// worker's metrics shard.
#include "gateway/gateway.h"

#include <pthread.h>
#include <sched.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <array>
#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/container/small_vector.hpp>
#include <boost/intrusive/list.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <list>
#include <map>
#include <random>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "config/crypto.h"
#include "config/json.h"
#include "config/yaml.h"
#include "core/duration.h"
#include "gateway/access_log.h"
#include "gateway/caller_auth.h"
#include "gateway/edge_reads.h"
#include "gateway/message_parser.h"
#include "gateway/write_now.h"
#include "gateway/policy.h"
#include "gateway/store_news.h"
#include "sluice/local_store.h"

namespace sluice::gateway {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

namespace {

using config::cgi_alias_of;

// Everything runs on io_context executors; naming the type (rather than any_io_executor) spares
// each operation the type-erased executor's copies.
using Executor = asio::io_context::executor_type;
template <class T>
using Task = asio::awaitable<T, Executor>;
using Stream = beast::basic_stream<tcp, Executor, beast::unlimited_rate_policy>;  // the admin listener's
using Socket = asio::basic_stream_socket<tcp, Executor>;
using Acceptor = asio::basic_socket_acceptor<tcp, Executor>;
using Timer = asio::basic_waitable_timer<std::chrono::steady_clock,
                                         asio::wait_traits<std::chrono::steady_clock>, Executor>;
using Resolver = asio::ip::basic_resolver<tcp, Executor>;
constexpr auto kTok = asio::as_tuple(asio::use_awaitable_t<Executor>{});
constexpr std::size_t kHeaderLimit = 8 * 1024;
constexpr std::size_t kDecideBodyLimit = 64 * 1024;
// The most of a refused request's body the gateway reads and drops to keep its connection (wire
// bytes: a chunked body's framing counts). A refusal is meant to be the gateway's cheapest answer:
// 64 KiB is a few reads, what a rate-limited API call's JSON body almost always fits in, and it is
// the largest body the gateway reads for itself elsewhere (/decide). A larger body costs the client
// less to send again on a new connection than the gateway to take in for nothing: it is answered
// with the connection closed, as before.
constexpr std::uint64_t kDiscardLimit = 64 * 1024;
constexpr std::size_t kRelayChunk = 16 * 1024;

using Clock = std::chrono::steady_clock;
using HeaderList = std::vector<std::pair<std::string_view, std::string>>;

Nanos since(Clock::time_point t) { return std::chrono::duration_cast<Nanos>(Clock::now() - t); }

Nanos wall_now() {
  return std::chrono::duration_cast<Nanos>(std::chrono::system_clock::now().time_since_epoch());
}

// A field's value (the first of that name), from a pass over the fields as they came: a request has
// few, and Beast's own lookup is a case-insensitive tree search, dearer than the pass.
std::string_view find_field(std::span<const HeadField> fields, std::string_view name) {
  for (const auto& f : fields) {
    if (f.name_string().size() == name.size() && beast::iequals(f.name_string(), name)) return f.value();
  }
  return {};
}

std::string_view find_field(std::span<const HeadField> fields, http::field name) {
  for (const auto& f : fields) {
    if (f.name() == name) return f.value();
  }
  return {};
}

// A few field names, each also spelt with '_' (cgi_alias_of). A request's every field is looked up
// in such sets, and most are of no name's length: one bit of a mask tells (lengths of 63 and more
// share the last one, and are compared).
template <std::size_t N>
class FieldNameSet {
 public:
  static constexpr std::size_t kSize = N;

  constexpr explicit FieldNameSet(std::array<std::string_view, N> names) : names_(names) {
    for (const std::string_view n : names_) lengths_ |= length_bit(n.size());
  }
  // The index of the name `field` is, or N.
  std::size_t find(std::string_view field) const {
    if ((lengths_ & length_bit(field.size())) == 0) return N;
    for (std::size_t i = 0; i < N; ++i) {
      if (cgi_alias_of(field, names_[i])) return i;
    }
    return N;
  }
  bool has(std::string_view field) const { return find(field) < N; }

 private:
  static constexpr std::uint64_t length_bit(std::size_t n) { return std::uint64_t{1} << std::min<std::size_t>(n, 63); }
  std::array<std::string_view, N> names_;
  std::uint64_t lengths_ = 0;
};

// The fields that name the caller, in one pass: the system key header's value, and whether it, the
// API key's header or a signature field comes more than once (found before a signed request's body
// is read). Spelt with '_' it is the same field (a CGI-style upstream reads both as one): the
// gateway sees the caller the upstream would.
struct CallerFields {
  bool has_system_key = false;
  std::string_view system_key;
  bool repeated = false;
};
CallerFields caller_fields(std::span<const HeadField> fields, std::string_view key_header) {
  CallerFields out;
  static constexpr FieldNameSet<4> kOnce{{kApiKeyHeader, kTimestampHeader, kNonceHeader, kSignatureHeader}};
  std::array<bool, kOnce.kSize> seen{};
  for (const auto& f : fields) {
    const std::string_view name = f.name_string();
    if (cgi_alias_of(name, key_header)) {
      out.repeated = out.repeated || out.has_system_key;
      if (!out.has_system_key) out.system_key = f.value();
      out.has_system_key = true;
      continue;
    }
    if (const std::size_t i = kOnce.find(name); i < seen.size()) {
      out.repeated = out.repeated || seen[i];
      seen[i] = true;
    }
  }
  return out;
}

// A request's fields, as a limit keyed by a header reads them: what the upstream gets. A field
// spelt with '_' is the one a CGI-style upstream reads for it; a target in absolute form gives the
// Host (its authority, in place of the client's Host field).
class FieldsLookup final : public HeaderLookup {
 public:
  FieldsLookup(std::span<const HeadField> f, std::string_view authority) : f_(f), authority_(authority) {}
  std::string_view get(std::string_view name) const override {
    if (!authority_.empty() && beast::iequals(name, "Host")) return authority_;
    for (const HeadField& f : f_) {
      if (cgi_alias_of(f.name_string(), name)) return f.value();
    }
    return {};
  }
  // Also spelt with '_', which a CGI-style upstream reads as the same.
  bool repeated(std::string_view name) const override {
    bool seen = false;
    for (const HeadField& f : f_) {
      if (!cgi_alias_of(f.name_string(), name)) continue;
      if (seen) return true;
      seen = true;
    }
    return false;
  }

 private:
  std::span<const HeadField> f_;
  std::string_view authority_;
};

// The fields a proxy does not forward (RFC 9110 7.6.1): the hop-by-hop ones, and those a Connection
// field names — except the message's framing (Content-Length, Transfer-Encoding) and Host: the body is
// forwarded as it was framed, so a "Connection: content-length" that dropped the length would let
// the body pass as a second request that no check has seen.
class HopFields {
 public:
  // `kept`: fields that go on even when Connection names them, in either spelling (a request's
  // system key header, which the caller was identified by as X-System-Key or X_System_Key, and the
  // headers its limits were keyed by: see Snapshot::kept_headers()).
  explicit HopFields(std::span<const HeadField> f, std::span<const std::string> kept = {}) {
    for (const auto& field : f) {
      if (field.name() != http::field::connection) continue;
      for_each_token(field.value(), [&](std::string_view token) {
        if (beast::iequals(token, "close") ||
            std::any_of(kept.begin(), kept.end(), [&](const std::string& k) { return cgi_alias_of(token, k); })) {
          return;
        }
        const http::field known = http::string_to_field(token);
        if (known == http::field::content_length || known == http::field::transfer_encoding ||
            known == http::field::host || always_dropped(known)) {
          return;
        }
        named_.push_back({known, token});
      });
    }
  }

  bool drops(const HeadField& field) const {
    const http::field name = field.name();
    return always_dropped(name) || std::any_of(named_.begin(), named_.end(), [&](const Named& n) {
             return n.known == name && (name != http::field::unknown || beast::iequals(n.text, field.name_string()));
           });
  }

 private:
  static bool always_dropped(http::field name) {
    switch (name) {
      case http::field::connection:
      case http::field::keep_alive:
      case http::field::proxy_connection:
      case http::field::te:
      case http::field::trailer:
      case http::field::upgrade:
      case http::field::proxy_authenticate:
      case http::field::proxy_authorization:
        return true;
      default:
        return false;
    }
  }

  struct Named {
    http::field known;  // unknown: compare text
    std::string_view text;
  };
  boost::container::small_vector<Named, 4> named_;
};

// CLOCK_MONOTONIC_COARSE: a read costs a few nanoseconds (it reads no counter) and moves in steps of
// the kernel's tick, 1 to 4 ms: enough for timeouts.
Nanos coarse_now() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return std::chrono::seconds(ts.tv_sec) + Nanos(ts.tv_nsec);
}

// The Date field's value now (RFC 9110 6.6.1: "Sun, 06 Nov 1994 08:49:37 GMT"), made once a second
// per thread from the coarse real-time clock; written in English whatever the locale.
std::string_view http_date_now() {
  static constexpr std::array<std::string_view, 7> kDays{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static constexpr std::array<std::string_view, 12> kMonths{"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  thread_local std::time_t second = -1;
  thread_local std::array<char, 32> text{};
  thread_local std::size_t size = 0;
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  if (ts.tv_sec != second) {
    second = ts.tv_sec;
    std::tm t{};
    ::gmtime_r(&second, &t);
    const int n = std::snprintf(text.data(), text.size(), "%s, %02d %s %04d %02d:%02d:%02d GMT",
                                kDays[static_cast<std::size_t>(t.tm_wday)].data(), t.tm_mday,
                                kMonths[static_cast<std::size_t>(t.tm_mon)].data(), t.tm_year + 1900, t.tm_hour,
                                t.tm_min, t.tm_sec);
    size = n > 0 ? static_cast<std::size_t>(n) : 0;
  }
  return {text.data(), size};
}

// The coarse clock's step: it lags the time by up to this much.
Nanos coarse_tick() {
  timespec ts{};
  ::clock_getres(CLOCK_MONOTONIC_COARSE, &ts);
  return std::chrono::seconds(ts.tv_sec) + Nanos(ts.tv_nsec);
}
const Nanos kCoarseTick = coarse_tick();

// How often a worker checks the deadlines of its sockets: one passes by at most this and three ticks
// of the coarse clock before the operation it bounds is cancelled, and never before.
constexpr Nanos kDeadlineSweep = std::chrono::milliseconds(10);

// The longest wait between two looks at whether a client waiting for its upstream's answer is still
// there (TimedSocket::watch).
constexpr Nanos kPeekEvery = std::chrono::seconds(1);

// How long an upstream host name's addresses are used before it is looked up again (per worker, in
// the background, when a connection is next opened). Until a name resolves again, its last
// addresses stay in use.
constexpr Nanos kResolveEvery = std::chrono::seconds(30);
// How soon a name whose lookup failed is looked up again; meanwhile a name with no addresses fails
// at once.
constexpr Nanos kResolveRetry = std::chrono::seconds(1);

// Past the drain timeout, how long the requests whose upstream connections were cut have to answer
// and log before the gateway stops (a client that does not read its answer is not waited for).
constexpr Nanos kDrainCutGrace = std::chrono::seconds(1);

// How often the gateway says at most that its limit store stopped answering, or answers again.
constexpr auto kStoreLogEvery = std::chrono::seconds(30);

// How long a worker passes over an upstream target it could not connect to (while another is up).
constexpr Nanos kTargetRest = std::chrono::seconds(5);

// A lingering close (RFC 9112 9.6): a connection closed with the client's input unread is reset,
// and the reset can discard the response before the client reads it, or fail the upload it is
// still sending (curl: "send failure"). The gateway shuts its sending side and reads and drops what
// the client still sends, for up to this long and this much.
constexpr Nanos kLingerTime = std::chrono::seconds(2);
constexpr std::size_t kLingerBytes = std::size_t{16} << 20;

using DeadlineHook =
    boost::intrusive::list_base_hook<boost::intrusive::link_mode<boost::intrusive::auto_unlink>>;

// A data-plane socket with a deadline, which its worker enforces by a sweep every kDeadlineSweep
// (a timer per read and write, as beast::basic_stream arms, was a tenth of a proxied request's CPU).
// The deadline bounds every operation until the next arm() or disarm(): one pending when it passes,
// or started after, is cancelled, and timed() turns its operation_aborted into
// beast::error::timeout (as it does any error once the deadline has passed: a connect that moves on
// to a resolved name's next address fails otherwise). Belongs to its worker's thread; does not move.
//
// An upstream connection can also watch its client's socket while the upstream works on the
// request and sends its answer: a sweep peeks at the client's socket once the wait has lasted a
// sweep, then after waits that double up to kPeekEvery (a request that waits long costs a system
// call a second, not a hundred); once the client has closed it (or reset it), client_gone() says so
// (nginx's 499) and what is pending here is cancelled, at every sweep until unwatch(), so that a
// client that gave up stops holding its in-flight place.
//
// A client's socket watches its upstream connection, in the same way, while the request's body is
// written to it: an upstream that answers before it has all of it with a status of 300 or more (a
// 413, a 401), or closes, is not kept waiting behind a client that pauses its upload, nor behind a
// write of the body it does not read (RFC 9112 9.3): both are cancelled, upstream_answered() says
// so, and the answer is read at once. An interim answer (1xx), or a 2xx from an upstream that still
// reads (a stream), lets the upload go on.
class TimedSocket : public DeadlineHook {
 public:
  using List = boost::intrusive::list<TimedSocket, boost::intrusive::constant_time_size<false>>;

  TimedSocket(Socket socket, List& list)
      : socket_(std::move(socket)), reader_(EdgeReads::of(socket_.get_executor().context())) {
    list.push_back(*this);
  }
  TimedSocket(asio::io_context& ioc, List& list) : socket_(ioc), reader_(EdgeReads::of(ioc)) { list.push_back(*this); }
  TimedSocket(const TimedSocket&) = delete;
  TimedSocket& operator=(const TimedSocket&) = delete;

  // Its writes, connect and close are the socket's; its reads are edge_reads.h's, never the
  // socket's own: read_now, then, when that says would_block, async_read_some.
  Socket& socket() { return socket_; }
  std::tuple<error_code, std::size_t> read_now(asio::mutable_buffer buffer) {
    error_code ec;
    std::size_t n = 0;
    if (!reader_.read_now(socket_.native_handle(), buffer, ec, n)) ec = asio::error::would_block;
    return {ec, n};
  }
  auto async_read_some(asio::mutable_buffer buffer) { return reader_.async_read_some(buffer, kTok); }
  // Whether something (bytes, the end, an error) may have come since the last read found nothing,
  // as far as the events collected so far say.
  bool may_have_input() const { return reader_.may_have_input(); }
  // For an upstream connection in its pool: since when (coarse_now()).
  void pooled(Nanos now) { pooled_at_ = now; }
  Nanos pooled_at() const { return pooled_at_; }
  // Ends what is pending, reads and writes, with operation_aborted.
  void cancel() {
    error_code ignored;
    socket_.cancel(ignored);
    reader_.cancel();
  }
  void arm(Nanos timeout) {
    // From the coarse clock, which may lag the time by a tick now and not when it is read again: two
    // ticks more, so that the time given is never cut short, even when a busy machine (a VM whose
    // timer interrupts come late) lets the clock fall a little more than a tick behind (a 300ms
    // timeout was seen to end after 299.6ms under AddressSanitizer with one).
    if (cut_) return;  // the drain's end: no read or write gets more time
    const Nanos now = coarse_now() + 2 * kCoarseTick;
    deadline_ = timeout >= Nanos::max() - now ? Nanos::max() : now + timeout;  // 106751d: never
    timed_out_ = false;
  }
  void disarm() {
    if (cut_) return;
    deadline_ = Nanos::max();
    timed_out_ = false;
    seen_ = false;  // for the next request (it goes back to its pool)
  }
  error_code timed(const error_code& ec) const { return ec && timed_out_ ? error_code(beast::error::timeout) : ec; }
  // The drain's end: the deadline passes now, for good (the next sweep cancels what waits, as a
  // timeout, and every operation after), so that the request waiting is answered and logged —
  // also one whose reads and writes succeed as fast as they are made (a stream, an upload), whose
  // next arm() would otherwise have given it a new deadline before the sweep saw this one.
  void cut() {
    cut_ = true;
    deadline_ = Nanos{0};
  }
  bool is_cut() const { return cut_; }
  // What watching another socket looks for.
  enum class Watch : std::uint8_t { kClientGone, kUpstreamAnswered };
  // Once gone, the client stays gone for the rest of the exchange, whatever phase watches next; an
  // upstream's answer is looked for anew at each watch.
  void watch(TimedSocket& other, Watch what = Watch::kClientGone) {
    watched_ = &other;
    what_ = what;
    if (what == Watch::kUpstreamAnswered) seen_ = false;
    peek_wait_ = kDeadlineSweep;
    next_peek_ = coarse_now() + peek_wait_;
  }
  void unwatch() { watched_ = nullptr; }
  bool client_gone() const { return seen_ && what_ == Watch::kClientGone; }
  bool upstream_answered() const { return seen_ && what_ == Watch::kUpstreamAnswered; }
  // The sweep: cancels what is pending once the deadline has passed (again at every sweep, for an
  // operation started after it), or once the watched client has gone.
  void check(Nanos now) {
    if (deadline_ <= now) {
      timed_out_ = true;
    } else if (watched_ != nullptr && (seen_ || (now >= next_peek_ && peek()))) {
      seen_ = true;  // and cancelled again at every sweep until unwatched, as for a deadline
    } else {
      return;
    }
    cancel();
    // An upstream that has answered is written no more of the body: a write it does not read stops.
    if (seen_ && what_ == Watch::kUpstreamAnswered) watched_->cancel();
  }

 private:
  // Whether what is watched for has come; sets when to look next.
  bool peek() {
    peek_wait_ = std::min(peek_wait_ * 2, kPeekEvery);
    next_peek_ = coarse_now() + peek_wait_;
    return what_ == Watch::kClientGone ? client_left() : upstream_answered_now();
  }

  // Whether the watched client has closed (or reset) its connection: a peek reads its end, or fails
  // other than for want of data. Bytes waiting (a next request sent ahead) say nothing.
  bool client_left() const {
    char c = 0;
    const ssize_t n = ::recv(watched_->socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }

  // Whether the watched upstream has given an answer it will read no more of the body for: it closed
  // (or reset) its side, whether or not an answer came first (POLLRDHUP), the answer's status is 300
  // or more (a 413, a 401), or what it sent is not an answer. An interim answer (1xx) is not final, and a 2xx
  // may come early from an upstream that still reads the body (a stream): the upload goes on.
  bool upstream_answered_now() const {
    pollfd p{watched_->socket().native_handle(), POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    if ((p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) return true;
    static constexpr std::string_view kVersion = "HTTP/1.";
    char head[12];  // "HTTP/1.1 413"
    const ssize_t n = ::recv(watched_->socket().native_handle(), head, sizeof head, MSG_PEEK | MSG_DONTWAIT);
    if (n <= 0) return false;
    const std::string_view got(head, static_cast<std::size_t>(n));
    if (got.substr(0, kVersion.size()) != kVersion.substr(0, std::min(got.size(), kVersion.size()))) return true;
    return got.size() >= 10 && got[9] >= '3';
  }

  Socket socket_;
  EdgeReader reader_;  // after socket_: gone before the socket closes, so no event comes for it
  Nanos deadline_ = Nanos::max();
  Nanos pooled_at_{0};
  bool timed_out_ = false;
  bool cut_ = false;  // see cut()
  TimedSocket* watched_ = nullptr;
  Nanos peek_wait_{0};
  Nanos next_peek_{0};
  Watch what_ = Watch::kClientGone;
  bool seen_ = false;
};

// Why an upstream's answer failed: a timeout; bytes that are not an answer the gateway may pass on
// (a malformed head or chunk, an unasked 101, a coding besides chunked, a head over its limit); or
// else a connection that broke (refused, reset, or closed before the answer was whole).
Reason reason_of_upstream_error(const error_code& ec) {
  if (ec == beast::error::timeout) return Reason::kUpstreamTimeout;
  const bool malformed = ec.category() == http::make_error_code(http::error::bad_version).category() &&
                         ec != http::error::end_of_stream && ec != http::error::partial_message;
  return malformed ? Reason::kUpstreamBadResponse : Reason::kUpstreamConnectFailed;
}

// How long a pooled upstream connection with no event since its last read is taken to be open
// without a look. Its events are those collected so far: a close that came in this turn of the
// event loop is not among them. Upstreams close idle connections after seconds (nginx 75, Node.js
// 5), so one pooled for less is reused on what the events say; one pooled longer is peeked at.
constexpr Nanos kPooledTrusted = std::chrono::seconds(1);

// Whether an idle upstream connection is still open and has sent nothing unasked: with no system
// call when nothing has come since its last read found nothing, and it was pooled a moment ago.
bool still_open(TimedSocket& s) {
  if (!s.may_have_input() && coarse_now() - s.pooled_at() < kPooledTrusted) return true;
  char c = 0;
  const ssize_t n = ::recv(s.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

// The parser and its reads, as Beast's http::async_read_header / async_read_some do them but without
// their composed operations' layers (a twentieth of a proxied request's CPU): a socket read into
// the buffer, then parse_buffered, and read_failed when the read fails.

// Feeds the parser what the buffer holds, consuming what it used: need_more when it takes more
// input to go on.
template <bool isRequest>
error_code parse_buffered(MessageParser<isRequest>& parser, beast::flat_buffer& buffer) {
  if (buffer.size() == 0) return http::error::need_more;
  error_code ec;
  const std::size_t used = parser.put(buffer.data(), ec);
  buffer.consume(used);
  if (!ec && used == 0 && !parser.is_done()) ec = http::error::need_more;
  return ec;
}

// Room for a read of a head into the buffer: as much as its capacity takes, at least 512 bytes and
// at most 64 KiB. A head's buffer stays as small as its heads need.
asio::mutable_buffer head_room(beast::flat_buffer& buffer) { return buffer.prepare(beast::read_size(buffer, 64 * 1024)); }

// Room for a read of a body into the buffer: up to kRelayChunk, whatever the buffer's capacity. The
// buffer grows to that once in a connection's life, on its first body read, and keeps the capacity:
// sized by its capacity instead (head_room), a buffer drained after every read stays at 512 bytes,
// and a body went 512 bytes a read and a write, at three times nginx's CPU for a large download.
asio::mutable_buffer body_room(beast::flat_buffer& buffer) { return buffer.prepare(kRelayChunk); }

// What a failed read means for the message: the connection's close ends a message that runs to it
// (then {}, and the parser is done); before any byte it is http::error::end_of_stream.
template <bool isRequest>
error_code read_failed(MessageParser<isRequest>& parser, const error_code& ec) {
  if (ec != asio::error::eof) return ec;
  if (!parser.got_some()) return http::error::end_of_stream;
  error_code eof_ec;
  parser.put_eof(eof_ec);
  return eof_ec;
}

Reason reason_of_read_error(const error_code& ec) {
  if (ec == http::error::header_limit) return Reason::kHeaderTooLarge;
  if (ec == http::error::body_limit) return Reason::kBodyTooLarge;
  if (ec == beast::error::timeout) return Reason::kRequestTimeout;
  return Reason::kBadRequest;
}

// Of a request's body: a body cut short by the client closing its connection is the client leaving,
// not bad input.
Reason reason_of_body_read_error(const error_code& ec) {
  if (ec == http::error::partial_message || ec == asio::error::eof || ec == asio::error::connection_reset ||
      ec == asio::error::broken_pipe) {
    return Reason::kClientClosedRequest;
  }
  return reason_of_read_error(ec);
}

bool is_idempotent(http::verb method) {
  switch (method) {
    case http::verb::get:
    case http::verb::head:
    case http::verb::options:
    case http::verb::trace:
    case http::verb::put:
    case http::verb::delete_:
      return true;
    default:
      return false;
  }
}

bool body_expected(http::verb method, unsigned status) {
  return method != http::verb::head && status / 100 != 1 && status != 204 && status != 304;
}

// The low `digits` hex digits of `v`, zero-padded, into `out`.
void put_hex(char* out, std::uint64_t v, int digits) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (int i = digits - 1; i >= 0; --i, v >>= 4) out[i] = kHex[v & 0xf];
}

// The CPUs this process may run on, in order.
std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

// The second of two of the object's keys that are the same header name, whatever their case and
// spelt with '_' for '-' (which a CGI-style upstream reads as the same: see cgi_alias_of).
std::optional<std::string_view> name_repeated(const boost::json::object& headers) {
  std::unordered_set<std::string> seen;
  for (const auto& kv : headers) {
    std::string name(kv.key());
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) {
      return c == '_' ? '-' : static_cast<char>(std::tolower(c));
    });
    if (!seen.insert(std::move(name)).second) return std::string_view(kv.key());
  }
  return std::nullopt;
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  append_json_escaped(out, s);
  return out + "\"";
}

// An upstream connection (Beast streams move, but do not move-assign).
using UpConn = std::unique_ptr<TimedSocket>;

// A client's fields that do not go up (in either spelling): those the gateway sets itself, the
// caller's API key, and those an upstream framework may take as the request's method
// (method-override middleware) or path (X-Original-URL, X-Rewrite-URL) in place of its request
// line's, which the gateway routed and permitted it by (a POST to a permitted route with
// "X-HTTP-Method-Override: DELETE" would run a DELETE no check has seen); and Proxy, which a CGI-style
// upstream (PHP, Go's net/http/cgi) gives the application as HTTP_PROXY, the variable its HTTP
// clients take their outgoing proxy from (httpoxy, CVE-2016-5385).
constexpr FieldNameSet<11> kNotFromTheClient{{"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override",
                                              "X-Original-URL", "X-Rewrite-URL", "X-Forwarded-For",
                                              "X-Forwarded-Proto", "X-Request-Id", "X-Sluice-System", kApiKeyHeader,
                                              "Proxy"}};

void append_field(std::string& out, std::string_view name, std::string_view value) {
  out.append(name).append(": ", 2).append(value).append("\r\n", 2);
}

// The request as the upstream gets it, written straight from the client's (which stays as it came):
// its fields but the hop-by-hop ones (not those in `kept`: the system key header, which the caller
// was identified by, and the headers limits are keyed by, even named in Connection), Expect
// (answered here), every Content-Length (one goes up, as the parser read it: it accepts repeats of
// the same value), the caller's API key (a secret of its own: X-Sluice-System says whose it was),
// the X-Forwarded-*, X-Request-Id and X-Sluice-System fields the gateway sets itself, and the fields
// upstream frameworks read as the request's own method or path in place of its request line's
// (kNotFromTheClient), which the gateway did not route or permit by; each also spelt with '_'
// (which a CGI-style upstream reads as the same). X-Forwarded-For keeps what earlier proxies said,
// X-Forwarded-Proto says `proto` (the client's protocol: see take_forwarded), and Via gets the
// gateway. An HTTP/1.0 request without Host (which HTTP/1.1 requires, and the parser requires of
// an HTTP/1.1 one) gets the upstream target's. The request's target goes in origin form; one that
// came in absolute form has its authority as the Host, in place of the client's (RFC 9112 3.2.2).
void append_upstream_head(std::string& out, const RequestParser& p, std::string_view origin, std::string_view authority,
                          std::string_view client_ip, std::string_view proto, std::string_view request_id,
                          std::string_view system, std::span<const std::string> kept, const config::Target& target) {
  const HopFields hop(p.fields(), kept);
  out.append(p.method_string());
  out += ' ';
  out.append(origin);
  out += " HTTP/1.1\r\n";
  boost::container::small_vector<std::string_view, 2> forwarded_for;
  bool host = false;
  for (const HeadField& f : p.fields()) {
    if (f.name() == http::field::host) {
      if (!authority.empty()) continue;
      host = true;
    }
    if (hop.drops(f) || f.name() == http::field::expect || f.name() == http::field::content_length) continue;
    const std::string_view name = f.name_string();
    if (f.name() == http::field::unknown) {
      if (beast::iequals(name, "X-Forwarded-For")) {
        if (f.value().find_first_not_of(" \t") != std::string_view::npos) forwarded_for.push_back(f.value());
        continue;
      }
      if (kNotFromTheClient.has(name)) continue;
    }
    append_field(out, name, f.value());
  }
  if (!authority.empty()) {
    append_field(out, "Host", authority);
  } else if (!host) {
    append_field(out, "Host", config::authority_of(target));
  }
  out += "X-Forwarded-For: ";
  for (const std::string_view v : forwarded_for) {
    out.append(v);
    out += ", ";
  }
  out.append(client_ip);
  out += "\r\nX-Forwarded-Proto: ";
  out.append(proto);
  out += "\r\n";
  // After the client's own Via fields, which pass as they came: the list in the order the message
  // went (RFC 9110 7.6.3), with the protocol it came in.
  out += p.http11() ? "Via: 1.1 sluice\r\n" : "Via: 1.0 sluice\r\n";
  append_field(out, "X-Request-Id", request_id);
  if (!system.empty()) append_field(out, "X-Sluice-System", system);
  if (!p.chunked() && p.content_length()) {
    char digits[24];
    const auto [end, ec] = std::to_chars(digits, digits + sizeof digits, *p.content_length());
    append_field(out, "Content-Length", std::string_view(digits, static_cast<std::size_t>(end - digits)));
  }
  out += "\r\n";
}

// The upstream's response as the client gets it: the verdict's rate-limit fields and X-Request-Id,
// then the upstream's fields but the hop-by-hop ones and those the gateway has set; the body
// chunk-framed when chunk_it (it has no length of its own), and "Connection: close" unless
// keep_alive. An HTTP/1.0 client (not client11) knows no chunking: its body goes unframed, and it
// is told "Connection: keep-alive" when the connection carries on, which HTTP/1.0 does not assume.
void append_client_head(std::string& out, const ResponseParser& p, const Verdict& verdict,
                        config::RateLimitHeaders form, std::string_view request_id, bool chunk_it,
                        bool keep_alive, bool client11) {
  const HopFields hop(p.fields());
  const unsigned status = p.status();
  out += "HTTP/1.1 ";
  out += static_cast<char>('0' + status / 100 % 10);
  out += static_cast<char>('0' + status / 10 % 10);
  out += static_cast<char>('0' + status % 10);
  out += ' ';
  out.append(p.reason());
  out += "\r\n";
  const HeaderNames set = write_header_lines(verdict, form, out);
  append_field(out, "X-Request-Id", request_id);
  // A 204 has no framing fields (RFC 9110 8.6, RFC 9112 6.1), whatever the upstream sent.
  const bool unframed = status == 204;
  bool dated = false;
  bool length_sent = false;
  for (const HeadField& f : p.fields()) {
    if (hop.drops(f) || (!client11 && f.name() == http::field::transfer_encoding)) continue;
    dated = dated || f.name() == http::field::date;
    if (unframed && (f.name() == http::field::content_length || f.name() == http::field::transfer_encoding)) continue;
    // Several Content-Length fields (the parser accepts only repeats of one value) go on as one,
    // the value as parsed, where the first was (RFC 9110 8.6): a client that refuses repeats, or
    // reads only the last, gets the length the gateway framed the body by.
    if (f.name() == http::field::content_length) {
      if (!length_sent && p.content_length()) {
        char digits[24];
        const auto [end, ec] = std::to_chars(digits, digits + sizeof digits, *p.content_length());
        append_field(out, "Content-Length", std::string_view(digits, static_cast<std::size_t>(end - digits)));
      }
      length_sent = true;
      continue;
    }
    const std::string_view name = f.name_string();
    const bool replaced = std::any_of(set.begin(), set.end(), [&](std::string_view n) { return beast::iequals(n, name); }) ||
                          (f.name() == http::field::unknown && beast::iequals(name, "X-Request-Id"));
    if (!replaced) append_field(out, name, f.value());
  }
  // An upstream without a clock sends none; the gateway, which has one, adds it (RFC 9110 6.6.1).
  if (!dated) append_field(out, "Date", http_date_now());
  if (chunk_it) out += "Transfer-Encoding: chunked\r\n";
  if (!keep_alive) {
    out += "Connection: close\r\n";
  } else if (!client11) {
    out += "Connection: keep-alive\r\n";
  }
  out += "\r\n";
}

// An interim (1xx) response as the client gets it: its fields but the hop-by-hop ones and framing
// fields, which a 1xx has no use for (it has no body) and a lenient reader might act on.
void append_interim_head(std::string& out, const ResponseParser& p) {
  const HopFields hop(p.fields());
  const unsigned status = p.status();
  out += "HTTP/1.1 1";
  out += static_cast<char>('0' + status / 10 % 10);
  out += static_cast<char>('0' + status % 10);
  out += ' ';
  out.append(p.reason());
  out += "\r\n";
  for (const HeadField& f : p.fields()) {
    if (hop.drops(f) || f.name() == http::field::content_length || f.name() == http::field::transfer_encoding) continue;
    append_field(out, f.name_string(), f.value());
  }
  out += "\r\n";
}

struct RelayResult {
  error_code read;   // reading the body from `from` failed
  error_code write;  // writing to `to` failed
  bool started = false;  // the head was written (a failed write may have sent part of it)
};

// Sends a message already parsed up to its body: `head`, then the body piece by piece as the parser
// reads it from `from`, chunk-framed when `chunked`. The head goes out with the first piece, in one
// write (a response's at once when no piece is there to read yet), and each piece in one write with
// its framing (at once when the socket takes it all, which sets no deadline on `to`). Each piece is
// what one read brought (at most kRelayChunk), so a body that trickles (server-sent events, a slow
// upload) is passed on as it comes, and read_timeout bounds each read, not the whole body.
// on_first() runs once the first piece is in (or the body is found empty), before it is written.
template <bool isRequest, class OnFirst>
Task<RelayResult> relay(TimedSocket& from, beast::flat_buffer& buffer,
                        MessageParser<isRequest>& parser,
                        TimedSocket& to, const std::string& head, bool chunked, char* chunk, Nanos read_timeout,
                        Nanos write_timeout, OnFirst on_first) {
  static constexpr std::string_view kCrlf = "\r\n";
  static constexpr std::string_view kCrlfLast = "\r\n0\r\n\r\n";
  static constexpr std::string_view kLast = "0\r\n\r\n";
  bool head_sent = false;
  bool first_in = false;  // on_first() has run
  while (true) {
    // The drain's end (TimedSocket::cut) ends the relay as a read that timed out: one whose reads
    // and writes all complete at once has nothing pending for the sweep to cancel.
    if (from.is_cut() || to.is_cut()) co_return RelayResult{beast::error::timeout, {}, head_sent};
    std::size_t n = 0;
    if (!parser.is_done()) {
      parser.body().data = chunk;
      parser.body().size = kRelayChunk;
      // What the buffer holds already (often the whole body, which came with the header) is parsed
      // in place; only for what is missing is there a read.
      error_code rec = parse_buffered(parser, buffer);
      if (rec == http::error::need_more && !head_sent && !isRequest) {
        // A response whose body is not there yet (a stream of events, a long poll, a body the
        // upstream is slow to make): its head goes on now, not with a first piece that may come
        // after the read's timeout (a 504 for an upstream that answered in time).
        error_code aec;
        if (from.socket().available(aec) == 0 && !aec) {
          error_code wec;
          const auto rest = write_now(to.socket(), std::array{asio::buffer(head)}, wec);
          if (!wec && asio::buffer_size(rest) > 0) {
            to.arm(write_timeout);
            auto [wr_ec, wn] = co_await asio::async_write(to.socket(), rest, kTok);
            wec = to.timed(wr_ec);
          }
          if (wec) co_return RelayResult{{}, wec, false};
          head_sent = true;
        }
      }
      if (rec == http::error::need_more) {
        from.arm(read_timeout);
        const auto room = body_room(buffer);
        auto [read_ec, rn] = from.read_now(room);
        if (read_ec == asio::error::would_block) std::tie(read_ec, rn) = co_await from.async_read_some(room);
        buffer.commit(rn);
        rec = read_ec ? read_failed(parser, from.timed(read_ec)) : parse_buffered(parser, buffer);
      }
      if (rec && rec != http::error::need_buffer && rec != http::error::need_more) {
        co_return RelayResult{rec, {}, head_sent};
      }
      n = kRelayChunk - parser.body().size;
    }
    const bool last = parser.is_done();
    char size_line[24];
    std::size_t size_len = 0;
    std::string_view tail;
    if (chunked && n > 0) {
      size_len = static_cast<std::size_t>(std::snprintf(size_line, sizeof size_line, "%zx\r\n", n));
      tail = last ? kCrlfLast : kCrlf;
    } else if (chunked && last) {
      tail = kLast;
    }
    // A read that brought only framing (a chunk header) has nothing to pass on yet.
    if (n == 0 && !last) continue;
    if (!first_in) {
      on_first();
      first_in = true;
    }
    const std::array<asio::const_buffer, 4> pieces{
        head_sent ? asio::const_buffer() : asio::buffer(head), asio::buffer(size_line, size_len),
        asio::buffer(chunk, n), asio::buffer(tail.data(), tail.size())};
    if (asio::buffer_size(pieces) > 0) {
      error_code wec;
      const auto rest = write_now(to.socket(), pieces, wec);
      if (!wec && asio::buffer_size(rest) > 0) {
        to.arm(write_timeout);
        auto [aec, an] = co_await asio::async_write(to.socket(), rest, kTok);
        wec = to.timed(aec);
      }
      if (wec) co_return RelayResult{{}, wec, head_sent};
    }
    head_sent = true;
    if (last) co_return RelayResult{{}, {}, true};
  }
}

// Counts itself in n while it lives.
class Counting {
 public:
  explicit Counting(std::atomic<int>& n) : n_(n) { n_.fetch_add(1); }
  ~Counting() { n_.fetch_sub(1); }
  Counting(const Counting&) = delete;
  Counting& operator=(const Counting&) = delete;

 private:
  std::atomic<int>& n_;
};

}  // namespace

void log_to_stderr(std::string_view message) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &utc);
  char head[48];
  std::snprintf(head, sizeof head, "%s.%03dZ sluice: ", stamp, static_cast<int>(ms));
  // A message of several lines (a refused configuration's problems) is as many lines, each stamped,
  // as a log shipper reads them; written at once, so that another thread's line comes between none.
  std::string out;
  for (std::size_t start = 0; start <= message.size();) {
    const std::size_t end = std::min(message.find('\n', start), message.size());
    out.append(head).append(message.substr(start, end - start)).push_back('\n');
    start = end + 1;
  }
  std::fwrite(out.data(), 1, out.size(), stderr);
}

// --- the shared state ---------------------------------------------------------------------------

struct Worker;

struct Gateway::Impl {
  GatewayOptions options;
  std::vector<std::unique_ptr<Worker>> workers;
  // Routes added with add_admin_route run on an event loop and thread of their own, so that a slow
  // one (a database write waiting for a lock) delays no proxied request.
  std::unique_ptr<asio::io_context> admin_ioc;
  std::thread admin_thread;
  std::unique_ptr<Acceptor> acceptor;
  std::unique_ptr<Acceptor> admin_acceptor;
  std::uint16_t port = 0;
  std::uint16_t admin_port = 0;

  std::unique_ptr<LocalStore> local_store;
  std::shared_ptr<Limiter> limiter;
  std::unique_ptr<BreakerRegistry> breakers;
  std::unique_ptr<Metrics> metrics;
  std::unique_ptr<Stats> stats;
  std::unique_ptr<NonceCache> nonces;
  std::unique_ptr<AccessLog> access_log;

  mutable std::mutex snapshot_mu;
  std::shared_ptr<const Snapshot> current;  // guarded by snapshot_mu
  std::atomic<std::uint64_t> generation{0};
  std::mutex reload_mu;  // one reload at a time
  // One reload from the file at a time (the watcher's, on worker 0, and SIGHUP's, on the main
  // thread): each stats the file and then loads it, and two interleaved could install the older
  // text last, under the newer stamp, which the watcher would then never read again.
  std::mutex file_reload_mu;

  std::mutex admin_mu;
  struct AdminRoute {
    std::string method;  // "*": any
    std::string prefix;
    AdminHandler handler;
    AdminScreen screen;
  };
  std::vector<AdminRoute> admin_routes;  // guarded by admin_mu

  // A stop signal came and drain_delay runs: healthz says draining, all else goes on as usual until
  // the drain begins (draining), at the delay's end or on the next stop signal.
  std::atomic<bool> delaying{false};
  std::atomic<bool> draining{false};
  std::atomic<bool> cutting{false};  // the drain timeout passed: what is left is cut
  std::atomic<Clock::time_point> drain_deadline{};  // once draining: when drain_timeout cuts what is left
  std::atomic<int> admin_in_flight{0};  // admin requests read and not yet answered: a drain waits for them
  std::atomic<bool> stopped{false};
  std::atomic<int> stores_down{0};  // workers whose limit store's breaker is open
  std::mutex store_log_mu;
  StoreNews store_news{kStoreLogEvery};              // guarded by store_log_mu
  // A Redis Cluster's masters that some worker's store said not to answer (see log_node).
  struct NodeNews {
    explicit NodeNews(const std::string& node)
        : news(kStoreLogEvery, "redis cluster node " + node, "limits whose keys it serves") {}
    int down = 0;  // workers whose store said it does not answer
    StoreNews news;
  };
  std::map<std::string, NodeNews, std::less<>> node_news;  // guarded by store_log_mu
  int seeds_gone_workers = 0;                              // guarded by store_log_mu: see log_notice
  std::unique_ptr<asio::steady_timer> store_log_timer;  // on worker 0: says a change held back
  bool store_log_timer_armed = false;                // guarded by store_log_mu

  // The gateway could not open a socket to an upstream (out of descriptors or memory): said at most
  // every kStoreLogEvery, with how many times.
  std::atomic<std::int64_t> overload_said{0};  // steady time, ns
  std::atomic<int> overload_unsaid{0};
  void log_overload() {
    const std::int64_t now = Clock::now().time_since_epoch().count();
    std::int64_t said = overload_said.load();
    const auto every = std::chrono::duration_cast<Clock::duration>(kStoreLogEvery).count();
    if ((said != 0 && now - said < every) || !overload_said.compare_exchange_strong(said, now)) {
      ++overload_unsaid;
      return;
    }
    const int more = overload_unsaid.exchange(0);
    log("cannot open a connection to an upstream: out of file descriptors or memory (ulimit -n?); answered 503 "
        "gateway_overloaded" + (more > 0 ? " (" + std::to_string(more) + " more times since last said)" : std::string()));
  }

  void log_store(StoreNews::Kind kind, const std::string& why) {
    std::optional<std::string> line;
    {
      std::lock_guard lock(store_log_mu);
      line = store_news.say(kind, why, Clock::now());
      arm_store_log_timer();
    }
    if (line) log(*line);
  }

  // Said once for the gateway, as the store's availability is: when the first worker's store says a
  // master does not answer, and when the last says it answers again (or that it is gone: a replica
  // took its slots). A master that keeps failing and answering is said at most every
  // kStoreLogEvery, as the store is.
  void log_node(const std::string& node, redis::NodeState state, const std::string& why) {
    std::optional<std::string> line;
    {
      std::lock_guard lock(store_log_mu);
      auto it = node_news.find(node);
      if (state == redis::NodeState::kNotAnswering) {
        if (it == node_news.end()) it = node_news.try_emplace(node, node).first;
        if (it->second.down++ == 0) line = it->second.news.say(StoreNews::kDown, why, Clock::now());
      } else if (it != node_news.end() && it->second.down > 0 && --it->second.down == 0) {
        if (state == redis::NodeState::kAnswering) {
          line = it->second.news.say(StoreNews::kUp, why, Clock::now());
        } else {
          line = "redis cluster node " + node + " left the slot map: its slots' limits are decided on the masters "
                 "that serve them now";
          node_news.erase(it);
        }
      }
      arm_store_log_timer();
    }
    if (line) log(*line);
  }

  // Said once for the gateway: when the first worker's store finds that none of the addresses it
  // was opened with is a node of the cluster any more, and when the last finds one again (each
  // store tells each once, in turn).
  void log_notice(redis::Notice notice, const std::string& text) {
    {
      std::lock_guard lock(store_log_mu);
      if (notice == redis::Notice::kSeedsGone ? seeds_gone_workers++ != 0
                                              : seeds_gone_workers == 0 || --seeds_gone_workers != 0) {
        return;
      }
    }
    log(text);
  }

  // Under store_log_mu.
  void arm_store_log_timer() {
    std::optional<Clock::time_point> due = store_news.next_due();
    for (const auto& [node, n] : node_news) {
      const std::optional<Clock::time_point> node_due = n.news.next_due();
      if (node_due && (!due || *node_due < *due)) due = node_due;
    }
    if (!due || store_log_timer_armed || !store_log_timer) return;
    store_log_timer_armed = true;
    asio::post(store_log_timer->get_executor(), [this, at = *due] {
      store_log_timer->expires_at(at);
      store_log_timer->async_wait([this](const boost::system::error_code& ec) {
        std::vector<std::string> lines;
        {
          std::lock_guard lock(store_log_mu);
          store_log_timer_armed = false;
          if (ec) return;
          const auto now = Clock::now();
          if (auto line = store_news.due(stores_down.load() > 0, now)) lines.push_back(std::move(*line));
          for (auto& [node, n] : node_news) {
            if (auto line = n.news.due(n.down > 0, now)) lines.push_back(std::move(*line));
          }
          arm_store_log_timer();
        }
        for (const std::string& line : lines) log(line);
      });
    });
  }
  // The settings that take effect at start only, as they are in effect (flags over the first
  // configuration): what /config shows, whatever a reload has brought since.
  config::Config start_only;

  config::Config in_effect(config::Config c) const {
    c.listen = start_only.listen;
    c.admin_listen = start_only.admin_listen;
    c.store = start_only.store;
    c.fleet_size = start_only.fleet_size;
    c.store_timeout = start_only.store_timeout;
    c.access_log = start_only.access_log;
    return c;
  }
  std::atomic<std::int64_t> sessions{0};
  std::atomic<std::size_t> next_worker{0};
  std::uint32_t request_id_prefix = 0;

  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool threads_done = false;  // guarded by stop_mu

  // What says the file changed: its modification time may be set back (cp -p, tar), the time its
  // inode changed may not.
  struct FileStamp {
    std::int64_t mtime_ns = 0;
    std::int64_t ctime_ns = 0;
    std::int64_t size = -1;
    std::uint64_t inode = 0;
    friend bool operator==(const FileStamp&, const FileStamp&) = default;
  };
  std::mutex stamp_mu;
  FileStamp stamp;  // guarded by stamp_mu
  bool config_missing = false;  // the file watch found no file last time (housekeeping only)
  std::unique_ptr<asio::signal_set> signals;

  void log(std::string_view message) const {
    if (options.log) {
      options.log(message);
    } else {
      log_to_stderr(message);
    }
  }

  std::shared_ptr<const Snapshot> snapshot() const {
    std::lock_guard lock(snapshot_mu);
    return current;
  }

  // Unix seconds, for signature timestamps and API key expiry.
  std::int64_t now_seconds() const {
    const sluice::Clock& clock = options.clock != nullptr ? *options.clock : SystemClock::instance();
    return std::chrono::duration_cast<std::chrono::seconds>(clock.now()).count();
  }

  Status install(std::shared_ptr<const config::Config> config);
  Status reload_from_file();
  FileStamp stat_config() const;
  void begin_drain();
  // On a stop signal: the drain, after drain_delay when the configuration sets one.
  void on_stop_signal(int sig);
  // For a stop signal that comes while draining: what the drain waits for, and until when.
  std::string drain_progress() const;
  // Connects every worker's limiter and waits until each has answered; logs those that failed.
  void connect_limiters();
  // Each limiter once, with the first worker it serves.
  std::vector<Worker*> distinct_limiters() const;
  // The breaker state of each distinct limiter with a shared store (for /metrics).
  std::vector<BreakerState> store_breakers() const;
  void stop_all();
  Task<void> accept_loop();
  Task<void> admin_loop();
  Task<void> admin_session(Socket socket);
  Task<void> housekeeping();
  Task<void> drain_watch();
  Task<void> drain_delay_watch(Clock::time_point until);
  void wait_signal();
};

// --- a worker: one event loop, its sessions and its upstream pools --------------------------------

struct Worker {
  Worker(Gateway::Impl& g, std::size_t i) : gw(g), index(i) {}

  Gateway::Impl& gw;
  std::size_t index;
  // Every socket of this worker's (declared before ioc, so that the sockets that ioc's pending
  // handlers hold unlink before it goes).
  TimedSocket::List sockets;
  // One thread runs it, and only that thread touches its sockets (the acceptor only registers the
  // ones it accepts for it; a drain posts its closes), so the reactor needs no lock per socket:
  // Asio's scheduler and registration stay locked, for what other threads post and register.
  asio::io_context ioc{BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO};
  std::thread thread;
  // Where this worker's limits are decided (declared after ioc: a store that runs on ioc goes
  // first).
  std::shared_ptr<Limiter> limiter;

  // The snapshot this worker serves, refreshed when the generation moves.
  std::shared_ptr<const Snapshot> cached;
  std::uint64_t cached_generation = ~std::uint64_t{0};

  struct Conn {
    TimedSocket* stream;
    bool busy = false;
  };
  std::unordered_set<Conn*> conns;  // touched on this worker's thread only

  struct TargetHash {
    std::size_t operator()(const config::Target& t) const {
      return std::hash<std::string_view>()(t.host) * 31 + t.port;
    }
  };
  std::unordered_map<config::Target, std::vector<UpConn>, TargetHash> idle;  // by host and port
  // Targets named by a host name: the addresses of their last lookup that found any, and the lookup
  // in flight, which requests waiting for a first answer join.
  struct Lookup {
    bool done = false;
    std::vector<tcp::endpoint> endpoints;  // when done: empty when the name did not resolve
    std::vector<Timer*> waiters;           // cancelled when it is done
  };
  struct Resolved {
    std::vector<tcp::endpoint> endpoints;
    Nanos refresh_at{};  // by steady_clock()
    std::shared_ptr<Lookup> lookup;
  };
  std::unordered_map<config::Target, Resolved, TargetHash> resolved;
  Resolver resolver{ioc.get_executor()};
  // Targets that could not be connected to, until when they rest (by steady_clock()).
  std::unordered_map<config::Target, Nanos, TargetHash> resting;
  std::size_t next_target = 0;
  std::uint64_t next_request = 0;
  std::string log_line;

  const std::shared_ptr<const Snapshot>& snapshot() {
    const std::uint64_t g = gw.generation.load(std::memory_order_acquire);
    if (g != cached_generation) {
      cached = gw.snapshot();
      cached_generation = g;
      close_idle_of_gone_targets();
    }
    return cached;
  }

  // The idle connections to targets no upstream names any more are closed: they would otherwise
  // stay (their upstream long gone, CLOSE-WAIT) for as long as the process runs. The pools stay,
  // emptied: a request in flight may hold one.
  void close_idle_of_gone_targets() {
    for (auto& [target, pool] : idle) {
      if (pool.empty()) continue;
      bool named = false;
      for (const config::Upstream& u : cached->config().upstreams) {
        named = named || std::find(u.targets.begin(), u.targets.end(), target) != u.targets.end();
      }
      if (!named) pool.clear();
    }
  }

  // The index of the next target in turn that this request has not tried, passing over resting
  // ones unless every untried one rests.
  std::size_t next_target_of(const std::vector<config::Target>& targets, std::span<const std::size_t> tried) {
    const std::size_t first = next_target++;
    if (resting.empty() && tried.empty()) return first % targets.size();
    const Nanos now = steady_clock().now();
    std::erase_if(resting, [&](const auto& rest) { return rest.second <= now; });
    std::optional<std::size_t> resting_one;
    for (std::size_t i = 0; i < targets.size(); ++i) {
      const std::size_t at = (first + i) % targets.size();
      if (std::find(tried.begin(), tried.end(), at) != tried.end()) continue;
      if (!resting.contains(targets[at])) {
        next_target = first + i + 1;
        return at;
      }
      if (!resting_one) resting_one = at;
    }
    return resting_one.value_or(first % targets.size());
  }

  // Ends the connections between requests: their reads are cancelled, and each session ends unless
  // its next request has begun to come (see session). Not closed from here: a read that has taken
  // the first bytes of a request may be done and its handler not run yet.
  void close_idle_conns() {
    for (Conn* c : conns) {
      if (!c->busy) c->stream->cancel();
    }
  }

  void cut_all() {
    for (TimedSocket& s : sockets) s.cut();
  }

  // Enforces the deadlines of the sockets (TimedSocket); runs as long as the worker.
  Task<void> sweep_deadlines() {
    Timer timer(ioc);
    while (true) {
      timer.expires_after(kDeadlineSweep);
      auto [ec] = co_await timer.async_wait(kTok);
      if (ec) co_return;
      const Nanos now = coarse_now();
      for (TimedSocket& s : sockets) s.check(now);
    }
  }

  Task<void> session(Socket socket);

  struct Exchange;
  // The request's id, path and query; whether it goes upstream (proxy) rather than being answered
  // by the gateway itself (answer: bad requests and the /_sluice/ endpoints).
  bool prepare(Exchange& x);
  // The request's id: the client's X-Request-Id when it is one, else one made up.
  void assign_request_id(Exchange& x);
  // From a peer in trusted_proxies: its client's address and protocol (Exchange::counted_ip, proto).
  void take_forwarded(Exchange& x);
  Task<bool> answer(Exchange& x);
  // 405 for a method the gateway's own endpoint does not take, with the ones it does.
  Task<bool> not_allowed(Exchange& x, std::string_view allow);
  Task<bool> proxy(Exchange& x);
  Task<bool> decide_endpoint(Exchange& x);
  // Caller authentication, before the access checks and any limit key. identify reads the header
  // fields; a system that signs its requests then needs verify (the body's hash is given, /decide)
  // or verify_body (reads the body, up to max_body_bytes, and checks its hash).
  CallerCheck identify(Exchange& x, Request& r);
  Reason verify(Exchange& x, const Request& r, std::string_view target, std::string_view body_sha256_hex);
  Task<Reason> verify_body(Exchange& x, const Request& r, std::string_view target);
  Task<bool> respond(Exchange& x, Reason reason, const Verdict* verdict, bool close);
  Task<bool> respond_json(Exchange& x, unsigned status, std::string body, const HeaderList& extra,
                               bool close);
  // Reads the request's body, up to limit bytes, into body: kOk, or why it could not.
  Task<Reason> read_body(Exchange& x, std::size_t limit, std::string& body);
  // The body of a request refused before it was proxied, read and dropped, so that the answer can
  // keep the connection: true when it was read whole. See the definition for when it is not tried.
  Task<bool> discard_body(Exchange& x);
  // Writes "100 Continue" (within send_timeout): false when it could not.
  Task<bool> send_continue(Exchange& x);
  // A new connection to target, within timeout (name resolution included), for as long as the client
  // stays (it is watched while the connection is opened).
  struct Connected {
    UpConn conn;              // null when it failed
    bool timed_out = false;
    bool client_gone = false;
    bool local = false;  // this process could not open a socket (descriptors, memory): no target's fault
  };
  Task<Connected> connect(const config::Target& target, Nanos timeout, TimedSocket& client);
  // A target's addresses, when its host is a name: its last ones (looked up again once kResolveEvery
  // has passed), or, the first time, those of a lookup within timeout.
  struct Resolution {
    std::vector<tcp::endpoint> endpoints;  // empty when the name did not resolve
    bool timed_out = false;
  };
  Task<Resolution> addresses_of(const config::Target& target, Nanos timeout);
  void start_lookup(const config::Target& target, Resolved& entry);
  // For how long things last (a target's rest, a name's addresses): the clock tests inject, or a
  // monotonic one, which no step of the wall clock moves.
  const sluice::Clock& steady_clock() const {
    return gw.options.clock != nullptr ? *gw.options.clock : SteadyClock::instance();
  }
  // Sends the request upstream and reads the response header into *x.up_parser (see proxy()).
  struct Sent {
    UpConn conn;                        // null when failed
    Reason failure = Reason::kOk;
    bool body_failed = false;  // the client's body was bad (413/400/timeout) rather than the upstream
    bool connect_failed = false;  // no connection could be opened: nothing was sent
    Nanos upload{0};  // spent streaming the client's body up: the client's time, not the upstream's
    bool left_connecting = false;  // the client left while a connection was being opened
    bool answered_early = false;  // before it had the whole body: its connection is not pooled
    bool local_failure = false;   // no connection, for want of this process's resources (Connected::local)
  };
  Task<Sent> send_upstream(Exchange& x, const InterfaceEntry& itf, const config::Target& target,
                           std::vector<UpConn>& pool, bool has_body, bool expects_continue);
  // Step 3: the limits that apply, all at once, then the shadow ones; counts what the store could
  // not decide. decide_limits_now plans them and, when the store is in this process, decides them
  // at once (the hot path: no coroutine frame, no handler) and returns the verdict's reason; when
  // it returns nullopt, decide_limits asks the networked store.
  std::optional<Reason> decide_limits_now(Exchange& x, const Request& r);
  Task<Reason> decide_limits(Exchange& x);
  void judge_limits(Exchange& x, const Status& status);
  void judge_shadow_limits(Exchange& x, const Status& status);
  void finish(Exchange& x, int status, Reason reason, std::optional<Nanos> upstream_latency);
  void release_leases(Exchange& x);
};

// One request on a client connection.
struct Worker::Exchange {
  TimedSocket& client;
  beast::flat_buffer& buffer;
  RequestParser& parser;
  Context& ctx;
  std::string_view client_ip;  // the peer's address
  // The client's address as limits count it and the log shows it, and the protocol it came in:
  // the peer's and http, or what a trusted proxy says of its client (take_forwarded).
  std::string_view counted_ip;
  std::string_view proto{"http"};
  std::shared_ptr<const Snapshot> snapshot;
  Clock::time_point start;
  std::string_view request_id{};  // the client's X-Request-Id (in its head), or generated_id
  // The target in origin form (path and query; what goes upstream), its path and query, and an
  // absolute-form target's authority (empty for one in origin form).
  std::string_view origin{};
  std::string_view path{};
  std::string_view query{};
  std::string_view authority{};
  std::string origin_made{};  // origin when the absolute form had no path ("http://h?q" -> "/?q")
  // Session-long scratch space, so that a request allocates neither: the relay buffer and the
  // upstream read buffer.
  char* chunk = nullptr;
  beast::flat_buffer* up_buffer = nullptr;
  std::string* head = nullptr;  // the serialized header of the message being relayed
  std::optional<ResponseParser>* up_parser = nullptr;  // the upstream's response
  HeadText* up_head = nullptr;                         // where *up_parser keeps its head
  Request request{};  // what the policy sees of a proxied request
  bool leases_held = false;
  bool decided = false;
  std::string forwarded_ip{};  // counted_ip, as a trusted proxy said it
  std::string body{};  // read before proxying when a signature covers it
  bool body_read = false;
  bool body_begun = false;     // read_body began on the body (it may have stopped part-way)
  bool continue_sent = false;  // "100 Continue" already written
  char generated_id[24] = {};
};

Task<void> Worker::session(Socket socket) {
  error_code ec;
  const std::string client_ip = client_address(socket.remote_endpoint(ec).address());
  TimedSocket stream(std::move(socket), sockets);
  Conn conn{&stream};
  conns.insert(&conn);
  gw.sessions.fetch_add(1);
  beast::flat_buffer buffer;
  beast::flat_buffer up_buffer;
  const auto chunk = std::make_unique<char[]>(kRelayChunk);
  std::string head;
  HeadText up_head;
  std::optional<ResponseParser> up_parser;
  Context ctx;
  HeadText request_head;
  std::optional<RequestParser> parser;
  bool unread = false;  // the client may still be sending: the close lingers
  while (true) {
    // A drain ends the connection between requests, unless the next has begun to come (its answer
    // then says Connection: close).
    if (gw.draining.load(std::memory_order_acquire)) {
      error_code aec;
      if (gw.cutting.load(std::memory_order_acquire) || (buffer.size() == 0 && stream.socket().available(aec) == 0)) {
        break;
      }
    }
    parser.emplace(request_head);
    parser->header_limit(kHeaderLimit);
    {
      const config::Config& cfg = snapshot()->config();
      parser->body_limit(static_cast<std::uint64_t>(cfg.max_body_bytes));
      // The deadline cancels the read rather than closing the socket: a client too slow to send
      // its header is still told 408.
      stream.arm(cfg.header_timeout);
    }
    // A request's latency counts from its first byte, as nginx's $request_time does: a head that
    // comes slowly (and one that times out, 408) is the request's time too.
    std::optional<Clock::time_point> first_byte;
    if (buffer.size() > 0) first_byte = Clock::now();
    error_code rec = parse_buffered(*parser, buffer);
    while (rec == http::error::need_more) {
      conn.busy = first_byte.has_value();  // a request begun: a drain waits for it
      const auto room = head_room(buffer);
      auto [read_ec, n] = stream.read_now(room);
      if (read_ec == asio::error::would_block) std::tie(read_ec, n) = co_await stream.async_read_some(room);
      if (stream.timed(read_ec) == asio::error::operation_aborted && gw.draining.load(std::memory_order_acquire)) {
        // A drain's cancel between requests: the connection ends, unless a request has begun to come.
        error_code aec;
        if (stream.socket().available(aec) > 0) continue;
      }
      if (n > 0 && !first_byte) first_byte = Clock::now();
      buffer.commit(n);
      rec = read_ec ? read_failed(*parser, stream.timed(read_ec)) : parse_buffered(*parser, buffer);
    }
    stream.disarm();
    const std::shared_ptr<const Snapshot> snap = snapshot();
    // Nothing of the previous request's context may outlive it: its entries point into the snapshot
    // it was decided on, which a reload may have freed since.
    ctx.clear();
    if (rec) {
      // A connection closed or timed out between requests just ends; anything else is answered.
      const bool quiet = rec == http::error::end_of_stream || rec == asio::error::operation_aborted ||
                         rec == asio::error::connection_reset || rec == asio::error::bad_descriptor ||
                         (rec == beast::error::timeout && !parser->got_some() && buffer.size() == 0);
      if (!quiet) {
        conn.busy = true;
        // A head that did not end (timed out, too large): its request line, when it came, says what
        // the request was, in the log.
        parser->read_request_line(buffer.data());
        Exchange x{.client = stream, .buffer = buffer, .parser = *parser, .ctx = ctx, .client_ip = client_ip,
                   .counted_ip = client_ip, .snapshot = snap, .start = first_byte.value_or(Clock::now())};
        assign_request_id(x);  // from what the parser read of the head
        Reason why = reason_of_read_error(rec);
        // A head over the limit with no line ended: its request line alone is (RFC 9112 3: 414).
        if (why == Reason::kHeaderTooLarge) {
          const auto* data = static_cast<const char*>(buffer.data().data());
          std::string_view in(data, std::min<std::size_t>(buffer.size(), kHeaderLimit));
          while (in.starts_with("\r\n")) in.remove_prefix(2);
          if (in.find("\r\n") == std::string_view::npos) why = Reason::kUriTooLong;
        }
        if (rec == http::error::bad_version && parser->version_unsupported()) why = Reason::kVersionNotSupported;
        co_await respond(x, why, nullptr, true);
        finish(x, status_of(why), why, std::nullopt);
        unread = true;
      }
      break;
    }
    conn.busy = true;
    Exchange x{.client = stream, .buffer = buffer, .parser = *parser, .ctx = ctx, .client_ip = client_ip,
               .counted_ip = client_ip, .snapshot = snap, .start = first_byte.value_or(Clock::now()),
               .chunk = chunk.get(), .up_buffer = &up_buffer, .head = &head,
               .up_parser = &up_parser, .up_head = &up_head};
    bool keep = false;
    if (prepare(x)) {
      keep = co_await proxy(x);
    } else {
      keep = co_await answer(x);
    }
    conn.busy = false;
    if (!keep) {
      unread = !parser->is_done() || buffer.size() > 0;
      break;
    }
  }
  if (unread) {
    conn.busy = false;  // a drain closes it rather than wait
    stream.socket().shutdown(Socket::shutdown_send, ec);
    stream.arm(kLingerTime);
    for (std::size_t dropped = 0; dropped < kLingerBytes;) {
      buffer.clear();
      const auto room = head_room(buffer);
      auto [read_ec, n] = stream.read_now(room);
      if (read_ec == asio::error::would_block) std::tie(read_ec, n) = co_await stream.async_read_some(room);
      if (read_ec) break;
      dropped += n;
    }
  }
  stream.socket().shutdown(Socket::shutdown_both, ec);
  stream.socket().close(ec);
  conns.erase(&conn);
  gw.sessions.fetch_sub(1);
}

void Worker::release_leases(Exchange& x) {
  if (!x.leases_held) return;
  for (const Lease& l : x.ctx.leases) {
    limiter->release(l.key, *l.limit, l.id, [m = gw.metrics.get()](Status s) {
      if (!s.ok()) m->count_store_error();
    });
  }
  x.ctx.leases.clear();
  x.leases_held = false;
}

void Worker::judge_limits(Exchange& x, const Status& status) {
  Context& ctx = x.ctx;
  judge(status, ctx, *limiter);
  x.leases_held = true;
  for (std::size_t i = 0; i < ctx.decisions.size() && status.ok(); ++i) {
    if (ctx.decisions[i].fallback) gw.metrics->count_fallback(ctx.enforced[i].on_store_failure);
  }
  if (ctx.verdict.store_failed) gw.metrics->count_store_error();
}

void Worker::judge_shadow_limits(Exchange& x, const Status& status) {
  Context& ctx = x.ctx;
  // sluice_store_errors_total counts requests: one whose enforced limits the store could not decide
  // either was counted already (judge_limits).
  const bool counted = ctx.verdict.store_failed;
  judge_shadow(status, ctx);
  for (std::size_t i = 0; i < ctx.shadow_decisions.size() && status.ok(); ++i) {
    if (ctx.shadow_decisions[i].fallback) gw.metrics->count_fallback(ctx.shadow[i].on_store_failure);
  }
  if (ctx.verdict.store_failed && !counted) gw.metrics->count_store_error();
}

std::optional<Reason> Worker::decide_limits_now(Exchange& x, const Request& r) {
  Context& ctx = x.ctx;
  plan_limits(r, ctx);
  const std::optional<Status> status = limiter->acquire_all_now(ctx.enforced, ctx.decisions);
  if (!status) return std::nullopt;
  judge_limits(x, *status);
  if (ctx.verdict.reason == Reason::kOk && !ctx.shadow.empty()) {
    judge_shadow_limits(x, limiter->acquire_each_now(ctx.shadow, ctx.shadow_decisions).value());
  }
  x.decided = true;
  return ctx.verdict.reason;
}

Task<Reason> Worker::decide_limits(Exchange& x) {
  Context& ctx = x.ctx;
  auto [status] = co_await limiter->async_acquire_all(ctx.enforced, ctx.decisions, kTok);
  judge_limits(x, status);
  if (ctx.verdict.reason == Reason::kOk && !ctx.shadow.empty()) {
    auto [shadow_status] = co_await limiter->async_acquire_each(ctx.shadow, ctx.shadow_decisions, kTok);
    judge_shadow_limits(x, shadow_status);
  }
  x.decided = true;
  co_return ctx.verdict.reason;
}

void Worker::finish(Exchange& x, int status, Reason reason, std::optional<Nanos> upstream_latency) {
  release_leases(x);
  const std::string_view system = x.ctx.system != nullptr ? std::string_view(x.ctx.system->system->key) : "";
  const std::string_view interface =
      x.ctx.interface != nullptr ? std::string_view(x.ctx.interface->interface->id) : "";
  gw.metrics->count_request(index, system, interface, reason, status);
  gw.stats->count(index, system, interface, reason);
  if (x.decided) {
    for (const CompiledLimit* l : x.ctx.verdict.shadow_rejected) gw.metrics->count_shadow_rejection(index, *l);
  }
  if (!gw.access_log->enabled()) return;
  AccessRecord r;
  r.time = wall_now();
  r.request_id = x.request_id;
  r.system = system;
  r.interface = interface;
  r.method = x.parser.method_string();
  // The path without its query, as for every request (a query may carry a secret), also when the
  // request was refused before its path was read.
  const std::string_view target = x.parser.target();
  r.path = x.path.empty() ? target.substr(0, target.find('?')) : x.path;
  r.status = status;
  r.reason = reason;
  r.latency = since(x.start);
  r.upstream_latency = upstream_latency;
  r.client_ip = x.counted_ip;
  r.shadow_rejected = x.decided ? &x.ctx.verdict.shadow_rejected : nullptr;
  gw.access_log->write(r, log_line);
}

Task<bool> Worker::respond_json(Exchange& x, unsigned status, std::string body, const HeaderList& extra,
                                     bool close) {
  // To an HTTP/1.0 client in its version, whose keep-alive Beast then says in "Connection".
  http::response<http::string_body> res{static_cast<http::status>(status), x.parser.http11() ? 11u : 10u};
  res.set(http::field::date, http_date_now());
  res.set(http::field::content_type, "application/json");
  if (!x.request_id.empty()) res.set("X-Request-Id", x.request_id);
  for (const auto& [name, value] : extra) res.set(name, value);
  res.body() = std::move(body);
  // The connection carries on only when the whole request was read: an unread body would be taken
  // for the next request.
  res.keep_alive(!close && x.parser.is_done() && x.parser.keep_alive() &&
                 !gw.draining.load(std::memory_order_acquire));
  res.prepare_payload();
  // An answer to HEAD has the length the body would have, and no body (which the client would take
  // for the start of the next response).
  if (x.parser.method() == http::verb::head) res.body().clear();
  x.client.arm(x.snapshot->config().send_timeout);
  auto [ec, n] = co_await http::async_write(x.client.socket(), res, kTok);
  co_return !ec && res.keep_alive();
}

Task<bool> Worker::send_continue(Exchange& x) {
  // An HTTP/1.0 client gets no 1xx, which it would take for the answer (RFC 9110 15.2).
  if (!x.parser.http11()) co_return true;
  static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
  x.client.arm(x.snapshot->config().send_timeout);
  auto [ec, n] = co_await asio::async_write(x.client.socket(), asio::buffer(kContinue), kTok);
  x.continue_sent = !ec;
  co_return !ec;
}

Task<bool> Worker::respond(Exchange& x, Reason reason, const Verdict* verdict, bool close) {
  if (reason == Reason::kClientClosedRequest) co_return false;  // nobody to answer
  HeaderList headers;
  if (verdict != nullptr) append_headers(*verdict, x.snapshot->config().rate_limit_headers, headers);
  co_return co_await respond_json(x, static_cast<unsigned>(status_of(reason)),
                                  error_body(reason, x.snapshot->config().language,
                                             verdict != nullptr ? verdict->bad_request : BadRequest::kMalformed),
                                  headers, close);
}

Task<Reason> Worker::read_body(Exchange& x, std::size_t limit, std::string& body) {
  x.body_begun = true;
  char chunk[4096];
  while (!x.parser.is_done()) {
    x.parser.body().data = chunk;
    x.parser.body().size = sizeof chunk;
    error_code ec = parse_buffered(x.parser, x.buffer);
    if (ec == http::error::need_more) {
      x.client.arm(x.snapshot->config().header_timeout);
      const auto room = body_room(x.buffer);
      auto [read_ec, n] = x.client.read_now(room);
      if (read_ec == asio::error::would_block) std::tie(read_ec, n) = co_await x.client.async_read_some(room);
      x.buffer.commit(n);
      ec = read_ec ? read_failed(x.parser, x.client.timed(read_ec)) : parse_buffered(x.parser, x.buffer);
    }
    if (ec && ec != http::error::need_buffer && ec != http::error::need_more) co_return reason_of_body_read_error(ec);
    body.append(chunk, sizeof chunk - x.parser.body().size);
    if (body.size() > limit) co_return Reason::kBodyTooLarge;
  }
  co_return Reason::kOk;
}

// As nginx's ngx_http_discard_request_body does for a request it refuses (limit_req's 429): a
// client refused with a body that has come (or comes at once) is answered on a connection that
// carries on, and its pipelined next request is served, rather than every refused POST of a
// rate-limited client costing it a new connection just when the gateway should be cheapest.
//
// The body is framed by the request's own parser, the one a proxied body goes through (its
// Content-Length, or its chunks and trailers, with their bounds): what follows it in the buffer is
// the next request, and nothing of the body can be taken for one. Bounded in bytes (kDiscardLimit,
// of what comes on the wire) and in time (header_timeout, and a second at most, once, for the
// whole body, not per read: a client that trickles cannot hold the connection longer). It is not tried, and the
// answer then closes the connection (lingering, as for any body left unread), when:
// - the client asked to close, or the gateway drains: the connection ends anyway;
// - the request expects 100-continue and was sent none: its client waits to be told to send the
//   body, and a refusal tells it not to (reading would only wait out the timeout);
// - its Content-Length is over the bound;
// - read_body already began on it and stopped part-way (too large, too slow, bad): the body is
//   not one to go on reading.
// Returns whether the body was read whole (the parser is done).
Task<bool> Worker::discard_body(Exchange& x) {
  RequestParser& req = x.parser;
  if (req.is_done()) co_return true;
  if (x.body_begun || !req.keep_alive() || gw.draining.load(std::memory_order_acquire)) co_return false;
  if (!x.continue_sent && beast::iequals(find_field(req.fields(), http::field::expect), "100-continue")) {
    co_return false;
  }
  if (req.content_length().value_or(0) > kDiscardLimit) co_return false;
  // For the whole body, and a second at most: a refusal is not held back long for a body that
  // does not come (the answer then closes the connection).
  x.client.arm(std::min<Nanos>(x.snapshot->config().header_timeout, std::chrono::seconds(1)));
  std::uint64_t taken = 0;  // of the body, on the wire
  while (!req.is_done()) {
    req.body().data = x.chunk;
    req.body().size = kRelayChunk;
    const std::size_t before = x.buffer.size();
    const error_code ec = parse_buffered(req, x.buffer);
    taken += before - x.buffer.size();
    if (taken > kDiscardLimit) co_return false;
    if (ec == http::error::need_buffer || (!ec && !req.is_done())) continue;  // the scratch space is full
    if (ec != http::error::need_more) co_return !ec;  // done, or a bad body (the answer closes)
    // All that the buffer holds is of the body (the parser needs more to go on): it counts too.
    if (taken + x.buffer.size() > kDiscardLimit) co_return false;
    const auto room = body_room(x.buffer);
    auto [read_ec, n] = x.client.read_now(room);
    if (read_ec == asio::error::would_block) std::tie(read_ec, n) = co_await x.client.async_read_some(room);
    if (read_ec) co_return false;  // timed out, or the client left: the answer (if any) closes
    x.buffer.commit(n);
  }
  co_return true;
}

void Worker::assign_request_id(Exchange& x) {
  const RequestParser& req = x.parser;
  const std::uint64_t id = next_request++;
  // A caller's id is kept when it is one: up to 128 visible ASCII characters, so that it goes into
  // the access log's JSON and the upstream's head as it came.
  const std::string_view given = find_field(req.fields(), "X-Request-Id");
  if (!given.empty() && given.size() <= 128 &&
      std::all_of(given.begin(), given.end(), [](char c) { return c > 0x20 && c < 0x7f; })) {
    x.request_id = given;
  } else {
    // "%08x%02zx%014llx" of the prefix, the worker and the counter, without snprintf (which was
    // about 1.5% of a proxied request's CPU).
    char* buf = x.generated_id;
    put_hex(buf, gw.request_id_prefix, 8);
    put_hex(buf + 8, index & 0xff, 2);
    put_hex(buf + 10, id & 0xffffffffffffffULL, 14);
    x.request_id = std::string_view(buf, sizeof x.generated_id);
  }
}

// An X-Forwarded-For entry's address: "203.0.113.7", "2001:db8::1", with a port "203.0.113.7:5555"
// or "[2001:db8::1]:443". nullopt for anything else (a zone id too: it names no host elsewhere).
std::optional<asio::ip::address> forwarded_address(std::string_view entry) {
  const auto port_ok = [](std::string_view port) {
    return !port.empty() && port.size() <= 5 &&
           std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (entry.starts_with('[')) {
    const std::size_t close = entry.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    const std::string_view after = entry.substr(close + 1);
    if (!after.empty() && !(after.front() == ':' && port_ok(after.substr(1)))) return std::nullopt;
    entry = entry.substr(1, close - 1);
    if (entry.find(':') == std::string_view::npos) return std::nullopt;  // an IPv4 address is not bracketed
  } else if (const std::size_t colon = entry.find(':'); colon != std::string_view::npos && colon == entry.rfind(':')) {
    if (!port_ok(entry.substr(colon + 1))) return std::nullopt;
    entry = entry.substr(0, colon);  // IPv4 with a port (an IPv6 address has several colons)
  }
  if (entry.find('%') != std::string_view::npos) return std::nullopt;
  error_code ec;
  const asio::ip::address address = asio::ip::make_address(entry, ec);
  if (ec) return std::nullopt;
  return address;
}

// X-Forwarded-For lists the addresses each proxy on the way was connected from, each appending its
// peer's: read from the right, the first entry that is not a trusted proxy is the client (or the
// first proxy not trusted), and what is left of it anyone could have written. All trusted: the
// leftmost. An entry that is not an address, or more than kMaxTrustedHops trusted ones in a row,
// leave the peer's own. The protocol is what the nearest proxy said: X-Forwarded-Proto's last
// entry, https or http.
void Worker::take_forwarded(Exchange& x) {
  constexpr int kMaxTrustedHops = 32;
  const Snapshot& snap = *x.snapshot;
  if (!snap.trusts_proxies() || !snap.trusts(x.client_ip)) return;
  boost::container::small_vector<std::string_view, 8> entries;
  std::string_view proto;
  for (const HeadField& f : x.parser.fields()) {
    if (f.name() != http::field::unknown) continue;
    if (beast::iequals(f.name_string(), "X-Forwarded-For")) {
      for_each_token(f.value(), [&](std::string_view entry) { entries.push_back(entry); });
    } else if (beast::iequals(f.name_string(), "X-Forwarded-Proto")) {
      for_each_token(f.value(), [&](std::string_view p) { proto = p; });
    }
  }
  if (beast::iequals(proto, "https")) x.proto = "https";
  int hops = 0;
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    const std::optional<asio::ip::address> address = forwarded_address(*it);
    if (!address || ++hops > kMaxTrustedHops) {
      x.counted_ip = x.client_ip;
      return;
    }
    x.forwarded_ip = client_address(*address);
    x.counted_ip = x.forwarded_ip;
    if (!snap.trusts(x.forwarded_ip)) return;
  }
}

bool Worker::prepare(Exchange& x) {
  assign_request_id(x);
  take_forwarded(x);
  x.origin = x.parser.target();
  // The absolute form (RFC 9112 3.2.2), which a server must accept: routed by its path, and sent
  // upstream in origin form with its authority as the Host.
  for (const std::string_view scheme : {"http://", "https://"}) {
    if (x.origin.size() < scheme.size() || !beast::iequals(x.origin.substr(0, scheme.size()), scheme)) continue;
    const std::string_view rest = x.origin.substr(scheme.size());
    const std::size_t end = rest.find_first_of("/?");
    x.authority = rest.substr(0, end);
    x.origin = end == std::string_view::npos ? std::string_view() : rest.substr(end);
    if (x.origin.empty() || x.origin.front() == '?') {
      x.origin_made.assign("/").append(x.origin);
      x.origin = x.origin_made;
    }
    if (x.authority.empty() || !is_host(x.authority)) return false;
    break;
  }
  const std::size_t q = x.origin.find('?');
  x.path = x.origin.substr(0, q);
  x.query = q == std::string_view::npos ? std::string_view() : x.origin.substr(q + 1);
  return path_is_clean(x.path) && !x.path.starts_with("/_sluice/");
}

Task<bool> Worker::answer(Exchange& x) {
  RequestParser& req = x.parser;
  if (!path_is_clean(x.path)) {
    x.ctx.verdict.bad_request = unclean_path_cause(x.path);
    co_await respond(x, Reason::kBadRequest, &x.ctx.verdict, true);
    finish(x, 400, Reason::kBadRequest, std::nullopt);
    co_return false;
  }
  // Every answer here but decide's to a POST leaves the body unread: a small one that comes at once
  // is dropped, as a refused request's is, and the connection carries on.
  const bool decides = x.path == "/_sluice/v1/decide" && req.method() == http::verb::post;
  if (!decides && !req.is_done()) co_await discard_body(x);
  if (x.path == "/_sluice/healthz") {
    if (req.method() != http::verb::get && req.method() != http::verb::head) co_return co_await not_allowed(x, "GET, HEAD");
    // From the stop signal on, drain_delay included: a load balancer takes the instance out first.
    const bool draining = gw.delaying.load(std::memory_order_acquire) || gw.draining.load(std::memory_order_acquire);
    const bool ok = co_await respond_json(x, draining ? 503 : 200,
                                          draining ? R"({"status":"draining"})" : R"({"status":"ok"})", {}, false);
    finish(x, draining ? 503 : 200, draining ? Reason::kDraining : Reason::kOk, std::nullopt);
    co_return ok;
  }
  if (x.path == "/_sluice/v1/decide") {
    if (!decides) co_return co_await not_allowed(x, "POST");
    co_return co_await decide_endpoint(x);
  }
  // Another path under /_sluice/.
  const bool ok = co_await respond(x, Reason::kNotFound, nullptr, false);
  finish(x, 404, Reason::kNotFound, std::nullopt);
  co_return ok;
}

Task<bool> Worker::not_allowed(Exchange& x, std::string_view allow) {
  const HeaderList headers{{"Allow", std::string(allow)}};  // RFC 9110 15.5.6
  const bool ok = co_await respond_json(x, 405, error_body(Reason::kMethodNotAllowed, x.snapshot->config().language),
                                        headers, false);
  finish(x, 405, Reason::kMethodNotAllowed, std::nullopt);
  co_return ok;
}

CallerCheck Worker::identify(Exchange& x, Request& r) {
  const CallerCheck check = identify_caller(r, *x.snapshot, gw.now_seconds());
  // A refused caller is counted against the interface it asked for (its system is not proven).
  if (check.reason != Reason::kOk) x.ctx.interface = x.snapshot->route(r.method, r.path);
  if (check.reason == Reason::kBadRequest && r.caller_named_twice) x.ctx.verdict.bad_request = BadRequest::kCallerRepeated;
  return check;
}

Reason Worker::verify(Exchange& x, const Request& r, std::string_view target, std::string_view body_sha256_hex) {
  const SignatureCheck check = verify_signature(r, target, body_sha256_hex, *x.snapshot, *gw.nonces, gw.now_seconds());
  if (check.reason != Reason::kOk) x.ctx.interface = x.snapshot->route(r.method, r.path);
  if (check.reason == Reason::kSignatureRateLimited) {
    x.ctx.verdict.retry_after = std::chrono::seconds(std::max<std::int64_t>(1, check.retry_after_seconds));
  }
  return check.reason;
}

Task<Reason> Worker::verify_body(Exchange& x, const Request& r, std::string_view target) {
  const auto max = static_cast<std::uint64_t>(x.snapshot->config().max_body_bytes);
  if (x.parser.content_length().value_or(0) > max) co_return Reason::kBodyTooLarge;
  if (beast::iequals(find_field(x.parser.fields(), http::field::expect), "100-continue") &&
      !co_await send_continue(x)) {
    co_return Reason::kRequestTimeout;
  }
  if (const Reason why = co_await read_body(x, max, x.body); why != Reason::kOk) co_return why;
  x.body_read = true;
  // Judged at the time the body is in, not when the header came: a replay that holds its body back
  // until the original's nonce has expired must find its timestamp expired too.
  co_return verify(x, r, target, config::sha256_hex(x.body));
}

// Why /decide cannot decide on a body (`o`, the JSON object it parsed to, or null), in the
// gateway's language; empty when it can. What is not of the documented shape is refused, a field
// of the wrong type not being taken as absent (a numeric "system" is not a request without a key),
// and so is what a proxied request could not carry, read as the request line and fields are read:
// the answer is the proxy's. A field it does not know is refused, not dropped. A field given twice
// would mean one thing here and perhaps another to whatever read the body before (Boost.JSON keeps
// the last). A client_ip other than the peer's
// own (`peer`) is taken only from a peer in `client_ip_from`: from anyone else it would spend
// another address's counters (a login limit keyed by client_ip, say).
std::string decide_refusal(std::string_view body, const boost::json::object* o, bool zh, std::string_view peer,
                           const std::vector<std::string>& client_ip_from) {
  static constexpr std::string_view kShape = R"({"system":"...","method":"GET","path":"/...","cost":1})";
  const auto say = [zh](std::string en, std::string chinese) { return zh ? std::move(chinese) : std::move(en); };
  if (o == nullptr) {
    return say("the body must be a JSON object such as " + std::string(kShape), "请求体应为 JSON 对象，如 " + std::string(kShape));
  }
  if (const std::optional<std::string> repeated = config::repeated_key(body)) {
    return say("the field " + *repeated + " is given twice", "字段 " + *repeated + " 出现了两次");
  }
  // A field misspelt ("Cost", "cots") would otherwise be dropped, and the request decided as if
  // it were not there: at cost 1, say.
  static constexpr std::array<std::string_view, 7> kFields{"system",    "method",      "path",   "cost",
                                                           "client_ip", "body_sha256", "headers"};
  for (const auto& kv : *o) {
    if (std::find(kFields.begin(), kFields.end(), kv.key()) != kFields.end()) continue;
    const std::string name = config::as_utf8(kv.key());
    return say("unknown field " + name + ": the fields are system, method, path, cost, client_ip, body_sha256 and headers",
               "未知字段 " + name + "：可用字段为 system、method、path、cost、client_ip、body_sha256 和 headers");
  }
  for (const char* name : {"system", "method", "path", "client_ip", "body_sha256"}) {
    if (auto it = o->find(name); it != o->end() && !it->value().is_string()) {
      return say(std::string("the field ") + name + " must be a string", std::string("字段 ") + name + " 应为字符串");
    }
  }
  const auto text = [o](const char* name) -> std::optional<std::string_view> {
    auto it = o->find(name);
    if (it == o->end()) return std::nullopt;
    return std::string_view(it->value().as_string());
  };
  const auto path = text("path");
  if (!path) return say("the field path is missing: " + std::string(kShape), "缺少字段 path：" + std::string(kShape));
  if (auto it = o->find("cost"); it != o->end()) {
    if (!it->value().is_int64() || it->value().as_int64() < 1 || it->value().as_int64() > kMaxLimit) {
      return say("cost must be a whole number from 1 to 2^40 (1099511627776)",
                 "cost 应为 1 到 2^40（1099511627776）之间的整数");
    }
  }
  if (const auto method = text("method"); method && !is_method(*method)) {
    return say("method must be an HTTP method in capitals, such as GET", "method 应为大写的 HTTP 方法，如 GET");
  }
  if (!path->empty() && !is_target(*path)) {
    return say("path must be visible ASCII (the rest percent-encoded), without a #fragment",
               "path 应为可见的 ASCII 字符（其余须百分号编码），且不带 #片段");
  }
  if (const auto ip = text("client_ip")) {
    boost::system::error_code ec;
    const asio::ip::address address = asio::ip::make_address(*ip, ec);
    if (ec) return say("client_ip must be an IP address", "client_ip 应为 IP 地址");
    const bool trusted = std::any_of(client_ip_from.begin(), client_ip_from.end(), [&](const std::string& n) {
      const auto network = config::parse_network(n);  // validated with the configuration
      return network && network->contains(peer);
    });
    if (client_address(address) != peer && !trusted) {
      std::string from;
      for (const std::string& n : client_ip_from) from += (from.empty() ? "" : ", ") + n;
      if (from.empty()) from = zh ? "空" : "none";
      return say("client_ip may name another address than the caller's only from a peer in decide_client_ip_from (" +
                     from + "); this request came from " + std::string(peer),
                 "只有来自 decide_client_ip_from（" + from + "）的请求才可以指定其他地址的 client_ip；本请求来自 " +
                     std::string(peer));
    }
  }
  if (const auto hash = text("body_sha256")) {
    const bool hex = std::all_of(hash->begin(), hash->end(),
                                 [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; });
    if (hash->size() != 64 || !hex) return say("body_sha256 must be 64 hex digits", "body_sha256 应为 64 位十六进制数字");
  }
  if (auto it = o->find("headers"); it != o->end()) {
    const auto* headers = it->value().if_object();
    if (headers == nullptr) {
      return say(R"(headers must be an object of header names and values, such as {"X-User-Id":"7"})",
                 R"(headers 应为请求头名到取值的对象，如 {"X-User-Id":"7"})");
    }
    for (const auto& kv : *headers) {
      const std::string name(kv.key());
      if (!is_field_name(name)) return say("headers: " + name + " is not a header name", "headers：" + name + " 不是请求头名");
      if (!kv.value().is_string()) return say("headers." + name + " must be a string", "headers." + name + " 应为字符串");
      if (!is_field_value(kv.value().as_string())) {
        return say("headers." + name + " has a character no header can carry",
                   "headers." + name + " 含有请求头不能携带的字符");
      }
    }
    // A header named twice is refused, as a caller named twice is on a request: it would mean one
    // thing here (the first) and perhaps another to other readers.
    if (const auto twice = name_repeated(*headers)) {
      return say("headers." + std::string(*twice) + " is given twice (names are the same in any case, and with _ for -)",
                 "headers." + std::string(*twice) + " 出现了两次（请求头名不分大小写，_ 与 - 视为相同）");
    }
  }
  return {};
}

Task<bool> Worker::decide_endpoint(Exchange& x) {
  const config::Config& cfg = x.snapshot->config();
  if (beast::iequals(find_field(x.parser.fields(), http::field::expect), "100-continue") &&
      !co_await send_continue(x)) {
    finish(x, status_of(Reason::kRequestTimeout), Reason::kRequestTimeout, std::nullopt);
    co_return false;
  }
  std::string body;
  if (const Reason why = co_await read_body(x, kDecideBodyLimit, body); why != Reason::kOk) {
    co_await respond(x, why, nullptr, true);
    finish(x, status_of(why), why, std::nullopt);
    co_return false;
  }
  boost::system::error_code jec;
  const boost::json::value doc = boost::json::parse(body, jec);
  const boost::json::object* o = !jec && doc.is_object() ? &doc.as_object() : nullptr;
  // Behind a trusted proxy, the client it names is who asks (the proxy's own address, loopback
  // say, would let every client behind it name any address).
  if (const std::string why = decide_refusal(body, o, cfg.language == config::Language::kChinese, x.counted_ip,
                                             cfg.decide_client_ip_from);
      !why.empty()) {
    // The body was read whole (read_body), so the connection carries on, as after a 200 or a 429: a
    // client that keeps its connection alive need not open another for its next question.
    const bool ok = co_await respond_json(x, 400, R"({"code":400,"reason":"bad_request","msg":)" + json_string(why) + "}", {},
                                          false);
    finish(x, 400, Reason::kBadRequest, std::nullopt);
    co_return ok;
  }
  auto str = [&](const char* name) -> std::optional<std::string_view> {
    auto it = o->find(name);
    if (it == o->end()) return std::nullopt;
    return std::string_view(it->value().as_string());
  };
  std::int64_t cost = 1;
  if (auto it = o->find("cost"); it != o->end()) cost = it->value().as_int64();
  const std::string_view full = *str("path");
  const std::size_t qm = full.find('?');
  // Headers to key limits by come in "headers": {"X-User-Id": "7"}, in either spelling, as a proxied
  // request's.
  class JsonHeaders final : public HeaderLookup {
   public:
    explicit JsonHeaders(const boost::json::object* h) : h_(h) {}
    std::string_view get(std::string_view name) const override {
      if (h_ == nullptr) return {};
      for (const auto& kv : *h_) {
        if (cgi_alias_of(kv.key(), name) && kv.value().is_string()) return kv.value().as_string();
      }
      return {};
    }
    bool repeated(std::string_view) const override { return false; }  // refused before (decide_refusal)

   private:
    const boost::json::object* h_;
  };
  const boost::json::object* headers = nullptr;
  if (auto it = o->find("headers"); it != o->end() && it->value().is_object()) headers = &it->value().as_object();
  JsonHeaders lookup(headers);
  Request r;
  r.method = str("method").value_or("GET");
  r.path = full.substr(0, qm);
  r.query = qm == std::string_view::npos ? std::string_view() : full.substr(qm + 1);
  const auto system = str("system");
  r.has_system_key = system.has_value();
  r.system_key = system.value_or("");
  std::string given_ip;
  if (const auto ip = str("client_ip")) given_ip = client_address(asio::ip::make_address(*ip));  // checked before
  r.client_ip = given_ip.empty() ? x.counted_ip : std::string_view(given_ip);
  r.headers = &lookup;
  r.cost = cost;
  r.hold_in_flight = false;

  const auto t0 = Clock::now();
  Context& ctx = x.ctx;
  // A signed request's body hash comes in "body_sha256" (hex, signed in lower case whichever case it
  // comes in); no field: an empty body.
  std::string body_hash = config::sha256_hex("");
  if (const auto given = str("body_sha256")) {
    body_hash = std::string(*given);
    for (char& c : body_hash) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  Reason reason = Reason::kBadRequest;
  ctx.verdict.bad_request = unclean_path_cause(r.path);
  if (path_is_clean(r.path)) {
    ctx.verdict.bad_request = BadRequest::kMalformed;
    const CallerCheck caller = identify(x, r);
    reason = caller.reason;
    if (reason == Reason::kOk && caller.needs_signature) reason = verify(x, r, full, body_hash);
  }
  if (reason == Reason::kOk) reason = check_access(r, *x.snapshot, ctx);
  if (reason == Reason::kOk) {
    const std::optional<Reason> now = decide_limits_now(x, r);
    reason = now ? *now : co_await decide_limits(x);
  }
  ctx.verdict.reason = reason;
  gw.metrics->observe_decision(index, since(t0));
  HeaderList extra;
  append_headers(ctx.verdict, cfg.rate_limit_headers, extra);
  std::string out;
  if (reason == Reason::kOk) {
    out = "{\"code\":200,\"reason\":\"ok\",\"allowed\":true,\"system\":" +
          json_string(ctx.system != nullptr ? std::string_view(ctx.system->system->key) : "") +
          ",\"interface\":" + json_string(ctx.interface->interface->id) + "}";
  } else {
    out = error_body(reason, cfg.language, ctx.verdict.bad_request);
  }
  const int code = status_of(reason);
  const bool ok = co_await respond_json(x, static_cast<unsigned>(code), std::move(out), extra, false);
  finish(x, code, reason, std::nullopt);
  co_return ok;
}

void Worker::start_lookup(const config::Target& target, Resolved& entry) {
  auto lookup = std::make_shared<Lookup>();
  entry.lookup = lookup;
  resolver.async_resolve(target.host, std::to_string(target.port),
                         [this, lookup, target](error_code ec, const Resolver::results_type& results) {
                           lookup->done = true;
                           if (!ec) {
                             for (const auto& r : results) lookup->endpoints.push_back(r.endpoint());
                           }
                           gw.metrics->count_resolution(lookup->endpoints.empty() ? Metrics::Resolution::kFailed
                                                                                  : Metrics::Resolution::kOk);
                           Resolved& e = resolved[target];
                           e.lookup.reset();
                           // A name that did not resolve keeps its last addresses until it does
                           // again, and is looked up again after kResolveRetry.
                           const bool found = !lookup->endpoints.empty();
                           e.refresh_at = steady_clock().now() + (found ? kResolveEvery : kResolveRetry);
                           if (found) e.endpoints = lookup->endpoints;
                           for (Timer* waiter : lookup->waiters) waiter->cancel();
                         });
}

Task<Worker::Resolution> Worker::addresses_of(const config::Target& target, Nanos timeout) {
  Resolved& entry = resolved[target];  // elements of an unordered_map stay put; none is erased
  if (!entry.endpoints.empty()) {
    // Refreshed in the background: no request waits for a name it has addresses for.
    if (!entry.lookup && steady_clock().now() >= entry.refresh_at) start_lookup(target, entry);
    co_return Resolution{entry.endpoints, false};
  }
  if (!entry.lookup) {
    // A name that did not resolve a moment ago fails at once, rather than ask again per request.
    if (steady_clock().now() < entry.refresh_at) co_return Resolution{{}, false};
    start_lookup(target, entry);
  }
  // The lookup in flight, joined rather than queued behind (Asio's resolver runs them one after
  // another on one thread, and getaddrinfo cannot be stopped: one that hangs would hold them all).
  const std::shared_ptr<Lookup> lookup = entry.lookup;
  Timer waiter(ioc);
  waiter.expires_after(timeout);
  lookup->waiters.push_back(&waiter);
  (void)co_await waiter.async_wait(kTok);
  std::erase(lookup->waiters, &waiter);
  if (!lookup->done) {
    gw.metrics->count_resolution(Metrics::Resolution::kTimeout);
    co_return Resolution{{}, true};
  }
  co_return Resolution{lookup->endpoints, false};
}

Task<Worker::Connected> Worker::connect(const config::Target& target, Nanos timeout, TimedSocket& client) {
  auto c = std::make_unique<TimedSocket>(ioc, sockets);
  c->arm(timeout);
  error_code ec;
  const auto address = asio::ip::make_address(target.host, ec);
  if (!ec) {
    c->watch(client);
    auto [cec] = co_await c->socket().async_connect(tcp::endpoint(address, target.port), kTok);
    ec = c->timed(cec);
  } else {
    const Resolution r = co_await addresses_of(target, timeout);
    if (r.endpoints.empty()) co_return Connected{UpConn(), r.timed_out};
    c->watch(client);
    auto [cec, endpoint] = co_await asio::async_connect(c->socket(), r.endpoints, kTok);
    ec = c->timed(cec);
  }
  c->unwatch();
  // A range connect moves on to the next address when cancelled: one may succeed for a client gone.
  if (c->client_gone()) co_return Connected{UpConn(), false, true};
  if (ec == asio::error::no_descriptors || ec == boost::system::errc::too_many_files_open_in_system ||
      ec == asio::error::no_buffer_space || ec == asio::error::no_memory) {
    co_return Connected{UpConn(), false, false, true};
  }
  if (ec) co_return Connected{UpConn(), ec == beast::error::timeout};
  c->socket().set_option(tcp::no_delay(true), ec);
  c->socket().non_blocking(true, ec);  // for write_now
  co_return Connected{std::move(c)};
}

// On a pooled connection when one is idle; a pooled connection the upstream had closed is retried
// once on a fresh one when the request can be sent again (it has no body, or all of it is held).
Task<Worker::Sent> Worker::send_upstream(Exchange& x, const InterfaceEntry& itf, const config::Target& target,
                                         std::vector<UpConn>& pool, bool has_body, bool expects_continue) {
  const RequestParser& req = x.parser;
  const UpstreamEntry& up = *itf.upstream;
  const bool head = req.method() == http::verb::head;
  UpConn conn;
  beast::flat_buffer& up_buffer = *x.up_buffer;
  up_buffer.clear();
  std::optional<ResponseParser>& rp = *x.up_parser;
  rp.reset();
  std::string& wire = *x.head;
  Reason failure = Reason::kOk;
  bool body_failed = false;
  bool connect_failed = false;
  bool local_failure = false;
  bool client_gone = false;
  bool left_connecting = false;
  bool interim_sent = false;
  bool answered_early = false;  // the upstream answered before it had the whole body
  std::string interim;
  Nanos upload{0};
  // Whether the request can be written again (it has no body, or all of it is held), and whether
  // it may be sent again after the upstream might have acted on it: only an idempotent one may
  // (RFC 9110 9.2.2), as a POST could place an order twice.
  const bool resendable = !has_body || x.body_read;
  const bool replayable = resendable && is_idempotent(req.method());
  for (int attempt = 0; attempt < 2 && !rp; ++attempt) {
    bool reused = false;
    while (attempt == 0 && !reused && !pool.empty()) {
      UpConn pooled = std::move(pool.back());
      pool.pop_back();
      // No request takes a pooled connection on which the upstream sent something while it was
      // idle: that answers none of ours, and a request sent on it would take it for its answer
      // (and each later request the answer of the one before). One closed meanwhile (an idle
      // timeout shorter than ours) is passed over too, at the price of a non-blocking read.
      if (still_open(*pooled)) {
        conn = std::move(pooled);
        reused = true;
      }
    }
    if (!reused) {
      Connected made = co_await connect(target, up.upstream->connect_timeout, x.client);
      if (made.client_gone) {
        failure = Reason::kClientClosedRequest;  // not the target's failure: no other is tried
        left_connecting = true;
        break;
      }
      if (made.local) {
        failure = Reason::kGatewayOverloaded;
        local_failure = true;
        break;
      }
      if (!made.conn) {
        failure = made.timed_out ? Reason::kUpstreamTimeout : Reason::kUpstreamConnectFailed;
        connect_failed = true;
        gw.metrics->count_connect_failure(up.upstream->name, target);
        break;
      }
      conn = std::move(made.conn);
    }
    if (expects_continue && attempt == 0 && has_body && !x.continue_sent && !co_await send_continue(x)) {
      failure = Reason::kRequestTimeout;
      body_failed = true;
      break;
    }
    TimedSocket& us = *conn;
    us.arm(itf.timeout);
    wire.clear();
    append_upstream_head(wire, x.parser, x.origin, x.authority, x.client_ip, x.proto, x.request_id,
                         x.ctx.system != nullptr ? std::string_view(x.ctx.system->system->key) : std::string_view(),
                         x.snapshot->kept_headers(), target);
    error_code ec;
    if (x.body_read) {
      // Read already (its signature covers it): the header and all of it in one write.
      char size_line[24];
      std::size_t size_len = 0;
      std::string_view tail;
      if (x.parser.chunked()) {
        if (!x.body.empty()) size_len = static_cast<std::size_t>(std::snprintf(size_line, sizeof size_line, "%zx\r\n", x.body.size()));
        tail = x.body.empty() ? "0\r\n\r\n" : "\r\n0\r\n\r\n";
      }
      const std::array<asio::const_buffer, 4> pieces{asio::buffer(wire), asio::buffer(size_line, size_len),
                                                     asio::buffer(x.body), asio::buffer(tail.data(), tail.size())};
      // The upstream may answer before it has read it all, as for a body relayed (below).
      if (has_body) x.client.watch(us, TimedSocket::Watch::kUpstreamAnswered);
      auto [wec, wn] = co_await asio::async_write(us.socket(), pieces, kTok);
      x.client.unwatch();
      answered_early = has_body && x.client.upstream_answered();
      ec = answered_early ? error_code() : us.timed(wec);
    } else {
      const auto upload_start = has_body ? Clock::now() : Clock::time_point();
      // Once the head is on its way, the upstream may answer before it has the whole body.
      const RelayResult sent = co_await relay(x.client, x.buffer, x.parser, us, wire, x.parser.chunked(), x.chunk,
                                              x.snapshot->config().header_timeout, itf.timeout, [&] {
                                                if (has_body) x.client.watch(us, TimedSocket::Watch::kUpstreamAnswered);
                                              });
      x.client.unwatch();
      answered_early = has_body && x.client.upstream_answered();
      if (has_body) upload += since(upload_start);
      // An answer that came while the client's body was awaited, or written, cut that: it is read at
      // once, and the connection ends after it (the rest of the body cannot be told from a next
      // request).
      if (sent.read && !answered_early) {
        failure = reason_of_body_read_error(sent.read);
        body_failed = true;
      }
      ec = sent.write;
      // An upstream that refuses an upload may answer before it has all of it, and stop reading (a
      // 413): the write fails, or was cancelled, and its answer is what the client gets, read as any
      // other would be.
      if (ec && ec != beast::error::timeout && has_body && (sent.started || answered_early)) ec = {};
    }
    if (body_failed) break;
    if (!ec) {
      // The response header: the upstream has the interface's timeout from the end of the request
      // (its writes went at once, setting no deadline), as long as the client stays. An interim
      // (1xx) response before it (103 Early Hints, 102 Processing) is passed on to an HTTP/1.1
      // client (RFC 9110 15.2), but 100 Continue: the gateway answers Expect itself.
      us.arm(itf.timeout);
      us.watch(x.client);
      while (true) {
        rp.emplace(*x.up_head);
        rp->body_limit(std::nullopt);
        rp->header_limit(64 * 1024);
        if (head) rp->skip(true);
        ec = parse_buffered(*rp, up_buffer);
        while (ec == http::error::need_more) {
          const auto room = head_room(up_buffer);
          auto [hec, hn] = us.read_now(room);
          if (hec == asio::error::would_block) std::tie(hec, hn) = co_await us.async_read_some(room);
          up_buffer.commit(hn);
          ec = hec ? read_failed(*rp, us.timed(hec)) : parse_buffered(*rp, up_buffer);
        }
        // A coding besides chunked, which no request asked for (none says TE) and which an
        // HTTP/1.0 client could not be sent: a bad response, as nginx has it.
        if (!ec && rp->transfer_coded()) ec = http::error::bad_transfer_encoding;
        if (ec || rp->status() / 100 != 1) break;
        if (rp->status() == 101) {
          // Switching protocols, which no request asked for (the gateway forwards no Upgrade): the
          // connection speaks something else from here on (RFC 9110 15.2.2), a bad response.
          ec = http::error::bad_status;
          break;
        }
        if (rp->status() != 100 && x.parser.http11()) {
          interim.clear();
          append_interim_head(interim, *rp);
          const std::array<asio::const_buffer, 1> piece{asio::buffer(interim)};
          const auto rest = write_now(x.client.socket(), piece, ec);
          if (!ec && asio::buffer_size(rest) > 0) {
            x.client.arm(x.snapshot->config().send_timeout);
            auto [iec, in] = co_await asio::async_write(x.client.socket(), rest, kTok);
            ec = x.client.timed(iec);
            x.client.disarm();
          }
          if (ec) {
            client_gone = true;
            break;
          }
          interim_sent = true;
        }
      }
      us.unwatch();
      client_gone = client_gone || us.client_gone();
    }
    // Some servers answer an idle connection they close with a 408, which can cross the request
    // on its way: on a pooled connection a 408 answers no request of ours (the upstream says it did
    // not act on one, RFC 9110 15.5.9), and the request goes again on a fresh connection when it can
    // be written again, whatever its method.
    // (Not after an interim response: the upstream had taken that request.)
    const bool idle_408 = !ec && reused && rp->status() == 408 && resendable && !interim_sent;
    if (!ec && !idle_408) break;
    const bool written = rp.has_value();
    // A client that has had an interim response is not sent another by a second try.
    const bool nothing_back = (!rp || !rp->got_some()) && !interim_sent;
    rp.reset();
    conn.reset();
    up_buffer.clear();
    if (client_gone) {
      failure = Reason::kClientClosedRequest;  // the connection closes: the upstream sees it gave up too
      break;
    }
    if (reused) pool.clear();  // the upstream closed them: they are all likely stale
    failure = reason_of_upstream_error(ec);
    if (failure != Reason::kUpstreamConnectFailed) break;
    // Sent again: a request the upstream did not take whole, or took and answered with nothing, when
    // it may be.
    const bool again = idle_408 || (reused && nothing_back && (written ? replayable : resendable));
    if (!again) break;
  }
  if (!rp) co_return Sent{UpConn(), failure, body_failed, connect_failed, upload, left_connecting, false, local_failure};
  co_return Sent{std::move(conn), Reason::kOk, false, false, upload, false, answered_early};
}

// A proxied request's steps. Its frame, and those of the coroutines it awaits, must stay within the
// 1020 bytes Asio reuses (255 chunks of 4 bytes; allocations_test.cpp): what only some answers need
// goes in the Exchange or its Context (in the session's frame), not in locals.
Task<bool> Worker::proxy(Exchange& x) {
  const RequestParser& req = x.parser;
  const config::Config& cfg = x.snapshot->config();
  Context& ctx = x.ctx;
  FieldsLookup lookup(req.fields(), x.authority);
  Request& r = x.request;
  r.method = req.method_string();
  r.path = x.path;
  r.query = x.query;
  const CallerFields named = caller_fields(req.fields(), cfg.system_key_header);
  r.has_system_key = named.has_system_key;
  r.system_key = named.system_key;
  r.caller_named_twice = named.repeated;
  r.client_ip = x.counted_ip;
  r.headers = &lookup;

  const auto t0 = Clock::now();
  const CallerCheck caller = identify(x, r);
  Reason reason = caller.reason;
  if (reason == Reason::kOk && caller.needs_signature) reason = co_await verify_body(x, r, req.target());
  if (reason == Reason::kOk) reason = check_access(r, *x.snapshot, ctx);
  if (reason == Reason::kOk) {
    const std::optional<Reason> now = decide_limits_now(x, r);
    reason = now ? *now : co_await decide_limits(x);
  }
  gw.metrics->observe_decision(index, since(t0));
  if (reason != Reason::kOk) {
    ctx.verdict.reason = reason;
    // A small body that comes at once is dropped, and the connection carries on (respond_json
    // keeps it when the request was read whole).
    if (!req.is_done()) co_await discard_body(x);
    const bool ok = co_await respond(x, reason, &ctx.verdict, false);
    finish(x, status_of(reason), reason, std::nullopt);
    co_return ok;
  }

  // The breaker.
  const InterfaceEntry& itf = *ctx.interface;
  const UpstreamEntry& up = *itf.upstream;
  BreakerPermit permit;
  if (up.breaker) {
    permit = up.breaker->try_acquire();
    if (!permit.admitted()) {
      ctx.verdict.retry_after = std::max(permit.retry_after(), Nanos{1});
      if (!req.is_done()) co_await discard_body(x);
      const bool ok = co_await respond(x, Reason::kUpstreamUnavailable, &ctx.verdict, false);
      finish(x, 503, Reason::kUpstreamUnavailable, std::nullopt);
      co_return ok;
    }
  }
  bool recorded = false;
  auto record = [&](bool failed, Nanos took) {
    if (up.breaker && !recorded) up.breaker->record(permit, failed, took);
    recorded = true;
  };
  auto release_permit = [&] {
    if (up.breaker && !recorded) up.breaker->release(permit);
    recorded = true;
  };

  gw.metrics->add_in_flight(1);
  struct InFlight {
    Metrics& m;
    ~InFlight() { m.add_in_flight(-1); }
  } in_flight{*gw.metrics};

  // The request as the upstream sees it.
  const bool expects_continue = beast::iequals(find_field(req.fields(), http::field::expect), "100-continue");
  const bool client_keep_alive = x.parser.keep_alive();
  const bool has_body = x.parser.chunked() || x.parser.content_length().value_or(0) > 0;

  const auto up_start = Clock::now();
  // The targets in turn. One that cannot be connected to has taken nothing of the request: the next
  // is tried, each at most once, and it rests for kTargetRest (skipped while another is up).
  const auto& targets = up.upstream->targets;
  std::vector<UpConn>* pool = nullptr;
  Sent sent_up;
  boost::container::small_vector<std::size_t, 4> tried;
  while (tried.size() < targets.size()) {
    const std::size_t at = next_target_of(targets, tried);
    const config::Target& target = targets[at];
    pool = &idle[target];
    sent_up = co_await send_upstream(x, itf, target, *pool, has_body, expects_continue);
    if (sent_up.local_failure) break;  // no target's fault, nor would another do better
    if (!sent_up.connect_failed) {
      // Connected (a client that left while it connected says nothing of the target).
      if (!resting.empty() && !sent_up.left_connecting) resting.erase(target);
      break;
    }
    resting.insert_or_assign(target, steady_clock().now() + kTargetRest);
    tried.push_back(at);
  }
  UpConn conn = std::move(sent_up.conn);
  // The upstream's time: to connect, and from the end of the request to the response header.
  const Nanos upstream_latency = since(up_start) - sent_up.upload;
  // A call whose client left after the upstream had taken `took`: the upstream did nothing wrong,
  // unless it was already slow. One that outlasted slow_call counts as slow, or a hung upstream
  // whose clients give up would never trip its breaker.
  auto abandoned = [&](Nanos took) {
    const CircuitBreakerOptions* judged = up.breaker ? &up.breaker->options() : nullptr;
    if (judged != nullptr && judged->slow_call_rate > 0 && took >= judged->slow_call) {
      record(false, took);
    } else {
      release_permit();
    }
  };
  if (!conn) {
    if (sent_up.failure == Reason::kClientClosedRequest) {
      // An upload the client broke off was never the upstream's to answer.
      if (sent_up.body_failed) {
        release_permit();
      } else {
        abandoned(upstream_latency);
      }
      finish(x, status_of(sent_up.failure), sent_up.failure, upstream_latency);  // nobody to answer
      co_return false;
    }
    if (sent_up.body_failed || sent_up.local_failure) {
      release_permit();
    } else {
      record(true, upstream_latency);
    }
    if (sent_up.local_failure) {
      // Said as this process's overload, not the limits' (their quota was not what refused it).
      ctx.verdict.quota.reset();
      ctx.verdict.retry_after = std::chrono::seconds(1);
      gw.log_overload();
    }
    // The client's connection carries on when its request was read whole (respond_json checks).
    const bool keep = co_await respond(x, sent_up.failure, sent_up.local_failure ? &ctx.verdict : nullptr, false);
    finish(x, status_of(sent_up.failure), sent_up.failure, upstream_latency);
    co_return keep;
  }
  std::optional<ResponseParser>& rp = *x.up_parser;
  beast::flat_buffer& up_buffer = *x.up_buffer;
  std::string& wire = *x.head;

  // The response, header then body piece by piece, back to the client.
  const unsigned status = rp->status();
  // The parser's view, which also knows a body that ends when the upstream closes.
  const bool upstream_keep_alive = rp->keep_alive();
  const bool with_body = body_expected(req.method(), status);
  // A body without a length goes chunk-framed to an HTTP/1.1 client, and to an HTTP/1.0 one as it
  // is, ended by closing the connection.
  const bool client11 = x.parser.http11();
  const bool chunk_it = client11 && with_body && !rp->content_length() && !rp->chunked();
  const bool relay_chunked = client11 && with_body && (chunk_it || rp->chunked());
  // (A request whose body was not read whole, an upload the upstream answered early, ends the
  // connection: the rest of it cannot be told from a next request.)
  const bool keep_client = client_keep_alive && !gw.draining.load(std::memory_order_acquire) &&
                           (client11 || !with_body || rp->content_length()) && x.parser.is_done();
  wire.clear();
  append_client_head(wire, *rp, ctx.verdict, cfg.rate_limit_headers, x.request_id, chunk_it, keep_client, client11);
  // The breaker judges the call by its status once the first piece of the body is in — not at the
  // end, or a stream would hold a half-open probe for as long as it lasts — and as failed when the
  // upstream stalls or breaks off before that piece (though its head may have gone on).
  const bool failure_status = status < 600 && up.failure_statuses.test(status);
  conn->watch(x.client);  // a stream, or a body the upstream is slow to send, can outlast the client
  const RelayResult sent = co_await relay(*conn, up_buffer, *rp, x.client, wire, relay_chunked,
                                          x.chunk, itf.timeout, x.snapshot->config().send_timeout,
                                          [&] { record(failure_status, upstream_latency); });
  conn->unwatch();
  // The client left: found by the sweep, or by a write to it that failed for its closing (a relay
  // done whole was not cut short).
  const bool left = sent.write == asio::error::broken_pipe || sent.write == asio::error::connection_reset ||
                    (conn->client_gone() && (sent.read || sent.write));
  if (left) {
    // Judged by the upstream's time until then, when the first piece of the body did not come
    // before (a body that stalls at once is as slow as a header that does).
    abandoned(since(up_start) - sent_up.upload);
    finish(x, sent.started ? static_cast<int>(status) : status_of(Reason::kClientClosedRequest),
           Reason::kClientClosedRequest, upstream_latency);
    co_return false;
  }
  const bool upstream_ok = !sent.read;
  const error_code ec = sent.write;
  record(failure_status || !upstream_ok, upstream_latency);  // when on_first did not
  // Why the upstream's side ended early, when it did.
  const Reason why = reason_of_upstream_error(sent.read);
  if (!upstream_ok && !sent.started) {
    // The upstream broke off before the first piece of the body: nothing was sent yet, and the
    // client's connection carries on when its request was read whole (respond_json checks).
    const bool keep = co_await respond(x, why, nullptr, false);
    finish(x, status_of(why), why, upstream_latency);
    co_return keep;
  }
  // The upstream connection goes back to the pool when the exchange ended cleanly.
  if (upstream_ok && !ec && rp->is_done() && upstream_keep_alive && up_buffer.size() == 0 &&
      (!has_body || x.parser.is_done()) && !sent_up.answered_early) {
    if (pool->size() < static_cast<std::size_t>(up.upstream->max_idle_connections)) {
      conn->disarm();
      conn->pooled(coarse_now());
      pool->push_back(std::move(conn));
      // A reload while it was out: its target may be gone since the pools were swept.
      if (x.snapshot != snapshot()) close_idle_of_gone_targets();
    }
  }
  // An upstream that broke off or stalled after the head went out, or a client that read nothing
  // of its answer for send_timeout: the client got its status and a body cut short (its connection
  // closes), and the log and the metrics say why.
  const Reason ended = ec == beast::error::timeout ? Reason::kRequestTimeout : upstream_ok ? Reason::kOk : why;
  finish(x, static_cast<int>(status), ended, upstream_latency);
  co_return !ec && upstream_ok && keep_client && x.parser.is_done();
}

// --- the admin listener ------------------------------------------------------------------------

// Whether a request from a loopback peer asks for itself, as a caller on this host: it names the
// listener by an address or "localhost" (a page whose name an attacker's DNS now points at 127.0.0.1
// names it by that name: DNS rebinding), and carries no field saying it forwards another's request
// (the clients of a reverse proxy on this host are not on it).
bool asks_for_itself(const http::request<http::string_body>& req) {
  for (const std::string_view forwarded : {"Forwarded", "X-Forwarded-For", "X-Real-IP"}) {
    if (req.find(forwarded) != req.end()) return false;
  }
  if (req.find(http::field::host) == req.end()) return true;  // HTTP/1.0
  std::string_view host = req[http::field::host];
  if (host.starts_with('[')) {
    const std::size_t close = host.find(']');
    if (close == std::string_view::npos) return false;
    host = host.substr(1, close - 1);
  } else if (const std::size_t colon = host.find(':'); colon != std::string_view::npos) {
    host = host.substr(0, colon);
  }
  boost::system::error_code ec;
  (void)asio::ip::make_address(host, ec);
  return !ec || beast::iequals(host, "localhost");
}

// The largest body the admin listener reads (PUT /admin/v1/config carries a whole configuration).
constexpr std::uint64_t kAdminBodyLimit = std::uint64_t{16} << 20;

// The admin listener's answers of its own: a built-in route without a token off loopback, and no
// route.
const AdminResponse kAdminUnauthorized{
    401, "application/json",
    R"({"code":401,"reason":"unauthorized","msg":"From off loopback (or through a proxy, or by a name other than localhost), this needs an admin token: Authorization: Bearer <token>."})"};
const AdminResponse kAdminNotFound{404, "application/json", R"({"code":404,"reason":"not_found","msg":"Not found."})"};

Task<void> Gateway::Impl::admin_session(Socket socket) {
  error_code pec;
  const auto peer = socket.remote_endpoint(pec).address();
  const bool loopback = !pec && (peer.is_loopback() ||
                                 (peer.is_v6() && peer.to_v6().is_v4_mapped() &&
                                  asio::ip::make_address_v4(asio::ip::v4_mapped, peer.to_v6()).is_loopback()));
  Stream stream(std::move(socket));
  beast::flat_buffer buffer;
  Timer hold_timer(stream.get_executor());
  // The client may still be sending what was not read (a body refused before it came): the close
  // lingers, as the data plane's does (kLingerTime).
  bool unread = false;
  while (true) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(kHeaderLimit);
    parser.body_limit(kAdminBodyLimit);
    stream.expires_after(std::chrono::seconds(30));
    // The head first: a request that waits for "100 Continue" before it sends its body gets it (or
    // its refusal) once the head is in.
    auto [ec, n] = co_await http::async_read_header(stream, buffer, parser, kTok);
    auto refuse = [&](http::status status, std::string body) -> Task<void> {
      http::response<http::string_body> res{status, 11};
      res.set(http::field::date, http_date_now());
      res.set(http::field::content_type, "application/json");
      res.set("X-Content-Type-Options", "nosniff");
      res.body() = std::move(body);
      res.keep_alive(false);
      res.prepare_payload();
      stream.expires_after(std::chrono::seconds(30));
      co_await http::async_write(stream, res, kTok);
    };
    // Framing the data plane refuses as ambiguous (RFC 9112 6.1, 3.2): a body read one way here
    // could be read another way by a proxy in front, and a request hidden in it answered. Refused
    // from the head, its body unread.
    if (!ec) {
      const auto& head = parser.get();
      const std::size_t codings = head.count(http::field::transfer_encoding);
      if (codings > 1 || (codings == 1 && !beast::iequals(head[http::field::transfer_encoding], "chunked")) ||
          head.count(http::field::host) > 1 || (head.version() == 11 && head.count(http::field::host) == 0)) {
        co_await refuse(http::status::bad_request,
                        R"({"code":400,"reason":"bad_request","msg":"The request's framing or Host is not one the admin listener takes."})");
        unread = !parser.is_done();
        break;
      }
    }
    // HEAD is answered as GET, without the body (RFC 9110 9.3.2).
    const bool head = !ec && parser.get().method() == http::verb::head;
    const std::string_view method_string = head ? "GET" : std::string_view(parser.get().method_string());
    const std::string path(parser.get().target().substr(0, parser.get().target().find('?')));
    const bool builtin = path == "/metrics" || path == "/healthz" || path == "/config";
    auto request_of = [&](const http::request<http::string_body>& req) {
      AdminRequest request{std::string(method_string), std::string(req.target()), req.body(), {},
                           loopback && asks_for_itself(req)};
      for (const auto& f : req) request.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
      return request;
    };
    AdminHandler handler;
    AdminScreen screen;
    if (!ec && !builtin) {
      std::lock_guard lock(admin_mu);
      std::size_t longest = 0;  // the route with the longest matching prefix answers
      for (const AdminRoute& route : admin_routes) {
        if ((route.method == "*" || method_string == route.method) && path.starts_with(route.prefix) &&
            (!handler || route.prefix.size() >= longest)) {
          handler = route.handler;
          screen = route.screen;
          longest = route.prefix.size();
        }
      }
    }
    // A body to come that the client holds back until told to send it (RFC 9110 10.1.1): a request
    // refused from its head alone gets that answer instead, and its connection ends (the data
    // plane's way: the body is never read, so nothing after it can be); any other gets "100
    // Continue" at once. An HTTP/1.0 client gets no 1xx, which it would take for the answer.
    std::optional<AdminResponse> early;
    if (!ec && !parser.is_done() && parser.get().version() == 11 &&
        beast::iequals(parser.get()[http::field::expect], "100-continue")) {
      if (builtin) {
        if (options.admin_guard && !options.admin_guard(request_of(parser.get()))) early = kAdminUnauthorized;
      } else if (!handler) {
        early = kAdminNotFound;
      } else if (screen) {
        const AdminRequest request = request_of(parser.get());
        auto ask = [&]() -> Task<std::optional<AdminResponse>> { co_return screen(request); };
        early = co_await asio::co_spawn(admin_ioc->get_executor(), ask, asio::use_awaitable_t<Executor>{});
      }
      if (!early) {
        static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
        stream.expires_after(std::chrono::seconds(30));
        auto [wec, wn] = co_await asio::async_write(stream, asio::buffer(kContinue), kTok);
        if (wec) break;
      }
    }
    if (!ec && !early && !parser.is_done()) {
      stream.expires_after(std::chrono::seconds(30));
      auto [bec, bn] = co_await http::async_read(stream, buffer, parser, kTok);
      ec = bec;
    }
    // A request that cannot be read is answered, not just hung up on (a whole configuration may be
    // what is too big), and ends the connection; one that ended or stalled just ends.
    const bool unreadable = ec && ec.category() == http::make_error_code(http::error::body_limit).category() &&
                            ec != http::error::end_of_stream && ec != http::error::partial_message;
    if (unreadable) {
      if (ec == http::error::body_limit) {
        co_await refuse(http::status::payload_too_large,
                        R"({"code":413,"reason":"body_too_large","msg":"The admin listener takes bodies up to 16 MiB."})");
      } else if (ec == http::error::header_limit) {
        co_await refuse(http::status::request_header_fields_too_large,
                        R"({"code":431,"reason":"header_too_large","msg":"The request header is larger than 8 KiB."})");
      } else {
        co_await refuse(http::status::bad_request, R"({"code":400,"reason":"bad_request","msg":)" +
                                                       json_string("The request is malformed: " + ec.message()) + "}");
      }
      unread = true;
      break;
    }
    if (ec) break;
    // From here to its answer's end, a drain waits for it (a long poll held is answered first).
    const Counting answering(admin_in_flight);
    auto& req = parser.get();
    const http::verb method = head ? http::verb::get : req.method();
    const AdminRequest request = request_of(req);
    AdminResponse out = kAdminNotFound;
    if (early) {
      out = std::move(*early);
    } else if (builtin && options.admin_guard && !options.admin_guard(request)) {
      out = kAdminUnauthorized;
    } else if (method == http::verb::get && path == "/metrics") {
      out = {200, "text/plain; version=0.0.4; charset=utf-8", metrics->render(*snapshot(), store_breakers())};
    } else if (method == http::verb::get && path == "/healthz") {
      out = delaying.load() || draining.load() ? AdminResponse{503, "application/json", R"({"status":"draining"})"}
                                               : AdminResponse{200, "application/json", R"({"status":"ok"})"};
    } else if (method == http::verb::get && path == "/config") {
      // Without the store's password: a read token or a loopback caller may see this.
      config::Config shown = in_effect(snapshot()->config());
      shown.store = config::redact_store_password(shown.store);
      out = {200, "application/yaml", config::to_yaml(shown)};
    } else if (builtin) {
      out = {405, "application/json",
             R"({"code":405,"reason":"method_not_allowed","msg":"Method not allowed: GET or HEAD."})",
             {{"Allow", "GET, HEAD"}}};
    } else if (handler) {
      auto call = [&]() -> Task<AdminResponse> { co_return handler(request); };
      out = co_await asio::co_spawn(admin_ioc->get_executor(), call, asio::use_awaitable_t<Executor>{});
      // A long poll: asked again until it has news or its time is up. One held when the gateway
      // begins to drain is answered then with what it has, its connection closed, rather than cut
      // by the stop; one that comes while it drains is told so (503, Retry-After), so that a
      // replica asks again in a while rather than at once, until the instance is gone.
      if (out.hold > Nanos{0} && draining.load()) {
        out = {503, "application/json",
               R"({"code":503,"reason":"draining","msg":"This instance is stopping: ask again in a while, or ask another."})",
               {{"Retry-After", "1"}}};
      }
      const auto until = Clock::now() + out.hold;
      while (out.hold > Nanos{0} && Clock::now() < until && !draining.load() && !stopped.load()) {
        hold_timer.expires_after(std::chrono::milliseconds(50));
        auto [tec] = co_await hold_timer.async_wait(kTok);
        if (tec) break;
        out = co_await asio::co_spawn(admin_ioc->get_executor(), call, asio::use_awaitable_t<Executor>{});
      }
    }
    http::response<http::string_body> res{static_cast<http::status>(out.status), 11};
    res.set(http::field::date, http_date_now());
    res.set(http::field::content_type, out.content_type);
    res.set("X-Content-Type-Options", "nosniff");  // every answer is what its type says
    for (const auto& [name, value] : out.headers) res.set(name, value);
    res.body() = std::move(out.body);
    // The connection carries on only when the whole request was read: an unread body would be taken
    // for the next request.
    res.keep_alive(req.keep_alive() && parser.is_done() && !draining.load());
    res.prepare_payload();
    stream.expires_after(std::chrono::seconds(30));
    http::response_serializer<http::string_body> serializer(res);
    error_code wec;
    if (head) {
      auto [hec, hn] = co_await http::async_write_header(stream, serializer, kTok);
      wec = hec;
    } else {
      auto [bec, bn] = co_await http::async_write(stream, serializer, kTok);
      wec = bec;
    }
    if (wec) break;
    if (!res.keep_alive()) {
      unread = !parser.is_done();
      break;
    }
  }
  error_code ec;
  if (unread) {
    // As the data plane's lingering close: the answer is not lost to a reset while the client
    // still sends.
    stream.socket().shutdown(Socket::shutdown_send, ec);
    stream.expires_after(kLingerTime);
    char drop[4096];
    for (std::size_t dropped = 0; dropped < kLingerBytes;) {
      auto [read_ec, got] = co_await stream.async_read_some(asio::buffer(drop), kTok);
      if (read_ec) break;
      dropped += got;
    }
  }
  stream.socket().shutdown(Socket::shutdown_both, ec);
}

Task<void> Gateway::Impl::admin_loop() {
  while (true) {
    auto [ec, socket] = co_await admin_acceptor->async_accept(kTok);
    if (ec) {
      if (!admin_acceptor->is_open()) co_return;
      continue;
    }
    asio::co_spawn(admin_acceptor->get_executor(), admin_session(std::move(socket)), asio::detached);
  }
}

Task<void> Gateway::Impl::accept_loop() {
  Timer backoff(acceptor->get_executor());
  std::uint64_t failed = 0;
  std::chrono::steady_clock::time_point next_said{};
  while (true) {
    Worker& w = *workers[next_worker++ % workers.size()];
    auto [ec, socket] = co_await acceptor->async_accept(w.ioc, kTok);
    if (ec) {
      if (!acceptor->is_open() || ec == asio::error::operation_aborted) co_return;
      // Out of file descriptors, most likely: give the connections in flight a moment to end. The
      // connection stays in the listen backlog. Said at once, then at most every 30 s.
      ++failed;
      if (const auto now = std::chrono::steady_clock::now(); now >= next_said) {
        log("cannot accept connections: " + ec.message() + " (" + std::to_string(failed) +
            " failed since the last such line; connections wait in the listen backlog, retried every 50 ms)");
        failed = 0;
        next_said = now + std::chrono::seconds(30);
      }
      backoff.expires_after(std::chrono::milliseconds(50));
      co_await backoff.async_wait(kTok);
      continue;
    }
    error_code oec;
    socket.set_option(tcp::no_delay(true), oec);
    socket.non_blocking(true, oec);  // for write_now
    asio::co_spawn(w.ioc, w.session(std::move(socket)), asio::detached);
  }
}

// --- reload, drain, housekeeping ----------------------------------------------------------------

Status Gateway::Impl::install(std::shared_ptr<const config::Config> config) {
  std::lock_guard lock(reload_mu);
  std::shared_ptr<const Snapshot> old = snapshot();
  if (old) {
    // Each start-only setting the reload changed, by name: the six listed whatever changed left the
    // operator to diff the files to find which one would wait for a restart. One changed back to
    // what is in effect is not named; one a flag gave at start is named apart: the flag overrides it.
    const config::Config& was = old->config();
    std::vector<std::string_view> changed, overridden;
    const auto note = [&](std::string_view name, const auto member, bool flag) {
      if (was.*member == (*config).*member || (*config).*member == start_only.*member) return;
      (flag ? overridden : changed).push_back(name);
    };
    note("listen", &config::Config::listen, !options.listen.empty());
    note("admin_listen", &config::Config::admin_listen, !options.admin_listen.empty());
    note("store", &config::Config::store, !options.store.empty());
    note("fleet_size", &config::Config::fleet_size, options.fleet_size > 0);
    note("store_timeout", &config::Config::store_timeout, false);
    note("access_log", &config::Config::access_log, !options.access_log.empty());
    const auto listed = [](const std::vector<std::string_view>& names) {
      std::string out;
      for (std::size_t i = 0; i < names.size(); ++i) {
        out += i == 0 ? "" : i + 1 == names.size() ? " and " : ", ";
        out += names[i];
      }
      return out;
    };
    if (!changed.empty()) {
      log(listed(changed) + (changed.size() == 1 ? " changed: it takes" : " changed: they take") +
          " effect at the next start only (/config shows what is in effect)");
    }
    if (!overridden.empty()) {
      log(listed(overridden) + (overridden.size() == 1 ? " changed, but it is" : " changed, but they are") +
          " given on the command line, which the file does not override");
    }
  }
  const std::uint64_t g = generation.load() + 1;
  auto next = std::make_shared<const Snapshot>(std::move(config), *breakers, g,
                                               options.secret_key ? &*options.secret_key : nullptr);
  for (const std::string& problem : next->caller_problems()) log("caller authentication: " + problem);
  std::vector<std::string> keys;
  for (const auto& u : next->config().upstreams) keys.push_back(Snapshot::breaker_key(u));
  {
    std::lock_guard slock(snapshot_mu);
    current = next;
  }
  generation.store(g, std::memory_order_release);
  breakers->retain(keys);
  return {};
}

Gateway::Impl::FileStamp Gateway::Impl::stat_config() const {
  struct stat st {};
  if (::stat(options.config_path.c_str(), &st) != 0) return {};
  auto ns = [](const timespec& t) { return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec; };
  return FileStamp{ns(st.st_mtim), ns(st.st_ctim), static_cast<std::int64_t>(st.st_size),
                   static_cast<std::uint64_t>(st.st_ino)};
}

Status Gateway::Impl::reload_from_file() {
  if (options.config_path.empty()) return invalid_argument("no configuration file to reload from");
  std::lock_guard reloading(file_reload_mu);
  {
    std::lock_guard lock(stamp_mu);
    stamp = stat_config();
  }
  auto loaded = config::load_yaml_file(options.config_path);
  if (auto* problems = std::get_if<std::vector<config::Problem>>(&loaded)) {
    std::string all;
    for (const auto& p : *problems) {
      log("reload refused: " + p.to_string());
      all += (all.empty() ? "" : "\n") + p.to_string();
    }
    metrics->count_reload(false);  // after the log: who sees the count can read why
    return invalid_argument(all);
  }
  Status s = install(std::get<std::shared_ptr<const config::Config>>(std::move(loaded)));
  metrics->count_reload(s.ok());
  log("configuration reloaded from " + options.config_path + " (generation " +
      std::to_string(generation.load()) + ")");
  return s;
}

Task<void> Gateway::Impl::housekeeping() {
  Timer timer(workers[0]->ioc);
  auto next_watch = Clock::now() + options.watch_interval;
  auto next_log_loss = Clock::now();
  while (!stopped.load()) {
    timer.expires_after(std::chrono::milliseconds(100));
    auto [ec] = co_await timer.async_wait(kTok);
    if (ec) co_return;
    // (The log's own thread writes it.) What it lost is said, at most every kStoreLogEvery.
    if (Clock::now() >= next_log_loss) {
      if (auto lost = access_log->take_lost()) {
        next_log_loss = Clock::now() + kStoreLogEvery;
        log("access log: " + std::to_string(lost->first) + " lines lost (" + lost->second + ")");
      }
    }
    if (!options.config_path.empty() && Clock::now() >= next_watch) {
      next_watch = Clock::now() + options.watch_interval;
      const FileStamp now = stat_config();
      bool changed = false;
      {
        std::lock_guard lock(stamp_mu);
        changed = now.size >= 0 && !(now == stamp);
      }
      // A file that is gone (removed, or a path that no longer leads to one) is said once; the
      // configuration read last goes on serving, and the file is read when it is back.
      if (now.size < 0 && !config_missing) {
        log("configuration file " + options.config_path + " is gone: still serving the configuration read last");
      }
      config_missing = now.size < 0;
      if (changed) (void)reload_from_file();
    }
  }
}

void Gateway::Impl::begin_drain() {
  // The deadline first, so that whoever sees `draining` sees it too (a stop signal sent again, see
  // drain_progress()); only the first drain sets it.
  // A drain_timeout past the clock's end (about 292 years from its epoch) is the clock's end.
  const Clock::time_point now = Clock::now();
  const auto timeout = std::min<Clock::duration>(snapshot()->config().drain_timeout, Clock::time_point::max() - now);
  Clock::time_point unset{};
  drain_deadline.compare_exchange_strong(unset, now + timeout);
  if (draining.exchange(true)) return;
  log("draining: no new connections; waiting for requests in flight");
  asio::post(workers[0]->ioc, [this] {
    error_code ec;
    acceptor->close(ec);
    asio::co_spawn(workers[0]->ioc, drain_watch(), asio::detached);
  });
  for (auto& w : workers) asio::post(w->ioc, [wp = w.get()] { wp->close_idle_conns(); });
}

std::string Gateway::Impl::drain_progress() const {
  const auto count = [](std::int64_t n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
  };
  const std::string left = count(sessions.load(), "client connection", "client connections") + " and " +
                           count(admin_in_flight.load(), "admin request", "admin requests");
  const auto until = std::chrono::ceil<std::chrono::seconds>(drain_deadline.load() - Clock::now());
  if (until.count() <= 0) {
    return "already draining, and drain_timeout has passed: cutting " + left + "; the gateway stops within a second";
  }
  return "already draining, waiting for " + left + "; drain_timeout cuts them in " + std::to_string(until.count()) +
         "s, then the gateway stops";
}

Task<void> Gateway::Impl::drain_watch() {
  const auto deadline = drain_deadline.load();
  Timer timer(workers[0]->ioc);
  while ((sessions.load() > 0 || admin_in_flight.load() > 0) && Clock::now() < deadline) {
    // Sessions that were between requests when the drain began close as they notice it.
    for (auto& w : workers) asio::post(w->ioc, [wp = w.get()] { wp->close_idle_conns(); });
    timer.expires_after(std::chrono::milliseconds(20));
    co_await timer.async_wait(kTok);
  }
  if (sessions.load() > 0) {
    // What the requests left wait for times out now: each is answered where it can be (a 504 for
    // one waiting on its upstream, a 408 for an upload still coming) and logged, rather than cut
    // off by the stop with neither.
    log("drain timeout: cutting " + std::to_string(sessions.load()) + " connections");
    cutting.store(true, std::memory_order_release);  // and no request begins after this
    for (auto& w : workers) asio::post(w->ioc, [wp = w.get()] { wp->cut_all(); });
    const auto cut_by = Clock::now() + kDrainCutGrace;
    while (sessions.load() > 0 && Clock::now() < cut_by) {
      for (auto& w : workers) asio::post(w->ioc, [wp = w.get()] { wp->close_idle_conns(); });
      timer.expires_after(std::chrono::milliseconds(20));
      co_await timer.async_wait(kTok);
    }
  }
  stop_all();
}

void Gateway::Impl::wait_signal() {
  signals->async_wait([this](const error_code& ec, int sig) {
    if (ec) return;
    if (sig == SIGHUP) {
      // As logrotate's postrotate expects: the access log file is opened again, then the
      // configuration reloaded.
      if (!access_log->reopen()) {
        log("access log: cannot open " + access_log->path() + " again (" + AccessLog::open_error(errno) +
            "); still writing to the file it had open");
      }
      (void)reload_from_file();
    } else if (draining.load(std::memory_order_acquire)) {
      // A stop signal sent again (an impatient operator, a supervisor repeating its stop) does not
      // cut the drain short: drain_timeout bounds it already. It is said, with what the drain waits
      // for and until when, so that it is not taken for a signal lost.
      log(std::string(sig == SIGINT ? "SIGINT" : "SIGTERM") + " again: " + drain_progress());
    } else {
      on_stop_signal(sig);
    }
    wait_signal();
  });
}

void Gateway::Impl::on_stop_signal(int sig) {
  const std::string name = sig == SIGINT ? "SIGINT" : "SIGTERM";
  if (delaying.load()) {
    // One sent again during the delay (the load balancer is known to have let go, or an operator
    // will not wait) ends it: the drain begins now.
    log(name + " again: drain_delay ended early; draining now");
    begin_drain();
    return;
  }
  const config::Config& cfg = snapshot()->config();
  if (cfg.drain_delay <= Nanos{0}) {
    begin_drain();
    return;
  }
  delaying.store(true);
  log(name + ": healthz says draining; still accepting for " + format_duration(cfg.drain_delay) +
      " (drain_delay), then draining (drain_timeout " + format_duration(cfg.drain_timeout) + ")");
  asio::co_spawn(workers[0]->ioc, drain_delay_watch(Clock::now() + cfg.drain_delay), asio::detached);
}

Task<void> Gateway::Impl::drain_delay_watch(Clock::time_point until) {
  Timer timer(workers[0]->ioc);
  // Looked at every 100 ms, so that a drain begun meanwhile (a second signal) ends it.
  while (!draining.load() && Clock::now() < until) {
    timer.expires_after(std::min<Clock::duration>(until - Clock::now(), std::chrono::milliseconds(100)));
    auto [ec] = co_await timer.async_wait(kTok);
    if (ec) co_return;
  }
  begin_drain();
}

void Gateway::Impl::connect_limiters() {
  struct Pending {
    std::mutex mu;
    std::condition_variable cv;
    std::size_t left = 0;                 // guarded by mu
    std::vector<std::string> problems;   // guarded by mu
  };
  const auto pending = std::make_shared<Pending>();
  const std::vector<Worker*> firsts = distinct_limiters();
  pending->left = firsts.size();
  for (Worker* w : firsts) {
    asio::post(w->ioc, [l = w->limiter.get(), pending] {
      l->connect([pending](Status s) {
        std::lock_guard lock(pending->mu);
        if (!s.ok() && std::find(pending->problems.begin(), pending->problems.end(), s.error().message) ==
                           pending->problems.end()) {
          pending->problems.push_back(s.error().message);
        }
        if (--pending->left == 0) pending->cv.notify_all();
      });
    });
  }
  std::unique_lock lock(pending->mu);
  pending->cv.wait(lock, [&] { return pending->left == 0; });
  for (const std::string& p : pending->problems) {
    log("limit store not reachable yet (" + p + "): limits follow their on_store_failure until it is");
  }
}

std::vector<Worker*> Gateway::Impl::distinct_limiters() const {
  std::vector<Worker*> firsts;
  for (const auto& w : workers) {
    const bool seen = std::any_of(firsts.begin(), firsts.end(),
                                  [&](const Worker* f) { return f->limiter == w->limiter; });
    if (!seen) firsts.push_back(w.get());
  }
  return firsts;
}

std::vector<BreakerState> Gateway::Impl::store_breakers() const {
  std::vector<BreakerState> out;
  for (const Worker* w : distinct_limiters()) {
    if (auto s = w->limiter->store_breaker()) out.push_back(*s);
  }
  return out;
}

void Gateway::Impl::stop_all() {
  if (stopped.exchange(true)) return;
  for (auto& w : workers) w->ioc.stop();
  if (admin_ioc) admin_ioc->stop();
}

// --- Gateway ------------------------------------------------------------------------------------

Gateway::Gateway(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Gateway::~Gateway() {
  stop();
  wait();
  for (auto& w : impl_->workers) {
    if (w->thread.joinable()) w->thread.join();
  }
  if (impl_->admin_thread.joinable()) impl_->admin_thread.join();
  // Handlers still queued (sessions, timers) go with their event loops; the acceptors and the signal
  // set must go first, and the loops before what the sessions point to.
  impl_->signals.reset();
  impl_->store_log_timer.reset();  // on worker 0's loop, which goes below
  impl_->acceptor.reset();
  impl_->admin_acceptor.reset();
  impl_->admin_ioc.reset();
  // A limiter whose store runs on a worker's loop goes before the loop (its Worker declares it so).
  impl_->workers.clear();
  impl_->limiter.reset();
  // What could not be written by now is said (a reader that stopped reading would hold the exit).
  impl_->access_log->flush();
  if (auto lost = impl_->access_log->take_lost()) {
    impl_->log("access log: " + std::to_string(lost->first) + " lines lost (" + lost->second + ")");
  }
  if (const std::uint64_t left = impl_->access_log->unwritten(); left > 0) {
    impl_->log("access log: " + std::to_string(left) + " lines not yet written after 2 s at exit (its reader is slow "
               "or stopped): lost");
  }
}

namespace {

Result<tcp::endpoint> endpoint_of(const std::string& address) {
  auto t = config::parse_target(address);
  if (!t) return invalid_argument("\"" + address + "\" is not host:port");
  error_code ec;
  auto ip = asio::ip::make_address(t->host == "localhost" ? "127.0.0.1" : t->host, ec);
  if (ec) return invalid_argument("\"" + t->host + "\" is not an IP address");
  return tcp::endpoint(ip, t->port);
}

Result<std::unique_ptr<Acceptor>> listen_on(asio::io_context& ioc, const std::string& address,
                                                 const char* what) {
  auto ep = endpoint_of(address);
  if (!ep.ok()) return invalid_argument(std::string("cannot listen (") + what + "): " + ep.error().message);
  auto a = std::make_unique<Acceptor>(ioc);
  error_code ec;
  a->open(ep->protocol(), ec);
  if (!ec) a->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) a->bind(*ep, ec);
  if (!ec) a->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    std::string why = ec == asio::error::address_in_use ? "the address is already in use (another process listens there)"
                                                        : ec.message();
    return invalid_argument(std::string("cannot listen on ") + address + " (" + what + "): " + why);
  }
  return a;
}

}  // namespace

namespace {

// An address with the port it was bound to (port 0 picks one), for /config.
std::string with_port(const std::string& address, std::uint16_t port) {
  auto target = config::parse_target(address);
  if (!target) return address;
  target->port = port;
  return config::to_string(*target);
}

// Whether a connection could be served: a client's socket and one to its upstream. With fewer
// descriptors left than that, a gateway would say it serves and then answer nothing, its accepts
// failing (its /healthz too).
// listener: a descriptor of the gateway's, copied to see whether two more can be had.
Status descriptors_left_for_connections(int listener) {
  constexpr int kNeeded = 2;
  int opened[kNeeded];
  int n = 0;
  for (; n < kNeeded; ++n) {
    opened[n] = ::dup(listener);
    if (opened[n] < 0) break;
  }
  const int err = errno;
  for (int i = 0; i < n; ++i) ::close(opened[i]);
  if (n == kNeeded) return {};
  if (err == ENFILE) return invalid_argument("the system's open files are all in use: no connection could be served");
  if (err != EMFILE) return {};
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  return invalid_argument("too few file descriptors left to serve a connection (ulimit -n is " +
                          std::to_string(limit.rlim_cur) + "): raise it");
}

}  // namespace

Result<std::unique_ptr<Gateway>> Gateway::start(GatewayOptions options,
                                                std::shared_ptr<const config::Config> config) {
  auto impl = std::make_unique<Impl>();
  Impl& g = *impl;
  g.options = std::move(options);
  g.options.threads = std::max(1, g.options.threads);
  const std::string listen = g.options.listen.empty() ? config->listen : g.options.listen;
  const std::string admin = g.options.admin_listen.empty() ? config->admin_listen : g.options.admin_listen;
  g.start_only.listen = listen;
  g.start_only.admin_listen = admin;
  g.start_only.store = g.options.store.empty() ? config->store : g.options.store;
  g.start_only.fleet_size = g.options.fleet_size > 0 ? g.options.fleet_size : config->fleet_size;
  g.start_only.store_timeout = config->store_timeout;
  g.start_only.access_log = g.options.access_log.empty() ? config->access_log : g.options.access_log;

  auto log = Result<std::unique_ptr<AccessLog>>(AccessLog::open(g.start_only.access_log));
  if (!log.ok()) return log.error();
  g.access_log = std::move(*log);
  if (g.options.limiter) {
    g.limiter = g.options.limiter;
  } else if (!g.options.make_limiter) {
    g.local_store = std::make_unique<LocalStore>(LocalStoreOptions{.clock = g.options.clock});
    g.limiter = std::make_shared<StoreLimiter>(*g.local_store);
  }
  g.metrics = std::make_unique<Metrics>(static_cast<std::size_t>(g.options.threads));
  g.stats = std::make_unique<Stats>(static_cast<std::size_t>(g.options.threads),
                                    g.options.clock != nullptr ? *g.options.clock : SystemClock::instance());
  g.nonces = std::make_unique<NonceCache>(g.options.nonce_capacity);
  Impl* self = &g;
  g.breakers = std::make_unique<BreakerRegistry>(BreakerRegistry::Options{
      .clock = g.options.clock,
      .on_change = [self](const std::string& upstream, BreakerState from, BreakerState to) {
        self->metrics->count_breaker_transition(upstream, to);
        self->log("breaker of upstream " + upstream + ": " + to_string(from) + " -> " + to_string(to));
      }});
  std::random_device random;
  g.request_id_prefix = static_cast<std::uint32_t>(random());

  for (int i = 0; i < g.options.threads; ++i) {
    try {
      g.workers.push_back(std::make_unique<Worker>(g, i));
      // Its reactor (an epoll and an eventfd descriptor) is made here, where a failure can be
      // answered, rather than by its first timer, in its thread, where it would end the process.
      Timer reactor_made_now(g.workers.back()->ioc);
    } catch (const boost::system::system_error& e) {
      return invalid_argument("cannot start worker thread " + std::to_string(i + 1) + " of " +
                              std::to_string(g.options.threads) + ": " + e.code().message() +
                              (e.code() == boost::system::errc::too_many_files_open
                                   ? " (each needs a few file descriptors; raise ulimit -n or use fewer --threads)"
                                   : ""));
    }
    Worker& w = *g.workers.back();
    if (!g.options.make_limiter) {
      w.limiter = g.limiter;
      continue;
    }
    auto made = g.options.make_limiter(w.ioc.get_executor());
    if (!made.ok()) return made.error();
    w.limiter = std::move(*made);
    // Said once for the gateway, not once per worker's store: when the first stops answering, and
    // when the last answers again.
    w.limiter->watch_store([self](bool available, const std::string& why) {
      if (!available) {
        if (self->stores_down.fetch_add(1) == 0) self->log_store(StoreNews::kDown, why);
      } else if (self->stores_down.fetch_sub(1) == 1) {
        self->log_store(StoreNews::kUp, why);
      }
    });
    w.limiter->watch_refusals([self](const std::string& why) { self->log_store(StoreNews::kRefused, why); });
    w.limiter->watch_nodes([self](const std::string& node, redis::NodeState state, const std::string& why) {
      self->log_node(node, state, why);
    });
    w.limiter->watch_notices([self](redis::Notice notice, const std::string& text) { self->log_notice(notice, text); });
  }
  g.store_log_timer = std::make_unique<asio::steady_timer>(g.workers[0]->ioc);
  auto acceptor = listen_on(g.workers[0]->ioc, listen, "listen");
  if (!acceptor.ok()) return acceptor.error();
  g.acceptor = std::move(*acceptor);
  g.port = g.acceptor->local_endpoint().port();
  g.start_only.listen = with_port(listen, g.port);
  if (admin != "off") {
    const auto a = config::parse_target(admin);
    const auto l = config::parse_target(listen);
    if (a && l && a->port != 0 && a->port == l->port && a->host == l->host) {
      return invalid_argument("cannot listen on " + admin + " (admin_listen): listen is the same address");
    }
    auto admin_acceptor = listen_on(g.workers[0]->ioc, admin, "admin_listen");
    if (!admin_acceptor.ok()) {
      // In use on listen's port: by the data plane's own listener, most likely, written another
      // way (0.0.0.0:8080 and 127.0.0.1:8080, localhost:8080), not another process.
      if (a && a->port == g.port && admin_acceptor.error().message.find("already in use") != std::string::npos) {
        return invalid_argument("cannot listen on " + admin + " (admin_listen): its port is listen's (" +
                                g.start_only.listen + "), on an address that overlaps; give it a port of its own");
      }
      return admin_acceptor.error();
    }
    g.admin_acceptor = std::move(*admin_acceptor);
    g.admin_port = g.admin_acceptor->local_endpoint().port();
    g.start_only.admin_listen = with_port(admin, g.admin_port);
  }
  if (Status s = g.install(std::move(config)); !s) return s.error();
  if (!g.options.config_path.empty()) g.stamp = g.stat_config();  // no other thread yet

  asio::io_context& main = g.workers[0]->ioc;
  if (g.options.handle_signals) {
    try {  // it opens a pipe: made before any thread starts, so that its failure can be answered
      g.signals = std::make_unique<asio::signal_set>(main, SIGHUP, SIGTERM, SIGINT);
    } catch (const boost::system::system_error& e) {
      return invalid_argument(std::string("cannot handle signals: ") + e.code().message());
    }
  }
  if (Status s = descriptors_left_for_connections(g.acceptor->native_handle()); !s) return s.error();
  if (g.admin_acceptor) asio::co_spawn(main, g.admin_loop(), asio::detached);
  g.admin_ioc = std::make_unique<asio::io_context>(1);
  g.admin_thread = std::thread([self] {
    auto guard = asio::make_work_guard(*self->admin_ioc);
    self->admin_ioc->run();
  });
  asio::co_spawn(main, g.housekeeping(), asio::detached);
  if (g.signals) g.wait_signal();
  const std::vector<int> cpus = g.options.pin_workers ? allowed_cpus() : std::vector<int>();
  for (auto& w : g.workers) {
    asio::co_spawn(w->ioc, w->sweep_deadlines(), asio::detached);
    const int cpu = cpus.empty() ? -1 : cpus[w->index % cpus.size()];
    w->thread = std::thread([wp = w.get(), self, cpu] {
      const std::string name = "sluice-w" + std::to_string(wp->index);
      pthread_setname_np(pthread_self(), name.c_str());
      if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (const int err = pthread_setaffinity_np(pthread_self(), sizeof set, &set); err != 0) {
          self->log(name + ": cannot be pinned to CPU " + std::to_string(cpu) + ": " + std::strerror(err));
        }
      }
      auto guard = asio::make_work_guard(wp->ioc);
      wp->ioc.run();
      if (wp->index == 0) {
        std::lock_guard lock(self->stop_mu);
        self->threads_done = true;
        self->stop_cv.notify_all();
      }
    });
  }
  // Requests are accepted once the limiters are connected (or have found that they cannot be yet),
  // so that a gateway just started does not decide by on_store_failure while its connections open.
  // Connections that arrive meanwhile wait in the listen backlog.
  g.connect_limiters();
  asio::co_spawn(main, g.accept_loop(), asio::detached);
  return std::unique_ptr<Gateway>(new Gateway(std::move(impl)));
}

std::uint16_t Gateway::port() const { return impl_->port; }
std::vector<BreakerState> Gateway::store_breakers() const { return impl_->store_breakers(); }
std::uint16_t Gateway::admin_port() const { return impl_->admin_port; }

Status Gateway::reload(std::shared_ptr<const config::Config> config) {
  Status s = impl_->install(std::move(config));
  impl_->metrics->count_reload(s.ok());
  return s;
}

Status Gateway::reload_from_file() { return impl_->reload_from_file(); }

void Gateway::drain() { impl_->begin_drain(); }
void Gateway::stop() { impl_->stop_all(); }

void Gateway::wait() {
  std::unique_lock lock(impl_->stop_mu);
  impl_->stop_cv.wait(lock, [&] { return impl_->threads_done; });
}

void Gateway::add_admin_route(std::string method, std::string prefix, AdminHandler handler, AdminScreen screen) {
  std::lock_guard lock(impl_->admin_mu);
  impl_->admin_routes.push_back({std::move(method), std::move(prefix), std::move(handler), std::move(screen)});
}

std::shared_ptr<const Snapshot> Gateway::snapshot() const { return impl_->snapshot(); }
Metrics& Gateway::metrics() { return *impl_->metrics; }
Stats& Gateway::stats() { return *impl_->stats; }

std::string_view AdminRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (beast::iequals(k, name)) return v;
  }
  return {};
}

std::string AdminRequest::list(std::string_view name) const {
  std::string joined;
  for (const auto& [k, v] : headers) {
    if (!beast::iequals(k, name)) continue;
    if (!joined.empty()) joined += ", ";
    joined += v;
  }
  return joined;
}

bool AdminRequest::has(std::string_view name) const {
  return std::any_of(headers.begin(), headers.end(), [&](const auto& h) { return beast::iequals(h.first, name); });
}

std::string_view AdminRequest::single(std::string_view name) const {
  std::string_view found;
  int times = 0;
  for (const auto& [k, v] : headers) {
    if (beast::iequals(k, name) && ++times == 1) found = v;
  }
  return times == 1 ? found : std::string_view();
}

}  // namespace sluice::gateway
