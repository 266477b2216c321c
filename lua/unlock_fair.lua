-- unlock_fair.lua: the end of unlock.lua when the name has a fair queue: hands the lock to its
-- head or wakes it
-- (lua/fair_queue.lua's wake_head, appended before this file: unlock.lua has already seen
-- the queue exist). Not a script of its own:
-- src/wire/scripts.rs appends both to unlock.lua, whose `lock`, `pub` and `result` it uses.
--
-- KEYS     as unlock.lua (KEYS[3] and KEYS[4] through lua/fair_queue.lua)
-- ARGV[5]  per-waiter channel prefix of the fair queue (as unlock.lua)
-- Returns  as unlock.lua: the `result` it computed
wake_head(lock, pub, ARGV[5])
return result
