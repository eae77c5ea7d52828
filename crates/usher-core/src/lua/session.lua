-- Whether an admitted place's session is still active, for the booking service.
-- KEYS: active   ARGV: place, now ms
-- Returns {SESSION_ACTIVE, expiry ms} while it is, {SESSION_ENDED} once it was released or
-- expired (or never existed: a genuine token always had a session).
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if exp and tonumber(exp) > tonumber(ARGV[2]) then return {SESSION_ACTIVE, exp} end
return {SESSION_ENDED}
