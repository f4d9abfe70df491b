// RESP: encoding commands, the replies hiredis's reader gives, and the cluster's key slots.
// Plain functions and values; not synchronised.
#pragma once

#include <hiredis/hiredis.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "redis/unique_function.h"
#include "sluice/result.h"

namespace sluice::redis::detail {

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
// One parsed reply (an error reply is a Reply too: is_error()).
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;
using Callback = UniqueFunction<void(Result<Reply>)>;

inline bool is_error(const Reply& r) { return r->type == REDIS_REPLY_ERROR; }
inline std::string_view text(const redisReply* r) { return {r->str, r->len}; }

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
