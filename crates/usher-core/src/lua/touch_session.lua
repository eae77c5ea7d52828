-- The booking service saw activity in a session: a sliding session is extended to now + TTL,
-- never past its token's cap; other sessions keep their expiry.
-- A touch of an active session is an arrival too (prelude.lua `arrive`).
-- KEYS: meta, active, unarrived, arrivals   ARGV: place, now ms, the token's cap ms (its exp)
-- Returns {SESSION_ACTIVE, expiry ms} (the new one) while the session is active, else
-- {SESSION_ENDED}.
local now = tonumber(ARGV[2])
local exp = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not exp or tonumber(exp) <= now then return {SESSION_ENDED} end
exp = tonumber(exp)
arrive(KEYS[1], KEYS[3], KEYS[4], ARGV[1])
local ttl_ms, sliding = session_limits(KEYS[1])
if sliding then
  local slid = math.min(now + ttl_ms, tonumber(ARGV[3]))
  if slid > exp then
    exp = slid
    redis.call('ZADD', KEYS[2], 'XX', exp, ARGV[1])
  end
end
return {SESSION_ACTIVE, fmt(exp)}
