-- A gateway puts back the places of the browsers it holds after Redis lost the queue (restarted
-- empty, flushed) and the queue was configured again. Places keep their ids (so their tickets,
-- and the order of the line: the score is the place id) and go to this gateway. A place
-- waiting already moves to this gateway; one admitted (or whose session ended) since is left
-- alone. A place parked (away) since is held here again: it goes back to `waiting`. The
-- place counter is raised above every id put back, so no id is handed out twice.
-- KEYS: meta, seq, waiting, active, ended, tokens, gws, away, parked   (one hash tag: {q:<id>})
-- ARGV: gateway index, now ms, gws ttl ms, then the place ids, in the line's order
-- Returns {RESTORE_UNKNOWN} when the queue is not configured (yet), {RESTORE_CLOSED, reason or
-- false} when it is closed, else {RESTORE_DONE, places put back, epoch or false}.
if redis.call('EXISTS', KEYS[1]) == 0 then return {RESTORE_UNKNOWN} end
local m = redis.call('HMGET', KEYS[1], 'open', 'close_reason', 'epoch')
if m[1] ~= '1' then return {RESTORE_CLOSED, m[2] or false} end
local gw = tonumber(ARGV[1])
local now = tonumber(ARGV[2])
local restored, highest = 0, 0
local add = {}
for i = 4, #ARGV do
  local place = tonumber(ARGV[i])
  if place > highest then highest = place end
  local member = find_member(KEYS[3], place)
  local parked = find_member(KEYS[9], place)
  if parked then
    redis.call('ZREM', KEYS[9], parked)
    add[#add + 1] = place; add[#add + 1] = member_of(place, gw)
  elseif member then
    if member_gateway(member) ~= ARGV[1] then
      redis.call('ZREM', KEYS[3], member)
      add[#add + 1] = place; add[#add + 1] = member_of(place, gw)
    end
  elseif not admitted_state(KEYS[4], KEYS[6], KEYS[5], ARGV[i], now) then
    add[#add + 1] = place; add[#add + 1] = member_of(place, gw)
    restored = restored + 1
  end
end
if #add > 0 then redis.call('ZADD', KEYS[3], unpack(add)) end
if #ARGV >= 4 then redis.call('ZREM', KEYS[8], unpack(ARGV, 4)) end
if highest > tonumber(redis.call('GET', KEYS[2]) or '0') then
  redis.call('SET', KEYS[2], fmt(highest))
end
redis.call('ZADD', KEYS[7], now + tonumber(ARGV[3]), ARGV[1])
return {RESTORE_DONE, restored, m[3] or false}
