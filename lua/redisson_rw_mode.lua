-- redisson_rw_mode.lua: the start of both releases of a read-write lock in Redisson's layout
-- (lua/redisson_rw_unlock_read.lua, lua/redisson_rw_unlock_write.lua): the hash's `mode`,
-- and Redisson's answer to a release of a lock without one. Not a script of its own:
-- spliced in where a line reads `--#include redisson_rw_mode.lua` (src/wire/scripts.rs).
-- It leaves the local `mode` ('read' or 'write') and `pub` (the publish command).
--
-- KEYS[1]  the lock hash `<name>`
-- KEYS[2]  the channel `redisson_rwlock:{<name>}`
-- ARGV[2]  message to publish
-- ARGV[4]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
-- Returns  -1  the lock has no `mode` (not held): ARGV[2] is published, as Redisson does
--          (otherwise the script goes on)
local pub = ARGV[4] == 'spublish' and 'spublish' or 'publish'
local mode = redis.call('hget', KEYS[1], 'mode')
if not mode then
    -- pcall: a refused publish (ACL) must not turn the answer into an error.
    redis.pcall(pub, KEYS[2], ARGV[2])
    return -1
end
