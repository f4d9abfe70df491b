// The Lua scripts of RedisStore, embedded at build time (scripts/*.lua, see embed_scripts.cmake).
// Constants; thread-safe.
#pragma once

namespace sluice::redis::detail {

struct Script {
  const char* sha1;    // what EVALSHA names it by
  const char* source;  // what SCRIPT LOAD sends when the server does not know it
};

extern const Script kAcquireScript;  // acquire.lua: one or several limits, all or nothing
extern const Script kRefundScript;   // refund.lua: gives back what admitted decisions took
extern const Script kReleaseScript;  // release.lua: gives back a concurrency lease

}  // namespace sluice::redis::detail
