-- rw_prelude.lua: helpers shared by the read-write lock scripts (prepended to each of them).
--
-- KEYS     none of its own; each function takes the keys it works on
-- ARGV     none
-- Returns  nothing (defines functions):
--   rw_now()                       server time in ms (one TIME)
--   rw_purge_readers(r, now)       drops readers whose "~" .. owner deadline passed (HDEL of
--                                  both fields), deletes r when no reader is left; returns
--                                  the live reader count and the latest live deadline
--   rw_purge_writers(ww, now)      drops waiting writers whose intent passed, deletes ww
--                                  when empty, else sets its TTL to latest intent + 1 s;
--                                  returns the live count and the latest intent
local function rw_now()
    local t = redis.call('time')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function rw_purge_readers(r, now)
    local all = redis.call('hgetall', r)
    local live, last = 0, 0
    for i = 1, #all, 2 do
        local field = all[i]
        if string.sub(field, 1, 1) == '~' then
            local deadline = tonumber(all[i + 1])
            if deadline <= now then
                redis.call('hdel', r, field, string.sub(field, 2))
            else
                live = live + 1
                if deadline > last then
                    last = deadline
                end
            end
        end
    end
    if live == 0 and #all > 0 then
        redis.call('del', r)
    end
    return live, last
end

local function rw_tidy_writers(ww, now)
    local top = redis.call('zrange', ww, -1, -1, 'withscores')
    if #top == 0 then
        return 0, 0
    end
    local last = tonumber(top[2])
    redis.call('pexpire', ww, math.max(last - now, 1) + 1000)
    return 1, last
end

local function rw_purge_writers(ww, now)
    local stale = redis.call('zrangebyscore', ww, '-inf', now)
    for i = 1, #stale do
        redis.call('zrem', ww, stale[i])
    end
    local any, last = rw_tidy_writers(ww, now)
    return any, last
end
