#include "test_server.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

namespace sluice::bench::testing {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

struct TestServer::Impl {
  explicit Impl(TestServerOptions o) : options(std::move(o)) {
    acceptor.open(tcp::v4());
    acceptor.set_option(tcp::acceptor::reuse_address(true));
    acceptor.bind(tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    // Accepted sockets inherit the option, so even a request sent right after the connection was
    // opened gets its receive time.
    const int on = 1;
    setsockopt(acceptor.native_handle(), SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on);
    acceptor.listen();
    accept();
    thread = std::thread([this] { io.run(); });
  }

  ~Impl() {
    io.stop();
    thread.join();
  }

  struct Answer {
    std::string response;
    Nanos stall{0};
    bool drop = false;   // close instead of answering, after the stall
    bool close = false;  // close once the response is out
  };

  struct Session : std::enable_shared_from_this<Session> {
    Session(Impl& server, tcp::socket s, int n)
        : impl(server), socket(std::move(s)), timer(impl.io), connection(n) {}

    // Reads with recvmsg to get the kernel's receive time of the data (SO_TIMESTAMPNS): when the
    // request arrived, however long this thread takes to get to it.
    void read() {
      socket.async_wait(tcp::socket::wait_read, [self = shared_from_this()](error_code ec) {
        if (ec) return;
        self->receive();
      });
    }

    void receive() {
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(timespec))];
      iovec iov{chunk.data(), chunk.size()};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      const ssize_t n = recvmsg(socket.native_handle(), &msg, MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return read();
      if (n <= 0) return;  // closed, or reset
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
          timespec ts{};
          std::memcpy(&ts, CMSG_DATA(c), sizeof ts);
          received = std::chrono::seconds(ts.tv_sec) + Nanos(ts.tv_nsec);
        }
      }
      input.append(chunk.data(), static_cast<std::size_t>(n));
      handle();
    }

    // Handles the request at the front of `input` once it is all there.
    void handle() {
      const auto head_end = input.find("\r\n\r\n");
      if (head_end == std::string::npos) return read();
      Arrival a;
      a.connection = connection;
      std::size_t content_length = 0;
      const std::string head = input.substr(0, head_end);
      const auto first_line_end = head.find("\r\n");
      const std::string request_line = head.substr(0, first_line_end);
      a.method = request_line.substr(0, request_line.find(' '));
      a.target =
          request_line.substr(a.method.size() + 1, request_line.rfind(' ') - a.method.size() - 1);
      for (std::size_t pos = first_line_end; pos != std::string::npos && pos < head.size();) {
        const std::size_t start = pos + 2;
        const std::size_t end = head.find("\r\n", start);
        const std::string line = head.substr(start, end == std::string::npos ? end : end - start);
        const auto colon = line.find(':');
        if (colon != std::string::npos) {
          const std::string name = lower(line.substr(0, colon));
          std::string value = line.substr(colon + 1);
          value.erase(0, value.find_first_not_of(' '));
          if (name == "content-length") content_length = std::stoul(value);
          if (!impl.options.key_header.empty() && name == lower(impl.options.key_header)) {
            a.key = value;
          }
        }
        pos = end;
      }
      const bool at_head = impl.options.answer_at_head && impl.options.answer_at_head(impl.arrival_count() + 1);
      if (!at_head && input.size() < head_end + 4 + content_length) return read();
      a.body = at_head ? "" : input.substr(head_end + 4, content_length);
      input.erase(0, at_head ? input.size() : head_end + 4 + content_length);
      a.at = received.count() > 0 ? received : std::chrono::system_clock::now().time_since_epoch();
      Impl::Answer answer = impl.decide(std::move(a));
      if (at_head) answer.close = true;
      respond(std::move(answer));
    }

    void respond(Impl::Answer answer) {
      if (answer.drop && answer.stall.count() > 0) {
        timer.expires_after(answer.stall);
        timer.async_wait([self = shared_from_this()](error_code) { self->close(); });
        return;
      }
      if (answer.drop) return close();
      output = std::move(answer.response);
      close_after_write = answer.close;
      if (answer.stall.count() > 0) {
        timer.expires_after(answer.stall);
        timer.async_wait([self = shared_from_this()](error_code) { self->write(); });
        return;
      }
      write();
    }

