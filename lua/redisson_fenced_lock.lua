-- redisson_fenced_lock.lua: take or re-enter a fenced lock in Redisson's format
-- (KeyLayout::Redisson): RFencedLock's hash and token counter. As Redisson does, every
-- acquire that succeeds, re-entry included, issues a new token; the hash holds owner fields
-- only (no token field: Redisson's scripts read every field of a lock hash as an owner).
-- One attempt, never blocks.
--
-- KEYS[1]  lock hash `<name>`: field "<client uuid>:<task id>" -> hold count
-- KEYS[2]  token counter `redisson_lock_token:{<name>}`, written without a TTL (as Redisson
--          does: it must outlive every lock hash)
-- ARGV[1]  lease in milliseconds (integer >= 1): TTL of a new lock; on re-entry the TTL is
--          raised to at least this value, never lowered
-- ARGV[2]  owner field
--
-- Returns {1, holds, token}  acquired; holds = this owner's hold count after the call,
--                            token = the new fencing token (lua/fence_counter.lua: at least
--                            the server clock in microseconds, so tokens stay above those
--                            Redisson issued by INCR and keep rising after lost writes)
--         {0, pttl}          held by another owner; pttl = its remaining TTL in ms
--         error              as lua/fence_counter.lua (nothing written)
-- (next_fence_token: lua/fence_counter.lua, prepended)
local lease = tonumber(ARGV[1])
local free = redis.call('exists', KEYS[1]) == 0
if free or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    local token, err = next_fence_token(KEYS[2])
    if not token then
        return redis.error_reply(err)
    end
    local holds = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    if free or redis.call('pttl', KEYS[1]) < lease then
        redis.call('pexpire', KEYS[1], lease)
    end
    return {1, holds, token}
end
return {0, redis.call('pttl', KEYS[1])}
