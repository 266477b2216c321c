-- latch_set.lua: set a countdown latch's count, if it is not set (open) already.
--
-- KEYS[1]  latch counter (a string)
-- KEYS[2]  latch channel (unused: nothing waits on a latch before it is set; passed as to
--          redisson_latch_set.lua, so the client makes one call for either layout)
-- ARGV[1]  count (integer, 1 .. 2^53)
-- ARGV[2]  TTL in milliseconds: how long a latch nobody counts down stays closed
-- ARGV[3]  publish command (unused, as KEYS[2])
--
-- Returns  1 set; 0 already set (the count is left as it is)
if redis.call('exists', KEYS[1]) == 1 then
    return 0
end
redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
return 1
