// A small blocking HTTP/1.1 client for the control plane: a follower pulling from its primary and
// `sluice config apply`. One request per connection, a deadline for the whole exchange, and cancel()
// from another thread. Thread-safe: send() from one thread at a time, cancel() from any.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/clock.h"
#include "sluice/result.h"

namespace sluice::gateway {

struct HttpUrl {
  std::string host;
  std::uint16_t port = 80;
  std::string path;  // without a trailing slash; empty for the root
};

// http://host[:port][/path]; nullopt for anything else (https is not spoken).
std::optional<HttpUrl> parse_http_url(std::string_view url);

struct FetchRequest {
  std::string method = "GET";
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  Nanos timeout = std::chrono::seconds(10);
};

struct FetchResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;

  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

class HttpFetcher {
 public:
  HttpFetcher();
  ~HttpFetcher();
  HttpFetcher(const HttpFetcher&) = delete;
  HttpFetcher& operator=(const HttpFetcher&) = delete;

  // The response, or why there is none (cannot connect, timed out, cancelled).
  Result<FetchResponse> send(const FetchRequest& request);
  // Makes a send() in progress, and every later one, fail at once.
  void cancel();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::gateway
