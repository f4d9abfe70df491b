---------------------------------------------------------------------------------------------------
-- The start of each function of the Redis 7 function library (see embed_scripts.cmake). A library
-- is loaded once and its functions called many times, so what the files above keep for one script
-- call (the states read and to write, the leases, what to save at the end, the pinned flag) is made
-- anew here at each call, as a script's run makes it; and KEYS and ARGV, a script's globals, are a
-- function's arguments.
local function begin(keys, args)
  KEYS, ARGV = keys, args
  PINNED = false
  SAVE_LATER = {}
  STATES, WRITES = {}, {}
  LEASES = {}
end
