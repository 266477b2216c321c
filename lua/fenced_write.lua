-- fenced_write.lua: write a fenced value unless a larger fencing token was seen before.
--
-- KEYS[1]  resource hash: field "value" -> the value, field "token" -> the highest token
--          that wrote it (decimal). Written without a TTL: it is the caller's data, and the
--          highest token must live as long as the value it protects.
-- ARGV[1]  the writer's fencing token (decimal integer, < 2^53)
-- ARGV[2]  the value
--
-- Returns {1, token}    written; the resource's highest token is now ARGV[1]
--         {0, highest}  rejected: the resource already saw the larger token `highest`
--                       (a decimal string); nothing was written
--
-- Equal tokens are accepted: the current holder may write many times.
local highest = redis.call('hget', KEYS[1], 'token')
if highest and tonumber(highest) > tonumber(ARGV[1]) then
    return {0, highest}
end
redis.call('hset', KEYS[1], 'value', ARGV[2], 'token', ARGV[1])
return {1, ARGV[1]}
