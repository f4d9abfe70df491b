-- acquire_many: several acquire calls in one, each decided as acquire.lua decides it, in order (the
-- calls of one client that queued while its previous call was in flight). ARGV[1]: how many calls;
-- then for each call its pinned time ("" for Redis TIME), its number of limits and its limits'
-- codes and ARGV, as acquire.lua reads them. KEYS: the calls' keys, in order. Returns six integers
-- per limit, call after call. Redis TIME is read once: the calls are one atomic step.
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
  k, a = acquire_limits(now, ARGV[a + 1] + 0, k, a + 2, out)
end
save_states()
return out
