-- Close a queue: nobody new may join, and every waiting place (away ones too) is dropped. Admitted sessions
-- stay valid until they expire. The place counter is kept so old tickets never name new places.
-- The reason is kept in meta (`close_reason`) for browsers that resume later; reopening
-- the queue (put_queue with open) deletes it.
-- A scheduled sale's pre-queue stays, and its draw stays pending until the queue reopens;
-- but once the draw's steps began (`drawing` exists) part of the pre-queue is in `waiting`
-- already, so the rest of it is dropped too, and the draw record so far: every entrant is
-- treated alike (all were told the queue closed), and a reopened queue draws afresh.
-- KEYS: meta, waiting, gws, away, pre, entrants, drawing, pre_away, absent, parked, then the
--       lane keys (lanes.lua: every lane's places are dropped)
-- ARGV: close reason (wire name, e.g. 'sold_out'), and for the tick's sold-out close the
--       time (ms) it is checked at
-- Returns false when the queue is unknown, else 1. Raises the settings' version.
-- Deletes before it writes: with Redis out of memory (maxmemory, noeviction) a script's first
-- write that may grow memory is refused, but once the script has written (a DEL counts) it
-- may go on, so an operator can always close a queue to free its line.
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
-- >>> inventory: the tick's sold-out close happens only while the queue is still sold out
-- past its grace (a report above 0 or an admitted session since cleared it)
if ARGV[2] and not sold_out_due(KEYS[1], tonumber(ARGV[2])) then return false end
-- <<< inventory
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[10])
lane_keys_at = 11
redis.call('DEL', KEYS[lane_keys_at], unpack(extra_lane_sets()))
if redis.call('EXISTS', KEYS[7]) == 1 then
  redis.call('DEL', KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9])
  redis.call('HDEL', KEYS[1], 'draw_began_ms', 'draw_cutoff', 'draw_absent')
end
redis.call('HSET', KEYS[1], 'open', '0', 'close_reason', ARGV[1])
record_closed(KEYS[1]) -- record
-- `open` is a setting: an editor who read it open holds a stale version now (put_settings.lua).
redis.call('HINCRBY', KEYS[1], 'settings_version', 1)
return 1
