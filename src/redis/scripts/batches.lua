---------------------------------------------------------------------------------------------------
-- Reading logs and leases in batches, for the sliding log and concurrency.

-- Logs and leases are read in batches: a few first (a decision usually needs only the oldest), then
-- more.
local FIRST_BATCH, BATCH = 4, 64

-- When the oldest entries holding `need` are gone: `read(from, n)` gives the times at which entries
-- from..from+n-1 (oldest first) go, and what each holds. When they never hold that much: nil and
-- what they hold in all.
local function when_freed(need, read)
  local freed, from, batch = 0, 0, FIRST_BATCH
  while true do
    local times, counts = read(from, batch)
    if #times == 0 then return nil, freed end
    for i = 1, #times do
      freed = freed + counts[i]
      if freed >= need then return times[i] end
    end
    from, batch = from + batch, BATCH
  end
end
