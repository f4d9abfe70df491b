-- refund: gives back what earlier admitted decisions took (a Redis Cluster's acquire_all, when a
-- limit in another slot rejected). Same ARGV as acquire, each limit's last value being the sixth
-- value its decision returned. Returns 1.
PINNED = ARGV[1] ~= ''
local now = now_us(ARGV[1])
each_limit(ARGV[2] + 0, 1, 3, function(alg, keys, p)
  if p.cost > 0 then alg[5](keys, p, now) end
end)
save_states()
return 1
