-- Browsers came back to this gateway while their away marks were being written: clears the
-- marks of the places this gateway still holds. (A disconnect is written in batches, a flush
-- every few tens of ms; a browser that resumed here in between could have its resume applied
-- before the batch's `away`, which would leave a connected place away and skipped by every
-- tick until it reconnected again.)
-- KEYS: waiting, away   (one hash tag)
-- ARGV: gateway index, place, place, ...
-- Only places whose waiting member names this gateway are affected: a place resumed at
-- another gateway meanwhile is that gateway's to mark.
-- Returns how many places are no longer away.
local gw = tonumber(ARGV[1])
local n = 0
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[1], member_of(tonumber(ARGV[i]), gw)) then
    n = n + redis.call('ZREM', KEYS[2], ARGV[i])
  end
end
return n
