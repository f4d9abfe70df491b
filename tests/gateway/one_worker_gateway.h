// Test helper for the tests that count what a request costs the gateway (allocations_test.cpp,
// reads_test.cpp): the demo upstream, and a gateway of one worker in front of it, on ports of their
// own, with no access log and no log lines. Thread-compatible.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>

#include "gateway/demo.h"
#include "gateway/gateway.h"
#include "load_config.h"

namespace sluice::testing {

struct OneWorkerGateway {
  std::unique_ptr<gateway::DemoUpstream> upstream;
  std::unique_ptr<gateway::Gateway> gateway;  // after upstream: it goes first
};

// `yaml` is the configuration after its upstreams, which are one: `app`, the demo upstream. When
// either does not start, a test failure, and the one that did not is null.
inline OneWorkerGateway start_one_worker(const std::string& yaml) {
  OneWorkerGateway out;
  auto up = gateway::DemoUpstream::start();
  if (!up.ok()) {
    ADD_FAILURE() << "the demo upstream did not start";
    return out;
  }
  out.upstream = std::move(*up);
  gateway::GatewayOptions o;
  o.listen = "127.0.0.1:0";
  o.admin_listen = "127.0.0.1:0";
  o.threads = 1;
  o.access_log = "off";
  o.log = [](std::string_view) {};
  auto g = gateway::Gateway::start(
      o, load_config("upstreams:\n  - {name: app, targets: [127.0.0.1:" + std::to_string(out.upstream->port()) + "]}\n" +
                     yaml));
  if (!g.ok()) {
    ADD_FAILURE() << g.error().message;
    return out;
  }
  out.gateway = std::move(*g);
  return out;
}

}  // namespace sluice::testing
