-- acquire_many: several acquire calls (and releases) in one, each decided as acquire.lua decides
-- it, in order (the calls of one client that queued while its previous call was in flight).
-- Returns six integers per limit, call after call. Redis TIME is read once: the calls are one
-- atomic step.
--
-- Under load a batch is mostly many calls of one or two limits on one key, so each thing comes
-- once, however many calls share it, and Redis makes and parses a few strings for the whole batch
-- rather than several per call:
-- - KEYS: each state's keys once;
-- - ARGV[1]: the number of limits, then each limit (and cost): its algorithm's code and ARGV,
--   without the refund value and the calls' own values (a concurrency limit's lease id);
-- - then the number of entries, and each entry, a limit on a state: the limit's index and the
--   index in KEYS of the state's first key (indexes from 1);
-- - then the number of runs, and each run of like calls: how many, their pinned time ("" for Redis
--   TIME), their number of entries, each entry's index, and then each call's own values: the lease
--   id of each of its concurrency limits, call after call. A run of releases of leases has -1 for
--   its number of entries, then its entry (a concurrency limit on a state) and each release's lease
--   id; each answers 1 when the lease was held, else 0, then five zeros.
--
-- A call whose decisions raise an error (a key holding what sluice did not write, say) answers -1
-- six times per limit, or -2 when Redis refused a command for a state it is in (out of memory, a
-- read-only replica: see UNAVAILABLE), and the error goes to the Redis log; the other calls are
-- decided as usual.
-- What the failed call wrote before the error stays, as it would have in a call of its own.
local LIMITS = {}
local a = 2
for i = 1, ARGV[1] + 0 do
  local alg = algorithm(ARGV[a])
  LIMITS[i] = {alg, alg[3](ARGV, a + 1)}
  a = a + alg[2] - alg[7]
end

local ENTRIES = {}
for i = 1, ARGV[a] + 0 do
  local limit = LIMITS[ARGV[a + 2 * i - 1] + 0]
  ENTRIES[i] = {limit[1], limit[2], ARGV[a + 2 * i] + 0}
end
a = a + 1 + 2 * #ENTRIES

-- The entries of the run being decided, by where they are in ARGV; and where the lease ids of the
-- call being decided start, with each concurrency entry's place among them.
local ENTRY_AT, LEASE_AT = {}, {}
local LEASES_FROM = 0

-- A call's entry at ARGV[at]: see limit_in_argv.
local function entry_listed(at)
  local entry = ENTRY_AT[at]
  local alg, p = entry[1], entry[2]
  if alg[7] == 1 then p.lease = ARGV[LEASES_FROM + LEASE_AT[at]] end
  return alg, p, entry[3], at + 1
end

local out = {}

-- The errors by which Redis refuses a command for a state it is in rather than for what the command
-- is: the client takes them as Redis unable to decide (RedisStore's unavailable_reply).
local UNAVAILABLE = {'OOM', 'READONLY', 'BUSY', 'LOADING', 'MASTERDOWN', 'NOREPLICAS'}

-- Appends -1 (-2 for an UNAVAILABLE error) six times per limit for a call that raised `message`,
-- and logs it.
local function failed(what, message, limits)
  message = type(message) == 'table' and message.err or tostring(message)
  redis.log(redis.LOG_WARNING, 'sluice: ' .. what .. ' failed: ' .. message)
  local code = -1
  for _, prefix in ipairs(UNAVAILABLE) do
    if string.sub(message, 1, #prefix) == prefix then code = -2 end
  end
  for _ = 1, 6 * limits do out[#out + 1] = code end
end

local at = a + 1  -- ARGV[a]: the number of runs; ARGV[at]: the next run's count
local redis_now
for _ = 1, ARGV[a] + 0 do
  local count, pinned, n = ARGV[at] + 0, ARGV[at + 1], ARGV[at + 2] + 0
  PINNED = pinned ~= ''
  local now
  if PINNED then
    now = pinned + 0
  else
    redis_now = redis_now or now_us('')
    now = redis_now
  end
  if n < 0 then
    local key = ENTRIES[ARGV[at + 3] + 0][3]
    local keys = {KEYS[key], KEYS[key + 1]}
    for i = 1, count do
      local ok, held = pcall(leases_release, keys, now, ARGV[at + 3 + i])
      if ok then
        out[#out + 1], out[#out + 2], out[#out + 3], out[#out + 4], out[#out + 5], out[#out + 6] =
          held, 0, 0, 0, 0, 0
      else
        failed('a release', held, 1)
      end
    end
    at = at + 4 + count
  else
    local leases = 0  -- each call's lease ids
    for e = at + 3, at + 2 + n do
      local entry = ENTRIES[ARGV[e] + 0]
      ENTRY_AT[e] = entry
      if entry[1][7] == 1 then
        LEASE_AT[e] = leases
        leases = leases + 1
      end
    end
    LEASES_FROM = at + 3 + n
    for _ = 1, count do
      local o = #out
      local ok, message = pcall(acquire_limits, now, n, 1, at + 3, out, entry_listed)
      if not ok then
        for i = #out, o + 1, -1 do out[i] = nil end
        failed('an acquire', message, n)
      end
      LEASES_FROM = LEASES_FROM + leases
    end
    at = LEASES_FROM
  end
end
save_states()
return out
