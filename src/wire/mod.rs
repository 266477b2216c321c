//! What lockwise writes to Redis: every key and channel name ([`keys`]) and every Lua
//! script with its runner ([`scripts`], the scripts themselves in `lua/`). The layer every
//! other module stands on, apart from the error type.

pub(crate) mod keys;
pub(crate) mod scripts;
