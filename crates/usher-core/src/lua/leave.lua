-- A browser leaves the line (or gives up its admitted session).
-- KEYS: waiting, active, tokens, away, pre, drawn
-- ARGV: place
-- Returns {LEAVE_LEFT, gateway index, place id} when a waiting (or pre-queue) place was
-- removed, {LEAVE_RELEASED} when an admitted session was released, {LEAVE_NOT_FOUND} when
-- there was nothing to remove. A pre-queue ticket maps to its drawn place through `drawn`.
local place = redis.call('HGET', KEYS[6], ARGV[1]) or ARGV[1]
local pre = find_member(KEYS[5], place)
if pre then
  redis.call('ZREM', KEYS[5], pre)
  return {LEAVE_LEFT, member_gateway(pre), place}
end
local found = find_member(KEYS[1], place)
if found then
  redis.call('ZREM', KEYS[1], found)
  redis.call('ZREM', KEYS[4], place)
  return {LEAVE_LEFT, member_gateway(found), place}
end
if redis.call('ZREM', KEYS[2], place) == 1 then
  redis.call('HDEL', KEYS[3], place)
  return {LEAVE_RELEASED}
end
return {LEAVE_NOT_FOUND}
