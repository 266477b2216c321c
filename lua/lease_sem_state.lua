-- lease_sem_state.lua: the available and the leased permits, after returning expired ones.
--
-- KEYS[1]  available permits; KEYS[2] leases; KEYS[3] channel (see lease_sem_common.lua)
-- ARGV[1]  idle TTL in ms of the count key (see touch())
-- ARGV[2]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
-- ARGV[3]  wakeup payload (the client's id: its own listener skips it)
--
-- Returns  {available, leased}: {0, 0} for an unset semaphore
local now = now_ms()
local freed, avail = purge(now)
avail = avail or 0
if freed > 0 then
    touch(now, tonumber(ARGV[1]))
    if avail > 0 then
        wake(ARGV[2], ARGV[3])
    end
end
return {avail, redis.call('zcard', KEYS[2])}
