-- redisson_lease_sem_release.lua: Redisson's tryRelease, for several ids: return leased
-- permits by id. An id that is not leased (released already, expired, or never one of this
-- semaphore's) is not released: an expired one is reclaimed here first, as Redisson counts
-- it back and answers 0 for it.
--
-- KEYS[1]  the name (available permits); KEYS[2] `{name}:timeout`; KEYS[3] channel
--          `redisson_sc:{name}` (see redisson_lease_sem_prelude.lua)
-- ARGV[1]  idle TTL in ms (see lsem_touch)
-- ARGV[2]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
-- ARGV[3]  now: the client's clock in ms
-- ARGV[4..]  permit ids, 16 raw bytes each
--
-- Publishes the available count after the change when permits came back and some are free.
--
-- Returns  how many of the ids were leased and are now released (0 .. #ids)
local now = tonumber(ARGV[3])
local freed, avail = lsem_reclaim(now, nil)
local released = 0
for i = 4, #ARGV do
    if redis.call('zrem', KEYS[2], ARGV[i]) == 1 then
        released = released + 1
    end
end
if released > 0 then
    avail = redis.call('incrby', KEYS[1], released)
end
if released + freed > 0 then
    lsem_touch(now, tonumber(ARGV[1]))
    lsem_publish(ARGV[2], avail)
end
return released
