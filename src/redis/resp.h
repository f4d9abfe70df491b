// RESP (version 2, which Redis speaks unless asked otherwise): encoding commands, reading
// replies, and the cluster's key slots. Plain functions and values; not synchronised.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "redis/unique_function.h"
#include "sluice/result.h"

namespace sluice::redis::detail {

// One reply (an error reply is a Reply too: is_error()). A value: an array holds its elements,
// so that an array of integers, the scripts' usual answer, is one allocation.
class Reply {
 public:
  enum class Type : std::uint8_t { kString, kStatus, kError, kInteger, kNil, kArray };

  Reply() = default;
  static Reply of_integer(std::int64_t n);
  static Reply of_text(Type type, std::string_view s);  // kString, kStatus or kError
  static Reply of_array(std::vector<Reply> elements);

  Type type() const { return type_; }
  bool is_error() const { return type_ == Type::kError; }
  std::int64_t integer() const { return integer_; }                   // kInteger
  std::string_view text() const { return text_; }                     // kString, kStatus, kError
  const std::vector<Reply>& elements() const { return elements_; }    // kArray
  // Whether this is an array of exactly n integers.
  bool integers(std::size_t n) const;

 private:
  friend class ReplyReader;
  Type type_ = Type::kNil;
  std::int64_t integer_ = 0;
  std::string text_;
  std::vector<Reply> elements_;
};

using Callback = UniqueFunction<void(Result<Reply>)>;

inline bool is_error(const Reply& r) { return r.is_error(); }
inline std::string_view text(const Reply& r) { return r.text(); }

// Reads replies from the bytes of a connection, as they come: fed any split of the stream, it gives
// the same replies.
class ReplyReader {
 public:
  void feed(const char* data, std::size_t n);
  // The next whole reply, nothing when the bytes fed so far end inside one, or an error (kProtocol)
  // for bytes that are not RESP, after which the stream cannot be read on.
  Result<std::optional<Reply>> next();

 private:
  enum class Parsed { kDone, kNeedMore, kBad };
  Parsed parse(std::size_t& at, Reply& out, int depth);
  // The line from `at` to its CRLF, without it; moves `at` past it. Nothing when the CRLF has not
  // come yet.
  std::optional<std::string_view> line(std::size_t& at) const;

  std::string buffer_;
  std::size_t start_ = 0;  // where the next reply starts in buffer_
  std::string error_;      // what was wrong, once something was
};

// A command in RESP, built argument by argument; the count is given first.
class Command {
 public:
  explicit Command(std::size_t args);
  Command& arg(std::string_view s);
  Command& arg(std::int64_t n);
  // The encoded bytes; checks (in debug builds) that exactly `args` arguments were added.
  std::string take() &&;

 private:
  std::string out_;
  std::size_t left_;
};

std::string encode(std::initializer_list<std::string_view> args);

// The cluster slot (0..16383) of a key: CRC16 of its hash tag, or of the whole key.
int key_slot(std::string_view key);

inline constexpr int kSlots = 16384;

}  // namespace sluice::redis::detail
