#include "gateway/demo.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <charconv>

#include "gateway/access_log.h"
#include "gateway/policy.h"

namespace sluice::gateway {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr auto kTok = asio::as_tuple(asio::use_awaitable);

std::int64_t number(std::string_view query, std::string_view name, std::int64_t fallback) {
  const std::string_view v = query_param(query, name);
  std::int64_t out = fallback;
  if (!v.empty()) std::from_chars(v.data(), v.data() + v.size(), out);
  return out;
}

config::LimitRule rule(Result<Limit> limit, std::string name = "") {
  return config::LimitRule{.name = std::move(name), .limit = *limit};
}

}  // namespace

std::shared_ptr<const config::Config> demo_config(std::uint16_t upstream_port) {
  using namespace std::chrono_literals;
  auto c = std::make_shared<config::Config>();
  config::Upstream app;
  app.name = "demo";
  app.targets = {{"127.0.0.1", upstream_port}};
  app.timeout = 5s;
  app.breaker.options.window_size = 20;
  app.breaker.options.minimum_calls = 10;
  app.breaker.options.failure_rate = 50;
  app.breaker.options.open_for = 10s;
  app.breaker.options.max_open_for = 10s;
  app.breaker.options.half_open_probes = 2;
  c->upstreams.push_back(app);

  config::System crm;
  crm.key = "crm";
  crm.description = "The CRM: orders and users, 50 requests per 15 s";
  crm.interfaces = {"orders", "users"};
  crm.limits.push_back(rule(Limit::sliding_log({.limit = 50, .period = 15s}), "crm-window"));
  c->systems.push_back(crm);
  config::System erp;
  erp.key = "erp";
  erp.description = "The ERP: disabled";
  erp.enabled = false;
  erp.all_interfaces = true;
  c->systems.push_back(erp);

  config::Interface orders;
  orders.id = "orders";
  orders.methods = {"GET", "POST"};
  orders.path = "/api/orders/*";
  orders.upstream = "demo";
  orders.concurrency = 100;
  orders.limits.push_back(rule(Limit::token_bucket({.capacity = 10, .refill_tokens = 1, .refill_period = 1s})));
  c->interfaces.push_back(orders);
  config::Interface users;
  users.id = "users";
  users.methods = {"GET"};
  users.path = "/api/users/{id}";
  users.upstream = "demo";
  c->interfaces.push_back(users);
  config::Interface login;
  login.id = "login";
  login.methods = {"POST"};
  login.path = "/api/login";
  login.upstream = "demo";
  login.is_public = true;
  config::LimitRule per_ip = rule(Limit::gcra({.limit = 5, .period = 1min, .burst = 5}));
  per_ip.key_by = config::KeyBy::kClientIp;
  login.limits.push_back(per_ip);
  c->interfaces.push_back(login);

  c->grants.push_back(config::Grant{"crm", "orders", {rule(Limit::fixed_window({.limit = 1000, .period = 1h}))}});
  return c;
}

struct DemoUpstream::Impl {
  asio::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  std::thread thread;
  DemoUpstream* owner = nullptr;

  asio::awaitable<void> session(tcp::socket socket) {
    beast::tcp_stream stream(std::move(socket));
    beast::flat_buffer buffer;
    while (true) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(1 << 20);
      auto [ec, n] = co_await http::async_read(stream, buffer, parser, kTok);
      if (ec) break;
      const auto& req = parser.get();
      const std::string_view target = req.target();
      const std::size_t q = target.find('?');
      const std::string_view path = target.substr(0, q);
      const std::string_view query = q == std::string_view::npos ? "" : target.substr(q + 1);
      if (const std::int64_t delay = number(query, "delay_ms", 0); delay > 0) {
        asio::steady_timer timer(ioc, std::chrono::milliseconds(delay));
        co_await timer.async_wait(kTok);
      }
      http::response<http::string_body> res{static_cast<http::status>(number(query, "status", 200)), 11};
      if (const std::int64_t bytes = number(query, "bytes", -1); bytes >= 0) {
        res.set(http::field::content_type, "application/octet-stream");
        res.body().assign(static_cast<std::size_t>(bytes), 'x');
      } else {
        std::string body = "{\"upstream\":\"demo\",\"method\":\"";
        append_json_escaped(body, req.method_string());
        body += "\",\"path\":\"";
        append_json_escaped(body, path);
        body += "\",\"query\":\"";
        append_json_escaped(body, query);
        body += "\",\"headers\":{";
        bool first = true;
        for (const auto& f : req) {
          body += first ? "\"" : ",\"";
          first = false;
          append_json_escaped(body, f.name_string());
          body += "\":\"";
          append_json_escaped(body, f.value());
          body += '"';
        }
        body += "},\"body\":\"";
        append_json_escaped(body, req.body());
        body += "\"}";
        res.set(http::field::content_type, "application/json");
        res.body() = std::move(body);
      }
      res.keep_alive(req.keep_alive() && number(query, "close", 0) == 0);
      res.prepare_payload();
      owner->requests_.fetch_add(1);
      auto [wec, wn] = co_await http::async_write(stream, res, kTok);
      if (wec || !res.keep_alive()) break;
    }
    boost::system::error_code ec;
    stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  }

  asio::awaitable<void> accept_loop() {
    while (true) {
      auto [ec, socket] = co_await acceptor.async_accept(kTok);
      if (ec) co_return;
      owner->connections_.fetch_add(1);
      asio::co_spawn(ioc, session(std::move(socket)), asio::detached);
    }
  }
};

Result<std::unique_ptr<DemoUpstream>> DemoUpstream::start(std::uint16_t port) {
  std::unique_ptr<DemoUpstream> up(new DemoUpstream());
  up->impl_ = std::make_unique<Impl>();
  Impl& i = *up->impl_;
  i.owner = up.get();
  boost::system::error_code ec;
  const tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), port);
  i.acceptor.open(ep.protocol(), ec);
  if (!ec) i.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) i.acceptor.bind(ep, ec);
  if (!ec) i.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Error{ErrorCode::kInvalidArgument,
                 "cannot start the demo upstream on 127.0.0.1:" + std::to_string(port) + ": " + ec.message()};
  }
  up->port_ = i.acceptor.local_endpoint().port();
  asio::co_spawn(i.ioc, i.accept_loop(), asio::detached);
  i.thread = std::thread([&i] { i.ioc.run(); });
  return up;
}

DemoUpstream::~DemoUpstream() {
  impl_->ioc.stop();
  impl_->thread.join();
}

}  // namespace sluice::gateway
