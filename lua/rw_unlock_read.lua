-- rw_unlock_read.lua: release one read hold; the last reader to leave wakes a writer.
--
-- KEYS[1]  readers hash R (see lua/rw_read.lua)
-- KEYS[2]  writers' channel WC
-- ARGV[1]  owner field
-- ARGV[2]  message to publish: the releasing client's id (it skips its own echo)
-- ARGV[3]  expected hold count before the release, or 0 for "any" (see lua/unlock.lua)
-- ARGV[4]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
--
-- Expired readers are purged first. The owner's last hold removes its fields; when no live
-- reader is left, R is deleted and one writer per client is woken on WC.
--
-- Returns  n > 0  released one hold, n holds remain
--          0      released the owner's last read hold
--          -1     not held by this owner (expired, force-unlocked, or never taken)
--          -2     hold count differs from ARGV[3]: nothing done
-- (rw_now, rw_purge_readers: lua/rw_prelude.lua, prepended)
local r, owner = KEYS[1], ARGV[1]
local readers = rw_purge_readers(r, rw_now())
local hash, field = r, owner
--#include release_count.lua
holds = redis.call('hincrby', r, owner, -1)
if holds > 0 then
    return holds
end
redis.call('hdel', r, owner, '~' .. owner)
if readers <= 1 then
    redis.call('del', r)
    -- pcall: the release has run; a refused publish (ACL) must not turn it into an error.
    redis.pcall(ARGV[4] == 'spublish' and 'spublish' or 'publish', KEYS[2], ARGV[2])
end
return 0
