-- redisson_latch_count_down.lua: Redisson's countDown: count a countdown latch down by one;
-- at zero or below the key is deleted, and reaching exactly zero publishes `0` (the latch
-- opened), which wakes every waiter, Java's and lockwise's.
--
-- KEYS[1]  latch counter: the name, a string
-- KEYS[2]  latch channel `redisson_countdownlatch__channel__{name}`
-- ARGV[1]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
--
-- The TTL is left as it is. A missing key is an open latch: nothing is written (Redisson's
-- DECR would create -1 and delete it again: the same end state).
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
if left == 0 then
    -- pcall: the DEL has run and is not rolled back, so a refused publish (ACL) must not
    -- turn a done count-down into an error; waiters still see the latch open at their bound.
    redis.pcall(ARGV[1] == 'spublish' and 'spublish' or 'publish', KEYS[2], '0')
end
return 0
