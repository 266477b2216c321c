-- force_unlock.lua: delete a lock whoever holds it and wake its waiters.
--
-- KEYS[1]  lock hash
-- KEYS[2]  unlock channel
-- ARGV[1]  message to publish (the calling client's id)
-- ARGV[2]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
--
-- Returns  1 the lock existed and was deleted; 0 it was not locked
if redis.call('del', KEYS[1]) == 1 then
    redis.call(ARGV[2] == 'spublish' and 'spublish' or 'publish', KEYS[2], ARGV[1])
    return 1
end
return 0
