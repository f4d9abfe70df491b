-- sluice: how the algorithms keep the states held in a string, for the one-limit scripts: each read
-- and write goes to Redis at once. The same functions as states_cached.lua (which says more),
-- without the bookkeeping that a single decision would only pay for. save_states() writes back
-- only the records of save_later().

local function state_get(key)
  local v = redis.call('GET', key)
  return v and state_decode(v)
end

local function state_set(key, reset, a, b, c)
  if reset then
    redis.call('SET', key, state_encode(a, b, c), 'PX', ttl_ms(reset))
  else
    redis.call('SET', key, state_encode(a, b, c), 'KEEPTTL')
  end
end

local function state_del(key)
  redis.call('DEL', key)
end

local function save_states()
  save_records()
end
