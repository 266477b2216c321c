-- lease_sem_release.lua: return leased permits by id. An id that is not leased (released
-- already, expired, or never ours) changes nothing.
--
-- KEYS[1]  available permits; KEYS[2] leases; KEYS[3] channel (see lease_sem_common.lua)
-- ARGV[1]  idle TTL in ms of the count key (see touch())
-- ARGV[2]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
-- ARGV[3]  wakeup payload (the client's id: its own listener skips it)
-- ARGV[4..]  permit ids
--
-- Returns  how many of the ids were leased and are now released (0 .. #ids)
local now = now_ms()
local freed, avail = purge(now)
local released = 0
for i = 4, #ARGV do
    if redis.call('zrem', KEYS[2], ARGV[i]) == 1 then
        released = released + 1
    end
end
if released > 0 and avail then
    avail = redis.call('incrby', KEYS[1], released)
end
if released + freed > 0 then
    touch(now, tonumber(ARGV[1]))
    if avail and avail > 0 then
        wake(ARGV[2], ARGV[3])
    end
end
return released
