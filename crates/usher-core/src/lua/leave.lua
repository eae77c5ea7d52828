-- A browser leaves the line (or gives up its admitted session).
-- KEYS: waiting, active, tokens, away
-- ARGV: place
-- Returns {LEAVE_LEFT, gateway index} when a waiting place was removed, {LEAVE_RELEASED} when
-- an admitted session was released, {LEAVE_NOT_FOUND} when there was nothing to remove.
local found = find_member(KEYS[1], ARGV[1])
if found then
  redis.call('ZREM', KEYS[1], found)
  redis.call('ZREM', KEYS[4], ARGV[1])
  return {LEAVE_LEFT, member_gateway(found)}
end
if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then
  redis.call('HDEL', KEYS[3], ARGV[1])
  return {LEAVE_RELEASED}
end
return {LEAVE_NOT_FOUND}
