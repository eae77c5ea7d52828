-- Browsers' connections dropped: keep their places for the queue's grace period.
-- KEYS: meta, waiting, away, parked, then the lane keys (lanes.lua: a place outside the
--       default lane moves between its own lane's zsets)
-- ARGV: gateway index, now ms, place, place, ...
-- Only places this gateway still holds are affected (not admitted, left or resumed elsewhere).
-- An away place leaves `waiting` for `parked` (same member, same score: its spot in line), so
-- the tick never reads it, and `away` holds the end of its grace period; resume.lua (or
-- back.lua) puts it back where it stood. A place parked already keeps its deadline.
-- With a grace period of 0 the places are removed at once.
-- Returns how many places are now away (or were removed).
lane_keys_at = 5
local grace = tonumber(redis.call('HGET', KEYS[1], 'grace_seconds') or '300') or 300
local gw = tonumber(ARGV[1])
local until_ms = tonumber(ARGV[2]) + grace * 1000
local n = 0
local went = {} -- record
for i = 3, #ARGV do
  local member = member_of(tonumber(ARGV[i]), gw)
  local waiting, parked = place_sets(ARGV[i], KEYS[2], KEYS[4])
  if redis.call('ZSCORE', waiting, member) then
    redis.call('ZREM', waiting, member)
    went[#went + 1] = ARGV[i] -- record
    if grace > 0 then
      redis.call('ZADD', parked, ARGV[i], member)
      redis.call('ZADD', KEYS[3], until_ms, ARGV[i])
    else
      lane_forget({ARGV[i]})
    end
    n = n + 1
  elseif grace > 0 and redis.call('ZSCORE', parked, member) then
    n = n + 1
  end
end
record_away(KEYS[1], went) -- record
return n
