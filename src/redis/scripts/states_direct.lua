-- sluice: how the algorithms keep states held in a string, for the one-limit scripts: each read and
-- write goes to Redis at once. The same functions as states_cached.lua (which says more), without
-- the bookkeeping that a single decision would only pay for.

local function state_get(key)
  return redis.call('GET', key)
end

-- ttl: milliseconds as for PX (a decimal string), or nil to keep the key's TTL.
local function state_set(key, value, ttl)
  if ttl then
    redis.call('SET', key, value, 'PX', ttl)
  else
    redis.call('SET', key, value, 'KEEPTTL')
  end
end

local function state_del(key)
  redis.call('DEL', key)
end

local function save_states() end
