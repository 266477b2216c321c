-- redisson_semaphore_drain.lua: Redisson's drainPermits: take every available permit at
-- once (the key is left holding 0).
--
-- KEYS[1]  semaphore key: the name, a string (see redisson_semaphore_prelude.lua)
-- ARGV[1]  idle TTL in milliseconds (a drain that took permits raises the TTL to this)
--
-- Returns  the number of permits taken (0 when none were available; a negative count is
--          left as it is). Nothing is published, as in Redisson.
-- GET first: a key of another type fails here (WRONGTYPE) before anything is written.
local available = tonumber(redis.call('get', KEYS[1]) or 0)
if not available then
    return redis.error_reply('ERR semaphore ' .. KEYS[1] .. ' does not hold an integer')
end
if available <= 0 then
    return 0
end
-- DECRBY rather than SET: it keeps the key's TTL, which sem_touch then only raises.
redis.call('decrby', KEYS[1], available)
sem_touch(KEYS[1], ARGV[1])
return available
