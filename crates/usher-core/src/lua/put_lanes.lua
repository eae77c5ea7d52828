-- Set a queue's lanes (crate::lanes; lanes.lua), checking in the same call that no place is
-- lost or moved to another lane by it.
-- KEYS: meta, waiting, parked, then the lane keys (lanes.lua)   (one hash tag)
-- ARGV: the lanes in order, '<name>:<share>,...' ('' = no lanes), the default lane's name
-- Slots: the default lane takes slot 0 (the queue's own `waiting`/`parked`: with no lanes
-- before, everyone in line is in the default lane now); a lane kept keeps its slot; a new
-- lane takes the lowest free slot. Refused, nothing written:
--   {LANES_NOT_EMPTY, lane, places}  a lane removed, or one whose slot would change (it
--       becomes or stops being the default lane), still has places in line; removing lanes
--       altogether keeps the default lane's places (they are the one line again)
--   {LANES_SCHEDULED}  a scheduled sale's draw is pending: its pre-queue has no lanes
--   {LANES_UNKNOWN}    no such queue
-- Else {LANES_WRITTEN}.
lane_keys_at = 4
if redis.call('EXISTS', KEYS[1]) == 0 then return {LANES_UNKNOWN} end
if redis.call('HGET', KEYS[1], 'draw') == 'pending' then return {LANES_SCHEDULED} end
local old = lanes_of(KEYS[1])
local function count(slot)
  local w, p = lane_sets(slot, KEYS[2], KEYS[3])
  return redis.call('ZCARD', w) + redis.call('ZCARD', p)
end
local wanted = {}
for name, share in string.gmatch(ARGV[1], '([%w_-]+):(%d+)') do
  wanted[#wanted + 1] = {name = name, share = share}
end
local old_slot = {}
for _, l in ipairs(old) do old_slot[l.name] = l.slot end
local used = {[0] = true}
local new_slot = {}
for _, l in ipairs(wanted) do
  if l.name == ARGV[2] then
    new_slot[l.name] = 0
  elseif old_slot[l.name] and old_slot[l.name] ~= 0 then
    new_slot[l.name] = old_slot[l.name]
    used[old_slot[l.name]] = true
  end
end
for _, l in ipairs(wanted) do
  if new_slot[l.name] == nil then
    local s = 1
    while used[s] do s = s + 1 end
    new_slot[l.name] = s
    used[s] = true
  end
end
-- A lane removed or moved must be empty; so must a slot a lane moves into (freed above).
for _, l in ipairs(old) do
  local keeps = new_slot[l.name] == l.slot
  local dropped_default = l.slot == 0 and #wanted == 0
  if not keeps and not dropped_default then
    local n = count(l.slot)
    if n > 0 then return {LANES_NOT_EMPTY, l.name, n} end
  end
end
for _, l in ipairs(wanted) do
  local s = new_slot[l.name]
  if old_slot[l.name] ~= s and s ~= 0 and count(s) > 0 then
    return {LANES_NOT_EMPTY, l.name, count(s)}
  end
end
if #wanted == 0 then
  redis.call('HDEL', KEYS[1], 'lanes', 'lane_credit')
else
  local spec = {}
  for _, l in ipairs(wanted) do spec[#spec + 1] = l.name .. ':' .. l.share .. ':' .. new_slot[l.name] end
  redis.call('HSET', KEYS[1], 'lanes', table.concat(spec, ','))
  redis.call('HDEL', KEYS[1], 'lane_credit')
end
return {LANES_WRITTEN}
