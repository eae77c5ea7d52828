-- The draw of a scheduled sale, by the replica holding the queue's lease, in one atomic step:
-- every pre-queue place gets a new place id at the tail of the line, in drawn order.
-- KEYS: meta, seq, pre, waiting, away, drawn, draw, entrants, lease   (one hash tag)
-- ARGV: lease value, now ms, the drawn order (pre-queue place ids, comma-separated),
--       the published draw (their entrant hashes in that order, 32 raw bytes each)
-- Lua has no HMAC, so the dispatcher computes the order (usher_core::draw) from the pre-queue
-- and the seed it read, and this script applies it. Places of the order that left meanwhile
-- are skipped; pre-queue places the order does not name (they joined after the dispatcher
-- read the pre-queue, or their browser never got its ticket: no entrant hash) follow, FIFO.
-- New ids are `seq + 1 ..` (INCRBY), so later joins come after every one of them, and the
-- line keeps "score = place id" (keys.rs). `drawn` maps each pre-queue id to its new id.
-- The gateways end the pre-queue streams at the draw (their browsers resume at once and see
-- their position), so every placed place starts away, for the grace period: a browser that
-- is gone for good is dropped, never admitted.
-- Returns {DRAW_LEASE_LOST}, {DRAW_NOT_PENDING} (already drawn, unscheduled or closed), or
-- {DRAW_DONE, drawn, after them, first new place id}.
if redis.call('GET', KEYS[9]) ~= ARGV[1] then return {DRAW_LEASE_LOST} end
local m = redis.call('HMGET', KEYS[1], 'draw', 'open', 'grace_seconds')
if m[1] ~= 'pending' or m[2] ~= '1' then return {DRAW_NOT_PENDING} end
local now = tonumber(ARGV[2])
local grace_ms = (tonumber(m[3]) or 300) * 1000
-- The pre-queue, read once (a call per entrant would cost more than the rest of the draw).
local pre = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')
local member_of_id = {}
for i = 1, #pre, 2 do member_of_id[pre[i + 1]] = pre[i] end
local order = {}
for id in string.gmatch(ARGV[3], '%d+') do
  local member = member_of_id[id]
  if member then
    order[#order + 1] = {id, member}
    member_of_id[id] = nil
  end
end
local drawn = #order
for i = 1, #pre, 2 do
  local id = pre[i + 1]
  if member_of_id[id] then order[#order + 1] = {id, pre[i]} end
end
local n = #order
local first = tonumber(redis.call('GET', KEYS[2]) or '0') + 1
if n > 0 then
  first = redis.call('INCRBY', KEYS[2], n) - n + 1
  -- In chunks: Lua's unpack takes a few thousand values at most.
  for c = 1, n, 1000 do
    local zadd, map, away = {}, {}, {}
    for i = c, math.min(c + 999, n) do
      local new = first + i - 1
      local gw = tonumber(member_gateway(order[i][2]))
      zadd[#zadd + 1] = new; zadd[#zadd + 1] = member_of(new, gw)
      map[#map + 1] = order[i][1]; map[#map + 1] = fmt(new)
      away[#away + 1] = now + grace_ms; away[#away + 1] = fmt(new)
    end
    redis.call('ZADD', KEYS[4], unpack(zadd))
    redis.call('HSET', KEYS[6], unpack(map))
    if grace_ms > 0 then redis.call('ZADD', KEYS[5], unpack(away)) end
  end
end
redis.call('DEL', KEYS[3], KEYS[8])
redis.call('SET', KEYS[7], ARGV[4])
redis.call('HSET', KEYS[1], 'draw', 'done')
return {DRAW_DONE, drawn, n - drawn, first}
