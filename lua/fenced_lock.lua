-- fenced_lock.lua: take or re-enter a fenced reentrant lock (one attempt, never blocks).
-- A new owner gets a new fencing token; re-entry returns the holder's current token.
--
-- KEYS[1]  lock hash, laid out like lock.lua's: field "<client uuid>:<task id>" -> hold count,
--          plus field "token" -> the holder's fencing token (decimal). No owner field can be
--          "token" (owner fields start with a uuid), so unlock.lua and renew.lua work
--          unchanged, and unlock.lua's `del` at the last release removes the token with it.
-- KEYS[2]  fencing counter (same hash tag): the last token issued, as a decimal string. The
--          only key lockwise writes without a TTL: it must outlive every lock hash.
-- ARGV[1]  lease in milliseconds (integer >= 1): TTL of a new lock; on re-entry the TTL is
--          raised to at least this value, never lowered
-- ARGV[2]  owner field "<client uuid>:<task id>"
-- KEYS[3]  the lock's overtake claim queue (lua/claim.lua, prepended)
-- KEYS[4]  the claim queue's deadlines
-- ARGV[3]  claim TTL in ms: > 0 queues (or renews) this owner's claim when the lock is held
--          by another owner; 0 does not
-- ARGV[4]  how long this owner has waited, in ms (with a claim: its place in the queue)
--
-- An attempt that finds the lock held by another owner sets the hash's waiter mark
-- "waiting" (see lua/unlock.lua); so does the claim queue's head when it takes the lock.
--
-- Returns {1, holds, token}  acquired; holds = this owner's hold count after the call,
--                            token = the fencing token of this hold (< 2^53)
--         {0, pttl}          held by another owner; pttl = its remaining TTL in ms (-1 = none)
--         {0, pttl}          also when free but another waiter heads the claim queue
--                            (lua/claim.lua); pttl is then the time until its claim lapses
--                            ({0, pttl, score} when this owner is in the queue too, or joined)
--         {0, pttl, score}   held by another owner, and this owner is in the claim queue now
--                            (score: its place, server ms)
--                            (queued or renewed by this call)
--         error "lockwise: fencing counter exhausted" when the next token would be 2^53 or more
--         error "lockwise: fencing counter is not an integer" when KEYS[2] holds anything else
--         (nothing is written in either case)
--
-- Tokens. A new token is max(counter + 1, server clock), the clock being TIME in microseconds
-- since the epoch (about 1.7e15 today, below 2^53 until the year 2255); the counter is set to
-- the token. The clock is what keeps tokens increasing when the server loses writes: a
-- restart without persistence (the counter is gone), a restart that loads an RDB snapshot or
-- an AOF (`appendfsync everysec`) missing the last writes, a failover to a replica that had
-- not received them (the counter comes back with an older value). Counting on from such a
-- counter would hand out tokens again; the clock has moved on since they were issued.
--
-- Why it holds, and when it does not. Every token is >= the clock at the moment it was
-- issued, and above it only by the counter's lead over the clock. Each token raises the lead
-- by at most 1 and every microsecond lowers it by 1 (down to 0), so the lead stays 0 while
-- the lock issues at most one token per microsecond on average (over every stretch of time
-- up to now). A burst of k tokens within d < k microseconds leaves a lead of up to k - d
-- microseconds (1000 tokens in 100 us: 900 us), drained again k - d microseconds later. One
-- lock hardly gets near that rate: each new owner costs this script and an unlock, which the
-- server runs one at a time.
-- Let T be the last token issued before the writes were lost, at clock c1 on the old server,
-- so T <= c1 + lead. The first token after the loss, issued at clock c2 on the restarted or
-- promoted server, is >= c2, so it is larger than T if c2 > c1 + lead: if the time from T to
-- the first new token (the gap) exceeds lead + skew, skew being how far the new server's
-- clock is behind the old one's (0 for a restart on the same machine whose clock never steps
-- back; a step back, e.g. by NTP, counts as skew). A restart takes milliseconds at least
-- (process start, loading the data), a Sentinel failover seconds, so the margin is wide with
-- synchronised clocks. Without it, new tokens may repeat old ones or fall below them by up to
-- lead + skew - gap microseconds. A counter deleted on its own (eviction, a DEL) is
-- overtaken by the clock the same way.
-- Lua numbers are doubles: counter and clock are compared as numbers (exact below 2^53), and
-- the counter is written from the clock's string or by INCR, never formatted from a number.
-- (next_fence_token: lua/fence_counter.lua, prepended)

-- Issues the next token into KEYS[2] and the hash; returns it, or nil and an error message.
local function next_token()
    local token, err = next_fence_token(KEYS[2])
    if token then
        redis.call('hset', KEYS[1], 'token', token)
    end
    return token, err
end

local lease = tonumber(ARGV[1])
if redis.call('exists', KEYS[1]) == 0 then
    local refused, head = claim_refusal(KEYS[3], KEYS[4], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]))
    if refused then
        return refused
    end
    local token, err = next_token()
    if not token then
        return redis.error_reply(err)
    end
    --#include claim_grant.lua
    return {1, 1, token}
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    local token = tonumber(redis.call('hget', KEYS[1], 'token'))
    if not token then
        -- Re-entered through a plain RLock of the same name: this hold gets its token now.
        local err
        token, err = next_token()
        if not token then
            return redis.error_reply(err)
        end
    end
    local holds = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    if redis.call('pttl', KEYS[1]) < lease then
        redis.call('pexpire', KEYS[1], lease)
    end
    return {1, holds, token}
end
local pttl = redis.call('pttl', KEYS[1])
if pttl > 0 then
    -- The waiter mark (lua/unlock.lua): this caller may wait for the release (not on a
    -- hash without a TTL, which lockwise never writes).
    redis.call('hset', KEYS[1], 'waiting', '1')
end
local score = stake_claim(KEYS[3], KEYS[4], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]))
if score then
    return {0, pttl, score}
end
return {0, pttl}
