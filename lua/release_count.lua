-- release_count.lua: the check every release makes before it changes anything: the owner's
-- hold count, and the count the caller expects. Not a script of its own: a release script
-- splices it in where a line reads `--#include release_count.lua` (src/wire/scripts.rs),
-- after setting the locals `hash` (the key of the owner's holds) and `field` (the owner's
-- field in it); it leaves `holds`, the count (a number >= 1), for the rest of the script.
--
-- KEYS     none of its own (`hash` is one of the script's)
-- ARGV[3]  expected hold count before the release, or 0 for "any". Used to settle an
--          acquire or release whose reply was lost: release only while the count is the
--          one the caller read, never a hold the caller did not count.
-- Returns  -1  not held by this owner (expired, force-unlocked, or never taken)
--          -2  hold count differs from ARGV[3]: nothing done
--          (otherwise the script goes on)
local holds = redis.call('hget', hash, field)
if not holds then
    return -1
end
holds = tonumber(holds)
local expected = tonumber(ARGV[3])
if expected > 0 and holds ~= expected then
    return -2
end
