-- semaphore_add.lua: add delta permits (release: delta = k > 0; add_permits: any sign),
-- creating the semaphore if it does not exist. Adding permits wakes waiters.
--
-- KEYS[1]  semaphore hash (see semaphore_prelude.lua)
-- KEYS[2]  semaphore channel
-- ARGV[1]  delta (integer, -2^53 .. 2^53, not 0)
-- ARGV[2]  idle TTL in milliseconds
-- ARGV[3]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
-- ARGV[4]  message payload: the caller's client id (its own waiters are woken locally)
--
-- Returns  {1, available}  done; available = permits after the change
--          {0, available}  refused, nothing changed: the result would leave -2^53 .. 2^53
-- HGET first: a key of another type fails here (WRONGTYPE) before anything is written.
local available = tonumber(redis.call('hget', KEYS[1], 'p') or 0)
local delta = tonumber(ARGV[1])
-- Compared without forming the sum: 2^53 + 1 is not exact in Lua's doubles.
if available > 9007199254740992 - delta or available < -9007199254740992 - delta then
    return {0, available}
end
local after = available + delta
redis.call('hincrby', KEYS[1], 'p', delta)
if delta > 0 then
    sem_bump(KEYS[1])
end
sem_touch(KEYS[1], ARGV[2])
if delta > 0 and after > 0 then
    sem_wake(KEYS[2], ARGV[3], ARGV[4])
end
return {1, after}
