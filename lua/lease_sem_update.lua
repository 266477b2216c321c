-- lease_sem_update.lua: give a leased permit a new lease, counted from now (longer or
-- shorter). An id that is not leased (released, expired, never ours) changes nothing.
--
-- KEYS[1]  available permits; KEYS[2] leases; KEYS[3] channel (see lease_sem_common.lua)
-- ARGV[1]  idle TTL in ms of the count key (see touch())
-- ARGV[2]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
-- ARGV[3]  wakeup payload (the client's id: its own listener skips it)
-- ARGV[4]  the new lease in ms (1 .. 2^53)
-- ARGV[5]  permit id
--
-- Returns  1 updated; 0 the id is not leased
local now = now_ms()
local freed, avail = purge(now)
local updated = 0
if redis.call('zscore', KEYS[2], ARGV[5]) then
    redis.call('zadd', KEYS[2], 'xx', fmt(now + tonumber(ARGV[4])), ARGV[5])
    updated = 1
end
if updated + freed > 0 then
    touch(now, tonumber(ARGV[1]))
end
if freed > 0 and avail and avail > 0 then
    wake(ARGV[2], ARGV[3])
end
return updated
