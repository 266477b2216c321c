-- lease_sem_common.lua: the helpers shared by every permit-expirable semaphore script. Not a
-- script of its own: src/scripts.rs prepends it to each lease_sem_*.lua, so each still runs
-- as one EVAL, and every one of them returns expired permits to the pool first.
--
-- KEYS[1]  available permits (a string holding an integer; missing: the semaphore is unset)
-- KEYS[2]  leases: sorted set, permit id -> lease deadline in server ms (redis TIME)
-- KEYS[3]  channel the scripts publish wakeups to
-- ARGV     none of its own
--
-- Defines (as locals of the script it is prepended to):
--   now_ms()              the server time in ms
--   purge(now)            removes the leases whose deadline is <= now and adds their count
--                         back to KEYS[1] (if it exists). Returns how many were removed and
--                         the available count after that (false: unset). It reads KEYS[1]
--                         before it writes KEYS[2], so a key of the wrong type fails the
--                         script before anything is written.
--   touch(now, idle)      TTLs: the count key's TTL is raised to at least max(idle, latest
--                         deadline - now), and the leases key gets the same TTL. The leases
--                         key must not expire before the count key: its expired leases are
--                         counted back only when a script purges them, so a leases key that
--                         vanished by its own TTL would take those permits with it.
--   wake(pub, payload)    publishes `payload` on KEYS[3] with `pub` (a refused publish does
--                         not fail the script: the write is done, and waiters still look
--                         again at their bound)
--   earliest(now)         ms until the earliest lease deadline, else the count key's pttl
--                         (-2: no key): how long a waiter may sleep before looking again
--   fmt(x)                an integer-valued number as digits (no exponent notation)
local function now_ms()
    local t = redis.call('time')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function fmt(x)
    return string.format('%.0f', x)
end

local function purge(now)
    local avail = redis.call('get', KEYS[1])
    local freed = redis.call('zremrangebyscore', KEYS[2], '-inf', fmt(now))
    if avail then
        avail = tonumber(avail)
        if freed > 0 then
            avail = redis.call('incrby', KEYS[1], freed)
        end
    end
    return freed, avail
end

local function touch(now, idle)
    local keep = idle
    local last = redis.call('zrange', KEYS[2], -1, -1, 'withscores')
    if last[2] and tonumber(last[2]) - now > keep then
        keep = tonumber(last[2]) - now
    end
    local pttl = redis.call('pttl', KEYS[1])
    if pttl > keep then
        keep = pttl
    elseif pttl ~= -2 and pttl < keep then
        redis.call('pexpire', KEYS[1], fmt(keep))
    end
    if last[2] then
        redis.call('pexpire', KEYS[2], fmt(keep))
    end
end

local function wake(pub, payload)
    redis.pcall(pub == 'spublish' and 'spublish' or 'publish', KEYS[3], payload)
end

local function earliest(now)
    local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
    if first[2] then
        return tonumber(first[2]) - now
    end
    return redis.call('pttl', KEYS[1])
end
