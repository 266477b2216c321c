-- semaphore_acquire.lua: take k permits if that many are available.
--
-- KEYS[1]  semaphore hash (see semaphore_prelude.lua)
-- ARGV[1]  permits wanted k (integer, 1 .. 2^53)
-- ARGV[2]  idle TTL in milliseconds (a grant raises the key's TTL to at least this)
--
-- Returns  {1, left, version}         granted; left = permits still available
--          {0, available, version, pttl}  not enough permits (nothing changed);
--                                     {0, 0, 0, -2} when the semaphore does not exist
-- HGET first: a key of another type fails here (WRONGTYPE) before anything is written.
local p = redis.call('hget', KEYS[1], 'p')
if not p then
    return {0, 0, 0, -2}
end
local available = tonumber(p)
local version = tonumber(redis.call('hget', KEYS[1], 'v') or 0)
local k = tonumber(ARGV[1])
if available < k then
    return {0, available, version, redis.call('pttl', KEYS[1])}
end
redis.call('hincrby', KEYS[1], 'p', -k)
sem_touch(KEYS[1], ARGV[2])
return {1, available - k, version}
