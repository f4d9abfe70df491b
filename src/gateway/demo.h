// The built-in demo for `sluice serve --demo`: a configuration (two systems, three interfaces, one of
// them public) and a small upstream that echoes what it receives. The tests use the upstream too.
// DemoUpstream is thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "config/config.h"
#include "sluice/result.h"

namespace sluice::gateway {

// The demo configuration, its upstream at 127.0.0.1:upstream_port.
std::shared_ptr<const config::Config> demo_config(std::uint16_t upstream_port);

// An HTTP/1.1 server on 127.0.0.1 answering every request with a JSON echo of it:
// {"method","path","query","headers":{...},"body"}. Query parameters steer it: status=503 answers
// with that status, delay_ms=200 answers that much later, bytes=N sends a body of N bytes instead
// of the echo, close=1 closes the connection after answering.
class DemoUpstream {
 public:
  // port 0 picks a free one.
  static Result<std::unique_ptr<DemoUpstream>> start(std::uint16_t port = 0);
  ~DemoUpstream();
  DemoUpstream(const DemoUpstream&) = delete;
  DemoUpstream& operator=(const DemoUpstream&) = delete;

  std::uint16_t port() const { return port_; }
  // Requests answered so far.
  std::int64_t requests() const { return requests_.load(); }
  // Connections accepted so far.
  std::int64_t connections() const { return connections_.load(); }

  struct Impl;

 private:
  DemoUpstream() = default;
  std::unique_ptr<Impl> impl_;
  std::uint16_t port_ = 0;
  std::atomic<std::int64_t> requests_{0};
  std::atomic<std::int64_t> connections_{0};
};

}  // namespace sluice::gateway
