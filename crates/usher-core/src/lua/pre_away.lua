-- Pre-queue browsers' connections dropped: record them in `pre_away`, so the draw can put
-- the entrants whose browsers are still there first (draw_begin.lua fixes the set). A
-- pre-queue place is not in `waiting`, so away.lua passes over it; the gateway's store call
-- sends the marks here when away.lua did not find them all.
-- KEYS: meta, pre, pre_away   (one hash tag)
-- ARGV: gateway index, place, place, ...
-- Only places this gateway still holds in the pre-queue are recorded (not left, drawn, or
-- resumed elsewhere), and only while the draw is pending.
-- Returns how many places were recorded.
if redis.call('HGET', KEYS[1], 'draw') ~= 'pending' then return 0 end
local gw = tonumber(ARGV[1])
local gone = {}
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[2], member_of(tonumber(ARGV[i]), gw)) then
    gone[#gone + 1] = ARGV[i]
  end
end
if #gone > 0 then redis.call('SADD', KEYS[3], unpack(gone)) end
return #gone
