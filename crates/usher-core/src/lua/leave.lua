-- A browser leaves the line (or gives up its admitted session).
-- KEYS: waiting, active, tokens, away, meta, ended, pre, drawn, parked, bound, then the lane
--       keys (lanes.lua: a place outside the default lane leaves its own lane)
--       (one hash tag: {q:<id>})
-- ARGV: place, now ms, then for browser binding (prelude.lua, wrong_key): '1' for a browser's
--       request ('' for the gateway's own), the key its proof was made with, the place's key
--       as the gateway knows it besides `bound` ('' = none)
-- Returns {LEAVE_LEFT, gateway index, place id} when a waiting (or pre-queue) place was
-- removed, {LEAVE_RELEASED} when an admitted session was released, {LEAVE_NOT_FOUND} when
-- there was nothing to remove, {LEAVE_WRONG_KEY} (nothing done) when a binding queue's
-- place is not the requester's to leave. A pre-queue ticket maps to its drawn place through `drawn`.
-- A released session ends like a booking service's release (end_session.lua): its capacity
-- slot frees at once and it is remembered in `ended`, so a resume hears `session_ended`.
lane_keys_at = 11
local place = redis.call('HGET', KEYS[8], ARGV[1]) or ARGV[1]
if wrong_key(KEYS[5], KEYS[10], KEYS[1], KEYS[9], KEYS[7], KEYS[2], place,
    ARGV[3] or '', ARGV[4] or '', ARGV[5] or '') then
  return {LEAVE_WRONG_KEY}
end
local pre = find_member(KEYS[7], place)
if pre then
  redis.call('ZREM', KEYS[7], pre)
  record_leave(KEYS[5], {place}, tonumber(ARGV[2]), record_left) -- record
  return {LEAVE_LEFT, member_gateway(pre), place}
end
-- A waiting place, or an away one (its browser leaves from another tab, or through the API).
local found = take_from_line(place, KEYS[1], KEYS[9])
if found then
  redis.call('ZREM', KEYS[4], place)
  record_leave(KEYS[5], {place}, tonumber(ARGV[2]), record_left) -- record
  return {LEAVE_LEFT, member_gateway(found), place}
end
if redis.call('ZSCORE', KEYS[2], place) then
  local _, _, max_ms = session_limits(KEYS[5])
  end_sessions(KEYS[2], KEYS[3], KEYS[6], {place}, tonumber(ARGV[2]), max_ms)
  record_outcome(KEYS[5], {place}, record_released) -- record
  return {LEAVE_RELEASED}
end
return {LEAVE_NOT_FOUND}
