#include "gateway/access_log.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <mutex>

#include "config/json.h"

namespace sluice::gateway {

using config::utf8_sequence;

void append_json_escaped(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char ch = s[i];
    const auto c = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20 || c == 0x7f) {
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else if (c < 0x80) {
      out += ch;
    } else if (const std::size_t n = utf8_sequence(s.substr(i)); n > 0) {
      out.append(s.substr(i, n));
      i += n - 1;
    } else {
      // A byte of no UTF-8 character: as the Latin-1 character it would be, so that the line stays
      // JSON in UTF-8 (it reads back as that character, as a real one would).
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
}

static_assert(kMaxLine <= PIPE_BUF, "a line must go into a pipe whole");

struct AccessLog::Shared {
  int fd = -1;
  bool owned = false;  // a file the log opened, O_APPEND (closed with it); not stdout
  bool pipe = false;   // written PIPE_BUF at most at a time: never split by another writer's write

  std::mutex mu;
  std::condition_variable cv;
  std::string queued;          // guarded by mu
  std::string before_swap;     // queued before a reopen: for the old file, guarded by mu
  int swap_fd = -1;            // reopen(): the new file, to put in place of fd, guarded by mu
  std::uint64_t appended = 0;  // lines queued, guarded by mu
  std::uint64_t done = 0;      // of those, lines written or lost, guarded by mu
  bool stop = false;           // guarded by mu
  bool finished = false;       // the writer has returned, guarded by mu
  std::uint64_t lost = 0;      // since take_lost(), guarded by mu
  std::string why_lost;        // guarded by mu

  ~Shared() {
    if (owned && fd >= 0) ::close(fd);
    if (swap_fd >= 0) ::close(swap_fd);
  }

  // Writes whole lines (on the writer's thread only); returns how many were lost, and why, when a
  // write failed. A file the log opened that took part of a line is cut back to the lines before
  // it, so that what follows starts a line of its own (a full disk leaves no half line for the
  // next one to run into).
  std::pair<std::uint64_t, std::string> write_out(std::string_view text) const {
    std::size_t at = 0;
    while (at < text.size()) {
      std::size_t end = text.size();
      if (pipe && end - at > PIPE_BUF) {
        end = text.rfind('\n', at + PIPE_BUF - 1) + 1;
        if (end <= at) end = text.find('\n', at) + 1;  // (no line is longer than PIPE_BUF)
        if (end == 0) end = text.size();
      }
      const off_t before = owned ? ::lseek(fd, 0, SEEK_END) : 0;
      std::size_t put = 0;
      while (at + put < end) {
        const ssize_t n = ::write(fd, text.data() + at + put, end - at - put);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          const std::string why = n < 0 ? std::strerror(errno) : "nothing written";
          const std::size_t whole = put == 0 ? 0 : text.rfind('\n', at + put - 1) + 1;
          const std::size_t kept = whole > at ? whole - at : 0;
          if (owned && put > kept && before >= 0) (void)::ftruncate(fd, before + static_cast<off_t>(kept));
          const std::string_view rest = text.substr(at + kept);
          return {static_cast<std::uint64_t>(std::count(rest.begin(), rest.end(), '\n')), why};
        }
        put += static_cast<std::size_t>(n);
      }
      at = end;
    }
    return {0, ""};
  }

  void run() {
    std::unique_lock lock(mu);
    for (;;) {
      if (queued.empty() && before_swap.empty() && swap_fd < 0) {
        if (stop) break;
        cv.wait_for(lock, std::chrono::milliseconds(100));
        continue;
      }
      std::string first;
      first.swap(before_swap);
      const int next_fd = std::exchange(swap_fd, -1);
      std::string batch;
      batch.swap(queued);
      const std::uint64_t upto = appended;
      lock.unlock();
      auto [lost_first, why_first] = write_out(first);
      if (next_fd >= 0) {
        (void)::dup3(next_fd, fd, O_CLOEXEC);  // the old file closes
        ::close(next_fd);
      }
      auto [lost_batch, why_batch] = write_out(batch);
      lock.lock();
      done = upto;
      if (lost_first + lost_batch > 0) {
        lost += lost_first + lost_batch;
        why_lost = lost_batch > 0 ? std::move(why_batch) : std::move(why_first);
      }
      cv.notify_all();
    }
    finished = true;
    cv.notify_all();
  }
};

AccessLog::AccessLog(std::shared_ptr<Shared> shared, std::string path)
    : shared_(std::move(shared)), path_(std::move(path)) {
  if (shared_) writer_ = std::thread([s = shared_] { s->run(); });
}

AccessLog::~AccessLog() {
  if (!shared_) return;
  flush(std::chrono::milliseconds(500));
  {
    std::lock_guard lock(shared_->mu);
    shared_->stop = true;
  }
  shared_->cv.notify_all();
  std::unique_lock lock(shared_->mu);
  // A writer stuck in a write (a reader that never reads) is left to the process's exit.
  if (shared_->cv.wait_for(lock, std::chrono::milliseconds(500), [&] { return shared_->finished; })) {
    lock.unlock();
    writer_.join();
  } else {
    writer_.detach();
  }
}

namespace {

// Opens the log's file for appending, without waiting: a named pipe that nobody reads yet would
// hold the open (the start, or a worker's loop at SIGHUP: every request) until someone did; it
// fails with ENXIO instead. Writes then block as before (see the log's thread).
int open_for_append(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0666);
  if (fd >= 0) {
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  }
  return fd;
}

}  // namespace

