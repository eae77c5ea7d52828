-- A gateway closes its open door for a queue once it reaches Redis again (crate::door): the
-- places it let through leave the line, so the dispatcher never admits them a second time,
-- and the period is recorded for the admin API and the dashboard. Everyone else keeps their
-- place exactly: nothing but the named places is touched.
-- KEYS: waiting, parked, away, door, meta (one hash tag: {q:<id>}), then the lane keys
--       (lanes.lua: a place outside the default lane leaves its own lane)
-- ARGV: the period as JSON ('' = places only: a late batch of a period already recorded),
--       periods kept, browsers let through (added to meta `door_admitted_total`), then the
--       place ids let through
-- Returns the number of places taken out of the line.
lane_keys_at = 6
local removed = 0
local taken = {} -- record
for i = 4, #ARGV do
  local place = ARGV[i]
  if take_from_line(place, KEYS[1], KEYS[2]) then
    removed = removed + 1
    taken[#taken + 1] = place -- record
  end
  redis.call('ZREM', KEYS[3], place)
end
-- >>> record: the places let through leave the record's line too (record_door). The gateway
-- let them through on its own clock while it could not reach Redis; the leave is stamped when
-- the door closes, on Redis' clock (no caller passes one): a time in the door's period.
if #taken > 0 then
  local t = redis.call('TIME')
  record_leave(KEYS[5], taken, tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000),
    record_door)
end
-- <<< record
-- The period is recorded for a queue that still exists: after a Redis data loss the queue's
-- meta is gone, and a write here would make a settings-less queue appear.
if ARGV[1] ~= '' and redis.call('HGET', KEYS[5], 'open') then
  redis.call('LPUSH', KEYS[4], ARGV[1])
  redis.call('LTRIM', KEYS[4], 0, tonumber(ARGV[2]) - 1)
  redis.call('HINCRBY', KEYS[5], 'door_admitted_total', tonumber(ARGV[3]))
end
return removed
