---------------------------------------------------------------------------------------------------
-- Concurrency: a sorted set of lease ids by expiry, and a hash of lease id -> permits with the
-- fields n (permits in flight), t (latest time seen) and e (when the last lease expires; the keys'
-- TTL ends then). ARGV: cost, quota, lease timeout in us, the lease id (chosen by the client),
-- refund value (unused).
--
-- A script keeps each such state it touches as a record (LEASES), read at its first use and written
-- back at the script's end (save_later), so that a batch of calls on one hot key costs Redis a few
-- commands for the batch and one per lease given back, not a dozen per call:
-- - n, t and e, read with one HMGET and written with one HSET;
-- - the leases taken, queued and written in one ZADD and HSET;
-- - the leases taken off (given back or expired), marked `removed` and taken off the set and the
--   hash at the script's end, in one ZREM and HDEL;
-- - expired leases, looked for once per time: every lease in the set or queued expires after
--   `clean`, the latest time looked for;
-- - e, which a lease given back may leave unknown (it may have been the last to expire): then
--   `bound` is what it was, which the leases left cannot pass, so that a lease taken that expires
--   at or after it gives e without reading the set.
-- Whatever reads the set or the hash directly writes the leases taken first (leases_flush), and
-- passes over those marked removed.
--
-- Nothing is taken off the set or the hash before the script's end, after every read and every
-- lease taken: on a node migrating the slot, Redis refuses a script's access to a key it has
-- emptied (and deleted), as a key that may be on the other node, and stops the script after what it
-- wrote. A state with no lease left is deleted whole (a DEL of each key), and one with a lease taken
-- since it was forgotten keeps its keys and loses its old leases one by one.

-- An integer as a decimal string (tostring would give "1.7e+15").
local function fmt(n)
  return string.format('%d', n)
end

local function leases_params(argv, i, p)
  p = p or {}
  p.cost, p.quota, p.period, p.lease = argv[i] + 0, argv[i + 1] + 0, argv[i + 2] + 0, argv[i + 3]
  p.permits = argv[i]  -- the cost as the hash keeps it
  return p
end

local LEASES = {}  -- keys[1] -> the record of that state

-- Forgets every lease: the keys go at the script's end, unless a lease is taken again first. A
-- state with no lease left is deleted, as the local store forgets it, t included. The leases taken
-- off stay marked: those the set still holds are taken off at the end.
local function leases_forget(r)
  r.forgotten, r.dirty = true, true
  r.n, r.t, r.e, r.bound = 0, 0, nil, nil
  r.zadd, r.hset, r.added, r.fresh = {}, {}, {}, {}
end

-- Whether lease `id`, in the set, is one the state holds: not taken off, and taken since the state
-- was forgotten, if it was.
local function leases_live(r, id)
  return not r.removed[id] and (not r.forgotten or r.fresh[id])
end

