-- semaphore_drain.lua: take every available permit at once.
--
-- KEYS[1]  semaphore hash (see semaphore_prelude.lua)
-- ARGV[1]  idle TTL in milliseconds (a drain that took permits raises the TTL to this)
--
-- Returns  the number of permits taken (0 when none were available; a negative count is
--          left as it is)
local available = tonumber(redis.call('hget', KEYS[1], 'p') or 0)
if available <= 0 then
    return 0
end
redis.call('hset', KEYS[1], 'p', 0)
sem_touch(KEYS[1], ARGV[1])
return available
