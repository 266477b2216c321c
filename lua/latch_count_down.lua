-- latch_count_down.lua: count a countdown latch down by one; at zero the latch opens: its
-- key is deleted and every waiter is woken.
--
-- KEYS[1]  latch counter (a string)
-- KEYS[2]  latch channel
-- ARGV[1]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
--
-- The wakeup's payload is '*', which tells every listener to wake all its waiters of the
-- channel, not one. The TTL is left as it is.
--
-- Returns  n > 0  the count left
--          0      the latch is open (opened by this call, or it was not set)
if redis.call('exists', KEYS[1]) == 0 then
    return 0
end
local left = redis.call('decr', KEYS[1])
if left > 0 then
    return left
end
redis.call('del', KEYS[1])
-- pcall: the DEL has run and is not rolled back, so a refused publish (ACL) must not turn
-- a done count-down into an error; waiters still see the latch open at their bound.
redis.pcall(ARGV[1] == 'spublish' and 'spublish' or 'publish', KEYS[2], '*')
return 0
