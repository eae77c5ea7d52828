-- Store minted tokens for admissions whose sessions still exist (lease holder only).
-- KEYS: tokens, lease, active   ARGV: lease value, place, record, place, record, ...
-- Returns false when the lease is not ours, else the places whose tokens were stored (a place
-- that left in the meantime has no session any more and gets no token).
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return false end
local stored = {}
-- In chunks: one ZMSCORE and one HSET per chunk instead of two commands per place.
local i = 2
while i <= #ARGV do
  local places, values = {}, {}
  while i <= #ARGV and #places < 500 do
    places[#places + 1] = ARGV[i]; values[#values + 1] = ARGV[i + 1]
    i = i + 2
  end
  local have = redis.call('ZMSCORE', KEYS[3], unpack(places))
  local set = {}
  for j = 1, #places do
    if have[j] then
      set[#set + 1] = places[j]; set[#set + 1] = values[j]
      stored[#stored + 1] = places[j]
    end
  end
  if #set > 0 then redis.call('HSET', KEYS[1], unpack(set)) end
end
return stored
