-- unlock.lua: release one hold of a lock of any kind (RLock, FencedLock, FairLock, MultiLock
-- members, a RedLock node); the last hold deletes the lock, publishes a wakeup on its channel
-- and, when a fair queue exists for the name, hands the lock to the head of that queue (or
-- wakes it). That last part,
-- lua/fair_queue.lua's helpers and lua/unlock_fair.lua, is appended after this file
-- (src/wire/scripts.rs) and reached only when the queue exists: a `local function` costs
-- Redis a closure on every call that reaches it.
--
-- KEYS[1]  lock hash, shared by every kind of this name
-- KEYS[2]  unlock channel (same hash tag as KEYS[1])
-- KEYS[3]  fair queue (see lua/fair_queue.lua); usually absent
-- KEYS[4]  fair queue deadlines
-- ARGV[1]  owner field
-- ARGV[2]  message to publish: the releasing client's id (lets that client skip its own
--          echo: it already woke its local waiters)
-- ARGV[3]  expected hold count before the release, or 0 for "any". Used to settle an
--          acquire or release whose reply was lost: release only while the count is the
--          one the caller read, never a hold the caller did not count.
-- ARGV[4]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
-- ARGV[5]  per-waiter channel prefix of the fair queue: waiter w listens on ARGV[5] .. ':' .. w
-- ARGV[6]  optional: the handoff record ("!<waiter id>", lua/fair_queue.lua's hand_over) of
--          the hold being released, removed from KEYS[4]: a fair lock's hold that was handed
--          over and taken on the message, before its confirmation (lua/fair_confirm.lua)
--          removed the record. Removals never need a TTL raised; an emptied set is gone.
--
-- A fair waiter that asked for a handoff is given the lock here and told 'grant:<n>'; any
-- other is woken with 'wake' (lua/fair_queue.lua's hand_over; never a client's id, so a head
-- in the releasing client hears it too). When the owner holds nothing (-1) and the lock is
-- free, a stuck queue head is served as well. Looking for the queue costs one EXISTS, paid only
-- by a marked last release or a release of nothing (see the waiter mark below).
--
-- The field "waiting" of the lock hash is the waiter mark: every attempt that finds the lock
-- held by another owner and may wait for this release sets it (lua/lock_contended.lua with a
-- claim queue, lua/fenced_lock.lua, lua/fair_lock.lua), and so does a fair handoff or a fair
-- head that leaves waiters behind (lua/fair_queue.lua's hand_over, lua/fair_lock.lua). It
-- lives and dies with the hold (same key, same TTL, deleted by the last release). A last
-- release of an unmarked hold is an HMGET and a DEL: nothing is published and no fair queue
-- is looked at, because no attempt found the lock taken while this hold existed (a waiter's
-- re-check after it subscribes is such an attempt, so a wakeup is never lost to it).
--
-- Returns  n > 0  released one hold, n holds remain (TTL unchanged)
--          0      released the last hold: lock deleted, waiters woken if it was marked
--          -1     not held by this owner (expired, force-unlocked, or never taken)
--          -2     hold count differs from ARGV[3]: nothing done
local lock = KEYS[1]
local pub = ARGV[4] == 'spublish' and 'spublish' or 'publish'

if ARGV[6] then
    redis.call('zrem', KEYS[4], ARGV[6])
end
local result
-- The owner's count and the waiter mark in one read (see "waiting" below).
local got = redis.call('hmget', lock, ARGV[1], 'waiting')
local holds = got[1]
if not holds then
    result = -1
else
    holds = tonumber(holds)
    local expected = tonumber(ARGV[3])
    if expected > 0 and holds ~= expected then
        return -2
    end
    if holds > 1 then
        return redis.call('hincrby', lock, ARGV[1], '-1')
    end
    -- The last hold: DEL alone (no HINCRBY to 0 first), one command fewer on the common path.
    redis.call('del', lock)
    if not got[2] then
        -- Unmarked: no attempt found this hold taken since it was taken, so nobody waits
        -- for its release on the channel, and no fair queue waits behind it.
        return 0
    end
    -- pcall: the DEL has run and is not rolled back, so a refused publish (ACL) must not turn
    -- a done unlock into an error; waiters still see the lock free at their TTL bound.
    redis.pcall(pub, KEYS[2], ARGV[2])
    result = 0
end
if redis.call('exists', KEYS[3]) == 0 then
    return result
end
