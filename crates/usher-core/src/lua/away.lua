-- A browser's connection dropped: keep its place for the queue's grace period.
-- KEYS: meta, waiting, away
-- ARGV: member (as this gateway holds it), place, now ms
-- Returns 0 when this gateway no longer holds the place (admitted, left, moved), 1 when the
-- place is now away until the grace period ends, 2 when the grace period is 0 and the place
-- was removed at once.
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then return 0 end
local grace = tonumber(redis.call('HGET', KEYS[1], 'grace_seconds') or '30') or 30
if grace <= 0 then
  redis.call('ZREM', KEYS[2], ARGV[1])
  return 2
end
redis.call('ZADD', KEYS[3], tonumber(ARGV[3]) + grace * 1000, ARGV[2])
return 1