std::string AccessLog::open_error(int error) {
  return error == ENXIO ? "a named pipe that nobody reads: start its reader first" : std::strerror(error);
}

Result<std::unique_ptr<AccessLog>> AccessLog::open(const std::string& where) {
  if (where == "off") return std::unique_ptr<AccessLog>(new AccessLog(nullptr, ""));
  auto shared = std::make_shared<Shared>();
  shared->fd = STDOUT_FILENO;
  if (where != "stdout") {
    shared->fd = open_for_append(where);
    if (shared->fd < 0) return invalid_argument("cannot open the access log " + where + ": " + open_error(errno));
    shared->owned = true;
  }
  struct stat st {};
  shared->pipe = ::fstat(shared->fd, &st) == 0 && S_ISFIFO(st.st_mode);
  return std::unique_ptr<AccessLog>(new AccessLog(std::move(shared), where != "stdout" ? where : ""));
}

Status AccessLog::check(const std::string& where) {
  if (where == "off" || where == "stdout") return {};
  const std::filesystem::path path(where);
  std::error_code ec;
  int error = 0;
  if (std::filesystem::exists(path, ec)) {
    error = std::filesystem::is_directory(path, ec) ? EISDIR : ::access(where.c_str(), W_OK) == 0 ? 0 : errno;
  } else {
    const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
    error = ::access(dir.c_str(), W_OK | X_OK) == 0 ? 0 : errno;
  }
  if (error != 0) return invalid_argument("cannot open the access log " + where + ": " + std::strerror(error));
  return {};
}

void AccessLog::format(const AccessRecord& r, std::string& out) {
  const std::int64_t ns = r.time.count();
  const std::time_t secs = static_cast<std::time_t>(ns / 1'000'000'000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char when[48];
  std::snprintf(when, sizeof when, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ns % 1'000'000'000 / 1000));
  auto field = [&](const char* name, std::string_view value) {
    out += ",\"";
    out += name;
    out += "\":\"";
    append_json_escaped(out, value);
    out += '"';
  };
  auto ms = [](Nanos d) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(d.count()) / 1e6);
    return std::string(buf);
  };
  out += "{\"time\":\"";
  out += when;
  out += '"';
  field("request_id", r.request_id);
  field("system", r.system);
  field("interface", r.interface);
  field("method", r.method);
  field("path", r.path);
  if (r.path_cut) out += ",\"path_cut\":true";
  if (r.method_cut) out += ",\"method_cut\":true";
  field("client_ip", r.client_ip);
  out += ",\"status\":" + std::to_string(r.status);
  field("reason", to_string(r.reason));
  out += ",\"latency_ms\":" + ms(r.latency);
  out += ",\"upstream_latency_ms\":";
  out += r.upstream_latency ? ms(*r.upstream_latency) : "null";
  if (r.shadow_rejected != nullptr && !r.shadow_rejected->empty()) {
    out += ",\"shadow_rejected\":[";
    for (std::size_t i = 0; i < r.shadow_rejected->size(); ++i) {
      out += i == 0 ? "\"" : ",\"";
      append_json_escaped(out, (*r.shadow_rejected)[i]->name);
      out += '"';
    }
    out += ']';
  }
  out += '}';
}

