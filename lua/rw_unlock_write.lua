-- rw_unlock_write.lua: release one write hold; the last one frees the lock, wakes every
-- reader and, when no reader holds it (a writer that downgraded may), one writer per client.
--
-- KEYS[1]  writer hash W
-- KEYS[2]  readers hash R (see lua/rw_read.lua)
-- KEYS[3]  readers' channel RC
-- KEYS[4]  writers' channel WC
-- ARGV[1]  owner field
-- ARGV[2]  message to publish on WC: the releasing client's id (it skips its own echo)
-- ARGV[3]  expected hold count before the release, or 0 for "any" (see lua/unlock.lua)
-- ARGV[4]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
--
-- RC gets the payload '*': every listener wakes all its reader waiters of the channel.
--
-- Returns  n > 0  released one hold, n holds remain (TTL unchanged)
--          0      released the last write hold: W deleted, waiters woken
--          -1     not held by this owner (expired, force-unlocked, or never taken)
--          -2     hold count differs from ARGV[3]: nothing done
-- (rw_now, rw_purge_readers: lua/rw_prelude.lua, prepended)
local w, owner = KEYS[1], ARGV[1]
local hash, field = w, owner
--#include release_count.lua
holds = redis.call('hincrby', w, owner, -1)
if holds > 0 then
    return holds
end
redis.call('del', w)
local pub = ARGV[4] == 'spublish' and 'spublish' or 'publish'
-- pcall: the DEL has run; a refused publish (ACL) must not turn it into an error.
redis.pcall(pub, KEYS[3], '*')
if rw_purge_readers(KEYS[2], rw_now()) == 0 then
    redis.pcall(pub, KEYS[4], ARGV[2])
end
return 0
