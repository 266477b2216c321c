-- rekey_end.lua: the end of `lua/rekey.lua` in lockwise's key layout (nothing else moves).
--
-- KEYS[1]  lock hash (as in lua/rekey.lua)
-- ARGV     as in lua/rekey.lua
--
-- Returns  1   moved
return 1
