-- fair_confirm.lua: a fair waiter that was handed the lock (lua/fair_queue.lua's hand_over)
-- and took it on the release's message confirms it, in the background after its lock()
-- returned: its handoff record "!<waiter id>" goes, and the lock's TTL is raised to the lease
-- (the handoff set only what was left of the waiter's queue deadline). It is the hold's first
-- renewal; it never takes a lock.
--
-- KEYS[1]  lock hash
-- KEYS[2]  unlock channel (not used here; the key layout is the same for every fair script)
-- KEYS[3]  queue: list of waiter ids, oldest first
-- KEYS[4]  deadlines: sorted set, waiter id -> deadline in server ms; handoff records
-- ARGV[1]  lease in milliseconds (integer >= 1): the TTL is raised to at least this
-- ARGV[2]  owner field
-- ARGV[3]  waiter id of the handoff
--
-- Returns  1 the owner holds the lock (TTL now at least the lease); 0 it does not (expired,
--          force-unlocked): nothing changed but the record's removal
-- (queue, deadlines, shrink: lua/fair_queue.lua, prepended)
if redis.call('zrem', deadlines, '!' .. ARGV[3]) == 1 then
    shrink()
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return 0
end
if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('pexpire', KEYS[1], ARGV[1])
end
return 1
