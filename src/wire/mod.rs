//! What lockwise writes to Redis: every key's role ([`role`]), every key and channel name
//! ([`keys`]: lockwise's; a layout with names of its own hands them over from the layout
//! room, `src/layout/`, above this layer) and every Lua
//! script with its runner ([`scripts`], the scripts themselves in `lua/`), and the Cluster
//! hash slot of a key ([`slot`]). The layer every
//! other module stands on, apart from the error type and the layout choice.

pub(crate) mod keys;
pub(crate) mod role;
pub(crate) mod scripts;
pub(crate) mod slot;
