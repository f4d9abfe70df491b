---------------------------------------------------------------------------------------------------
-- Concurrency: a sorted set of lease ids by expiry, and a hash of lease id -> permits with the
-- fields n (permits in flight) and t (latest time seen). ARGV: cost, quota, lease timeout in us,
-- the lease id (chosen by the client), refund value (unused).

-- An integer as a decimal string (tostring would give "1.7e+15").
local function fmt(n)
  return string.format('%d', n)
end

local function leases_params(argv, i, p)
  p = p or {}
  p.cost, p.quota, p.period, p.lease = argv[i] + 0, argv[i + 1] + 0, argv[i + 2] + 0, argv[i + 3]
  return p
end

-- Saves in_flight and latest with the TTL of the last lease to expire, or forgets the state.
local function leases_settle(keys, now, in_flight, latest)
  local last = redis.call('ZRANGE', keys[1], -1, -1, 'WITHSCORES')
  if #last == 0 then
    redis.call('DEL', keys[1], keys[2])
    return 0
  end
  local reset = last[2] + 0 - now
  local ttl = ttl_ms(reset)
  redis.call('HSET', keys[2], 'n', fmt(in_flight), 't', fmt(latest))
  redis.call('PEXPIRE', keys[1], ttl)
  redis.call('PEXPIRE', keys[2], ttl)
  return reset
end

local function leases_load(keys, now)
  local meta = redis.call('HMGET', keys[2], 'n', 't')
  local in_flight, latest = (meta[1] or 0) + 0, (meta[2] or 0) + 0
  local t = max(now, latest)
  -- In batches, so that unpack() stays within Lua's stack.
  while true do
    local expired = redis.call('ZRANGEBYSCORE', keys[1], '-inf', fmt(t), 'LIMIT', 0, 1000)
    if #expired == 0 then break end
    local permits = redis.call('HMGET', keys[2], unpack(expired))
    for _, n in ipairs(permits) do in_flight = in_flight - (n + 0) end
    redis.call('ZREM', keys[1], unpack(expired))
    redis.call('HDEL', keys[2], unpack(expired))
  end
  return in_flight, t
end

local function leases_decide(keys, p, now)
  local in_flight, t = leases_load(keys, now)
  local d
  if p.cost <= p.quota - in_flight then
    if p.cost > 0 then
      redis.call('ZADD', keys[1], fmt(t + p.period), p.lease)
      redis.call('HSET', keys[2], p.lease, fmt(p.cost))
      in_flight = in_flight + p.cost
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
  d[5] = leases_settle(keys, now, in_flight, t)
  return d
end

-- Gives a lease back; 1 when it was held (timed out but not yet dropped counts as held, as in the
-- core). Only then is the state brought up to date, as a peek would.
local function leases_release(keys, now, lease)
  local permits = redis.call('HGET', keys[2], lease)
  if not permits or redis.call('ZREM', keys[1], lease) == 0 then return 0 end
  redis.call('HDEL', keys[2], lease)
  redis.call('HINCRBY', keys[2], 'n', -(permits + 0))
  local in_flight, t = leases_load(keys, now)
  leases_settle(keys, now, in_flight, t)
  return 1
end

local function leases_refund(keys, p, now)
  leases_release(keys, now, p.lease)
end
