-- multi_check.lua: whether members of a multi-lock are still held by their owners (reads only).
--
-- KEYS[1..n]  lock hashes (in Cluster: all in one slot)
-- ARGV[i]     owner field expected in KEYS[i]
--
-- Returns  an array of n integers: 1 = KEYS[i] still has the field ARGV[i], 0 = gone (key
--          missing: expired, force-unlocked, wiped by a restart; or held by another owner)
local result = {}
for i = 1, #KEYS do
    result[i] = redis.call('hexists', KEYS[i], ARGV[i])
end
return result
