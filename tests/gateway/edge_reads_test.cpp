// EdgeReader over a real TCP connection on the loopback: what has come is read at once; a read that
// did not fill its buffer leaves the socket waiting for epoll's next event; a read that waits
// completes when bytes come, or the end; an end that came with the last bytes is read (it is told
// once); cancel, and an io_context that goes, end a read that waits; reads that keep finding input
// take turns; the events of a reader gone are nobody's.
#include "gateway/edge_reads.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include <poll.h>
#include <sys/socket.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

namespace sluice::gateway {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using tcp = asio::ip::tcp;

// How long a read that waits may take before the test fails rather than hangs: it is not waited
// out when the read completes.
constexpr auto kNoLongerThan = std::chrono::seconds(10);

struct Result {
  error_code ec;
  std::size_t n = 0;
};

class EdgeReadsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tcp::acceptor acceptor(ioc_, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    peer_.connect(acceptor.local_endpoint());
    acceptor.accept(socket_);
  }

  // Sends to the socket, and blocks until the bytes have reached it (on the loopback they do within
  // the call, unless the kernel has left its network work to a thread of its own).
  void send(const std::string& bytes) {
    asio::write(peer_, asio::buffer(bytes));
    pollfd p{socket_.native_handle(), POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, -1), 1);
  }

  // Runs what is ready in the io_context: the wait on the epoll instance, which has events (on the
  // loopback, bytes and a close reach the socket within the call that sends them), and the reading
  // of them.
  void collect_events() { ASSERT_GT(ioc_.poll(), 0u); }

  // Blocks until the peer's close (its FIN) has come to the socket.
  void await_peer_close() {
    pollfd p{socket_.native_handle(), POLLRDHUP, 0};
    ASSERT_EQ(::poll(&p, 1, -1), 1);
  }

  std::optional<Result> read_now(std::size_t size) {
    buffer_.assign(size, '\0');
    Result r;
    if (!reader_->read_now(socket_.native_handle(), asio::buffer(buffer_), r.ec, r.n)) return std::nullopt;
    return r;
  }

  // A read that waits, its result set by its handler.
  std::shared_ptr<std::optional<Result>> start_read(std::size_t size) {
    buffer_.assign(size, '\0');
    auto result = std::make_shared<std::optional<Result>>();
    reader_->async_read_some(asio::buffer(buffer_), [result](error_code ec, std::size_t n) { *result = Result{ec, n}; });
    return result;
  }

  std::string got(std::size_t n) const { return buffer_.substr(0, n); }

  asio::io_context ioc_;
  tcp::socket peer_{ioc_};
  tcp::socket socket_{ioc_};
  std::optional<EdgeReader> reader_{std::in_place, EdgeReads::of(ioc_)};
  std::string buffer_;
};

TEST_F(EdgeReadsTest, WhatHasComeIsReadAtOnceAndAShortReadWaitsForTheNextEvent) {
  send("hello");
  std::optional<Result> r = read_now(64);
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->ec);
  EXPECT_EQ(got(r->n), "hello");
  // Not filled: all there was is read, and the next read waits for an event, without a look.
  EXPECT_FALSE(reader_->may_have_input());
  EXPECT_FALSE(read_now(64).has_value());
}

TEST_F(EdgeReadsTest, ASocketWithNothingYetIsSaidSoAndWaitsForBytes) {
  EXPECT_FALSE(read_now(64).has_value());
  EXPECT_FALSE(reader_->may_have_input());
  const auto result = start_read(64);
  EXPECT_FALSE(result->has_value());
  send("late");
  while (!result->has_value()) ASSERT_EQ(ioc_.run_one_for(kNoLongerThan), 1u);
  EXPECT_FALSE((*result)->ec);
  EXPECT_EQ(got((*result)->n), "late");
}

TEST_F(EdgeReadsTest, AFilledBufferLeavesTheRestToReadAtOnce) {
  send("0123456789abcdefghij");
  std::optional<Result> r = read_now(10);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(got(r->n), "0123456789");
  EXPECT_TRUE(reader_->may_have_input());
  r = read_now(10);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(got(r->n), "abcdefghij");
}

TEST_F(EdgeReadsTest, AnIdleSocketThatIsClosedIsSeenToHaveInput) {
  send("x");
  ASSERT_TRUE(read_now(64).has_value());
  EXPECT_FALSE(reader_->may_have_input());
  peer_.close();
  await_peer_close();
  collect_events();
  EXPECT_TRUE(reader_->may_have_input());
  const std::optional<Result> r = read_now(64);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->ec, asio::error::eof);
}

// epoll tells the peer's close once, with the bytes before it when they come together: the short
// read of those bytes must not leave the end unread, waiting for an event that will not come.
TEST_F(EdgeReadsTest, AnEndThatCameWithTheLastBytesIsReadAfterThem) {
  EXPECT_FALSE(read_now(64).has_value());
  send("last");
  peer_.shutdown(tcp::socket::shutdown_send);
  await_peer_close();
  collect_events();
  std::optional<Result> r = read_now(64);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(got(r->n), "last");
  r = read_now(64);
  ASSERT_TRUE(r.has_value()) << "the end was told with the bytes, and is waited for again";
  EXPECT_EQ(r->ec, asio::error::eof);
}

