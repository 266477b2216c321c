-- latch_set.lua: set a countdown latch's count, if it is not set (open) already.
--
-- KEYS[1]  latch counter (a string)
-- ARGV[1]  count (integer, 1 .. 2^53)
-- ARGV[2]  TTL in milliseconds: how long a latch nobody counts down stays closed
--
-- Returns  1 set; 0 already set (the count is left as it is)
if redis.call('exists', KEYS[1]) == 1 then
    return 0
end
redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
return 1
