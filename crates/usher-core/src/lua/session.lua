-- Whether an admitted place's session is still active, for the booking service.
-- The first check of an active session is its arrival (no-shows: prelude.lua `arrive`).
-- KEYS: active, meta, unarrived, arrivals   ARGV: place, now ms
-- Returns {SESSION_ACTIVE, expiry ms} while it is, {SESSION_ENDED} once it was released or
-- expired (or never existed: a genuine token always had a session).
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if exp and tonumber(exp) > tonumber(ARGV[2]) then
  arrive(KEYS[2], KEYS[3], KEYS[4], ARGV[1])
  return {SESSION_ACTIVE, exp}
end
return {SESSION_ENDED}
