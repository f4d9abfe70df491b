-- sluice: the limiting algorithms of src/core/algorithms.cpp as Redis Lua, decision for decision.
-- common.lua comes first in every script, then how it keeps states (states_*.lua); then the
-- helpers and algorithms a script needs; then an entry (see embed_scripts.cmake for which script
-- holds which). Redis defines every function of a script anew on each call, so a script carries
-- only what it uses.
--
-- Lua numbers are doubles: every integer below 2^53 is exact, and every value this file keeps is
-- such an integer. Where the core multiplies into 128 bits, muldiv() (muldiv.lua) divides exactly
-- by long division over small digits. docs/algorithms.md ("Redis") gives the ranges that make this
-- hold.
--
-- Decimal strings (ARGV, replies, stored states) become numbers by `s + 0`, which parses them once;
-- tonumber parses them twice, and parsing is a good part of a short script's cost. Numbers passed
-- to redis.call go as strings made by string.format('%d'), which is cheaper than the %.17g Redis
-- prints a number with.

-- "a:b" as stored. %d formats a 64-bit integer, exact below 2^53 (tostring would give "1.7e+15"),
-- and much faster than %.0f.
local function pair(a, b)
  return string.format('%d:%d', a, b)
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

-- Time: Redis TIME (one clock for the fleet), or the time a test pins.
local function now_us(pinned)
  if pinned ~= '' then return pinned + 0 end
  local t = redis.call('TIME')
  return (t[1] + 0) * 1000000 + (t[2] + 0)
end

-- The TTL of a state that is full again after `reset` microseconds: Redis expires keys at
-- millisecond resolution, so the TTL is `reset` rounded up to whole milliseconds. A state past full
-- decides exactly as a missing one, so the sub-millisecond excess never changes a decision. Under a
-- pinned test time, Redis's own clock is unrelated to the decisions' time, so keys live a minute
-- longer, enough for a test to finish. Returned as a decimal string, for PX and PEXPIRE.
local PINNED = false
local function ttl_ms(reset)
  local ms = ceil_div(reset, 1000)
  if PINNED then ms = ms + 60000 end
  return string.format('%d', ms)
end

-- Deletes each of `keys` by a DEL of its own. A DEL of several keys, on a node importing their
-- slot, is refused when one of them is missing (as Redis refuses any command of several keys
-- there), which cuts the script short after what it wrote: so is one that deletes a state whose
-- set its own ZREM emptied.
local function del_each(keys)
  for _, key in ipairs(keys) do redis.call('DEL', key) end
end

local function max(a, b)
  if a > b then return a end
  return b
end

-- Whether a stored window or tick `index` (of `period` us) starts further after now than a clock
-- stepped back can leave it (two periods, or a day if more): a state kept under another limit on
-- its key (a period changed), read as none (see kept_under_another_limit in algorithms.cpp).
local DAY_US = 86400000000
local function kept_under_another_limit(index, period, now)
  return index > idiv(now + max(2 * period, DAY_US), period)
end

-- A decision: allowed, cost_exceeds_limit, remaining, retry_after_us, reset_after_us, and a value
-- that refund() needs to give the cost back (the window, or the log time; 0 when unused). Every
-- decision fills the one table DECISION, since a table made per decision, and collected, costs
-- Redis more than the decision: a caller copies what it keeps before the next decision.
local DECISION = {0, 0, 0, 0, 0, 0}
local function decision(allowed, remaining, retry, reset, extra)
  local d = DECISION
  d[1], d[2], d[3], d[4], d[5], d[6] = allowed and 1 or 0, 0, remaining, retry, reset, extra or 0
  return d
end

-- States a script keeps in tables of its own and writes back at its end (the concurrency limit's
-- leases): save_later(save, record) has save_states() call save(record) once its decisions are
-- done, in the order the records were made.
local SAVE_LATER = {}
local function save_later(save, record)
  SAVE_LATER[#SAVE_LATER + 1] = {save, record}
end

local function save_records()
  for _, s in ipairs(SAVE_LATER) do s[1](s[2]) end
end

-- "a:b" (the sliding log's meta): the two numbers, or nil for none (false).
local function pair_parse(v)
  if not v then return nil end
  local a, b = string.match(v, '^(%d+):(%d+)$')
  return a + 0, b + 0
end

-- The states held in a string (the meter, the interval bucket, the fixed and sliding windows): two
-- or three numbers, "a:b" or "a:b:c" in Redis, and a table {a, b[, c]} in a script. A decision that
-- finds a state full again deletes it, as the local store forgets it (which matters when time goes
-- backwards: a forgotten state no longer remembers the later time).
local function state_decode(v)
  local a, b, c = string.match(v, '^(%d+):(%d+):?(%d*)$')
  if c == '' then return {a + 0, b + 0} end
  return {a + 0, b + 0, c + 0}
end

local function state_encode(a, b, c)
  if c then return string.format('%d:%d:%d', a, b, c) end
  return string.format('%d:%d', a, b)
end

-- ARGV of the window algorithms (fixed, sliding, log): cost, quota, period_us, refund value (read
-- by each_limit, for refunds only). Like every *_params, fills `p` when given (a table the caller
-- reuses), else a new table.
local function window_params(argv, i, p)
  p = p or {}
  p.cost, p.quota, p.period = argv[i] + 0, argv[i + 1] + 0, argv[i + 2] + 0
  return p
end
