-- redisson_semaphore_prelude.lua: helpers shared by the semaphore scripts of Redisson's key
-- layout (KeyLayout::Redisson), concatenated before each.
--
-- KEYS  none of its own (the functions take the semaphore key as an argument)
-- ARGV  none of its own
--
-- Redisson's RSemaphore is one string key, the bare name, holding the available permits as
-- a decimal (negative after a negative add); a missing key is 0 permits. Nothing else is
-- stored: no version, so a waiter relies on the channel's message and a bounded re-check
-- (src/sync/semaphore/acquire.rs). Messages on the channel `redisson_sc:{name}` carry the
-- new available count as a decimal integer, which Java parses with Long.valueOf.
-- TTL: Redisson writes the key without one; lockwise keeps its idle TTL on what it writes:
-- each of its writes raises the key's TTL to at least the handle's idle TTL (never lowers
-- it). Java ignores the TTL (its SETs may clear it until lockwise's next write).
--
-- Returns  nothing: it only defines functions

-- Raises the key's TTL to at least `ttl` ms (never lowers one a longer-lived handle set;
-- PTTL -1, no TTL, as Java leaves the key, is raised too).
local function sem_touch(key, ttl)
    if redis.call('pttl', key) < tonumber(ttl) then
        redis.call('pexpire', key, ttl)
    end
end

-- Publishes the available count `count` as a decimal integer (string.format: tostring
-- would write large numbers in exponent notation, which Long.valueOf rejects). pcall: the
-- write has run and is not rolled back, so a refused publish (ACL) must not turn it into an
-- error.
local function sem_publish(channel, publish, count)
    redis.pcall(publish == 'spublish' and 'spublish' or 'publish', channel,
        string.format('%d', count))
end
