-- force_unlock.lua: delete a lock of any kind whoever holds it and wake its waiters (those
-- on its channel; the head of its fair queue, if there is one, is handed the lock or woken:
-- lua/fair_queue.lua's hand_over). The fair queue is kept.
--
-- KEYS[1]  lock hash
-- KEYS[2]  unlock channel
-- KEYS[3]  fair queue (see lua/fair_queue.lua)
-- KEYS[4]  fair queue deadlines
-- ARGV[1]  message to publish (the calling client's id)
-- ARGV[2]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
-- ARGV[3]  per-waiter channel prefix of the fair queue
--
-- Returns  1 the lock existed and was deleted; 0 it was not locked
-- (queue, deadlines, clock, wake_fair: lua/fair_queue.lua, prepended)
local pub = ARGV[2] == 'spublish' and 'spublish' or 'publish'
local deleted = redis.call('del', KEYS[1])
if deleted == 1 then
    -- pcall: the DEL has run and is not rolled back, so a refused publish (ACL) must not
    -- turn a done unlock into an error.
    redis.pcall(pub, KEYS[2], ARGV[1])
end
wake_fair(KEYS[1], pub, ARGV[3])
return deleted
