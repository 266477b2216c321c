-- redisson_lease_sem_state.lua: Redisson's availablePermits, and the leased permits, after
-- reclaiming the expired ones.
--
-- KEYS[1]  the name (available permits); KEYS[2] `{name}:timeout`; KEYS[3] channel
--          `redisson_sc:{name}` (see redisson_lease_sem_prelude.lua)
-- ARGV[1]  idle TTL in ms (see lsem_touch)
-- ARGV[2]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
-- ARGV[3]  now: the client's clock in ms
--
-- Publishes the available count when expired permits were reclaimed and some are free.
--
-- Returns  {available, leased}: {0, 0} for an unset semaphore; leased counts permits
--          without lease (NEVER) too
local now = tonumber(ARGV[3])
local freed, avail = lsem_reclaim(now, nil)
if freed > 0 then
    lsem_touch(now, tonumber(ARGV[1]))
    lsem_publish(ARGV[2], avail)
end
return {avail, redis.call('zcard', KEYS[2])}
