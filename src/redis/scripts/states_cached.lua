-- sluice: how the algorithms keep states held in a string (the meter, the interval bucket, the fixed
-- and sliding windows), for the scripts that decide several limits or calls: each is read at most
-- once per script and written once, at its end (save_states()). A script that decides many times
-- for one hot key, as many.lua does under load, then costs Redis one GET and one SET, not one of
-- each per decision; a call into Redis costs about as much as the decision itself. The one-limit
-- scripts use states_direct.lua, which has the same functions. One of the two comes first in
-- every script (see embed_scripts.cmake).

local STATES = {}  -- key -> its value as the script has it, false when none
local WRITES = {}  -- key -> {value or false, PX ttl or nil to keep the TTL, deleted on the way}

local function state_get(key)
  local v = STATES[key]
  if v == nil then
    v = redis.call('GET', key)
    STATES[key] = v
  end
  return v
end

-- ttl: milliseconds as for PX (a decimal string), or nil to keep the key's TTL.
local function state_set(key, value, ttl)
  STATES[key] = value
  local w = WRITES[key]
  if not w then
    w = {}
    WRITES[key] = w
  end
  w[1] = value
  if ttl then w[2] = ttl end
end

local function state_del(key)
  STATES[key] = false
  WRITES[key] = {false, nil, true}
end

-- Leaves what the writes in sequence would have left: a TTL set last holds; a value set after a
-- delete, with its TTL kept, has none.
local function save_states()
  for key, w in pairs(WRITES) do
    if not w[1] then
      redis.call('DEL', key)
    elseif w[2] then
      redis.call('SET', key, w[1], 'PX', w[2])
    elseif w[3] then
      redis.call('SET', key, w[1])
    else
      redis.call('SET', key, w[1], 'KEEPTTL')
    end
  end
end
