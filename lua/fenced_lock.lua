-- fenced_lock.lua: take or re-enter a fenced reentrant lock (one attempt, never blocks).
-- A new owner gets a new fencing token; re-entry returns the holder's current token.
--
-- KEYS[1]  lock hash, laid out like lock.lua's: field "<client uuid>:<task id>" -> hold count,
--          plus field "token" -> the holder's fencing token (decimal). No owner field can be
--          "token" (owner fields start with a uuid), so unlock.lua and renew.lua work
--          unchanged, and unlock.lua's `del` at the last release removes the token with it.
-- KEYS[2]  fencing counter (same hash tag). The only key relock writes without a TTL: it
--          must outlive every lock hash, or tokens would repeat.
-- ARGV[1]  lease in milliseconds (integer >= 1): TTL of a new lock; on re-entry the TTL is
--          raised to at least this value, never lowered
-- ARGV[2]  owner field "<client uuid>:<task id>"
--
-- Returns {1, holds, token}  acquired; holds = this owner's hold count after the call,
--                            token = the fencing token of this hold (< 2^53)
--         {0, pttl}          held by another owner; pttl = its remaining TTL in ms (-1 = none)
--         error "relock: fencing counter exhausted" when the counter reached 2^53 - 1
--
-- Tokens. A missing counter (first use, or a Redis restart without persistence) starts from
-- the server clock in microseconds since the epoch (about 1.7e15 today, below 2^53 until the
-- year 2255). Each token is then counter + 1, so tokens issued after a restart are larger
-- than those issued before it as long as the server clock never goes backwards and a lock
-- is taken fewer than a million times per second (the counter never overtakes the clock).
-- Lua numbers are doubles: the token is copied as the counter's string, never formatted
-- from a number, and stays below 2^53 so the integer reply is exact.
local MAX_TOKEN = 9007199254740991 -- 2^53 - 1

local function next_token()
    if redis.call('exists', KEYS[2]) == 0 then
        local now = redis.call('time') -- {seconds, microseconds} as strings
        redis.call('set', KEYS[2], now[1] .. string.sub('000000' .. now[2], -6))
    end
    local token = redis.call('incr', KEYS[2])
    if token > MAX_TOKEN then
        return nil
    end
    redis.call('hset', KEYS[1], 'token', redis.call('get', KEYS[2]))
    return token
end

local lease = tonumber(ARGV[1])
if redis.call('exists', KEYS[1]) == 0 then
    local token = next_token()
    if not token then
        return redis.error_reply('relock: fencing counter exhausted')
    end
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], lease)
    return {1, 1, token}
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    local token = tonumber(redis.call('hget', KEYS[1], 'token'))
    if not token then
        -- Re-entered through a plain RLock of the same name: this hold gets its token now.
        token = next_token()
        if not token then
            return redis.error_reply('relock: fencing counter exhausted')
        end
    end
    local holds = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    if redis.call('pttl', KEYS[1]) < lease then
        redis.call('pexpire', KEYS[1], lease)
    end
    return {1, holds, token}
end
return {0, redis.call('pttl', KEYS[1])}
