-- Forgets the browser keys of places that are over for good (browser binding; keys.rs,
-- `bound`), a slice of `bound` a call, by the replica driving the queue after its tick.
-- KEYS: meta, bound, waiting, parked, pre, active, then the lane keys (lanes.lua)
--       (one hash tag: {q:<id>})
-- ARGV: how many fields to look at (HSCAN COUNT)
-- A place is over when `place_live` (prelude.lua) says so: it left, was dropped (away past
-- its grace, or its gateway died), its queue closed, or its session ended. A live place
-- keeps its key: a resume or status poll of an admitted place with a valid session proves
-- it, and the dispatcher mints by it. Sweeping (HSCAN, its cursor kept in meta
-- `bound_cursor`) rather than deleting in every script that ends a place keeps those
-- scripts as they are and every call bounded; a whole pass over 100,000 places takes a
-- few minutes at one call a second. Keys drawn places moved (place_drawn) are in `bound`
-- under their place in line, which is what is checked.
-- Returns how many keys it forgot.
lane_keys_at = 7
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('HDEL', KEYS[1], 'bound_cursor')
  return 0
end
local scan = redis.call('HSCAN', KEYS[2], redis.call('HGET', KEYS[1], 'bound_cursor') or '0',
  'COUNT', ARGV[1])
local over = {}
for i = 1, #scan[2], 2 do
  local place = scan[2][i]
  if not place_live(KEYS[3], KEYS[4], KEYS[5], KEYS[6], place) then over[#over + 1] = place end
end
if #over > 0 then redis.call('HDEL', KEYS[2], unpack(over)) end
if scan[1] == '0' then
  redis.call('HDEL', KEYS[1], 'bound_cursor')
else
  redis.call('HSET', KEYS[1], 'bound_cursor', scan[1])
end
return #over
