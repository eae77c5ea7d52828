-- Read-only view of a place, for clients that poll.
-- KEYS: meta, waiting, active, tokens, ended, pre, drawn
-- ARGV: place, now ms
-- Returns what resume.lua does ({PLACE_ADMITTED, record}, {PLACE_ADMISSION_PENDING},
-- {PLACE_SESSION_ENDED}, {PLACE_QUEUE_CLOSED, reason or false}, {PLACE_GONE}), but
-- {PLACE_WAITING, position, waiting, rate or false, the bucket's rate} without the previous
-- gateway, and {PLACE_SCHEDULED, opens_at ms} in a pre-queue (a pre-queue ticket maps to its
-- drawn place through `drawn`, as in resume.lua).
local place = redis.call('HGET', KEYS[7], ARGV[1]) or ARGV[1]
local adm = admitted_state(KEYS[3], KEYS[4], KEYS[5], place, tonumber(ARGV[2]))
if adm then return adm end
local closed = closed_reply(KEYS[1])
if closed then return closed end
if find_member(KEYS[6], place) then
  return {PLACE_SCHEDULED, (redis.call('HGET', KEYS[1], 'opens_at_ms') or '0')}
end
local found = find_member(KEYS[2], place)
if not found then return {PLACE_GONE} end
local rank = redis.call('ZRANK', KEYS[2], found)
local w = redis.call('ZCARD', KEYS[2])
local rate, configured = eta_rates(KEYS[1])
return {PLACE_WAITING, rank + 1, w, rate, configured}
