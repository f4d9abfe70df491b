-- acquire_many: several acquire calls in one, each decided as acquire.lua decides it, in order (the
-- calls of one client that queued while its previous call was in flight). ARGV[1]: how many calls;
-- then for each call its pinned time ("" for Redis TIME), its number of limits and its limits'
-- codes and ARGV, as acquire.lua reads them. KEYS: the calls' keys, in order. Returns six integers
-- per limit, call after call. Redis TIME is read once: the calls are one atomic step.
--
-- A call whose decisions raise an error (a key holding what sluice did not write, say) answers -1
-- six times per limit, and the error goes to the Redis log; the other calls are decided as usual.
-- What the failed call wrote before the error stays, as it would have in a call of its own.
local out, k, a = {}, 1, 2
local redis_now
for _ = 1, ARGV[1] + 0 do
  local pinned = ARGV[a]
  PINNED = pinned ~= ''
  local now
  if PINNED then
    now = pinned + 0
  else
    redis_now = redis_now or now_us('')
    now = redis_now
  end
  local n, o = ARGV[a + 1] + 0, #out
  local ok, next_k, next_a = pcall(acquire_limits, now, n, k, a + 2, out)
  if ok then
    k, a = next_k, next_a
  else
    local message = type(next_k) == 'table' and next_k.err or tostring(next_k)
    redis.log(redis.LOG_WARNING, 'sluice: an acquire failed: ' .. tostring(message))
    for i = #out, o + 1, -1 do out[i] = nil end
    for _ = 1, 6 * n do out[#out + 1] = -1 end
    k, a = skip_limits(n, k, a + 2)
  end
end
save_states()
return out
