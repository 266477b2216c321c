-- lease_sem_add.lua: set the available permits (only if the semaphore is unset), or add to
-- them (creating the semaphore when unset).
--
-- KEYS[1]  available permits; KEYS[2] leases; KEYS[3] channel (see lease_sem_common.lua)
-- ARGV[1]  'set' (try_set_permits) or 'add' (add_permits)
-- ARGV[2]  n for 'set' (0 .. 2^53); delta for 'add' (-2^53 .. 2^53)
-- ARGV[3]  idle TTL in ms of the count key (see touch())
-- ARGV[4]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
-- ARGV[5]  wakeup payload (the client's id: its own listener skips it)
--
-- Returns  {1, available}  done; `available` is the new count
--          {0, available}  refused, nothing changed but the purge: 'set' on a semaphore that
--                          is set; 'add' that would make the count negative or above 2^53
local now = now_ms()
local freed, current = purge(now)
local avail = current or 0
local done = 0
if ARGV[1] == 'set' then
    if not current then
        avail = tonumber(ARGV[2])
        redis.call('set', KEYS[1], ARGV[2], 'px', ARGV[3])
        done = 1
    end
else
    local new = avail + tonumber(ARGV[2])
    if new >= 0 and new <= 9007199254740992 then
        redis.call('set', KEYS[1], fmt(new), 'keepttl')
        avail = new
        done = 1
    end
end
if done + freed > 0 then
    touch(now, tonumber(ARGV[3]))
    if avail > 0 then
        wake(ARGV[4], ARGV[5])
    end
end
return {done, avail}
