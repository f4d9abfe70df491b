#include "http_client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>

namespace sluice::testing {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct HttpClient::Impl {
  std::uint16_t port;
  asio::io_context ioc;
  std::optional<beast::tcp_stream> stream;
  beast::flat_buffer buffer;
  int connections = 0;

  bool connect() {
    ++connections;
    stream.emplace(ioc);
    boost::system::error_code ec;
    stream->connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), ec);
    if (ec) stream.reset();
    buffer.clear();
    return stream.has_value();
  }
};

HttpClient::HttpClient(std::uint16_t port) : impl_(std::make_unique<Impl>()) { impl_->port = port; }
HttpClient::~HttpClient() = default;
int HttpClient::connections() const { return impl_->connections; }

HttpResponse HttpClient::request(const std::string& method, const std::string& target,
                                 const std::vector<std::pair<std::string, std::string>>& headers,
                                 const std::string& body) {
  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  req.method_string(method);
  req.set(http::field::host, "127.0.0.1");
  for (const auto& [k, v] : headers) req.insert(k, v);
  req.body() = body;
  if (!body.empty() || method == "POST" || method == "PUT") req.prepare_payload();
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (!impl_->stream && !impl_->connect()) return {};
    boost::system::error_code ec;
    http::write(*impl_->stream, req, ec);
    // The final response, after any interim (1xx) ones.
    std::optional<http::response_parser<http::string_body>> parser;
    const auto interim = [&] { return parser->get().result_int() / 100 == 1 && parser->get().result_int() != 101; };
    while (!ec && (!parser || interim())) {
      parser.emplace();
      parser->body_limit(64 << 20);
      if (method == "HEAD") parser->skip(true);
      http::read(*impl_->stream, impl_->buffer, *parser, ec);
    }
    if (ec) {
      // A kept-alive connection the server had closed: once more on a new one.
      impl_->stream.reset();
      if (attempt == 0 && (!parser || !parser->got_some())) continue;
      return {};
    }
    HttpResponse out;
    const auto& res = parser->get();
    out.status = static_cast<int>(res.result_int());
    for (const auto& f : res) {
      std::string name(f.name_string());
      for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      out.headers[name] = std::string(f.value());
    }
    out.body = res.body();
    out.keep_alive = res.keep_alive();
    if (!out.keep_alive) impl_->stream.reset();
    return out;
  }
  return {};
}

HttpResponse HttpClient::get(const std::string& target, const std::string& system_key) {
  if (system_key.empty()) return request("GET", target);
  return request("GET", target, {{"X-System-Key", system_key}});
}

namespace {

int connect_fd(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

std::string raw_exchange(std::uint16_t port, const std::string& bytes, std::chrono::milliseconds wait) {
  const int fd = connect_fd(port);
  if (fd < 0) return {};
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<std::size_t>(n);
  }
  std::string out;
  const auto until = std::chrono::steady_clock::now() + wait;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    char buf[65536];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

RawConnection::RawConnection(std::uint16_t port) : fd_(connect_fd(port)) {}

RawConnection::~RawConnection() {
  if (fd_ >= 0) ::close(fd_);
}

bool RawConnection::send(const std::string& bytes) {
  for (std::size_t sent = 0; sent < bytes.size();) {
    const ssize_t n = fd_ < 0 ? -1 : ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

std::string RawConnection::read_until(const std::string& end, std::chrono::milliseconds wait) {
  const auto until = std::chrono::steady_clock::now() + wait;
  while (pending_.find(end) == std::string::npos && fd_ >= 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    char buf[65536];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) break;
    pending_.append(buf, static_cast<std::size_t>(n));
  }
  const std::size_t at = pending_.find(end);
  const std::size_t taken = at == std::string::npos ? pending_.size() : at + end.size();
  std::string out = pending_.substr(0, taken);
  pending_.erase(0, taken);
  return out;
}

int raw_status(const std::string& response) {
  if (response.rfind("HTTP/1.1 ", 0) != 0 || response.size() < 12) return 0;
  return std::atoi(response.substr(9, 3).c_str());
}

bool can_connect(std::uint16_t port) {
  const int fd = connect_fd(port);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

std::uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

namespace {

// The directories temp_dir() made, removed when the test process exits normally (a test run makes
// hundreds; left behind, they fill /tmp run after run). SLUICE_TEST_KEEP_DIRS=1 keeps them to look
// at after a failure. A forked child leaves by _exit and so never removes its parent's.
class TempDirs {
 public:
  ~TempDirs() {
    if (std::getenv("SLUICE_TEST_KEEP_DIRS") != nullptr) return;
    std::error_code ignored;
    for (const std::string& dir : dirs_) std::filesystem::remove_all(dir, ignored);
  }
  void add(std::string dir) {
    const std::lock_guard<std::mutex> lock(mutex_);
    dirs_.push_back(std::move(dir));
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> dirs_;
};

}  // namespace

std::map<std::string, std::string> cpus_of_threads(const std::string& pid) {
  std::map<std::string, std::string> out;
  std::error_code gone;  // a thread that ends while it is read
  for (const auto& task : std::filesystem::directory_iterator("/proc/" + pid + "/task", gone)) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    std::ifstream status(task.path() / "status");
    for (std::string line; std::getline(status, line);) {
      if (line.starts_with("Cpus_allowed_list:")) out[name] = line.substr(line.find_first_not_of(" \t", 18));
    }
  }
  return out;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) out.push_back(cpu);
  }
  return out;
}

std::string temp_dir() {
  static TempDirs made;
  std::string pattern = (std::getenv("TMPDIR") != nullptr ? std::string(std::getenv("TMPDIR")) : "/tmp") +
                        "/sluice-gateway-test-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  made.add(pattern);
  return pattern;
}

void write_file(const std::string& path, const std::string& text) {
  // Written beside and renamed into place, as editors and deploy tools do: a reader never sees
  // half a file.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
  }
  std::rename(tmp.c_str(), path.c_str());
}

Child::Child(const std::vector<std::string>& argv, const std::string& output_dir)
    : out_path_(output_dir + "/stdout.txt"), err_path_(output_dir + "/stderr.txt") {
  // Emptied here, before the child runs: a caller that reads them at once must not see what an
  // earlier child in the same directory wrote.
  std::ofstream(out_path_, std::ios::trunc);
  std::ofstream(err_path_, std::ios::trunc);
  pid_ = ::fork();
  if (pid_ == 0) {
    const int out = ::open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out, 1);
    ::dup2(err, 2);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
}

std::vector<std::string> held_to_file_modes(std::vector<std::string> argv) {
  if (::geteuid() != 0) return argv;
  argv.insert(argv.begin(), {"/usr/bin/setpriv", "--bounding-set=-dac_override,-dac_read_search"});
  return argv;
}

Child::~Child() {
  if (pid_ > 0 && !exited_) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

void Child::signal(int sig) const { ::kill(pid_, sig); }

int Child::wait_exit(std::chrono::milliseconds timeout) {
  if (!exited_) {
    eventually([&] {
      const pid_t r = ::waitpid(pid_, &status_, WNOHANG);
      exited_ = r == pid_;
      return exited_;
    }, timeout);
  }
  if (!exited_ || !WIFEXITED(status_)) return -1;
  return WEXITSTATUS(status_);
}

std::string Child::stderr_text() const {
  std::ifstream in(err_path_);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string Child::stdout_text() const {
  std::ifstream in(out_path_);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace sluice::testing
