// Helpers shared by the control plane's tests: a configuration to start from, parsing that must
// succeed, a database in a fresh directory, and an error answer's reason. Not thread-safe.
#pragma once

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <memory>
#include <string>

#include "config/store.h"
#include "config/yaml.h"
#include "http_client.h"

namespace sluice::control_test {

// Two upstreams, three interfaces, two systems and a grant, all valid.
inline std::string base_yaml(std::uint16_t upstream_port = 9) {
  const std::string up = "127.0.0.1:" + std::to_string(upstream_port);
  return "upstreams:\n"
         "  - {name: app, targets: [" + up + "], breaker: {window: 4, minimum_calls: 4, failure_rate: 50, open_for: 1m}}\n"
         "  - {name: spare, targets: [" + up + "]}\n"
         "systems:\n"
         "  - key: crm\n"
         "    interfaces: [orders, users]\n"
         "    limits: [{name: crm-hour, algorithm: fixed_window, limit: 100, period: 1h}]\n"
         "  - {key: erp, interfaces: [orders]}\n"
         "interfaces:\n"
         "  - id: orders\n"
         "    path: /orders/*\n"
         "    upstream: app\n"
         "    concurrency: 10\n"
         "    limits: [{algorithm: sliding_window, limit: 20, period: 1s, key_by: client_ip}]\n"
         "  - {id: users, path: \"/users/{id}\", upstream: app}\n"
         "  - {id: health, path: /health, upstream: spare, public: true}\n"
         "grants:\n"
         "  - {system: crm, interface: orders, limits: [{algorithm: gcra, limit: 5, period: 1m}]}\n";
}

inline std::shared_ptr<const config::Config> parse(const std::string& yaml) {
  auto r = config::load_yaml(yaml, "test.yaml");
  if (auto* problems = std::get_if<std::vector<config::Problem>>(&r)) {
    std::string all;
    for (const auto& p : *problems) all += p.to_string() + "\n";
    ADD_FAILURE() << all;
    return std::make_shared<config::Config>();
  }
  return std::get<std::shared_ptr<const config::Config>>(r);
}

inline std::unique_ptr<config::ConfigStore> open_store(const std::string& path, const Clock* clock = nullptr) {
  auto store = config::ConfigStore::open({.path = path, .clock = clock});
  EXPECT_TRUE(store.ok()) << (store.ok() ? "" : store.error().message);
  return store.ok() ? std::move(*store) : nullptr;
}

inline std::string yaml_of(const config::Config& c) { return config::to_yaml(c); }

// The "reason" of a JSON error answer; empty when there is none.
inline std::string reason_of(const testing::HttpResponse& r) {
  boost::system::error_code ec;
  const auto v = boost::json::parse(r.body, ec);
  if (ec || !v.is_object() || !v.as_object().contains("reason")) return "";
  const auto& reason = v.as_object().at("reason");
  return reason.is_string() ? std::string(reason.as_string()) : "";
}

}  // namespace sluice::control_test
