-- Close a queue: nobody new may join, and every waiting place is dropped. Admitted sessions
-- stay valid until they expire. The place counter is kept so old tickets never name new places.
-- KEYS: meta, waiting, gws, away
-- Returns false when the queue is unknown, else 1.
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
redis.call('HSET', KEYS[1], 'open', '0')
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
return 1
