#pragma once
// The data plane's reads, made as nginx makes them: a socket is read when epoll has said it is
// readable, or while its last read filled the buffer, and never on the chance. Asio tries every read
// before it waits for one (its reactor knows no better: it asks for readability only once a read
// has failed), so each wait for a next request or for an upstream's answer cost a recvfrom that
// found nothing, EAGAIN; and an idle upstream connection was peeked at before it took a request,
// to see that the upstream had not closed it meanwhile or sent something unasked. Those were three
// of the seven system calls of a proxied request (docs/benchmarks.md).
//
// EdgeReads, one per io_context, is an epoll instance of its own, in which each EdgeReader's socket
// is registered once, edge-triggered; Asio waits on it as on any descriptor, and when it is
// readable EdgeReads collects all that it has to say in one epoll_wait. An EdgeReader keeps what
// the last events and reads said: whether its socket may have input. So a read that would find
// nothing waits without a system call, and an idle connection that may have input is seen for
// what it is without one.
//
// Like a socket's Asio reads, an EdgeReader's belong to the io_context's thread.

#include <sys/epoll.h>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/intrusive/list.hpp>
#include <boost/system/error_code.hpp>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice::gateway {

class EdgeReads;

// One socket's reads. The socket's other operations (connect, writes, cancel, close) stay Asio's;
// its owner calls cancel() where it cancels the socket.
class EdgeReader
    : public boost::intrusive::list_base_hook<boost::intrusive::link_mode<boost::intrusive::auto_unlink>> {
 public:
  using error_code = boost::system::error_code;
  using Signature = void(error_code, std::size_t);

  explicit EdgeReader(EdgeReads& events) : events_(events) {}
  // A read waiting ends with operation_aborted, as an Asio socket's does when it is destroyed.
  ~EdgeReader();
  EdgeReader(const EdgeReader&) = delete;
  EdgeReader& operator=(const EdgeReader&) = delete;

  // Reads from `fd` (a connected stream socket) what it holds now, up to the buffer's size: true
  // when that is done, with n bytes read, or ec set (asio::error::eof at the end of the stream);
  // false when the socket has nothing yet, and the caller waits with async_read_some. Registers
  // the socket on the first call (after a connect: the descriptor is the connected one). A reader
  // serves one socket: one opened again after a close takes a new reader.
  bool read_now(int fd, boost::asio::mutable_buffer buffer, error_code& ec, std::size_t& n);

  // The rest of a read that read_now found nothing for (one read waits at a time): completes once
  // the socket has input (or has ended), with what read_now would then say; or with
  // operation_aborted by cancel(). The handler runs on the io_context's thread: called by EdgeReads
  // as it learns of the input (as a reactor's operations are), posted otherwise.
  template <class Token>
  auto async_read_some(boost::asio::mutable_buffer buffer, Token&& token) {
    return boost::asio::async_initiate<Token, Signature>(
        [this](auto handler, boost::asio::mutable_buffer b) { wait(b, std::move(handler)); }, token, buffer);
  }

  // Ends a waiting read with operation_aborted.
  void cancel();

  // Whether input (or the end, or an error) may have come to the socket since its last read found
  // none: false is sure up to the last events collected.
  bool may_have_input() const { return ready_; }

 private:
  friend class EdgeReads;
  using Handler = boost::asio::any_completion_handler<Signature>;

  enum class Call : bool { kPost, kNow };

  void wait(boost::asio::mutable_buffer buffer, Handler handler);
  void try_complete(Call call);  // reads for the waiting read, if it can
  void complete(error_code ec, std::size_t n, Call call);

  EdgeReads& events_;
  int fd_ = -1;         // as registered
  bool ready_ = true;   // a read may find something
  bool ended_ = false;  // the peer has closed its side, or the socket failed: reads never wait
  static constexpr unsigned kStreak = 16;
  unsigned streak_ = 0;  // reads done at once since the last wait
  boost::asio::mutable_buffer want_;
  Handler waiter_;
};

// The epoll instance of an io_context's EdgeReaders: an Asio service, so that the reads waiting
// when the io_context is destroyed are destroyed with it, as its own operations are.
class EdgeReads : public boost::asio::execution_context::service {
 public:
  using key_type = EdgeReads;
  static inline boost::asio::execution_context::id id;

  explicit EdgeReads(boost::asio::io_context& ioc);
  ~EdgeReads() override;

  // The io_context's, made on first use.
  static EdgeReads& of(boost::asio::io_context& ioc) { return boost::asio::use_service<EdgeReads>(ioc); }

 private:
  friend class EdgeReader;
  using Waiting = boost::intrusive::list<EdgeReader, boost::intrusive::constant_time_size<false>>;

  void shutdown() override;
  bool add(EdgeReader& reader, int fd, boost::system::error_code& ec);
  void forget(const EdgeReader& reader);
  void arm();
  void collect();

  boost::asio::io_context& ioc_;
  int epoll_fd_;
  boost::asio::posix::basic_stream_descriptor<boost::asio::io_context::executor_type> descriptor_;
  Waiting waiting_;  // the readers whose read waits
  Waiting due_;      // in collect(): the readers whose read waited and that have had an event

  // The readers by descriptor, each with the number its registration was given, which its events
  // carry: an event that does not match is of a reader gone. Closing a descriptor takes it out of
  // the epoll instance only once no process has it open, and a child forked meanwhile (to exec a
  // program: Asio opens sockets without O_CLOEXEC) keeps it open, its events still coming.
  struct Slot {
    EdgeReader* reader = nullptr;
    std::uint32_t registration = 0;
  };
  std::vector<Slot> slots_;
  std::uint32_t registrations_ = 0;
};

}  // namespace sluice::gateway
