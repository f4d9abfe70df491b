// TestServer: an HTTP/1.1 server that admits `admit` requests, then answers 429 (or misbehaves as
// asked: fixed bytes, dropped or cut answers, closes), and records when each request arrived
// (kernel receive time). Own thread, 127.0.0.1 port 0; accessors thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sluice/clock.h"

namespace sluice::bench::testing {

struct TestServerOptions {
  std::int64_t admit = 50;
  // Count separately per value of this header (e.g. X-System-Key); "" counts all requests together.
  std::string key_header{};
  // Requests go to this many independent counters, unevenly (with two, the first takes two of every
  // three), like servers behind a load balancer that each count alone: together they admit more
  // than `admit`, and `remaining` jumps back up within a window.
  int counters = 1;
  // Hold the first response this long before sending it.
  Nanos stall_first{0};
  std::int64_t window_s = 60;  // the `t` of the RateLimit header and the Retry-After
  // Answer every request with these bytes, as they are (a bad status line, odd headers); "" for
  // the answer above.
  std::string raw_response{};
  // Close the connection right after each response, without saying so (no Connection: close), as
  // a server does whose idle timeout is shorter than the client's pauses.
  bool close_after_response = false;
  // Close the connection instead of answering the requests this picks (numbered from 1 in the
  // order they arrive), after holding each for hold_drop.
  std::function<bool(std::size_t)> drop{};
  Nanos hold_drop{0};
  // Send only the first half of the response to the requests this picks, then close.
  std::function<bool(std::size_t)> cut{};
  // Answer the requests this picks once their head is in, and close without reading the body (a
  // server that refuses an upload: the close resets the connection while the body still comes).
  std::function<bool(std::size_t)> answer_at_head{};
};

struct Arrival {
  // When the request's last bytes reached the server's socket, by the kernel's receive timestamp
  // (CLOCK_REALTIME): only differences between arrivals mean anything.
  Nanos at{0};
  std::string method;
  std::string target;
  std::string key;  // the key header's value
  std::string body;
  int connection = 0;  // which accepted connection it came on: 1, 2, ... in the order accepted
};

class TestServer {
 public:
  explicit TestServer(TestServerOptions options = {});
  ~TestServer();
  TestServer(const TestServer&) = delete;
  TestServer& operator=(const TestServer&) = delete;

  std::uint16_t port() const;
  std::string url(const std::string& path = "/") const;
  std::vector<Arrival> arrivals() const;
  // Waits until at least n requests have arrived, for at most 10 s; whether they did.
  bool wait_for_arrivals(std::size_t n) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::bench::testing