-- Calls Redis command `cmd` on `key` with the values of `list`, 1000 at a time (unpack() is
-- limited by Lua's stack): pairs stay whole.
local function call_in_chunks(cmd, key, list)
  for i = 1, #list, 1000 do
    redis.call(cmd, key, unpack(list, i, math.min(i + 999, #list)))
  end
end

-- Writes the leases taken to Redis (which never empties a key).
local function leases_flush(r)
  local keys = r.keys
  if #r.zadd > 0 then
    call_in_chunks('ZADD', keys[1], r.zadd)
    r.zadd, r.added = {}, {}
  end
  if #r.hset > 0 then
    call_in_chunks('HSET', keys[2], r.hset)
    r.hset = {}
  end
end

-- When the last lease held expires, read from the set (the leases taken written first); nil for
-- none.
local function leases_last(r)
  leases_flush(r)
  local stop = -1
  while true do
    local last = redis.call('ZRANGE', r.keys[1], stop - 15, stop, 'WITHSCORES')
    if #last == 0 then return nil end
    for i = #last - 1, 1, -2 do
      if leases_live(r, last[i]) then return last[i + 1] + 0 end
    end
    stop = stop - 16
  end
end

-- The decision's reset_after: until the last lease expires, e being read when unknown. A state
-- with no lease left is forgotten, and answers 0.
local function leases_reset(r, now)
  if r.n > 0 and not r.e then r.e, r.bound = leases_last(r), nil end
  if r.n <= 0 or not r.e then
    leases_forget(r)
    return 0
  end
  return r.e - now
end

-- Writes the record back: deleted when forgotten with no lease taken since; else the leases taken,
-- n, t and e, then the leases taken off, with a TTL until e (as of the latest decision: once a
-- script, however many decisions it made on the state).
local function leases_save(r)
  if not r.dirty then return end
  leases_reset(r, r.now)
  local keys = r.keys
  if r.forgotten and next(r.fresh) == nil then
    del_each(keys)
    return
  end
  local h = r.hset
  h[#h + 1], h[#h + 2], h[#h + 3], h[#h + 4], h[#h + 5], h[#h + 6] =
    'n', fmt(r.n), 't', fmt(r.t), 'e', fmt(r.e)
  leases_flush(r)
  local gone = {}
  for id in pairs(r.removed) do gone[#gone + 1] = id end
  if #gone > 0 then
    call_in_chunks('ZREM', keys[1], gone)
    call_in_chunks('HDEL', keys[2], gone)
  end
  local ttl = ttl_ms(r.e - r.now)
  redis.call('PEXPIRE', keys[1], ttl)
  redis.call('PEXPIRE', keys[2], ttl)
  r.removed, r.dirty = {}, false
end

-- The record of the state at keys, read at its first use in the script. A state written before e
-- was kept has none: e is then unknown, with no bound.
local function leases_record(keys)
  local r = LEASES[keys[1]]
  if r then return r end
  local meta = redis.call('HMGET', keys[2], 'n', 't', 'e')
  local n = (meta[1] or 0) + 0
  local e = meta[3] and meta[3] + 0
  r = {keys = {keys[1], keys[2]}, n = n, t = (meta[2] or 0) + 0, e = e, now = 0,
       clean = -math.huge, forgotten = false, dirty = false,
       zadd = {}, hset = {}, added = {}, removed = {}, fresh = {}}
  if n > 0 and not e then r.bound = math.huge end
  LEASES[keys[1]] = r
  save_later(leases_save, r)
  return r
end

-- Marks the leases that have expired by time t taken off, reading them in batches, so that
-- unpack() stays within Lua's stack.
local function leases_expire(r, t)
  if t <= r.clean then return end
  leases_flush(r)
  local keys = r.keys
  local from = 0
  while true do
    local expired = redis.call('ZRANGEBYSCORE', keys[1], '-inf', fmt(t), 'LIMIT', from, 1000)
    local ids = {}
    for _, id in ipairs(expired) do
      if leases_live(r, id) then ids[#ids + 1] = id end
    end
    if #ids > 0 then
      local permits = redis.call('HMGET', keys[2], unpack(ids))
      for i, n in ipairs(permits) do
        r.n = r.n - (n + 0)
        r.removed[ids[i]] = true
      end
    end
    if #expired < 1000 then break end
    from = from + #expired
  end
  r.clean = t
end

-- Brings the record to time `now` (t being the latest time seen) and drops what expired by then.
local function leases_at(r, now)
  local t = max(now, r.t)
  leases_expire(r, t)
  r.t, r.now, r.dirty = t, now, true
  return t
end

-- e after a lease that expires at `expires` is taken.
local function leases_raise(r, expires)
  if r.e then
    r.e = max(r.e, expires)
  elseif not r.bound or expires >= r.bound then
    r.e, r.bound = expires, nil
  else
    r.e, r.bound = leases_last(r), nil
  end
end

local function leases_decide(keys, p, now)
  local r = leases_record(keys)
  local t = leases_at(r, now)
  local d
  while true do
    if p.cost <= p.quota - r.n then
      if p.cost > 0 then
        local expires = t + p.period
        -- A lease id given back and taken again in one script is held: the ZADD and HSET rewrite it.
        r.removed[p.lease] = nil
        if r.forgotten then r.fresh[p.lease] = true end
        -- Leases taken at one time with one timeout expire together: their score is formatted once.
        if expires ~= r.expires then r.expires, r.expires_s = expires, fmt(expires) end
        local z, h = r.zadd, r.hset
        z[#z + 1], z[#z + 2] = r.expires_s, p.lease
        h[#h + 1], h[#h + 2] = p.lease, p.permits
        r.added[p.lease] = true
        if expires <= r.clean then r.clean = expires - 1 end
        r.n = r.n + p.cost
        leases_raise(r, expires)
      end
      d = decision(true, p.quota - r.n, 0, 0)
      break
    end
    d = decision(false, max(0, p.quota - r.n), 0, 0)
    if p.cost > p.quota then
      d[2] = 1
      break
    end
    -- Once enough leases have timed out (sooner, if they are released).
    leases_flush(r)
    local gone, held = when_freed(r.n + p.cost - p.quota, function(from, n)
      local leases = redis.call('ZRANGE', keys[1], from, from + n - 1, 'WITHSCORES')
      local ids, times = {}, {}
      for i = 1, #leases, 2 do
        ids[#ids + 1] = leases[i]
        times[#times + 1] = leases[i + 1] + 0
      end
      if #ids == 0 then return times, {} end
      local counts = redis.call('HMGET', keys[2], unpack(ids))
      for i, v in ipairs(counts) do
        if leases_live(r, ids[i]) then counts[i] = v + 0 else counts[i] = 0 end
      end
      return times, counts
    end)
    if gone then
      d[4] = gone - now
      break
    end
    -- The leases left hold less than n counts: a script was cut short after taking some off the
    -- set (by a Redis that refused it a key it had emptied, before this one). n becomes what they
    -- hold, and the call is decided again, rather than fail until the state expires.
    r.n = held
  end
  d[5] = leases_reset(r, now)
  return d
end

-- Gives a lease back; 1 when it was held (timed out but not yet dropped counts as held, as in the
-- core). Only then is the state brought up to date, as a peek would.
local function leases_release(keys, now, lease)
  local r = leases_record(keys)
  if not leases_live(r, lease) then return 0 end  -- given back, or every lease held before was
  if r.added[lease] then leases_flush(r) end
  local permits = redis.call('HGET', keys[2], lease)
  if not permits then return 0 end
  r.n = r.n - (permits + 0)  -- first: a value sluice did not write raises before anything changes
  r.removed[lease] = true
  r.dirty = true
  if r.n <= 0 then
    -- The last lease given back: the state is forgotten, with no need to look for expired leases.
    leases_forget(r)
    return 1
  end
  -- The lease given back may have been the last to expire.
  if r.e then r.e, r.bound = nil, r.e end
  leases_at(r, now)
  if r.n <= 0 then leases_forget(r) end
  return 1
end

local function leases_refund(keys, p, now)
  leases_release(keys, now, p.lease)
end
