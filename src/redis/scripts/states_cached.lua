-- sluice: how the algorithms keep the states held in a string (the meter, the interval bucket, the
-- fixed and sliding windows), for the scripts that decide several limits or calls: each is read
-- and parsed at most once per script, and formatted and written once, at its end (save_states()).
-- A script that decides many times for one hot key, as many.lua does under load, then costs Redis
-- one GET and one SET, not one of each per decision, and parses and formats the state once; each
-- of those costs about as much as the decision itself. The one-limit scripts use
-- states_direct.lua, which has the same functions.
--
-- state_get(key) gives the state's numbers as a table (see state_decode), or false for none; the
-- caller must not change that table, and must read what it needs from it before it sets the
-- state: state_set(key, reset, a, b[, c]) keeps the numbers in that same table (a table made per
-- decision costs more than the decision), with a TTL of `reset` microseconds (see ttl_ms), or the
-- key's TTL when reset is nil.

local STATES = {}  -- key -> its numbers as the script has them, false when none
local WRITES = {}  -- key -> {numbers or false, reset or nil to keep the TTL, deleted on the way}

local function state_get(key)
  local t = STATES[key]
  if t == nil then
    local v = redis.call('GET', key)
    t = v and state_decode(v) or false
    STATES[key] = t
  end
  return t
end

local function state_set(key, reset, a, b, c)
  local values = STATES[key]
  if values then
    values[1], values[2], values[3] = a, b, c
  else
    values = {a, b, c}
    STATES[key] = values
  end
  local w = WRITES[key]
  if not w then
    w = {}
    WRITES[key] = w
  end
  w[1] = values
  if reset then w[2] = reset end
end

local function state_del(key)
  STATES[key] = false
  WRITES[key] = {false, nil, true}
end

-- Leaves what the writes in sequence would have left: a TTL set last holds; a value set after a
-- delete, with its TTL kept, has none. Then writes back the records of save_later().
local function save_states()
  for key, w in pairs(WRITES) do
    local v = w[1]
    if not v then
      redis.call('DEL', key)
    elseif w[2] then
      redis.call('SET', key, state_encode(v[1], v[2], v[3]), 'PX', ttl_ms(w[2]))
    elseif w[3] then
      redis.call('SET', key, state_encode(v[1], v[2], v[3]))
    else
      redis.call('SET', key, state_encode(v[1], v[2], v[3]), 'KEEPTTL')
    end
  end
  save_records()
end
