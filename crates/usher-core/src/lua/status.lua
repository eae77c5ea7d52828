-- Read-only view of a place, for clients that poll.
-- KEYS: meta, waiting, active, tokens, ended, pre, drawn, parked
-- ARGV: place, now ms
-- Returns what resume.lua does ({PLACE_ADMITTED, record}, {PLACE_ADMISSION_PENDING},
-- {PLACE_SESSION_ENDED}, {PLACE_QUEUE_CLOSED, reason or false}, {PLACE_GONE}), but
-- {PLACE_WAITING, position, waiting, rate or false, the bucket's rate} without the previous
-- gateway, and {PLACE_SCHEDULED, opens_at ms} in a pre-queue (a pre-queue ticket maps to its
-- drawn place through `drawn`, as in resume.lua). An away place (in `parked`) is waiting; a
-- position counts the places ahead in `waiting` and `parked` (ZCOUNT: O(log n)).
local place = redis.call('HGET', KEYS[7], ARGV[1]) or ARGV[1]
local adm = admitted_state(KEYS[3], KEYS[4], KEYS[5], place, tonumber(ARGV[2]))
if adm then return adm end
local closed = closed_reply(KEYS[1])
if closed then return closed end
if find_member(KEYS[6], place) then
  return {PLACE_SCHEDULED, (redis.call('HGET', KEYS[1], 'opens_at_ms') or '0')}
end
if not (find_member(KEYS[2], place) or find_member(KEYS[8], place)) then return {PLACE_GONE} end
local ahead = '(' .. place
local rank = redis.call('ZCOUNT', KEYS[2], '-inf', ahead) + redis.call('ZCOUNT', KEYS[8], '-inf', ahead)
local w = redis.call('ZCARD', KEYS[2]) + redis.call('ZCARD', KEYS[8])
local rate, configured = eta_rates(KEYS[1])
return {PLACE_WAITING, rank + 1, w, rate, configured}
