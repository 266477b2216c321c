-- redisson_semaphore_set.lua: Redisson's trySetPermits: create the semaphore with n permits
-- if it does not exist, and publish the count.
--
-- KEYS[1]  semaphore key: the name, a string (see redisson_semaphore_prelude.lua)
-- KEYS[2]  semaphore channel `redisson_sc:{name}`
-- ARGV[1]  permits n (integer, 0 .. 2^53)
-- ARGV[2]  idle TTL in milliseconds (lockwise's: the key is written with it)
-- ARGV[3]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
--
-- Publishes n (decimal) when n > 0: a count of 0 can wake nobody.
--
-- Returns  1 created; 0 it exists (nothing changed, not even the TTL)
-- GET first: a key of another type fails here (WRONGTYPE) before anything is written.
if redis.call('get', KEYS[1]) then
    return 0
end
redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
local n = tonumber(ARGV[1])
if n > 0 then
    sem_publish(KEYS[2], ARGV[3], n)
end
return 1
