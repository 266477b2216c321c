-- redisson_force_unlock.lua: delete a lock in Redisson's format (KeyLayout::Redisson)
-- whoever holds it, as Redisson's forceUnlock does: DEL, and `0` on the lock channel if
-- something was deleted.
--
-- KEYS[1]  lock hash `<name>`
-- KEYS[2]  lock channel `redisson_lock__channel:{<name>}`
-- ARGV[1]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
--
-- Returns  1 the lock existed and was deleted; 0 it was not locked
local deleted = redis.call('del', KEYS[1])
if deleted == 1 then
    redis.pcall(ARGV[1] == 'spublish' and 'spublish' or 'publish', KEYS[2], '0')
end
return deleted
