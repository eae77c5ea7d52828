-- A browser leaves the line (or gives up its admitted session).
-- KEYS: waiting, active, tokens, away
-- ARGV: place
-- Returns {1, gateway index} when a waiting place was removed, {2} when an admitted session was
-- released, {0} when there was nothing to remove.
local found = find_member(KEYS[1], ARGV[1])
if found then
  redis.call('ZREM', KEYS[1], found)
  redis.call('ZREM', KEYS[4], ARGV[1])
  return {1, member_gateway(found)}
end
if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then
  redis.call('HDEL', KEYS[3], ARGV[1])
  return {2}
end
return {0}
