-- sluice: the limiting algorithms of src/core/algorithms.cpp as Redis Lua, decision for decision.
-- common.lua comes first in every script; then the algorithms' files; then an entry (see
-- embed_scripts.cmake for which script holds which).
--
-- Lua numbers are doubles: every integer below 2^53 is exact, and every value this file keeps is
-- such an integer. Where the core multiplies into 128 bits, muldiv() below divides exactly by long
-- division over small digits. docs/algorithms.md ("Redis") gives the ranges that make this hold.

local TWO53 = 9007199254740992

-- Integers as decimal strings (tostring would give "1.7e+15"); %d formats a 64-bit integer, exact
-- below 2^53, and much faster than %.0f.
local function fmt(n)
  return string.format('%d', n)
end

local function pair(a, b)
  return string.format('%d:%d', a, b)
end

local function pair3(a, b, c)
  return string.format('%d:%d:%d', a, b, c)
end

-- floor(a / b) for integers 0 <= a < 2^53, 0 < b < 2^53, with a + b < 2^53.
local function idiv(a, b)
  local q = math.floor(a / b)
  local r = a - q * b
  while r < 0 do q = q - 1; r = r + b end
  while r >= b do q = q + 1; r = r - b end
  return q
end

local function ceil_div(a, b)
  local q = idiv(a, b)
  if q * b < a then return q + 1 end
  return q
end

-- floor((a * b + e) / c) and its remainder, exactly, for integers a, b, e >= 0 and c > 0 below 2^53
-- with b + c <= 2^46 and e < 2^52: the quotient is exact when it is below 2^53.
local function muldiv(a, b, e, c)
  local p = a * b
  if p + e < TWO53 then
    local q = idiv(p + e, c)
    return q, p + e - q * c
  end
  -- Long division over the base-2^k digits of a, with (b + c) * 2^k <= 2^53 so that every partial
  -- sum r * 2^k + digit * b stays exact.
  local base = 2
  while base * 2 * (b + c) <= TWO53 do base = base * 2 end
  local digits = {}
  while a > 0 do
    local high = math.floor(a / base)
    digits[#digits + 1] = a - high * base
    a = high
  end
  local q, r = 0, 0
  for i = #digits, 1, -1 do
    local t = r * base + digits[i] * b
    local qd = idiv(t, c)
    r = t - qd * c
    q = q * base + qd
  end
  local t = r + e
  local qd = idiv(t, c)
  return q + qd, t - qd * c
end

-- Time: Redis TIME (one clock for the fleet), or the time a test pins.
local function now_us(pinned)
  if pinned ~= '' then return tonumber(pinned) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- The TTL of a state that is full again after `reset` microseconds: Redis expires keys at
-- millisecond resolution, so the TTL is `reset` rounded up to whole milliseconds. A state past full
-- decides exactly as a missing one, so the sub-millisecond excess never changes a decision. Under a
-- pinned test time, Redis's own clock is unrelated to the decisions' time, so keys live a minute
-- longer, enough for a test to finish.
local PINNED = false
local function ttl_ms(reset)
  local ms = ceil_div(reset, 1000)
  if PINNED then ms = ms + 60000 end
  return ms
end

local function max(a, b)
  if a > b then return a end
  return b
end

-- A decision: allowed, cost_exceeds_limit, remaining, retry_after_us, reset_after_us, and a value
-- that refund() needs to give the cost back (the window, or the log time; 0 when unused).
local function decision(allowed, remaining, retry, reset, extra)
  return {allowed and 1 or 0, 0, remaining, retry, reset, extra or 0}
end

-- A state that a decision found full again is forgotten, as the local store forgets it (which
-- matters when time goes backwards: a forgotten state no longer remembers the later time).
local function forget_if_full(key, d, existed)
  if existed and d[5] == 0 then redis.call('DEL', key) end
end

-- "a:b" states (interval bucket, fixed window, log meta): the two numbers, or nil when absent.
local function pair_load(key)
  local v = redis.call('GET', key)
  if not v then return nil end
  local a, b = string.match(v, '^(%d+):(%d+)$')
  return tonumber(a), tonumber(b)
end

-- ARGV of the window algorithms (fixed, sliding, log): cost, quota, period_us, refund value (read
-- by each_limit, for refunds only).
local function window_params(argv, i)
  return {cost = tonumber(argv[i]), quota = tonumber(argv[i + 1]), period = tonumber(argv[i + 2])}
end

-- Logs and leases are read in batches: a few first (a decision usually needs only the oldest), then
-- more.
local FIRST_BATCH, BATCH = 4, 64

-- When the oldest entries holding `need` are gone: `read(from, n)` gives the times at which entries
-- from..from+n-1 (oldest first) go, and what each holds. nil when they never hold that much.
local function when_freed(need, read)
  local freed, from, batch = 0, 0, FIRST_BATCH
  while true do
    local times, counts = read(from, batch)
    if #times == 0 then return nil end
    for i = 1, #times do
      freed = freed + counts[i]
      if freed >= need then return times[i] end
    end
    from, batch = from + batch, BATCH
  end
end
