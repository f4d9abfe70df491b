#include "gateway/http_fetch.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <charconv>
#include <mutex>

namespace sluice::gateway {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

std::optional<HttpUrl> parse_http_url(std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  if (!url.starts_with(kScheme)) return std::nullopt;
  std::string_view rest = url.substr(kScheme.size());
  const std::size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  HttpUrl out;
  if (slash != std::string_view::npos) out.path = std::string(rest.substr(slash));
  while (!out.path.empty() && out.path.back() == '/') out.path.pop_back();
  std::string_view host = authority;
  const std::size_t colon = authority.rfind(':');
  if (colon != std::string_view::npos && authority.find(']', colon) == std::string_view::npos) {
    host = authority.substr(0, colon);
    const std::string_view port = authority.substr(colon + 1);
    unsigned value = 0;
    auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || p != port.data() + port.size() || value == 0 || value > 65535) return std::nullopt;
    out.port = static_cast<std::uint16_t>(value);
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty()) return std::nullopt;
  out.host = std::string(host);
  return out;
}

struct HttpFetcher::Impl {
  asio::io_context ioc{1};
  std::mutex mu;
  bool cancelled = false;  // guarded by mu
};

HttpFetcher::HttpFetcher() : impl_(std::make_unique<Impl>()) {}
HttpFetcher::~HttpFetcher() = default;

void HttpFetcher::cancel() {
  std::lock_guard lock(impl_->mu);
  impl_->cancelled = true;
  impl_->ioc.stop();
}

Result<FetchResponse> HttpFetcher::send(const FetchRequest& request) {
  const auto url = parse_http_url(request.url);
  if (!url) return invalid_argument("\"" + request.url + "\" is not an http://host:port URL");
  const std::size_t after_authority = request.url.find('/', 7);
  const std::string target = after_authority == std::string::npos ? "/" : request.url.substr(after_authority);
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->cancelled) return Error{ErrorCode::kStoreUnavailable, "cancelled"};
    impl_->ioc.restart();
  }
  Result<FetchResponse> result = Error{ErrorCode::kStoreUnavailable, "cancelled"};
  auto exchange = [&]() -> asio::awaitable<void> {
    constexpr auto tok = asio::as_tuple(asio::use_awaitable);
    const std::string where = request.url;
    auto fail = [&](std::string_view what, const boost::system::error_code& ec) {
      const bool timeout = ec == beast::error::timeout;
      result = Error{timeout ? ErrorCode::kTimeout : ErrorCode::kStoreUnavailable,
                     std::string(what) + " " + where + ": " + (timeout ? "timed out" : ec.message())};
    };
    beast::tcp_stream stream(impl_->ioc);
    stream.expires_after(request.timeout);
    tcp::resolver resolver(impl_->ioc);
    auto [rec, endpoints] = co_await resolver.async_resolve(url->host, std::to_string(url->port), tok);
    if (rec) co_return fail("cannot resolve", rec);
    auto [cec, ep] = co_await stream.async_connect(endpoints, tok);
    if (cec) co_return fail("cannot connect to", cec);
    http::request<http::string_body> req{http::string_to_verb(request.method), target, 11};
    req.method_string(request.method);
    req.set(http::field::host, url->host + ":" + std::to_string(url->port));
    req.set(http::field::user_agent, "sluice");
    for (const auto& [k, v] : request.headers) req.set(k, v);
    req.body() = request.body;
    req.keep_alive(false);
    req.prepare_payload();
    auto [wec, wn] = co_await http::async_write(stream, req, tok);
    if (wec) co_return fail("cannot send to", wec);
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 * 1024 * 1024);
    auto [hec, hn] = co_await http::async_read(stream, buffer, parser, tok);
    if (hec) co_return fail("no answer from", hec);
    FetchResponse out;
    out.status = static_cast<int>(parser.get().result_int());
    for (const auto& f : parser.get()) {
      std::string name(f.name_string());
      for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      out.headers[name] = std::string(f.value());
    }
    out.body = std::move(parser.get().body());
    result = std::move(out);
    boost::system::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  };
  asio::co_spawn(impl_->ioc, exchange(), asio::detached);
  impl_->ioc.run();
  return result;
}

}  // namespace sluice::gateway
