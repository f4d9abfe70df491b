#include "gateway/access_log.h"

#include <limits.h>
#include <stdio_ext.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

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

AccessLog::AccessLog(std::FILE* file, bool owned, std::string path)
    : file_(file), owned_(owned), path_(std::move(path)) {}

AccessLog::~AccessLog() {
  if (file_ != nullptr) std::fflush(file_);
  if (owned_) std::fclose(file_);
}

namespace {

// The buffer of the log's stream: 64 KiB, or PIPE_BUF for a pipe, where a write of up to PIPE_BUF
// is never split by another writer's (the gateway's messages on stderr, when both go to one pipe).
std::size_t buffer_size(std::FILE* f) {
  struct stat st{};
  if (::fstat(::fileno(f), &st) == 0 && S_ISFIFO(st.st_mode)) return PIPE_BUF;
  return std::size_t{1} << 16;
}

}  // namespace

Result<std::unique_ptr<AccessLog>> AccessLog::open(const std::string& where) {
  if (where == "off") return std::unique_ptr<AccessLog>(new AccessLog(nullptr, false, ""));
  std::FILE* f = stdout;
  if (where != "stdout") {
    f = std::fopen(where.c_str(), "a");
    if (f == nullptr) {
      return invalid_argument("cannot open the access log " + where + ": " + std::strerror(errno));
    }
  }
  auto log = std::unique_ptr<AccessLog>(new AccessLog(f, where != "stdout", where != "stdout" ? where : ""));
  log->buffer_size_ = buffer_size(f);
  // stdout's buffer outlives the log (the stream is not closed with it).
  static char stdout_buffer[std::size_t{1} << 16];
  char* buffer = stdout_buffer;
  if (f != stdout) {
    log->buffer_ = std::make_unique<char[]>(log->buffer_size_);
    buffer = log->buffer_.get();
  }
  std::setvbuf(f, buffer, _IOFBF, log->buffer_size_);
  return log;
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
  if (file_ == nullptr) return;
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
  // Whole lines go out together: the buffer is written before a line that would not fit in it,
  // rather than filled and written with the line cut, which put the gateway's messages on stderr
  // inside a line when both go to one place (2>&1).
  ::flockfile(file_);
  if (__fpending(file_) + line.size() > buffer_size_) std::fflush(file_);
  std::fwrite(line.data(), 1, line.size(), file_);
  ::funlockfile(file_);
}

void AccessLog::flush() {
  if (file_ != nullptr) std::fflush(file_);
}

bool AccessLog::reopen() {
  if (!owned_) return true;
  // Opened first, so that a path that cannot be opened leaves the log where it was.
  std::FILE* fresh = std::fopen(path_.c_str(), "a");
  if (fresh == nullptr) return false;
  ::flockfile(file_);
  std::fflush(file_);
  // The same stream on the new file (writers hold their FILE*): its descriptor is put in place of
  // the old one's, which closes it.
  const bool moved = ::dup2(::fileno(fresh), ::fileno(file_)) >= 0;
  ::funlockfile(file_);
  const int saved = errno;
  std::fclose(fresh);
  errno = saved;
  return moved;
}

}  // namespace sluice::gateway
