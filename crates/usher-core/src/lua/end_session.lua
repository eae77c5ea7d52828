-- The booking service is done with a session: it ends at once (its slot frees) and is
-- remembered in `ended`, so a resume hears `session_ended`. Idempotent.
-- Consuming an active session is an arrival (prelude.lua `arrive`), counted before it ends.
-- KEYS: meta, active, tokens, ended, unarrived, arrivals, record (record.lua)
-- ARGV: place, now ms, '1' for a consume (a sale: see the inventory block below) or ''
-- Returns {SESSION_RELEASED, expires at ms} when an active session ended now (this call, and
-- no other, ended it: `POST /api/session/consume` rests on that), {SESSION_ENDED} when it had
-- ended already.
local exp = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not exp then return {SESSION_ENDED} end
if tonumber(exp) > tonumber(ARGV[2]) then arrive(KEYS[1], KEYS[5], KEYS[6], ARGV[1]) end
local _, _, max_ms = session_limits(KEYS[1])
end_sessions(KEYS[2], KEYS[3], KEYS[4], {ARGV[1]}, tonumber(ARGV[2]), max_ms)
if tonumber(exp) <= tonumber(ARGV[2]) then return {SESSION_ENDED} end
-- >>> record: a consumed session booked, a released one did not
record_key_at = 7
record_outcome(KEYS[1], {ARGV[1]}, ARGV[3] == '1' and record_booked or record_released)
-- <<< record
-- >>> inventory: a consumed session counts as a sold basket until the next report resets
-- the count (inventory.lua); a released one gives its basket back
if ARGV[3] == '1' and redis.call('HGET', KEYS[1], 'inventory_remaining') then
  redis.call('HINCRBY', KEYS[1], 'inventory_consumed', 1)
end
-- <<< inventory
return {SESSION_RELEASED, tonumber(exp)}
