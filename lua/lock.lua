-- lock.lua: take or re-enter a reentrant lock (one attempt, never blocks). Its fast path:
-- the lock is taken here when it is free and unclaimed; otherwise the script goes on with
-- lua/claim.lua's helpers and lua/lock_contended.lua, appended after it (src/wire/scripts.rs).
-- A `local function` costs Redis a closure on every call that reaches it, so the helpers
-- come after the fast path, which never reaches them.
--
-- KEYS[1]  lock hash: field "<client uuid>:<task id>" -> hold count
-- ARGV[1]  lease in milliseconds (integer >= 1): TTL of a new lock; on re-entry the TTL is
--          raised to at least this value, never lowered (an inner short lease must not cut
--          short an outer watchdog hold)
-- ARGV[2]  owner field "<client uuid>:<task id>"
-- KEYS[2]  optional: the lock's overtake claim queue (lua/claim.lua, prepended); absent on
--          a RedLock node, which neither stakes nor honours claims
-- KEYS[3]  the claim queue's deadlines (with KEYS[2])
-- ARGV[3]  claim TTL in ms: > 0 queues (or renews) this owner's claim when the lock is held
--          by another owner; 0 does not (only with KEYS[2])
-- ARGV[4]  how long this owner has waited, in ms (with a claim: its place in the queue)
--
-- Returns {1, holds}     acquired; holds = this owner's hold count after the call (1 = new lock)
--         {0, pttl}      held by another owner; pttl = its remaining TTL in ms (-1 = no TTL)
--         {0, pttl}      also when free but another waiter heads the claim queue
--                        (lua/claim.lua); pttl is then the time until the head's claim lapses
--                        ({0, pttl, score} when this owner is in the queue too, or joined it)
--         {0, pttl, score}  held by another owner, and this owner is in the claim queue now
--                        (queued or renewed by this call); score = its place (server ms)
-- An attempt that finds the lock held by another owner sets the hash's waiter mark
-- "waiting" (see lua/unlock.lua), with a claim queue only (not in Redisson's layout or on a
-- RedLock node); so does the claim queue's head when it takes the lock.
local lease = tonumber(ARGV[1])
-- One EXISTS over the lock and its claim: a free, unclaimed lock (the common case) is taken
-- with three commands in all. Redis spends about as much on each command inside a script as
-- on a plain command, so the fast path is kept to the fewest.
local busy
if KEYS[2] then
    busy = redis.call('exists', KEYS[1], KEYS[2])
else
    busy = redis.call('exists', KEYS[1])
end
if busy == 0 then
    -- Strings, not numbers: Redis turns a Lua number argument into a string with printf.
    redis.call('hset', KEYS[1], ARGV[2], '1')
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {1, 1}
end
