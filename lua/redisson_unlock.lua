-- redisson_unlock.lua: release one hold of a lock in Redisson's format (KeyLayout::Redisson):
-- the hash `<name>` that Redisson's RLock, RFencedLock and non-reentrant lock share. The last
-- hold deletes the hash and publishes ARGV[2] (always `0`, Redisson's UNLOCK_MESSAGE: Java
-- parses every payload on this channel as a decimal integer) on the lock channel, which wakes
-- one waiter in each Redisson client and lockwise client listening. No unlock latch: a
-- release whose reply was lost is settled by ARGV[3], the hold count the caller read, so a
-- retry never releases a hold twice.
--
-- KEYS[1]  lock hash `<name>`
-- KEYS[2]  lock channel `redisson_lock__channel:{<name>}`
-- ARGV[1]  owner field
-- ARGV[2]  message to publish: `0`
-- ARGV[3]  expected hold count before the release, or 0 for "any" (as lua/unlock.lua)
-- ARGV[4]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
--
-- Returns  n > 0  released one hold, n holds remain (TTL unchanged)
--          0      released the last hold: lock deleted, waiters woken
--          -1     not held by this owner
--          -2     hold count differs from ARGV[3]: nothing done
local hash, field = KEYS[1], ARGV[1]
--#include release_count.lua
if holds > 1 then
    return redis.call('hincrby', KEYS[1], ARGV[1], -1)
end
redis.call('del', KEYS[1])
-- pcall: the DEL has run and is not rolled back, so a refused publish (ACL) must not turn a
-- done unlock into an error; waiters still see the lock free at their TTL bound.
redis.pcall(ARGV[4] == 'spublish' and 'spublish' or 'publish', KEYS[2], ARGV[2])
return 0
