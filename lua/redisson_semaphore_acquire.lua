-- redisson_semaphore_acquire.lua: Redisson's tryAcquire: take k permits if the key exists
-- and holds at least k (a missing key is 0 permits).
--
-- KEYS[1]  semaphore key: the name, a string (see redisson_semaphore_prelude.lua)
-- ARGV[1]  permits wanted k (integer, 1 .. 2^53)
-- ARGV[2]  idle TTL in milliseconds (a grant raises the key's TTL to at least this)
--
-- Returns  the reply shapes of semaphore_acquire.lua, with the available count standing
--          for the version (Redisson's format keeps none):
--          {1, left, left}                  granted; left = permits still available
--          {0, available, available, pttl}  not enough permits (nothing changed)
--          {0, 0, 0, -2}                    the semaphore does not exist
-- GET first: a key of another type fails here (WRONGTYPE) before anything is written.
local value = redis.call('get', KEYS[1])
if not value then
    return {0, 0, 0, -2}
end
local available = tonumber(value)
if not available then
    return redis.error_reply('ERR semaphore ' .. KEYS[1] .. ' does not hold an integer')
end
local k = tonumber(ARGV[1])
if available < k then
    return {0, available, available, redis.call('pttl', KEYS[1])}
end
local left = redis.call('decrby', KEYS[1], k)
sem_touch(KEYS[1], ARGV[2])
return {1, left, left}
