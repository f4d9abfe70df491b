// write_now over a real socket pair: all of it when the send buffer has room, part of it (and the
// rest written asynchronously arrives in order) when it has not, nothing when it is full, and the
// error when the peer is gone.
#include "gateway/write_now.h"

#include <gtest/gtest.h>

#include <array>
#include <string>
#include <thread>

#include <sys/socket.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/connect_pair.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/write.hpp>

namespace sluice::gateway {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using Socket = asio::local::stream_protocol::socket;

class WriteNowTest : public ::testing::Test {
 protected:
  void SetUp() override {
    asio::local::connect_pair(writer_, reader_);
    writer_.non_blocking(true);
  }
  // A send buffer of a few KiB, so that a large write cannot go at once.
  void shrink_send_buffer() {
    const int small = 4096;
    ASSERT_EQ(::setsockopt(writer_.native_handle(), SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
  }
  std::string read_all() {
    std::string out;
    char buf[8192];
    error_code ec;
    while (true) {
      const std::size_t n = reader_.read_some(asio::buffer(buf), ec);
      if (ec) break;
      out.append(buf, n);
    }
    return out;
  }

  asio::io_context ioc_;
  Socket writer_{ioc_};
  Socket reader_{ioc_};
};

TEST_F(WriteNowTest, WhatFitsGoesWholeAndNothingIsLeft) {
  const std::string head = "HTTP/1.1 200 OK\r\n\r\n";
  const std::string body = "hello";
  const std::array<asio::const_buffer, 2> pieces{asio::buffer(head), asio::buffer(body)};
  error_code ec;
  const auto rest = write_now(writer_, pieces, ec);
  EXPECT_FALSE(ec);
  EXPECT_EQ(asio::buffer_size(rest), 0u);
  writer_.close();
  EXPECT_EQ(read_all(), head + body);
}

// The case a loopback client rarely makes happen: the rest, from the middle of a piece, follows
// what went at once, every byte once and in order.
TEST_F(WriteNowTest, WhatDoesNotFitIsLeftAndTheRestFollowsInOrder) {
  shrink_send_buffer();
  std::string pieces_text[3];
  for (int i = 0; i < 3; ++i) {
    pieces_text[i].resize(300'000);
    for (std::size_t j = 0; j < pieces_text[i].size(); ++j) pieces_text[i][j] = static_cast<char>('a' + (i * 7 + j) % 26);
  }
  const std::array<asio::const_buffer, 3> pieces{asio::buffer(pieces_text[0]), asio::buffer(pieces_text[1]),
                                                 asio::buffer(pieces_text[2])};
  error_code ec;
  const auto rest = write_now(writer_, pieces, ec);
  ASSERT_FALSE(ec) << ec.message();
  const std::size_t left = asio::buffer_size(rest);
  EXPECT_GT(left, 0u);
  EXPECT_LT(left, 900'000u) << "some of it went at once";

  std::string got;
  std::thread reader([&] { got = read_all(); });
  error_code async_ec;
  asio::async_write(writer_, rest, [&](error_code e, std::size_t n) {
    async_ec = e;
    EXPECT_EQ(n, left);
    writer_.close();
  });
  ioc_.run();
  reader.join();
  EXPECT_FALSE(async_ec);
  EXPECT_EQ(got, pieces_text[0] + pieces_text[1] + pieces_text[2]);
}

TEST_F(WriteNowTest, AFullSendBufferLeavesEverythingAndIsNoError) {
  shrink_send_buffer();
  const std::string filler(1'000'000, 'f');
  error_code ec;
  (void)write_now(writer_, asio::buffer(filler), ec);  // fills it
  ASSERT_FALSE(ec);
  const std::string more = "more";
  const auto rest = write_now(writer_, asio::buffer(more), ec);
  EXPECT_FALSE(ec);
  EXPECT_EQ(asio::buffer_size(rest), more.size());
}

TEST_F(WriteNowTest, APeerThatIsGoneIsAnError) {
  reader_.close();
  const std::string data = "data";
  error_code ec;
  (void)write_now(writer_, asio::buffer(data), ec);
  EXPECT_EQ(ec, asio::error::broken_pipe);
}

}  // namespace
}  // namespace sluice::gateway
