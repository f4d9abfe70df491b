#include "gateway/edge_reads.h"

#include <sys/socket.h>

#include <boost/asio/post.hpp>
#include <boost/system/system_error.hpp>
#include <cerrno>
#include <utility>

namespace sluice::gateway {

namespace asio = boost::asio;
using error_code = boost::system::error_code;

EdgeReader::~EdgeReader() {
  cancel();
  events_.forget(*this);
}

bool EdgeReader::read_now(int fd, asio::mutable_buffer buffer, error_code& ec, std::size_t& n) {
  ec = {};
  n = 0;
  if (fd != fd_ && !events_.add(*this, fd, ec)) return true;
  if (buffer.size() == 0) return true;  // as Asio's: done at once
  // Reads that keep finding input are made to wait for their turn now and then (the wait reads at
  // once, and its handler goes to the back of the io_context's queue): a client or an upstream that
  // always has more to send does not keep the thread from the other connections.
  if (!ready_ || ++streak_ > kStreak) return false;
  while (true) {
    const ssize_t got = ::recv(fd_, buffer.data(), buffer.size(), MSG_DONTWAIT);
    if (got > 0) {
      n = static_cast<std::size_t>(got);
      // A read that did not fill the buffer took all there was: the next one waits for an event,
      // which epoll (edge-triggered) sends for whatever comes after this read. Not once the peer
      // has closed: its end, already told, is not told again.
      if (n < buffer.size() && !ended_) ready_ = false;
      return true;
    }
    if (got == 0) {
      ec = asio::error::eof;
      return true;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (ended_) {
        ec = asio::error::eof;  // nothing is to come (a reset's error has been read already)
        return true;
      }
      ready_ = false;
      return false;
    }
    ec = error_code(errno, asio::error::get_system_category());
    return true;
  }
}

void EdgeReader::cancel() {
  if (waiter_) complete(asio::error::operation_aborted, 0, Call::kPost);
}

void EdgeReader::wait(asio::mutable_buffer buffer, Handler handler) {
  want_ = buffer;
  waiter_.swap(handler);  // not assigned: Boost 1.81's move assignment wraps the handler in another
  streak_ = 0;
  events_.waiting_.push_back(*this);
  if (ready_ || fd_ < 0) try_complete(Call::kPost);  // within the read's initiation: not called
}

void EdgeReader::try_complete(Call call) {
  error_code ec;
  std::size_t n = 0;
  if (fd_ < 0) {
    ec = asio::error::bad_descriptor;  // a wait with no read_now before it: no socket to wait for
  } else if (!read_now(fd_, want_, ec, n)) {
    return;
  }
  complete(ec, n, call);
}

void EdgeReader::complete(error_code ec, std::size_t n, Call call) {
  unlink();
  Handler handler;
  handler.swap(waiter_);
  if (call == Call::kNow) {
    std::move(handler)(ec, n);
  } else {
    asio::post(events_.ioc_, [handler = std::move(handler), ec, n]() mutable { std::move(handler)(ec, n); });
  }
}

EdgeReads::EdgeReads(asio::io_context& ioc)
    : asio::execution_context::service(ioc), ioc_(ioc), epoll_fd_(::epoll_create1(EPOLL_CLOEXEC)), descriptor_(ioc) {
  if (epoll_fd_ < 0) throw boost::system::system_error(errno, asio::error::get_system_category(), "epoll_create1");
  descriptor_.assign(epoll_fd_);
  arm();
}

EdgeReads::~EdgeReads() = default;  // descriptor_ closes the epoll instance

// The reads still waiting are ended, their handlers queued on the io_context, whose scheduler (a
// service older than this one) destroys them when it shuts down next: their coroutines' frames with
// them.
void EdgeReads::shutdown() {
  while (!waiting_.empty()) waiting_.front().cancel();
}

bool EdgeReads::add(EdgeReader& reader, int fd, error_code& ec) {
  if (++registrations_ == 0) ++registrations_;  // 0 is no registration's
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
  ev.data.u64 = (std::uint64_t{registrations_} << 32) | static_cast<std::uint32_t>(fd);
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0 &&
      (errno != EEXIST || ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &ev) != 0)) {
    ec = error_code(errno, asio::error::get_system_category());
    return false;
  }
  forget(reader);
  if (static_cast<std::size_t>(fd) >= slots_.size()) slots_.resize(static_cast<std::size_t>(fd) + 1);
  slots_[static_cast<std::size_t>(fd)] = Slot{&reader, registrations_};
  reader.fd_ = fd;
  reader.ready_ = true;  // what came before is not told as an event: the first read looks
  reader.ended_ = false;
  return true;
}

void EdgeReads::forget(const EdgeReader& reader) {
  const auto at = static_cast<std::size_t>(reader.fd_);
  if (reader.fd_ >= 0 && at < slots_.size() && slots_[at].reader == &reader) slots_[at] = Slot{};
}

void EdgeReads::arm() {
  descriptor_.async_wait(asio::posix::descriptor_base::wait_read, [this](const error_code& ec) {
    if (ec) return;  // the io_context is going
    collect();
    arm();
  });
}

// First each event marks its reader (nothing runs meanwhile that could destroy a reader whose
// event is still to come in the batch); then the readers whose read waits read, and their handlers
// are called, one by one. A handler may end another's connection: that reader leaves due_ as it goes.
void EdgeReads::collect() {
  constexpr int kBatch = 64;
  epoll_event events[kBatch];
  int n = 0;
  do {
    n = ::epoll_wait(epoll_fd_, events, kBatch, 0);
    for (int i = 0; i < n; ++i) {
      const auto at = static_cast<std::uint32_t>(events[i].data.u64);
      const auto registration = static_cast<std::uint32_t>(events[i].data.u64 >> 32);
      if (at >= slots_.size() || slots_[at].registration != registration || slots_[at].reader == nullptr) continue;
      EdgeReader& reader = *slots_[at].reader;
      reader.ready_ = true;
      if ((events[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) reader.ended_ = true;
      if (reader.waiter_) {
        reader.unlink();
        due_.push_back(reader);
      }
    }
  } while (n == kBatch);
  while (!due_.empty()) {
    EdgeReader& reader = due_.front();
    reader.unlink();
    waiting_.push_back(reader);  // until its read is done: an event that found nothing leaves it waiting
    reader.try_complete(EdgeReader::Call::kNow);
  }
}

}  // namespace sluice::gateway
