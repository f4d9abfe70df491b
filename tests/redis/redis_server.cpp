#include "redis_server.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <ctime>

namespace sluice::testing {

namespace {

// A port that was free a moment ago (bound to port 0, then closed).
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

std::vector<char*> c_args(std::vector<std::string>& argv) {
  std::vector<char*> out;
  for (auto& a : argv) out.push_back(a.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

std::string run(const std::vector<std::string>& argv, int* status) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  std::vector<std::string> copy = argv;
  auto args = c_args(copy);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    const int devnull = ::open("/dev/null", O_WRONLY);
    dup2(devnull, 2);
    close(fds[0]);
    close(fds[1]);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  if (status != nullptr) *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

Result<std::unique_ptr<RedisServer>> RedisServer::start(Options options) {
  std::string last_error;
  for (int attempt = 0; attempt < 5; ++attempt) {
    std::string pattern = (std::filesystem::temp_directory_path() / "sluice-redis-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) return Error{ErrorCode::kStoreUnavailable, "mkdtemp failed"};
    const int port = free_port();
    std::unique_ptr<RedisServer> server(new RedisServer(options, pattern, port));
    const Status s = server->launch();
    if (s.ok()) return server;
    last_error = s.error().message;
  }
  return Error{ErrorCode::kStoreUnavailable, "cannot start redis-server: " + last_error};
}

Status RedisServer::launch() {
  std::vector<std::string> argv = {"redis-server", "--port", std::to_string(port_), "--bind",
                                   "127.0.0.1", "--dir", dir_, "--save", "", "--appendonly", "no",
                                   "--logfile", dir_ + "/redis.log", "--daemonize", "no"};
  if (!options_.password.empty()) {
    argv.insert(argv.end(), {"--requirepass", options_.password});
  }
  argv.insert(argv.end(), options_.args.begin(), options_.args.end());
  if (options_.cluster_node) {
    // A replica's first sync starts at once, not after the 5 s Redis waits by default for more
    // replicas to share a diskless transfer: a cluster is ready in under 2 s rather than 6.
    argv.insert(argv.end(), {"--cluster-enabled", "yes", "--cluster-config-file", dir_ + "/nodes.conf",
                             "--cluster-node-timeout", "1000", "--repl-diskless-sync-delay", "0"});
  }
  auto args = c_args(argv);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    // The server dies with the test, even when the test crashes.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    const int devnull = ::open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    execvp(args[0], args.data());
    _exit(127);
  }
  if (pid < 0) return Error{ErrorCode::kStoreUnavailable, "fork failed"};
  pid_ = pid;
  const bool up = eventually(
      [&] {
        int st = 0;
        if (waitpid(pid_, &st, WNOHANG) == pid_) {
          pid_ = -1;
          return true;  // exited: stop waiting
        }
        return cli({"PING"}).find("PONG") != std::string::npos;
      },
      std::chrono::seconds(10));
  if (pid_ < 0 || !up) {
    kill();
    return Error{ErrorCode::kStoreUnavailable,
                 "redis-server on port " + std::to_string(port_) + " did not come up"};
  }
  return {};
}

RedisServer::~RedisServer() {
  kill();
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

std::string RedisServer::cli(const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {"redis-cli", "-p", std::to_string(port_)};
  if (!options_.password.empty()) argv.insert(argv.end(), {"--no-auth-warning", "-a", options_.password});
  argv.insert(argv.end(), args.begin(), args.end());
  std::string out = run(argv);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

void RedisServer::pause() {
  if (pid_ > 0) ::kill(pid_, SIGSTOP);
}

void RedisServer::resume() {
  if (pid_ > 0) ::kill(pid_, SIGCONT);
}

void RedisServer::kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

Status RedisServer::restart() {
  kill();
  return launch();
}

Result<std::unique_ptr<RedisCluster>> RedisCluster::start() {
  auto cluster = std::make_unique<RedisCluster>();
  std::vector<std::string> create = {"redis-cli", "--cluster", "create"};
  for (int i = 0; i < 6; ++i) {
    auto node = RedisServer::start({.cluster_node = true});
    if (!node) return node.error();
    create.push_back("127.0.0.1:" + std::to_string((*node)->port()));
    cluster->nodes_.push_back(std::move(*node));
  }
  create.insert(create.end(), {"--cluster-replicas", "1", "--cluster-yes"});
  int status = 0;
  const std::string out = run(create, &status);
  if (status != 0) {
    return Error{ErrorCode::kStoreUnavailable, "redis-cli --cluster create failed: " + out};
  }
  // Ready when every node sees the cluster as ok and every replica has synced with its master (a
  // replica that never synced refuses to take over).
  const bool ok = eventually(
      [&] {
        int replicas = 0;
        for (auto& n : cluster->nodes_) {
          if (n->cli({"CLUSTER", "INFO"}).find("cluster_state:ok") == std::string::npos) return false;
          const std::string replication = n->cli({"INFO", "replication"});
          if (replication.find("role:slave") == std::string::npos) continue;
          if (replication.find("master_link_status:up") == std::string::npos) return false;
          ++replicas;
        }
        return replicas == 3;
      },
      std::chrono::seconds(30));
  if (!ok) return Error{ErrorCode::kStoreUnavailable, "the cluster did not become ok"};
  return cluster;
}

std::string RedisCluster::address() const {
  std::string a = "redis-cluster://";
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    a += (i > 0 ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(nodes_[i]->port());
  }
  return a;
}

RedisServer* RedisCluster::master_of(int slot) {
  for (auto& n : nodes_) {
    if (!n->running()) continue;
    // CLUSTER NODES: "id ip:port@bus flags master ping pong epoch link slot-range...".
    std::istringstream lines(n->cli({"CLUSTER", "NODES"}));
    for (std::string line; std::getline(lines, line);) {
      std::istringstream f(line);
      std::string id, addr, flags, master, ping, pong, epoch, link;
      f >> id >> addr >> flags >> master >> ping >> pong >> epoch >> link;
      if (flags.find("master") == std::string::npos || flags.find("fail") != std::string::npos) continue;
      for (std::string range; f >> range;) {
        if (range.front() == '[') continue;
        const auto dash = range.find('-');
        const int lo = std::stoi(range.substr(0, dash));
        const int hi = dash == std::string::npos ? lo : std::stoi(range.substr(dash + 1));
        if (slot < lo || slot > hi) continue;
        const int port = std::stoi(addr.substr(addr.find(':') + 1, addr.find('@') - addr.find(':') - 1));
        for (auto& m : nodes_) {
          if (m->port() == port) return m.get();
        }
      }
    }
    return nullptr;
  }
  return nullptr;
}

}  // namespace sluice::testing
