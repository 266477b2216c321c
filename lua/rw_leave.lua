-- rw_leave.lua: a writer that timed out or was cancelled withdraws its intent; when no
-- writer waits any more, the readers held back by it are woken.
--
-- KEYS[1]  waiting writers WW (see lua/rw_write.lua)
-- KEYS[2]  readers' channel RC
-- ARGV[1]  writer owner field
-- ARGV[2]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
--
-- Returns  1 the writer was registered and left; 0 it was not registered
-- (rw_now, rw_purge_writers: lua/rw_prelude.lua, prepended)
local removed = redis.call('zrem', KEYS[1], ARGV[1])
local left = rw_purge_writers(KEYS[1], rw_now())
if removed == 1 and left == 0 then
    -- pcall: a refused publish (ACL) must not fail the script after its writes.
    redis.pcall(ARGV[2] == 'spublish' and 'spublish' or 'publish', KEYS[2], '*')
end
return removed
