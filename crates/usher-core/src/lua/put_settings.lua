-- Write a queue's settings (the admin API's PUT, USHER_QUEUES_FILE) and bump their version.
-- KEYS: meta   (hash tag {q:<id>}), then, for a write of the settings, record (record.lua)
-- ARGV: expected version ('' = any: a PUT without If-Match), n (how many field/value pairs
--       follow), the n pairs to set, then the fields to delete.
-- Rules: the version check and the write are one step, so of two editors who read the same
-- version only the first writes; the second is refused and must read again. A queue stored
-- before versions existed has none and reads as version 0; a queue that does not exist has
-- no version an editor could have read.
-- Returns {SETTINGS_WRITTEN, new version} or {SETTINGS_STALE, current version}.
local current = tonumber(redis.call('HGET', KEYS[1], 'settings_version')) or 0
if ARGV[1] ~= '' then
  if redis.call('EXISTS', KEYS[1]) == 0 or tonumber(ARGV[1]) ~= current then
    return {SETTINGS_STALE, current}
  end
end
local n = tonumber(ARGV[2])
local set = {}
for i = 3, 2 + 2 * n do set[#set + 1] = ARGV[i] end
if #set > 0 then redis.call('HSET', KEYS[1], unpack(set)) end
for i = 3 + 2 * n, #ARGV do redis.call('HDEL', KEYS[1], ARGV[i]) end
-- >>> record: a record whose queue stops recording gets its retention, as at a close
if KEYS[2] then
  record_key_at = 2
  record_stopped(KEYS[1])
end
-- <<< record
return {SETTINGS_WRITTEN, redis.call('HINCRBY', KEYS[1], 'settings_version', 1)}
