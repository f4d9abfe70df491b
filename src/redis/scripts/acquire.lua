-- acquire: decides every limit that follows in ARGV, in order, and when any rejects gives back what
-- the others took, all in one atomic call. ARGV[1]: the pinned time ("" in production, which takes
-- Redis TIME); ARGV[2]: how many limits. Returns six integers per limit (see decision()).
PINNED = ARGV[1] ~= ''
local now = now_us(ARGV[1])
local out, admitted, all = {}, {}, true
each_limit(function(alg, keys, p)
  local d = alg[4](keys, p, now)
  for j = 1, 6 do out[#out + 1] = d[j] end
  if d[1] == 1 then
    p.extra = d[6]
    admitted[#admitted + 1] = {alg, keys, p}
  else
    all = false
  end
end)
if not all then
  for i = #admitted, 1, -1 do
    local a = admitted[i]
    if a[3].cost > 0 then a[1][5](a[2], a[3], now) end
  end
end
return out
