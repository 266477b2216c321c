-- rw_force_unlock.lua: delete a read-write lock whoever holds it (writer, readers, waiting
-- writers' intents) and wake every waiter of both channels.
--
-- KEYS[1]  writer hash W
-- KEYS[2]  readers hash R
-- KEYS[3]  waiting writers WW
-- KEYS[4]  readers' channel RC
-- KEYS[5]  writers' channel WC
-- ARGV[1]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
--
-- Returns  1 the lock was held (W or R existed); 0 it was not
local held = redis.call('exists', KEYS[1], KEYS[2])
redis.call('del', KEYS[1], KEYS[2], KEYS[3])
local pub = ARGV[1] == 'spublish' and 'spublish' or 'publish'
-- pcall: the DEL has run; a refused publish (ACL) must not turn it into an error.
redis.pcall(pub, KEYS[4], '*')
redis.pcall(pub, KEYS[5], '*')
if held > 0 then
    return 1
end
return 0
