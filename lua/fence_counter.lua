-- fence_counter.lua: the fencing counter's next token, shared by lua/fenced_lock.lua and
-- lua/redisson_fenced_lock.lua (prepended to each; not a script of its own). Why the token
-- is max(counter + 1, server clock in microseconds), and when that keeps tokens increasing
-- across lost writes: see lua/fenced_lock.lua.
--
-- next_fence_token(counter)  counter: the key of the fencing counter (a decimal string, or
--                            absent). Returns the new token (a number < 2^53), written to
--                            the counter, or nil and an error message (nothing written):
--                            "lockwise: fencing counter exhausted" when the next token would
--                            be 2^53 or more, "lockwise: fencing counter is not an integer"
--                            when the counter holds anything else.
-- KEYS, ARGV: none of its own (the counter's key is an argument of the function).
-- Returns: see next_fence_token above.
local MAX_TOKEN = 9007199254740991 -- 2^53 - 1

local function next_fence_token(counter_key)
    local now = redis.call('time') -- {seconds, microseconds} as strings
    local clock = now[1] .. string.sub('000000' .. now[2], -6)
    local counter = redis.call('get', counter_key)
    if counter and not string.find(counter, '^%-?%d+$') then
        return nil, 'lockwise: fencing counter is not an integer'
    end
    local count_on = counter and tonumber(counter) >= tonumber(clock)
    local next_value = count_on and tonumber(counter) + 1 or tonumber(clock)
    if next_value > MAX_TOKEN then
        return nil, 'lockwise: fencing counter exhausted'
    end
    if count_on then
        redis.call('incr', counter_key)
    else
        redis.call('set', counter_key, clock)
    end
    return tonumber(redis.call('get', counter_key))
end
