-- redisson_rw_unlock_write.lua: release one write hold of a read-write lock in Redisson's
-- format (KeyLayout::Redisson), RReadWriteLock's write unlock in its effects; see
-- lua/redisson_rw_read.lua for the hash. No unlock latch: a release whose reply was lost is
-- settled by ARGV[3], as lua/redisson_unlock.lua.
--
-- KEYS[1]  the lock hash `<name>`
-- KEYS[2]  the channel `redisson_rwlock:{<name>}`
-- ARGV[1]  writer field `<owner>:write`
-- ARGV[2]  message to publish: `1` (Redisson's read-unlock message: every waiter wakes)
-- ARGV[3]  expected hold count before the release, or 0 for "any" (as lua/unlock.lua)
-- ARGV[4]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
--
-- The last write hold removes the writer field: with no other field left the hash is
-- deleted; otherwise the owner's own read holds remain and `mode` becomes 'read' (a
-- downgrade; the TTL is unchanged). Both publish ARGV[2] on KEYS[2] (Redisson publishes
-- only the first: the second lets waiting readers in at once instead of at the TTL). A
-- release of a lock without `mode` publishes it too, as Redisson's does.
--
-- Returns  n > 0  released one hold, n write holds remain (TTL unchanged)
--          0      released the last write hold
--          -1     not held by this owner (expired, force-unlocked, or never taken)
--          -2     hold count differs from ARGV[3]: nothing done
local lock, field = KEYS[1], ARGV[1]
--#include redisson_rw_mode.lua
if mode ~= 'write' then
    return -1
end
local hash = lock
--#include release_count.lua
local left = redis.call('hincrby', lock, field, -1)
if left > 0 then
    return left
end
redis.call('hdel', lock, field)
if redis.call('hlen', lock) <= 1 then
    redis.call('del', lock)
else
    redis.call('hset', lock, 'mode', 'read')
end
-- pcall: the writes have run and are not rolled back (see lua/redisson_unlock.lua).
redis.pcall(pub, KEYS[2], ARGV[2])
return 0
