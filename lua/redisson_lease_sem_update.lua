-- redisson_lease_sem_update.lua: Redisson's updateLeaseTime: give a leased permit a new
-- expiry, now + lease (longer or shorter). An id that is not leased (released, expired,
-- never one of this semaphore's) changes nothing.
--
-- KEYS[1]  the name (available permits); KEYS[2] `{name}:timeout`; KEYS[3] channel
--          `redisson_sc:{name}` (see redisson_lease_sem_prelude.lua)
-- ARGV[1]  idle TTL in ms (see lsem_touch)
-- ARGV[2]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
-- ARGV[3]  now: the client's clock in ms
-- ARGV[4]  the new lease in ms (1 .. 2^53); the expiry is capped at NEVER
-- ARGV[5]  permit id, 16 raw bytes
--
-- Publishes the available count when expired permits were reclaimed and some are free.
--
-- Returns  1 updated; 0 the id is not leased
local now = tonumber(ARGV[3])
local freed, avail = lsem_reclaim(now, nil)
local updated = 0
if redis.call('zscore', KEYS[2], ARGV[5]) then
    local expiry = fmt(math.min(now + tonumber(ARGV[4]), NEVER))
    redis.call('zadd', KEYS[2], 'xx', expiry, ARGV[5])
    updated = 1
end
if updated + freed > 0 then
    lsem_touch(now, tonumber(ARGV[1]))
end
if freed > 0 then
    lsem_publish(ARGV[2], avail)
end
return updated
