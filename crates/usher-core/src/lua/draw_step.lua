-- One step of a scheduled sale's draw, by the replica holding the queue's lease: the next
-- slice of the drawn order takes places at the tail of the line.
-- KEYS: meta, seq, pre, waiting, away, drawn, drawing, lease, bound, record (record.lua)
--       (one hash tag)
-- ARGV: lease value, lease ttl ms, now ms, the record's length in bytes before this step,
--       this step's pre-queue place ids in drawn order (comma-separated), their entrant
--       hashes in that order (32 raw bytes each), how many of them (the last ones) are
--       absent entrants
-- Lua has no HMAC, so the dispatcher computes the order (usher_core::draw) from the pre-queue
-- and the seed it read, and applies it in steps of a bounded size: one script holds Redis
-- for a step (milliseconds), never for the whole pre-queue (seconds at 100,000 entrants),
-- so every other queue on the same Redis keeps moving. `draw` stays `pending` until
-- draw.lua ends it: joins still go to the pre-queue, and the ticks wait. Each step appends
-- its hashes to `drawing`, the record so far, only if the record is as long as the replica
-- expects: a step sent twice (a client that re-sends a request whose reply it lost, as the
-- cluster client does) or one lost with a failed-over master makes the lengths differ, and
-- the replica reads the pre-queue and the record again instead. A replica that takes over
-- mid-draw goes on after the last hash recorded (store/draw_run.rs), so the record stays in
-- drawn order. Places of the slice that left meanwhile are skipped; their hashes stay in
-- the record.
-- Returns {DRAW_LEASE_LOST}, {DRAW_NOT_PENDING} (drawn, unscheduled or closed), {DRAW_STALE},
-- or {DRAW_DONE, placed, first new place id}.
if redis.call('GET', KEYS[8]) ~= ARGV[1] then return {DRAW_LEASE_LOST} end
redis.call('PEXPIRE', KEYS[8], ARGV[2])
local m = redis.call('HMGET', KEYS[1], 'draw', 'open', 'grace_seconds')
if m[1] ~= 'pending' or m[2] ~= '1' then return {DRAW_NOT_PENDING} end
if redis.call('EXISTS', KEYS[7]) == 0
  or redis.call('STRLEN', KEYS[7]) ~= tonumber(ARGV[4]) then
  return {DRAW_STALE}
end
local grace_ms = (tonumber(m[3]) or 300) * 1000
local order = {}
for id in string.gmatch(ARGV[5], '%d+') do
  local member = find_member(KEYS[3], id)
  if member then order[#order + 1] = {id, member} end
end
local first = place_drawn(KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[9], order,
  tonumber(ARGV[3]), grace_ms)
record_key_at = 10 -- record
record_drawn(KEYS[1], order, first)
redis.call('APPEND', KEYS[7], ARGV[6])
-- The record lists the present entrants, then the absent ones: meta `draw_absent` counts the
-- absent hashes at its end (0 or missing: all present, as a draw of the previous version).
local absent = tonumber(ARGV[7]) or 0
if absent > 0 then redis.call('HINCRBY', KEYS[1], 'draw_absent', absent) end
return {DRAW_DONE, #order, first}
