// AccessLog: one JSON line per request, to stdout or a file, buffered and flushed by the server's
// timer. Thread-safe (each line is one stdio write, which stdio serialises).
#pragma once

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "gateway/policy.h"
#include "sluice/result.h"

namespace sluice::gateway {

struct AccessRecord {
  Nanos time{0};  // since the Unix epoch
  std::string_view request_id;
  std::string_view system;
  std::string_view interface;
  std::string_view method;
  std::string_view path;
  int status = 0;
  Reason reason = Reason::kOk;
  Nanos latency{0};
  std::optional<Nanos> upstream_latency;
  std::string_view client_ip;
  const std::vector<const CompiledLimit*>* shadow_rejected = nullptr;
  bool path_cut = false;    // the path was cut so that the line fits in kMaxLine
  bool method_cut = false;  // the method was longer than kMaxMethod, and cut to it
};

// The longest method the log writes whole: real ones are short, and a request line of 8 KiB could
// be all method.
inline constexpr std::size_t kMaxMethod = 64;

// The longest line the log writes, newline included: PIPE_BUF, so that a pipe takes each whole.
inline constexpr std::size_t kMaxLine = 4096;

class AccessLog {
 public:
  // "stdout", "off", or a file path (appended to).
  static Result<std::unique_ptr<AccessLog>> open(const std::string& where);
  // Whether open(where) would succeed, without making the file (for serve --check): the same error.
  static Status check(const std::string& where);
  ~AccessLog();
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;

  bool enabled() const { return file_ != nullptr; }
  // Formats into line (reused between calls) and writes it.
  void write(const AccessRecord& record, std::string& line);
  void flush();
  // A log written to a file opens its path again (after logrotate moved the file away, say), what is
  // buffered going to the old file first; false, with errno, when the path cannot be opened (the
  // old file is then kept). Writes on other threads wait meanwhile.
  bool reopen();
  const std::string& path() const { return path_; }  // of a file; empty for stdout or off

  // The JSON line for a record, without the newline.
  static void format(const AccessRecord& record, std::string& out);

 private:
  AccessLog(std::FILE* file, bool owned, std::string path);
  std::FILE* file_;
  bool owned_;
  std::string path_;  // of a file
  std::size_t buffer_size_ = 0;
  std::unique_ptr<char[]> buffer_;  // a file's stream buffer (closed before it goes)
};

// Appends s as the inside of a JSON string in UTF-8: a byte that is part of no well-formed UTF-8
// character goes as the Latin-1 character it would be (\u00XX).
void append_json_escaped(std::string& out, std::string_view s);

}  // namespace sluice::gateway
