-- Take new places at the tail of a queue: one for each of a batch of joins (a gateway sends
-- the joins that arrived while its previous call for the queue was under way as one call).
-- KEYS: meta, seq, waiting, gws, pre   (one hash tag: {q:<id>})
-- ARGV: gateway index, now ms, gws ttl ms, n (places to take, 1..JOIN_BATCH_MAX)
-- Returns {PLACE_QUEUE_CLOSED} when the queue is closed or unknown, else
-- {PLACE_WAITING, last place, waiting, rate or false, admit_per_second}: the places taken are
-- last - n + 1 .. last, in the order of the batch, and the last of them is at position `waiting`;
-- or {PLACE_SCHEDULED, last, opens_at ms} when they went to a scheduled sale's pre-queue.
if redis.call('HGET', KEYS[1], 'open') ~= '1' then return {PLACE_QUEUE_CLOSED} end
local n = tonumber(ARGV[4])
local gw = tonumber(ARGV[1])
-- Scheduled sale: while its draw is pending, places go to the pre-queue, which the draw puts
-- in line in a random order (draw.lua); nobody joins `waiting` ahead of it.
if redis.call('HGET', KEYS[1], 'draw') == 'pending' then
  local last = redis.call('INCRBY', KEYS[2], n)
  local pre = {}
  for seq = last - n + 1, last do
    pre[#pre + 1] = seq
    pre[#pre + 1] = member_of(seq, gw)
  end
  redis.call('ZADD', KEYS[5], unpack(pre))
  return {PLACE_SCHEDULED, last, (redis.call('HGET', KEYS[1], 'opens_at_ms') or '0')}
end
local last = redis.call('INCRBY', KEYS[2], n)
local args = {}
for seq = last - n + 1, last do
  args[#args + 1] = seq
  args[#args + 1] = member_of(seq, gw)
end
redis.call('ZADD', KEYS[3], unpack(args))
redis.call('ZADD', KEYS[4], tonumber(ARGV[2]) + tonumber(ARGV[3]), ARGV[1])
local w = redis.call('ZCARD', KEYS[3])
local m = redis.call('HMGET', KEYS[1], 'rate', 'admit_per_second')
return {PLACE_WAITING, last, w, m[1], m[2]}
