-- force_unlock.lua: delete a lock whoever holds it and wake its waiters.
--
-- KEYS[1]  lock hash
-- KEYS[2]  unlock channel
-- ARGV[1]  message to publish (the calling client's id)
--
-- Returns  1 the lock existed and was deleted; 0 it was not locked
if redis.call('del', KEYS[1]) == 1 then
    redis.call('publish', KEYS[2], ARGV[1])
    return 1
end
return 0
