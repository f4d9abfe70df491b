---------------------------------------------------------------------------------------------------
-- Concurrency: a sorted set of lease ids by expiry, and a hash of lease id -> permits with the
-- fields n (permits in flight), t (latest time seen) and e (when the last lease expires, so that a
-- decision need not read it from the set; the keys' TTL ends then). ARGV: cost, quota, lease
-- timeout in us, the lease id (chosen by the client), refund value (unused).

-- An integer as a decimal string (tostring would give "1.7e+15").
local function fmt(n)
  return string.format('%d', n)
end

local function leases_params(argv, i, p)
  p = p or {}
  p.cost, p.quota, p.period, p.lease = argv[i] + 0, argv[i + 1] + 0, argv[i + 2] + 0, argv[i + 3]
  return p
end

-- The meta fields in one HMGET: permits in flight, the latest time seen, when the last lease
-- expires (nil in a state written before that was kept: see leases_last), and `lease`'s permits
-- when a lease id is given.
local function leases_meta(keys, lease)
  local meta
  if lease then
    meta = redis.call('HMGET', keys[2], 'n', 't', 'e', lease)
  else
    meta = redis.call('HMGET', keys[2], 'n', 't', 'e')
  end
  return (meta[1] or 0) + 0, (meta[2] or 0) + 0, meta[3] and meta[3] + 0, meta[4]
end

-- When the last lease in the set expires, read from the set; nil for none.
local function leases_last(keys)
  local last = redis.call('ZRANGE', keys[1], -1, -1, 'WITHSCORES')
  return last[2] and last[2] + 0
end

-- Drops the leases that have expired by time t; returns in_flight less what they held. In batches,
-- so that unpack() stays within Lua's stack.
local function leases_expire(keys, in_flight, t)
  while true do
    local expired = redis.call('ZRANGEBYSCORE', keys[1], '-inf', fmt(t), 'LIMIT', 0, 1000)
    if #expired == 0 then break end
    local permits = redis.call('HMGET', keys[2], unpack(expired))
    for _, n in ipairs(permits) do in_flight = in_flight - (n + 0) end
    redis.call('ZREM', keys[1], unpack(expired))
    redis.call('HDEL', keys[2], unpack(expired))
  end
  return in_flight
end

-- Saves in_flight, latest and last (when the last lease expires), and a lease's permits when
-- given, with a TTL until `last` when it differs from `was` (what the keys' TTL was set for); or
-- forgets the state when no lease is left. Returns last - now, the decision's reset_after.
local function leases_settle(keys, now, in_flight, latest, last, was, lease, permits)
  if not last then
    redis.call('DEL', keys[1], keys[2])
    return 0
  end
  if lease then
    redis.call('HSET', keys[2], 'n', fmt(in_flight), 't', fmt(latest), 'e', fmt(last),
      lease, fmt(permits))
  else
    redis.call('HSET', keys[2], 'n', fmt(in_flight), 't', fmt(latest), 'e', fmt(last))
  end
  local reset = last - now
  if last ~= was then
    local ttl = ttl_ms(reset)
    redis.call('PEXPIRE', keys[1], ttl)
    redis.call('PEXPIRE', keys[2], ttl)
  end
  return reset
end

local function leases_decide(keys, p, now)
  local in_flight, latest, last = leases_meta(keys)
  local t = max(now, latest)
  in_flight = leases_expire(keys, in_flight, t)
  local was = last
  -- Every lease held expires by `last`, and the last to expire is still held while any is (it
  -- expires after every other), so `last` stays right unless none is left.
  if in_flight <= 0 then
    last = nil
  elseif not last then
    last = leases_last(keys)
  end
  local d, lease
  if p.cost <= p.quota - in_flight then
    if p.cost > 0 then
      local expires = t + p.period
      redis.call('ZADD', keys[1], fmt(expires), p.lease)
      lease = p.lease
      in_flight = in_flight + p.cost
      last = last and max(last, expires) or expires
    end
    d = decision(true, p.quota - in_flight, 0, 0)
  else
    d = decision(false, p.quota - in_flight, 0, 0)
    if p.cost > p.quota then
      d[2] = 1
    else
      -- Once enough leases have timed out (sooner, if they are released).
      local gone = when_freed(in_flight + p.cost - p.quota, function(from, n)
        local leases = redis.call('ZRANGE', keys[1], from, from + n - 1, 'WITHSCORES')
        local ids, times = {}, {}
        for i = 1, #leases, 2 do
          ids[#ids + 1] = leases[i]
          times[#times + 1] = leases[i + 1] + 0
        end
        if #ids == 0 then return times, {} end
        local counts = redis.call('HMGET', keys[2], unpack(ids))
        for i, v in ipairs(counts) do counts[i] = v + 0 end
        return times, counts
      end)
      d[4] = gone - now
    end
  end
  d[5] = leases_settle(keys, now, in_flight, t, last, was, lease, p.cost)
  return d
end

-- Gives a lease back; 1 when it was held (timed out but not yet dropped counts as held, as in the
-- core). Only then is the state brought up to date, as a peek would.
local function leases_release(keys, now, lease)
  local in_flight, latest, last, permits = leases_meta(keys, lease)
  if not permits or redis.call('ZREM', keys[1], lease) == 0 then return 0 end
  redis.call('HDEL', keys[2], lease)
  local t = max(now, latest)
  in_flight = leases_expire(keys, in_flight - (permits + 0), t)
  -- The lease given back may have been the last to expire.
  leases_settle(keys, now, in_flight, t, in_flight > 0 and leases_last(keys) or nil, last)
  return 1
end

local function leases_refund(keys, p, now)
  leases_release(keys, now, p.lease)
end
