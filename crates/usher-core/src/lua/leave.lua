-- A browser leaves the line (or gives up its admitted session).
-- KEYS: waiting, active, tokens, away, meta, ended
-- ARGV: place, now ms
-- Returns {LEAVE_LEFT, gateway index} when a waiting place was removed, {LEAVE_RELEASED} when
-- an admitted session was released, {LEAVE_NOT_FOUND} when there was nothing to remove.
-- A released session ends like a booking service's release (end_session.lua): its capacity
-- slot frees at once and it is remembered in `ended`, so a resume hears `session_ended`.
local found = find_member(KEYS[1], ARGV[1])
if found then
  redis.call('ZREM', KEYS[1], found)
  redis.call('ZREM', KEYS[4], ARGV[1])
  return {LEAVE_LEFT, member_gateway(found)}
end
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  local _, _, max_ms = session_limits(KEYS[5])
  end_sessions(KEYS[2], KEYS[3], KEYS[6], {ARGV[1]}, tonumber(ARGV[2]), max_ms)
  return {LEAVE_RELEASED}
end
return {LEAVE_NOT_FOUND}