void AccessLog::write(const AccessRecord& given, std::string& line) {
  if (!shared_) return;
  AccessRecord record = given;
  if (record.method.size() > kMaxMethod) {
    record.method = record.method.substr(0, kMaxMethod);
    record.method_cut = true;
  }
  line.clear();
  format(record, line);
  // A line of up to PIPE_BUF bytes goes into a pipe whole, whatever else writes to it: a longer
  // path (up to 8 KiB, and an escape per byte may take six) is cut to what fits.
  if (line.size() + 1 > kMaxLine) {
    // The longest start of the path that fits (a search: escapes make the length not linear).
    AccessRecord cut = record;
    cut.path_cut = true;
    std::size_t fits = 0;
    std::size_t too_long = record.path.size();
    while (too_long - fits > 1) {
      const std::size_t mid = fits + (too_long - fits) / 2;
      cut.path = record.path.substr(0, mid);
      line.clear();
      format(cut, line);
      (line.size() + 1 <= kMaxLine ? fits : too_long) = mid;
    }
    cut.path = record.path.substr(0, fits);
    line.clear();
    format(cut, line);
  }
  line += '\n';
  std::lock_guard lock(shared_->mu);
  if (line.size() > kMaxLine) {  // long even without its path (many long shadow limits' names)
    ++shared_->lost;
    shared_->why_lost = "a line over " + std::to_string(kMaxLine) + " bytes";
    return;
  }
  if (shared_->queued.size() + line.size() > kMaxQueued) {
    ++shared_->lost;
    shared_->why_lost = "more than " + std::to_string(kMaxQueued >> 20) + " MiB waited to be written";
    return;
  }
  shared_->queued += line;
  ++shared_->appended;
  if (shared_->queued.size() >= (std::size_t{1} << 16)) shared_->cv.notify_all();
}

bool AccessLog::flush(std::chrono::milliseconds wait) {
  if (!shared_) return true;
  std::unique_lock lock(shared_->mu);
  const std::uint64_t target = shared_->appended;
  shared_->cv.notify_all();
  return shared_->cv.wait_for(lock, wait, [&] { return shared_->done >= target || shared_->finished; });
}

bool AccessLog::reopen() {
  if (!shared_ || !shared_->owned) return true;
  // Opened first, so that a path that cannot be opened leaves the log where it was; put in place by
  // the log's thread (it may be stuck in a write: this, on a worker's loop, must not wait for it).
  const int fresh = open_for_append(path_);
  if (fresh < 0) return false;
  {
    std::lock_guard lock(shared_->mu);
    shared_->before_swap += shared_->queued;  // what came before goes to the old file
    shared_->queued.clear();
    if (shared_->swap_fd >= 0) ::close(shared_->swap_fd);
    shared_->swap_fd = fresh;
  }
  shared_->cv.notify_all();
  return true;
}

std::optional<std::pair<std::uint64_t, std::string>> AccessLog::take_lost() {
  if (!shared_) return std::nullopt;
  std::lock_guard lock(shared_->mu);
  if (shared_->lost == 0) return std::nullopt;
  return std::pair{std::exchange(shared_->lost, 0), shared_->why_lost};
}

std::uint64_t AccessLog::unwritten() const {
  if (!shared_) return 0;
  std::lock_guard lock(shared_->mu);
  return shared_->appended - shared_->done;
}

}  // namespace sluice::gateway