TEST_F(EdgeReadsTest, AResetIsAnError) {
  EXPECT_FALSE(read_now(64).has_value());
  const auto result = start_read(64);
  const ::linger abortive{1, 0};
  ASSERT_EQ(::setsockopt(peer_.native_handle(), SOL_SOCKET, SO_LINGER, &abortive, sizeof abortive), 0);
  peer_.close();
  while (!result->has_value()) ASSERT_EQ(ioc_.run_one_for(kNoLongerThan), 1u);
  EXPECT_EQ((*result)->ec, asio::error::connection_reset);
}

TEST_F(EdgeReadsTest, CancelEndsAWaitingRead) {
  EXPECT_FALSE(read_now(64).has_value());
  const auto result = start_read(64);
  reader_->cancel();
  EXPECT_FALSE(result->has_value()) << "the handler is posted, not called from cancel";
  while (!result->has_value()) ASSERT_EQ(ioc_.run_one_for(kNoLongerThan), 1u);
  EXPECT_EQ((*result)->ec, asio::error::operation_aborted);
  // The socket carries on: bytes that come later are read.
  send("after");
  collect_events();
  const std::optional<Result> r = read_now(64);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(got(r->n), "after");
}

TEST_F(EdgeReadsTest, ADestroyedReaderEndsItsWaitingRead) {
  EXPECT_FALSE(read_now(64).has_value());
  const auto result = start_read(64);
  reader_.reset();
  while (!result->has_value()) ASSERT_EQ(ioc_.run_one_for(kNoLongerThan), 1u);
  EXPECT_EQ((*result)->ec, asio::error::operation_aborted);
}

// A descriptor stays in the epoll instance while any process has its file open (a child forked to
// exec a program keeps the sockets that have no O_CLOEXEC): events keep coming for a reader gone,
// and they are not another's, even one made where it was.
TEST_F(EdgeReadsTest, AnEventOfAReaderGoneIsNobodys) {
  auto gone = std::make_unique<EdgeReader>(EdgeReads::of(ioc_));
  char buf[16];
  error_code ec;
  std::size_t n = 0;
  ASSERT_FALSE(gone->read_now(socket_.native_handle(), asio::buffer(buf), ec, n));
  gone.reset();  // and socket_ stays open, as the file of a socket closed in a child's hands

  tcp::acceptor acceptor(ioc_, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  tcp::socket other_peer(ioc_);
  other_peer.connect(acceptor.local_endpoint());
  tcp::socket other = acceptor.accept();
  auto reader = std::make_unique<EdgeReader>(EdgeReads::of(ioc_));  // often where the one gone was
  ASSERT_FALSE(reader->read_now(other.native_handle(), asio::buffer(buf), ec, n));
  send("for the reader gone");
  collect_events();
  EXPECT_FALSE(reader->may_have_input());
}

// As Asio's own operations: a coroutine waiting on a read when the io_context is destroyed is
// destroyed with it, its locals with it (LeakSanitizer would also see a frame left behind).
TEST(EdgeReadsShutdownTest, AReadWaitingWhenTheIoContextGoesIsDestroyedWithIt) {
  auto destroyed = std::make_shared<bool>(false);
  struct Guard {
    std::shared_ptr<bool> flag;
    ~Guard() { *flag = true; }
  };
  bool suspended = false;
  {
    asio::io_context ioc;
    tcp::acceptor acceptor(ioc, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    tcp::socket peer(ioc);
    peer.connect(acceptor.local_endpoint());
    tcp::socket socket = acceptor.accept();
    asio::co_spawn(
        ioc,
        [&]() -> asio::awaitable<void> {
          const Guard guard{destroyed};
          EdgeReader reader(EdgeReads::of(ioc));
          char buf[16];
          error_code ec;
          std::size_t n = 0;
          if (reader.read_now(socket.native_handle(), asio::buffer(buf), ec, n)) co_return;
          suspended = true;
          co_await reader.async_read_some(asio::buffer(buf), asio::use_awaitable);
        },
        asio::detached);
    while (!suspended) ASSERT_EQ(ioc.run_one_for(kNoLongerThan), 1u);
    EXPECT_FALSE(*destroyed);
  }
  EXPECT_TRUE(*destroyed);
}

TEST_F(EdgeReadsTest, ReadsThatKeepFindingInputTakeTurns) {
  send(std::string(64, 'x'));
  int at_once = 0;
  while (read_now(1).has_value()) ++at_once;
  EXPECT_EQ(at_once, 16);
  EXPECT_TRUE(reader_->may_have_input());
  // The wait reads at once, and its handler takes its turn in the io_context's queue.
  const auto result = start_read(1);
  EXPECT_FALSE(result->has_value());
  while (!result->has_value()) ASSERT_EQ(ioc_.run_one_for(kNoLongerThan), 1u);
  EXPECT_EQ((*result)->n, 1u);
  // And the count starts again.
  EXPECT_TRUE(read_now(1).has_value());
}

}  // namespace
}  // namespace sluice::gateway
