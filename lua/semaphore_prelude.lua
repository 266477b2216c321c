-- semaphore_prelude.lua: helpers shared by the semaphore scripts, concatenated before each.
--
-- KEYS  none of its own (the functions take the semaphore hash as an argument)
-- ARGV  none of its own
--
-- The semaphore is one hash: field 'p' = available permits (may be negative after a
-- negative add), field 'v' = version, changed by every write that adds permits, so a waiter
-- can tell whether the permits changed for the better since it last looked. A new hash
-- starts its version at the server's clock in microseconds, so a semaphore re-created after
-- its idle TTL never repeats a version of the old one.
--
-- Returns  nothing: it only defines functions

-- Raises the key's TTL to at least `ttl` ms (never lowers one a longer-lived handle set).
local function sem_touch(key, ttl)
    if redis.call('pttl', key) < tonumber(ttl) then
        redis.call('pexpire', key, ttl)
    end
end

-- A new version: permits were added.
local function sem_bump(key)
    if redis.call('hexists', key, 'v') == 1 then
        redis.call('hincrby', key, 'v', 1)
    else
        local t = redis.call('time')
        redis.call('hset', key, 'v', tonumber(t[1]) * 1000000 + tonumber(t[2]))
    end
end

-- Wakes waiters. pcall: the write has run and is not rolled back, so a refused publish (ACL)
-- must not turn it into an error.
local function sem_wake(channel, publish, payload)
    redis.pcall(publish == 'spublish' and 'spublish' or 'publish', channel, payload)
end
