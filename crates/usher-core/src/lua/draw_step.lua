-- One step of a scheduled sale's draw, by the replica holding the queue's lease: the next
-- slice of the drawn order takes places at the tail of the line.
-- KEYS: meta, seq, pre, waiting, away, drawn, drawing, lease   (one hash tag)
-- ARGV: lease value, now ms, this step's pre-queue place ids in drawn order (comma-separated),
--       their entrant hashes in that order (32 raw bytes each)
-- Lua has no HMAC, so the dispatcher computes the order (usher_core::draw) from the pre-queue
-- and the seed it read, and applies it in steps of a bounded size: one script holds Redis
-- for a step (milliseconds), never for the whole pre-queue (seconds at 100,000 entrants),
-- so every other queue on the same Redis keeps moving. `draw` stays `pending` until
-- draw.lua ends it: nobody is admitted (the dispatcher draws before it ticks) and joins still
-- go to the pre-queue. Each step appends its hashes to `drawing`, the record so far; a
-- replica that takes over mid-draw reads the places still in the pre-queue and goes on after
-- the last hash recorded (store/draw.rs), so the record stays in drawn order.
-- Places of the slice that left meanwhile are skipped; their hashes stay in the record.
-- Returns {DRAW_LEASE_LOST}, {DRAW_NOT_PENDING} (already drawn, unscheduled or closed), or
-- {DRAW_DONE, placed, first new place id}.
if redis.call('GET', KEYS[8]) ~= ARGV[1] then return {DRAW_LEASE_LOST} end
local m = redis.call('HMGET', KEYS[1], 'draw', 'open', 'grace_seconds')
if m[1] ~= 'pending' or m[2] ~= '1' then return {DRAW_NOT_PENDING} end
local grace_ms = (tonumber(m[3]) or 300) * 1000
local order = {}
for id in string.gmatch(ARGV[3], '%d+') do
  local member = find_member(KEYS[3], id)
  if member then order[#order + 1] = {id, member} end
end
local first = place_drawn(KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], order,
  tonumber(ARGV[2]), grace_ms)
redis.call('APPEND', KEYS[7], ARGV[4])
return {DRAW_DONE, #order, first}
