-- Browsers came back to this gateway while their away marks were being written: clears the
-- marks of the places this gateway still holds, and puts each back from `parked` to its spot
-- in `waiting`. (A disconnect is written in batches, a flush every few tens of ms; a browser
-- that resumed here in between could have its resume applied before the batch's `away`,
-- which would leave a connected place parked, never admitted, until it reconnected again.)
-- KEYS: waiting, away, parked, then the lane keys (lanes.lua)   (one hash tag)
-- ARGV: gateway index, place, place, ...
-- Only places whose member names this gateway are affected: a place resumed at another
-- gateway meanwhile is that gateway's to mark.
-- Returns how many places are no longer away.
lane_keys_at = 4
local gw = tonumber(ARGV[1])
local n = 0
for i = 2, #ARGV do
  local member = member_of(tonumber(ARGV[i]), gw)
  local waiting, parked = place_sets(ARGV[i], KEYS[1], KEYS[3])
  if redis.call('ZREM', parked, member) == 1 then
    redis.call('ZADD', waiting, ARGV[i], member)
    n = n + redis.call('ZREM', KEYS[2], ARGV[i])
  elseif redis.call('ZSCORE', waiting, member) then
    n = n + redis.call('ZREM', KEYS[2], ARGV[i])
  end
end
return n
