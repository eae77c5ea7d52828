-- The booking service reports what is left of a queue's inventory (see src/inventory.rs).
-- The report replaces the last one, and the count of sessions consumed since it starts
-- again at 0 (the booking service counted those sales); a report above 0 ends a sold-out
-- grace (`inventory_idle_ms`), so admission resumes and the queue does not close.
-- KEYS: meta, active   ARGV: remaining ('' forgets the report), now ms
-- Returns false for an unknown queue, else {remaining, held, basket size}: the inventory as
-- the line is told of it at once (prelude.lua inventory_of); {} once forgotten (the queue
-- admits as if it never had a report).
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
if ARGV[1] == '' then
  redis.call('HDEL', KEYS[1], 'inventory_remaining', 'inventory_at_ms', 'inventory_consumed',
    'inventory_idle_ms')
  return {}
end
local now = tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'inventory_remaining', ARGV[1], 'inventory_at_ms', ARGV[2],
  'inventory_consumed', '0')
if tonumber(ARGV[1]) > 0 then redis.call('HDEL', KEYS[1], 'inventory_idle_ms') end
local inv = inventory_of(KEYS[1], KEYS[2], now)
return {math.max(inv[1], 0), inv[2], inv[3]}
