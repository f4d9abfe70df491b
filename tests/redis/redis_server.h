// Test servers: a redis-server process of the test's own on a free port in a temp dir, and a Redis
// Cluster of 3 masters and 3 replicas built with redis-cli --cluster create. Not thread-safe: use
// each from the thread that made it (it also dies with that thread's process).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "sluice/result.h"

namespace sluice::testing {

// Runs a program and returns what it printed on stdout (the exit status in `status`, if given).
std::string run(const std::vector<std::string>& argv, int* status = nullptr);

// How late a call may be answered after its deadline: 5 ms, or 50 ms when sanitizers slow every
// step several times over.
#ifdef __SANITIZE_ADDRESS__
inline constexpr std::chrono::milliseconds kLateness{50};
#else
inline constexpr std::chrono::milliseconds kLateness{5};
#endif

// Polls `condition` until it holds or `timeout` passes; true when it held.
template <class F>
bool eventually(F condition, std::chrono::milliseconds timeout);

class RedisServer {
 public:
  struct Options {
    bool cluster_node = false;
    std::string password{};
    std::vector<std::string> args{};  // more of redis-server's flags
  };

  // Starts a server and waits until it answers PING; the error says why not.
  static Result<std::unique_ptr<RedisServer>> start(Options options);
  static Result<std::unique_ptr<RedisServer>> start() { return start(Options{}); }
  ~RedisServer();

  int port() const { return port_; }
  std::string address() const { return "redis://127.0.0.1:" + std::to_string(port_); }

  // redis-cli against this server; returns its output, trimmed of the final newline.
  std::string cli(const std::vector<std::string>& args) const;

  // SIGKILL, and waits for the process to be gone.
  void kill();
  // Starts it again on the same port and directory (after kill()).
  Status restart();
  bool running() const { return pid_ > 0; }
  // SIGSTOP (hung: connected, answering nothing) and SIGCONT.
  void pause();
  void resume();

 private:
  RedisServer(Options options, std::string dir, int port)
      : options_(std::move(options)), dir_(std::move(dir)), port_(port) {}
  Status launch();

  Options options_;
  std::string dir_;
  int port_;
  pid_t pid_ = -1;
};

class RedisCluster {
 public:
  // 6 nodes, 3 masters with a replica each; waits until every node sees the cluster as ok.
  static Result<std::unique_ptr<RedisCluster>> start();

  std::string address() const;  // redis-cluster://127.0.0.1:p1,...
  RedisServer& node(std::size_t i) { return *nodes_[i]; }
  std::size_t size() const { return nodes_.size(); }
  // The node that is master of `slot` now (by CLUSTER SLOTS as a running node sees it).
  RedisServer* master_of(int slot);

 private:
  std::vector<std::unique_ptr<RedisServer>> nodes_;
};

template <class F>
bool eventually(F condition, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    struct timespec ts{0, 5'000'000};
    nanosleep(&ts, nullptr);
  }
}

}  // namespace sluice::testing
