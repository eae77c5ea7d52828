-- Browsers' connections dropped: keep their places for the queue's grace period.
-- KEYS: meta, waiting, away, parked
-- ARGV: gateway index, now ms, place, place, ...
-- Only places this gateway still holds are affected (not admitted, left or resumed elsewhere).
-- An away place leaves `waiting` for `parked` (same member, same score: its spot in line), so
-- the tick never reads it, and `away` holds the end of its grace period; resume.lua (or
-- back.lua) puts it back where it stood. A place parked already keeps its deadline.
-- With a grace period of 0 the places are removed at once.
-- Returns how many places are now away (or were removed).
local grace = tonumber(redis.call('HGET', KEYS[1], 'grace_seconds') or '300') or 300
local gw = tonumber(ARGV[1])
local until_ms = tonumber(ARGV[2]) + grace * 1000
local n = 0
for i = 3, #ARGV do
  local member = member_of(tonumber(ARGV[i]), gw)
  if redis.call('ZSCORE', KEYS[2], member) then
    redis.call('ZREM', KEYS[2], member)
    if grace > 0 then
      redis.call('ZADD', KEYS[4], ARGV[i], member)
      redis.call('ZADD', KEYS[3], until_ms, ARGV[i])
    end
    n = n + 1
  elseif grace > 0 and redis.call('ZSCORE', KEYS[4], member) then
    n = n + 1
  end
end
return n
