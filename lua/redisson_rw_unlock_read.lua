-- redisson_rw_unlock_read.lua: release one read hold of a read-write lock in Redisson's
-- format (KeyLayout::Redisson), RReadWriteLock's read unlock in its effects; see
-- lua/redisson_rw_read.lua for the hash and the timeout keys. No unlock latch: a release
-- whose reply was lost is settled by ARGV[3], as lua/redisson_unlock.lua.
--
-- KEYS[1]  the lock hash `<name>`
-- KEYS[2]  the channel `redisson_rwlock:{<name>}`
-- ARGV[1]  owner field (the reader's)
-- ARGV[2]  message to publish: `0` (Redisson's unlock message: one waiter per client wakes)
-- ARGV[3]  expected hold count before the release, or 0 for "any" (as lua/unlock.lua)
-- ARGV[4]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
-- ARGV[5]  timeout key prefix: `{<name>}`, or `<name>` when the name contains `{`
--
-- The hold's timeout key (the highest) is deleted. If other fields are left, the hash lives
-- on with the longest TTL left among every holder's timeout keys (so an expired reader's
-- hold ends with it); when none is left it is deleted, unless a writer holds it (mode
-- 'write': then its TTL is only raised). Deleting the hash publishes ARGV[2] on KEYS[2], as
-- a release of a lock without `mode` does (Redisson's).
--
-- Returns  n > 0  released one hold, n read holds of this owner remain
--          0      released this owner's last read hold
--          -1     not held by this owner (expired, force-unlocked, or never taken)
--          -2     hold count differs from ARGV[3]: nothing done
local lock, owner = KEYS[1], ARGV[1]
--#include redisson_rw_mode.lua
local hash, field = lock, owner
--#include release_count.lua
local left = redis.call('hincrby', lock, owner, -1)
if left == 0 then
    redis.call('hdel', lock, owner)
end
redis.call('del', ARGV[5] .. ':' .. owner .. ':rwlock_timeout:' .. (left + 1))
if redis.call('hlen', lock) > 1 then
    local longest = -3
    local all = redis.call('hgetall', lock)
    for i = 1, #all, 2 do
        local count = all[i] ~= 'mode' and tonumber(all[i + 1])
        if count then
            for n = count, 1, -1 do
                local key = ARGV[5] .. ':' .. all[i] .. ':rwlock_timeout:' .. n
                longest = math.max(longest, redis.call('pttl', key))
            end
        end
    end
    if longest > 0 then
        if mode == 'read' or redis.call('pttl', lock) < longest then
            redis.call('pexpire', lock, longest)
        end
        return left
    end
    if mode == 'write' then
        return left
    end
end
redis.call('del', lock)
-- pcall: the DEL has run and is not rolled back (see lua/redisson_unlock.lua).
redis.pcall(pub, KEYS[2], ARGV[2])
return left
