-- refund: gives back what earlier admitted decisions took (a Redis Cluster's acquire_all, when a
-- limit in another slot rejected). Same ARGV as acquire, each limit's last value being the sixth
-- value its decision returned. Returns 1, or the error of a refund that raised one (what the
-- others wrote is written, as in acquire.lua).
PINNED = ARGV[1] ~= ''
local now = now_us(ARGV[1])
local ok, err = pcall(each_limit, ARGV[2] + 0, 1, 3, function(alg, keys, p)
  if p.cost > 0 then alg[5](keys, p, now) end
end)
save_states()
if not ok then return redis.error_reply(type(err) == 'table' and err.err or tostring(err)) end
return 1
