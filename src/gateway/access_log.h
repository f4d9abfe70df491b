// AccessLog: one JSON line per request, to stdout or a file. Lines are queued in memory and written
// by a thread of the log's own, so that a reader that stops reading (a stuck log shipper on a pipe)
// or a full disk never holds a request up: past kMaxQueued bytes waiting, lines are dropped and
// counted. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

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

// How much may wait to be written before lines are dropped.
inline constexpr std::size_t kMaxQueued = std::size_t{8} << 20;

class AccessLog {
 public:
  // "stdout", "off", or a file path (appended to).
  static Result<std::unique_ptr<AccessLog>> open(const std::string& where);
  // Whether open(where) would succeed, without making the file (for serve --check): the same error.
  static Status check(const std::string& where);
  ~AccessLog();
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;

  bool enabled() const { return shared_ != nullptr; }
  // Formats into line (reused between calls) and queues it (or drops it, when kMaxQueued wait).
  void write(const AccessRecord& record, std::string& line);
  // Waits until what was queued before is written (or lost), at most `wait`; false if it is not.
  bool flush(std::chrono::milliseconds wait = std::chrono::seconds(2));
  // A log written to a file opens its path again (after logrotate moved the file away, say), what was
  // queued before going to the old file; false, with errno, when the path cannot be opened (the old
  // file is then kept).
  bool reopen();
  // What an errno of open() or reopen() says, for a message.
  static std::string open_error(int error);
  const std::string& path() const { return path_; }  // of a file; empty for stdout or off
  // Lines lost since the last call (dropped while too much waited, or a write that failed: a full
  // disk, a reader gone), and why the last was; nullopt when none.
  std::optional<std::pair<std::uint64_t, std::string>> take_lost();
  // Lines queued and not yet written (nor lost).
  std::uint64_t unwritten() const;

  // The JSON line for a record, without the newline.
  static void format(const AccessRecord& record, std::string& out);

 private:
  struct Shared;  // what the writer thread shares: it may outlive the log, stuck in a write
  AccessLog(std::shared_ptr<Shared> shared, std::string path);
  std::shared_ptr<Shared> shared_;  // null: off
  std::string path_;                // of a file
  std::thread writer_;
};

// Appends s as the inside of a JSON string in UTF-8: a byte that is part of no well-formed UTF-8
// character goes as the Latin-1 character it would be (\u00XX).
void append_json_escaped(std::string& out, std::string_view s);

}  // namespace sluice::gateway