    void write() {
      asio::async_write(socket, asio::buffer(output),
                        [self = shared_from_this()](error_code ec, std::size_t) {
                          if (ec) return;
                          if (self->close_after_write) return self->close();
                          self->handle();  // a request may already be waiting in the buffer
                        });
    }

    void close() {
      error_code ignored;
      socket.close(ignored);
    }

    Impl& impl;
    tcp::socket socket;
    asio::steady_timer timer;
    std::array<char, 8192> chunk{};
    std::string input;
    std::string output;
    bool close_after_write = false;
    Nanos received{0};  // when the latest data arrived, by the kernel's clock (CLOCK_REALTIME)
    int connection;
  };

  std::size_t arrival_count() {
    std::lock_guard lock(mu);
    return arrivals.size();
  }

  Answer decide(Arrival a) {
    std::lock_guard lock(mu);
    const std::size_t n = arrivals.size();
    const auto counters = static_cast<std::size_t>(options.counters);
    const std::string key = a.key + "#" + std::to_string(n % (counters + 1) % counters);
    arrivals.push_back(std::move(a));
    arrived.notify_all();
    Answer answer;
    if (options.drop && options.drop(n + 1)) {
      answer.drop = true;
      answer.stall = options.hold_drop;
      return answer;
    }
    if (n == 0) answer.stall = options.stall_first;
    answer.close = options.close_after_response;
    if (options.cut && options.cut(n + 1)) answer.close = true;
    if (!options.raw_response.empty()) {
      answer.response = options.raw_response;
      return answer;
    }
    const std::int64_t used = ++counts[key];
    const bool admitted = used <= options.admit;
    const std::int64_t remaining = std::max<std::int64_t>(0, options.admit - used);
    const std::string body =
        admitted ? "{\"ok\":true}" : R"({"code":429,"reason":"test_limited","msg":"limited"})";
    std::string& r = answer.response;
    r = admitted ? "HTTP/1.1 200 OK\r\n" : "HTTP/1.1 429 Too Many Requests\r\n";
    r += "Content-Type: application/json\r\n";
    r += "RateLimit-Policy: \"test\";q=" + std::to_string(options.admit) +
         ";w=" + std::to_string(options.window_s) + "\r\n";
    r += "RateLimit: \"test\";r=" + std::to_string(remaining) +
         ";t=" + std::to_string(options.window_s) + "\r\n";
    if (!admitted) r += "Retry-After: " + std::to_string(options.window_s) + "\r\n";
    r += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    if (options.cut && options.cut(n + 1)) r.resize(r.size() / 2);
    return answer;
  }

  void accept() {
    acceptor.async_accept([this](error_code ec, tcp::socket socket) {
      if (ec) return;
      socket.set_option(tcp::no_delay(true), ec);
      std::make_shared<Session>(*this, std::move(socket), ++accepted)->read();
      accept();
    });
  }

  const TestServerOptions options;
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  int accepted = 0;  // on the io thread
  std::thread thread;
  mutable std::mutex mu;
  mutable std::condition_variable arrived;     // notified with each arrival
  std::vector<Arrival> arrivals;               // guarded by mu
  std::map<std::string, std::int64_t> counts;  // guarded by mu
};

TestServer::TestServer(TestServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

TestServer::~TestServer() = default;

std::uint16_t TestServer::port() const { return impl_->acceptor.local_endpoint().port(); }

std::string TestServer::url(const std::string& path) const {
  return "http://127.0.0.1:" + std::to_string(port()) + path;
}

std::vector<Arrival> TestServer::arrivals() const {
  std::lock_guard lock(impl_->mu);
  return impl_->arrivals;
}

bool TestServer::wait_for_arrivals(std::size_t n) const {
  std::unique_lock lock(impl_->mu);
  return impl_->arrived.wait_for(lock, std::chrono::seconds(10),
                                 [&] { return impl_->arrivals.size() >= n; });
}

}  // namespace sluice::bench::testing
