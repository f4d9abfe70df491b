// Test helpers: a small blocking HTTP/1.1 client over real sockets, raw byte exchanges, and child
// processes. Not thread-safe: one client per thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace sluice::testing {

struct HttpResponse {
  int status = 0;                             // 0: no response (connection failed or closed)
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
  bool keep_alive = false;

  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? "" : it->second;
  }
};

// Keeps one connection open and reconnects when the server closed it.
class HttpClient {
 public:
  explicit HttpClient(std::uint16_t port);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  HttpResponse request(const std::string& method, const std::string& target,
                       const std::vector<std::pair<std::string, std::string>>& headers = {},
                       const std::string& body = "");
  HttpResponse get(const std::string& target, const std::string& system_key = "");
  // How many connections it has opened (1 while the server kept the first one alive).
  int connections() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Connects, writes bytes, and returns everything read until the server closes the connection or
// `wait` passes. With `half_close`, shuts down the sending side after writing.
std::string raw_exchange(std::uint16_t port, const std::string& bytes,
                         std::chrono::milliseconds wait = std::chrono::seconds(5));

// The status code of the first response in raw bytes (0 when there is none).
int raw_status(const std::string& response);

// One connection to 127.0.0.1:port whose bytes go a step at a time: a head, what the server says to
// it ("100 Continue"), then the body.
class RawConnection {
 public:
  explicit RawConnection(std::uint16_t port);
  ~RawConnection();
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool send(const std::string& bytes);
  // What the server sent up to and including `end` (what came after it is kept for the next read),
  // or all it sent when it closed, or when `wait` passed first.
  std::string read_until(const std::string& end, std::chrono::milliseconds wait = std::chrono::seconds(5));

 private:
  int fd_ = -1;
  std::string pending_;
};

// Whether a TCP connection to 127.0.0.1:port is accepted.
bool can_connect(std::uint16_t port);

// A child process with its stdout and stderr captured to files.
class Child {
 public:
  Child(const std::vector<std::string>& argv, const std::string& output_dir);
  ~Child();  // kills it (SIGKILL) if still running
  pid_t pid() const { return pid_; }
  void signal(int sig) const;
  // Waits up to `timeout` for the child to exit; its exit code, or -1 if it did not exit (or was
  // killed by a signal).
  int wait_exit(std::chrono::milliseconds timeout);
  std::string stderr_text() const;
  std::string stdout_text() const;

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = 0;
  std::string out_path_;
  std::string err_path_;
};

// argv, to be run so that a file's mode keeps it out (a file made mode 0 cannot be read): as it is,
// or under root, whom no mode keeps out, through setpriv with the capabilities that override modes
// (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH) taken from what it runs.
std::vector<std::string> held_to_file_modes(std::vector<std::string> argv);

// Polls cond every few milliseconds until it holds or the deadline passes; returns its last value.
template <class F>
bool eventually(F&& cond, std::chrono::milliseconds deadline = std::chrono::seconds(10));

// A free TCP port on 127.0.0.1 (bound, read, released).
std::uint16_t free_port();

// Each thread's name in process `pid` ("self": this one), with the CPUs it may run on as
// /proc/PID/task/TID/status lists them ("0-1", "1").
std::map<std::string, std::string> cpus_of_threads(const std::string& pid = "self");

// The CPUs this process may run on, in order.
std::vector<int> allowed_cpus();

// A fresh directory under the system's temporary directory, removed with what it holds when the
// test process exits (unless SLUICE_TEST_KEEP_DIRS is set).
std::string temp_dir();
void write_file(const std::string& path, const std::string& text);

}  // namespace sluice::testing

#include "http_client_inl.h"
