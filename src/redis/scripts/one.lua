-- acquire_@ALG@: one limit of one algorithm, the common case, with only that algorithm's code (every
-- function a script defines is made anew on each call). ARGV[1]: the pinned time ("" for Redis
-- TIME); then the algorithm's ARGV without the refund value. Returns the six integers of
-- decision().
PINNED = ARGV[1] ~= ''
local d = @ALG@_decide(KEYS, @PARAMS@_params(ARGV, 2), now_us(ARGV[1]))
save_states()
return d
