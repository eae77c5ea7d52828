-- The end of a scheduled sale's draw, by the replica holding the queue's lease, after its
-- steps (draw_step.lua) placed the drawn order: the pre-queue places no step named (they
-- joined while the draw was computed or run, or their browser never got its ticket: no
-- entrant hash) follow, FIFO, and the draw is published and done.
-- KEYS: meta, seq, pre, waiting, away, drawn, draw, entrants, lease, drawing   (one hash tag)
-- ARGV: lease value, now ms
-- The gateways end the pre-queue streams at the draw (their browsers resume at once and see
-- their position), so every placed place starts away, for the grace period.
-- Returns {DRAW_LEASE_LOST}, {DRAW_NOT_PENDING} (already drawn, unscheduled or closed), or
-- {DRAW_DONE, placed FIFO, first of their place ids}.
if redis.call('GET', KEYS[9]) ~= ARGV[1] then return {DRAW_LEASE_LOST} end
local m = redis.call('HMGET', KEYS[1], 'draw', 'open', 'grace_seconds')
if m[1] ~= 'pending' or m[2] ~= '1' then return {DRAW_NOT_PENDING} end
local grace_ms = (tonumber(m[3]) or 300) * 1000
local pre = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')
local order = {}
for i = 1, #pre, 2 do order[#order + 1] = {pre[i + 1], pre[i]} end
local first = place_drawn(KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], order,
  tonumber(ARGV[2]), grace_ms)
-- UNLINK: the entrants hash (one field per entrant) is freed in the background, not while
-- this script holds Redis.
redis.call('UNLINK', KEYS[3], KEYS[8])
if redis.call('EXISTS', KEYS[10]) == 1 then
  redis.call('RENAME', KEYS[10], KEYS[7])
else
  redis.call('SET', KEYS[7], '')
end
redis.call('HSET', KEYS[1], 'draw', 'done')
return {DRAW_DONE, #order, first}
