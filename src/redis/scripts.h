// The Lua scripts of RedisStore, embedded at build time (scripts/*.lua, see embed_scripts.cmake).
// Constants; thread-safe.
#pragma once

namespace sluice::redis::detail {

struct Script {
  const char* sha1;      // what EVALSHA names it by
  const char* source;    // what SCRIPT LOAD and EVAL send
  const char* function;  // what FCALL names it by in kLibrary, or nullptr when not in it
};

// The Redis 7 function library (FUNCTION LOAD): the scripts that carry every algorithm, as
// functions that Redis defines once rather than at each call.
extern const char* const kLibrary;

extern const Script kAcquireScript;  // any limits, all or nothing
extern const Script kAcquireManyScript;  // several acquire calls in one
extern const Script kRefundScript;   // gives back what admitted decisions took
extern const Script kReleaseScript;  // gives back a concurrency lease

// One limit of one algorithm: the common case, with only that algorithm's code.
extern const Script kAcquireMeterScript;     // continuous token bucket and GCRA
extern const Script kAcquireIntervalScript;  // interval token bucket
extern const Script kAcquireFixedScript;
extern const Script kAcquireSlidingScript;
extern const Script kAcquireLogScript;
extern const Script kAcquireLeasesScript;

}  // namespace sluice::redis::detail
