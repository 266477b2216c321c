//! The scripts' effects on one lock hash, as pure functions of the inputs the Lua takes.
//!
//! Each function mirrors one script of `lua/` for the parts the hold accounting depends on:
//! which owner fields exist, their counts, whether the key is there, and the reply. Claims,
//! the waiter mark and publishing are left out (they decide who is woken, not who holds).
//! `tests/conformance.rs` runs the real scripts on a real server over every small hash and
//! compares their replies and effects with these functions, so a script whose reply table
//! changes fails there until the model changes with it.

/// Owners of the model: `A0` and `A1` are two owners (tasks) of the client under test, `B`
/// an owner of another client.
pub const OWNERS: usize = 3;

/// One owner's field in the lock hash: its hold count, and the *server run* it belongs to,
/// a ghost value the real hash does not keep: a new number each time the field is created,
/// so a check can tell a hold of a later run from one of an earlier run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Field {
    pub count: u8,
    pub run: u8,
}

/// The lock hash: one optional field per owner. The key exists while any field does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Hash {
    pub fields: [Option<Field>; OWNERS],
}

impl Hash {
    /// Whether the key exists.
    pub fn exists(&self) -> bool {
        self.fields.iter().any(Option::is_some)
    }

    /// `HGET <key> <owner>`, as `settle::owner_holds` reads it (0 when absent).
    pub fn hget(&self, owner: usize) -> u8 {
        self.fields[owner].map_or(0, |f| f.count)
    }
}

/// The reply of `lua/lock.lua` (with or without the claim keys: without waiters, both take
/// the same path).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LockReply {
    /// `{1, holds}`: acquired or re-entered; this owner's count after the call.
    Granted(u8),
    /// `{0, pttl}`: held by another owner.
    Held,
}

/// `lua/lock.lua` for `owner`: a free key is created with count 1 (a new server run,
/// `next_run`), the owner's own field is incremented, another owner's hold refuses.
pub fn lock(hash: &mut Hash, owner: usize, next_run: &mut u8) -> LockReply {
    if !hash.exists() {
        *next_run += 1;
        hash.fields[owner] = Some(Field {
            count: 1,
            run: *next_run,
        });
        return LockReply::Granted(1);
    }
    match &mut hash.fields[owner] {
        Some(f) => {
            f.count += 1;
            LockReply::Granted(f.count)
        }
        None => LockReply::Held,
    }
}

/// `lua/unlock.lua` (and `lua/redisson_unlock.lua`, the same table) for `owner` with
/// `expected` (`ARGV[3]`; 0 = any count): `n > 0` holds left, `0` the last hold (the key is
/// deleted, every field with it), `-1` no hold of this owner, `-2` the count differs from
/// `expected` and nothing was done.
pub fn unlock(hash: &mut Hash, owner: usize, expected: u8) -> i8 {
    let Some(f) = &mut hash.fields[owner] else {
        return -1;
    };
    if expected > 0 && f.count != expected {
        return -2;
    }
    if f.count > 1 {
        f.count -= 1;
        return f.count as i8;
    }
    *hash = Hash::default();
    0
}

/// `lua/force_unlock.lua`: deletes the key whoever holds it; 1 if it existed.
pub fn force_unlock(hash: &mut Hash) -> u8 {
    let existed = hash.exists();
    *hash = Hash::default();
    existed as u8
}
