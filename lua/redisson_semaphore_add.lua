-- redisson_semaphore_add.lua: Redisson's release / addPermits: add delta permits (release:
-- delta = k > 0; add_permits: any sign), creating the semaphore if it does not exist, and
-- publish the new count.
--
-- KEYS[1]  semaphore key: the name, a string (see redisson_semaphore_prelude.lua)
-- KEYS[2]  semaphore channel `redisson_sc:{name}`
-- ARGV[1]  delta (integer, -2^53 .. 2^53, not 0)
-- ARGV[2]  idle TTL in milliseconds
-- ARGV[3]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
--
-- Publishes the available count after the change (decimal) when permits were added and
-- some are free: a removal or a count <= 0 can wake nobody.
--
-- Returns  {1, available}  done; available = permits after the change
--          {0, available}  refused, nothing changed: the result would leave -2^53 .. 2^53
-- GET first: a key of another type fails here (WRONGTYPE) before anything is written.
local available = tonumber(redis.call('get', KEYS[1]) or 0)
if not available then
    return redis.error_reply('ERR semaphore ' .. KEYS[1] .. ' does not hold an integer')
end
local delta = tonumber(ARGV[1])
-- Compared without forming the sum: 2^53 + 1 is not exact in Lua's doubles.
if available > 9007199254740992 - delta or available < -9007199254740992 - delta then
    return {0, available}
end
local after = redis.call('incrby', KEYS[1], delta)
sem_touch(KEYS[1], ARGV[2])
if delta > 0 and after > 0 then
    sem_publish(KEYS[2], ARGV[3], after)
end
return {1, after}
