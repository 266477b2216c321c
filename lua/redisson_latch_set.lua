-- redisson_latch_set.lua: Redisson's trySetCount: set a countdown latch's count if it is
-- not set (open) already, and publish `1` (a count was set: the latch is closed).
--
-- KEYS[1]  latch counter: the name, a string
-- KEYS[2]  latch channel `redisson_countdownlatch__channel__{name}`
-- ARGV[1]  count (integer, 1 .. 2^53)
-- ARGV[2]  TTL in milliseconds: how long a latch nobody counts down stays closed. Redisson
--          writes the key without a TTL; lockwise keeps its own rule (Java ignores it).
-- ARGV[3]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
--
-- Returns  1 set; 0 already set (the count is left as it is, nothing is published)
if redis.call('exists', KEYS[1]) == 1 then
    return 0
end
redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
-- pcall: the SET has run and is not rolled back, so a refused publish (ACL) must not turn
-- it into an error (the message only closes Java's local latch, which re-reads the count).
redis.pcall(ARGV[3] == 'spublish' and 'spublish' or 'publish', KEYS[2], '1')
return 1
