-- redisson_lease_sem_add.lua: Redisson's trySetPermits ('set': only if the name is unset)
-- and addPermits ('add': creating it when unset).
--
-- KEYS[1]  the name (available permits); KEYS[2] `{name}:timeout`; KEYS[3] channel
--          `redisson_sc:{name}` (see redisson_lease_sem_prelude.lua)
-- ARGV[1]  'set' (try_set_permits) or 'add' (add_permits)
-- ARGV[2]  n for 'set' (0 .. 2^53); delta for 'add' (-2^53 .. 2^53)
-- ARGV[3]  idle TTL in ms (a new name is written with it; see lsem_touch)
-- ARGV[4]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
-- ARGV[5]  now: the client's clock in ms
--
-- 'set' on an unset name writes n, as Redisson's trySetPermits, and leaves the set alone
-- (permits left there are counted back when they expire or are released). Otherwise expired
-- permits are reclaimed first. Publishes the new count when permits were set, added or
-- reclaimed and some are free.
--
-- Returns  {1, available}  done; `available` is the new count
--          {0, available}  refused, nothing changed but the reclaim: 'set' on a name that is
--                          set; 'add' that would make the count negative or above 2^53
local now = tonumber(ARGV[5])
local n = tonumber(ARGV[2])
if ARGV[1] == 'set' and not redis.call('get', KEYS[1]) then
    redis.call('set', KEYS[1], ARGV[2], 'px', ARGV[3])
    lsem_touch(now, tonumber(ARGV[3]))
    lsem_publish(ARGV[4], n)
    return {1, n}
end
local freed, avail = lsem_reclaim(now, nil)
local done = 0
-- Compared without forming the sum: 2^53 + 1 is not exact in Lua's doubles.
if ARGV[1] == 'add' and avail >= -n and avail <= 9007199254740992 - n then
    avail = redis.call('incrby', KEYS[1], ARGV[2])
    done = 1
end
if done + freed > 0 then
    lsem_touch(now, tonumber(ARGV[3]))
    if freed > 0 or n > 0 then
        lsem_publish(ARGV[4], avail)
    end
end
return {done, avail}
