#pragma once
// The first half of the data plane's writes: what a non-blocking socket takes at once. Its send
// buffer nearly always takes a head and a small body whole, and a write done here spares Asio's
// asynchronous operation, its trip through the scheduler and the coroutine's suspension (a tenth of
// a proxied request's CPU). The caller writes the rest, when there is one, asynchronously.

#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/beast/core/buffers_suffix.hpp>
#include <boost/system/error_code.hpp>

namespace sluice::gateway {

// Writes to `socket` (which must be in non-blocking mode: socket.non_blocking(true)) what it takes
// now of `buffers`, and returns what is left: empty when all of it went. ec is set only when the
// socket failed (a full send buffer is not a failure: all is left).
template <class Socket, class Buffers>
boost::beast::buffers_suffix<Buffers> write_now(Socket& socket, const Buffers& buffers, boost::system::error_code& ec) {
  boost::beast::buffers_suffix<Buffers> rest(buffers);
  const std::size_t sent = socket.write_some(buffers, ec);
  if (ec == boost::asio::error::would_block || ec == boost::asio::error::try_again) {
    ec = {};
    return rest;
  }
  if (!ec) rest.consume(sent);
  return rest;
}

}  // namespace sluice::gateway
