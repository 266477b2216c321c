-- lease_sem_acquire.lua: take k permits, each under its own id with the same lease, if k
-- are available (after lease_sem_common.lua's purge of expired leases).
--
-- KEYS[1]  available permits; KEYS[2] leases; KEYS[3] channel (see lease_sem_common.lua)
-- ARGV[1]  k, the number of permits (1 .. 1000)
-- ARGV[2]  lease in ms (1 .. 2^53)
-- ARGV[3]  idle TTL in ms of the count key (see touch())
-- ARGV[4]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
-- ARGV[5]  wakeup payload (the client's id: its own listener skips it)
-- ARGV[6..5+k]  the k new permit ids
--
-- Expired leases freed by this call and left over after it are announced on the channel.
--
-- Returns  {1, available}         granted; `available` is what is left
--          {0, available, wait}   not enough permits (the semaphore is unset: available 0);
--                                 `wait` is how long in ms a waiter may sleep before
--                                 looking again (see earliest(); negative: no bound known)
local k = tonumber(ARGV[1])
local now = now_ms()
local freed, avail = purge(now)
if avail and avail >= k then
    local deadline = fmt(now + tonumber(ARGV[2]))
    redis.call('decrby', KEYS[1], k)
    for i = 6, 5 + k do
        redis.call('zadd', KEYS[2], deadline, ARGV[i])
    end
    touch(now, tonumber(ARGV[3]))
    if freed > 0 and avail > k then
        wake(ARGV[4], ARGV[5])
    end
    return {1, avail - k}
end
avail = avail or 0
if freed > 0 then
    touch(now, tonumber(ARGV[3]))
    if avail > 0 then
        wake(ARGV[4], ARGV[5])
    end
end
return {0, avail, earliest(now)}
