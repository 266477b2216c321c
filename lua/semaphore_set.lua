-- semaphore_set.lua: create a semaphore with n permits, if it does not exist.
--
-- KEYS[1]  semaphore hash (see semaphore_prelude.lua)
-- KEYS[2]  semaphore channel
-- ARGV[1]  permits n (integer, 0 .. 2^53)
-- ARGV[2]  idle TTL in milliseconds
-- ARGV[3]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
-- ARGV[4]  message payload: the caller's client id (its own waiters are woken locally)
--
-- Returns  1 created; 0 it exists (nothing changed, not even the TTL)
-- HEXISTS first: a key of another type fails here (WRONGTYPE) before anything is written.
if redis.call('hexists', KEYS[1], 'p') == 1 then
    return 0
end
redis.call('hset', KEYS[1], 'p', ARGV[1])
sem_bump(KEYS[1])
redis.call('pexpire', KEYS[1], ARGV[2])
if tonumber(ARGV[1]) > 0 then
    sem_wake(KEYS[2], ARGV[3], ARGV[4])
end
return 1
