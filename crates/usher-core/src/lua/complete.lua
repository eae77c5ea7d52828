-- Store minted tokens for admissions whose sessions still exist.
-- KEYS: tokens   ARGV: place, record, place, record, ...
local stored = 0
for i = 1, #ARGV, 2 do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 1 then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
    stored = stored + 1
  end
end
return stored
