// Address: where a RedisStore connects, parsed from redis://... or redis-cluster://... (below).
// Plain value types and a pure function; not synchronised, like any value.
//
// redis://[[user]:password@]host:port[/db] names one node;
// redis-cluster://[[user]:password@]host:port,host:port,... the seeds of a Redis Cluster. The user
// and password are percent-decoded (RFC 3986); credentials without a ':' are a password.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/result.h"

namespace sluice::redis {

struct Endpoint {
  std::string host;
  std::uint16_t port = 6379;

  std::string to_string() const;  // host:port ([host]:port for IPv6)
  friend bool operator==(const Endpoint&, const Endpoint&) = default;
};

struct Address {
  bool cluster = false;
  std::vector<Endpoint> nodes;  // one for a single node; the seeds of a cluster
  std::string user;             // empty: the default user
  std::string password;         // empty: no AUTH
  // The user or password as written held a '%', an escape since percent-decoding came in: a server
  // that refuses them is told of it (earlier versions sent a '%' as written).
  bool escaped_credentials = false;
  int db = 0;                   // single node only (a cluster has database 0 only)
};

// Parses an address; the port defaults to 6379, the database to 0.
Result<Address> parse_address(std::string_view text);

}  // namespace sluice::redis
