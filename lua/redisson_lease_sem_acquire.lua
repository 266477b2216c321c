-- redisson_lease_sem_acquire.lua: Redisson's RPermitExpirableSemaphore acquire: reclaim up
-- to k expired permits, then take k permits, each under its own id with the same expiry, if
-- k are available.
--
-- KEYS[1]  the name (available permits); KEYS[2] `{name}:timeout`; KEYS[3] channel
--          `redisson_sc:{name}` (see redisson_lease_sem_prelude.lua)
-- ARGV[1]  k, the number of permits (1 .. 1000)
-- ARGV[2]  lease in ms (1 .. 2^53); the expiry now + lease is capped at NEVER
-- ARGV[3]  idle TTL in ms (see lsem_touch)
-- ARGV[4]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
-- ARGV[5]  now: the client's clock in ms (Redisson's scores are client time)
-- ARGV[6..5+k]  the k new permit ids, 16 raw bytes each
--
-- Publishes the available count after a reclaim that freed permits (as Redisson does, even
-- when this call then takes them).
--
-- Returns  the reply shapes of lease_sem_acquire.lua:
--          {1, available}         granted; `available` is what is left
--          {0, available, wait}   not enough permits (unset: available 0); `wait` is how long
--                                 in ms a waiter may sleep before looking again (see
--                                 lsem_earliest; negative: no bound known)
local k = tonumber(ARGV[1])
local now = tonumber(ARGV[5])
local freed, avail = lsem_reclaim(now, k)
if freed > 0 then
    lsem_publish(ARGV[4], avail)
end
if avail >= k then
    local expiry = fmt(math.min(now + tonumber(ARGV[2]), NEVER))
    redis.call('decrby', KEYS[1], k)
    for i = 6, 5 + k do
        redis.call('zadd', KEYS[2], expiry, ARGV[i])
    end
    lsem_touch(now, tonumber(ARGV[3]))
    return {1, avail - k}
end
if freed > 0 then
    lsem_touch(now, tonumber(ARGV[3]))
end
return {0, math.max(avail, 0), lsem_earliest(now)}
