-- acquire_many: several acquire calls in one, each decided as acquire.lua decides it, in order (the
-- calls of one client that queued while its previous call was in flight). Returns six integers
-- per limit, call after call. Redis TIME is read once: the calls are one atomic step.
--
-- The limits come first, each once however many calls take it, so that Redis makes and parses
-- their strings once: ARGV[1] is how many there are, then each is its algorithm's code and ARGV
-- (cost included) without the refund value and the calls' own values (a concurrency limit's
-- lease id). Then the number of calls, and for each call its pinned time ("" for Redis TIME), its
-- number of limits, and for each limit the index of its limit above (from 1) and its own values.
-- KEYS: the calls' keys, in order.
--
-- A call whose decisions raise an error (a key holding what sluice did not write, say) answers -1
-- six times per limit, and the error goes to the Redis log; the other calls are decided as usual.
-- What the failed call wrote before the error stays, as it would have in a call of its own.
local LIMITS = {}
local a = 2
for i = 1, ARGV[1] + 0 do
  local alg = algorithm(ARGV[a])
  LIMITS[i] = {alg, alg[3](ARGV, a + 1)}
  a = a + alg[2] - alg[7]
end

-- A call's limit at ARGV[a]: see limit_in_argv.
local function limit_listed(at)
  local limit = LIMITS[ARGV[at] + 0]
  local alg, p = limit[1], limit[2]
  if alg[7] == 1 then p.lease = ARGV[at + 1] end
  return alg, p, at + 1 + alg[7]
end

local out, k = {}, 1
local at = a + 1  -- ARGV[a]: the number of calls; ARGV[at]: the next call's pinned time
local redis_now
for _ = 1, ARGV[a] + 0 do
  local pinned = ARGV[at]
  PINNED = pinned ~= ''
  local now
  if PINNED then
    now = pinned + 0
  else
    redis_now = redis_now or now_us('')
    now = redis_now
  end
  local n, o = ARGV[at + 1] + 0, #out
  local ok, next_k, next_at = pcall(acquire_limits, now, n, k, at + 2, out, limit_listed)
  if ok then
    k, at = next_k, next_at
  else
    local message = type(next_k) == 'table' and next_k.err or tostring(next_k)
    redis.log(redis.LOG_WARNING, 'sluice: an acquire failed: ' .. tostring(message))
    for i = #out, o + 1, -1 do out[i] = nil end
    for _ = 1, 6 * n do out[#out + 1] = -1 end
    at = at + 2
    for _ = 1, n do
      local alg = LIMITS[ARGV[at] + 0][1]
      k, at = k + alg[1], at + 1 + alg[7]
    end
  end
end
save_states()
return out
