---------------------------------------------------------------------------------------------------
-- Sliding log: a list of "at:count" runs, oldest first, and a meta key "total:latest". ARGV:
-- window_params, the refund value being the time the request was logged at.


local function log_entry(v)
  local at, n = string.match(v, '^(%d+):(%d+)$')
  return at + 0, n + 0
end

-- Saves total and latest with the TTL of the newest entry, the first `dropped` entries (those that
-- have left the window) trimmed off, or forgets the state when it is empty or its newest entry has
-- left the window too (a refund can leave only such entries). The entries are trimmed here, after
-- every read and the call's own entry: on a node migrating the slot, Redis refuses a script's
-- access to a key it has emptied (and deleted), as a key that may be on the other node, and stops
-- the script after what it wrote.
local function log_settle(keys, p, now, total, latest, dropped)
  local reset = 0
  if total > 0 then reset = log_entry(redis.call('LINDEX', keys[1], -1)) + p.period - now end
  if reset <= 0 then
    del_each(keys)
    return 0
  end
  if dropped > 0 then redis.call('LTRIM', keys[1], dropped, -1) end
  local ttl = ttl_ms(reset)
  redis.call('SET', keys[2], pair(total, latest), 'PX', ttl)
  redis.call('PEXPIRE', keys[1], ttl)
  return reset
end

local function log_decide(keys, p, now)
  local list = keys[1]
  local total, latest = pair_parse(redis.call('GET', keys[2]))
  total, latest = total or 0, latest or 0
  local t = max(now, latest)
  -- Count the entries that have left the window (at + period <= t): the first `dropped`.
  local dropped, batch = 0, FIRST_BATCH
  while total > 0 do
    local entries = redis.call('LRANGE', list, dropped, dropped + batch - 1)
    local drop = 0
    for _, v in ipairs(entries) do
      local at, n = log_entry(v)
      if at + p.period > t then break end
      drop = drop + 1
      total = total - n
    end
    dropped = dropped + drop
    if drop < #entries or #entries < batch then break end
    batch = BATCH
  end
  local d
  while true do
    if p.cost <= p.quota - total then
      if p.cost > 0 then
        -- The newest entry, which has left the window only if every entry has (its time is then
        -- before t).
        local last = redis.call('LINDEX', list, -1)
        local at, n = 0, 0
        if last then at, n = log_entry(last) end
        if last and at == t then
          redis.call('LSET', list, -1, pair(t, n + p.cost))
        else
          redis.call('RPUSH', list, pair(t, p.cost))
        end
        total = total + p.cost
      end
      d = decision(true, p.quota - total, 0, 0, t)
      break
    end
    d = decision(false, max(0, p.quota - total), 0, 0)
    if p.cost > p.quota then
      d[2] = 1
      break
    end
    -- Once the oldest entries holding `need` have left the window.
    local gone, held = when_freed(total + p.cost - p.quota, function(from, n)
      local times, counts = {}, {}
      for i, v in ipairs(redis.call('LRANGE', list, dropped + from, dropped + from + n - 1)) do
        local at, count = log_entry(v)
        times[i], counts[i] = at + p.period, count
      end
      return times, counts
    end)
    if gone then
      d[4] = gone - now
      break
    end
    -- The entries left hold less than total counts: a script was cut short after trimming them
    -- (by a Redis that refused it a key it had emptied, before this one). total becomes what they
    -- hold, and the call is decided again, rather than fail until the state expires.
    total = held
  end
  d[5] = log_settle(keys, p, now, total, t, dropped)
  return d
end

-- Takes the cost back off the run at `at` (the time the request was logged at). A run that would
-- leave the list empty is left to log_settle's DEL, rather than removed first.
local function log_refund(keys, p, now)
  local at = p.extra
  local total, latest = pair_parse(redis.call('GET', keys[2]))
  if not total then return end
  local list = keys[1]
  local cost = p.cost
  local len = redis.call('LLEN', list)
  local i = len - 1
  while cost > 0 and i >= 0 do
    local e_at, n = log_entry(redis.call('LINDEX', list, i))
    if e_at < at then break end
    if e_at == at then
      local take = math.min(cost, n)
      cost = cost - take
      total = total - take
      if take < n then
        redis.call('LSET', list, i, pair(e_at, n - take))
      elseif len > 1 then
        redis.call('LSET', list, i, 'x')
        redis.call('LREM', list, 1, 'x')
        len = len - 1
      end
    end
    i = i - 1
  end
  log_settle(keys, p, now, total, latest, 0)
end
