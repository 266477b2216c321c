-- redisson_fair_prelude.lua: what every Redisson-layout fair script starts with (prepended
-- to lua/redisson_fair_lock.lua, lua/redisson_fair_leave.lua, lua/redisson_fair_unlock.lua
-- and lua/redisson_fair_force_unlock.lua; not a script of its own). RFairLock's queue is a
-- list of owner fields, oldest first, beside a sorted set owner -> deadline (ms on the
-- clients' clocks). A head whose deadline has passed is dropped by whichever script runs
-- next, as Redisson's own scripts do.
--
-- fair_purge(queue, timeouts, now)  drops stale heads: while the head's deadline is <= now,
--                                   LPOP it and ZREM its deadline (stops at a head without
--                                   a deadline)
-- fair_keep(queue, timeouts, now, extra)  gives both keys a TTL past the last deadline
--                                   (+ extra ms), so a queue every waiter left behind dies
--                                   on its own (Redisson writes them without one; it reads
--                                   no TTL of them)
-- KEYS, ARGV: none of its own (the including script passes its keys to the functions).
-- Returns: nothing; the functions above return nothing either.
local function fair_purge(queue, timeouts, now)
    while true do
        local head = redis.call('lindex', queue, 0)
        if not head then
            return
        end
        local deadline = redis.call('zscore', timeouts, head)
        if not deadline or tonumber(deadline) > now then
            return
        end
        redis.call('lpop', queue)
        redis.call('zrem', timeouts, head)
    end
end

local function fair_keep(queue, timeouts, now, extra)
    local last = redis.call('zrange', timeouts, -1, -1, 'withscores')
    if last[2] then
        local ttl = math.max(tonumber(last[2]) - now, 0) + extra
        redis.call('pexpire', queue, ttl)
        redis.call('pexpire', timeouts, ttl)
    end
end
