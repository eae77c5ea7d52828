-- Store minted tokens for admissions whose sessions still exist (lease holder only).
-- KEYS: tokens, lease   ARGV: lease value, place, record, place, record, ...
-- Returns false when the lease is not ours, else the places whose tokens were stored (a place
-- that left in the meantime has no session any more and gets no token).
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return false end
local stored = {}
for i = 2, #ARGV, 2 do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 1 then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
    stored[#stored + 1] = ARGV[i]
  end
end
return stored
