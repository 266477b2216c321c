//! The acquire / wait / release protocol shared by every lock kind.
//!
//! # How it works
//!
//! A lock attempt is one Lua script call that either takes the lock (or re-enters it) or
//! reports the holder's remaining TTL. Waiting is built on the client's single subscription
//! connection:
//!
//! 1. Try the script. Acquired: the caller registers the hold (and the watchdog) and only then
//!    hands out the guard.
//! 2. Held by another owner: take a share of the lock's channel subscription and wait for the
//!    server to confirm it.
//! 3. Create the channel's `Notified` future and `enable()` it, *then* try the script again.
//!    An unlock that lands after this point wakes us, even if it lands before we start
//!    waiting: no lost wakeup.
//! 4. Still held: wait for the notification or `min(holder's pttl, remaining wait)`, whichever
//!    comes first (a crashed holder's lock is taken when its TTL runs out, and a missing TTL
//!    never means "sleep forever"). Loop to 3.
//! 5. On every exit the subscription share is dropped; the last share unsubscribes.
//!
//! A waiter rides through a failover: an attempt that the server refused without running
//! it (`MOVED`, `TRYAGAIN`, `CLUSTERDOWN`, `READONLY`, ...), or, once the caller waits, one
//! lost with its connection, is tried again after a pause (50 ms doubling to 1 s), within
//! the caller's deadline and the client's failover retry ([`wait::Trouble`]). A reply that
//! arrives after the TTL it set ran out (the process was paused meanwhile) takes no guard:
//! its hold is settled away and the wait goes on.
//!
//! # Batching
//!
//! An acquire's first attempt and a release go through the client's [`batch`] lanes: alone
//! when fewer than two calls are in flight on the connection (on a Cluster, the hash slot),
//! else queued and sent with the others as one call of `lua/batch.lua` when one returns. The
//! batch answers each item as its own script would, or leaves it untried (the caller then
//! sends the full script); a lost batch leaves every member in doubt, as a lost call does.
//! A waiter's later attempts, a fair lock's release and every call of a client with replica
//! sync go alone.
//!
//! # Cancellation
//!
//! A script call whose future is dropped may still run on the server. Each acquire attempt is
//! therefore wrapped in [`Inflight`]: if it is dropped before its reply arrived, the rest of
//! the call is finished in the background, and a hold it took is released by a settlement
//! (below) at once. When the reply is lost for another reason (response timeout, connection
//! drop), the outcome is unknown: the settlement reads what the server counts and releases
//! only holds that no guard owns, so a hold the caller did not take is never released.
//!
//! # One call at a time, and runs of holds
//!
//! An owner (a task, a named owner) has at most one acquire or release call per lock in
//! flight: a second one waits for the first's reply ([`registry`]'s `Begin::Wait`,
//! `ReleaseStep::Busy`). So the registry always knows the count the server has for the owner,
//! and every release sends that exact count as `expected` (the scripts change nothing when
//! the server's count differs): a release can only take a hold of its own *run*. A run is an
//! owner's holds from the first grant until the server forgets them (last release, expiry,
//! force unlock, restart); each run has its own epoch and `lost` token. A grant whose count
//! shows the earlier holds gone, or that joins a run already known lost, starts a new run,
//! whether a guard takes it or it was abandoned (a cancelled acquire): the old guards are
//! lost, and their releases send nothing (`ReleaseStep::Stale`). So a stale guard's unlock never
//! removes a later hold, a new hold never inherits a lost run's signal, and an abandoned
//! re-entry is never adopted as an old hold.
//!
//! # Settling: the server's count always comes back to the guards'
//!
//! Each call that may change an owner's hold count (acquire, release) is counted in the
//! client's hold registry while in flight ([`Ticket`]). A call whose outcome is unknown (reply
//! lost: connection dropped, response timeout), an abandoned acquire that took a hold, a
//! granted reply whose count the local guards do not explain, or the release of a guard from
//! an earlier run, all leave the entry *in doubt*. As soon as no call of that owner is in
//! flight, a settlement runs ([`settle`]): it reads the owner's count on the server and
//! releases, one conditional step at a time (`expected` = the count it read), until the
//! server's count equals the number of live guards. New acquires of that owner wait for it;
//! releases during it are left to it. A count found *below* the guards' means the server
//! forgot holds (expiry, force-unlock, restart): those guards are told they are lost.
//!
//! So a release whose reply was lost never leaves a phantom hold that the same task would
//! later re-enter, and a server count above what the owner knows is never adopted.
//!
//! A guard whose release a settlement took over is told its hold lasted only if a count read
//! *after* its hand-over still had it and the settlement then released what it meant to
//! without finding the owner's holds gone. A re-entry whose reply was lost leaves the run
//! *unverified*: it may have run after the run's holds were force-unlocked and taken a fresh
//! hold with the same count. The settlement's first read settles it (one connection, in
//! order: the re-entry has run by then, or never will); a count of 1 where holds were
//! expected cannot tell the two apart, so the run is given up (its guards told lost, the hold
//! released) rather than a new run adopted as the old one. The model in `model/` checks
//! these rules, with the ones above, over every interleaving of a bounded world.
//! When Redis cannot be reached, a settlement retries with backoff (20 ms doubling to 1 s);
//! a call that comes to wait for it (an unlock handed over, an acquire of the owner) ends the
//! backoff at once, so the call is answered within its budget once Redis is back. With no
//! guard left the settlement stops once the key's longest TTL has certainly run out.
//!
//! # Layout
//!
//! - [`core`]: the per-client state every kind works through (connection, listener, watchdog).
//! - [`wait`]: the wait loop above and its deadline helpers.
//! - [`owner`]: whose holds an acquire takes, and the owner field it writes.
//! - [`claim`]: the overtake limit: a waiter that waited too long claims the next release.
//! - [`lock_ref`]: [`LockRef`], the engine's reference to one lock: its client, name and release.
//! - [`kinds`]: [`KindId`], every kind by one name and its metric label.
//! - [`batch`]: natural batching of the uncontended lock and unlock calls per connection.
//! - [`acquire`]: an acquire as data: a kind describes its attempt, the engine runs it.
//! - [`call`]: acquire calls that never leak a hold (cancellation, tickets, replica sync).
//! - [`registry`]: the local hold registry: guards, calls in flight, doubts, loss deadlines.
//! - [`settle`]: settlements that bring the server's count back to the guards'.
//! - [`hold`]: one granted hold, as every guard type wraps it.
//! - [`handle`]: what every hash-based kind shares above that: name and keys, the acquire
//!   prologue, one script attempt, inspection and guard accessors.
//! - [`watchdog`]: the task that renews held locks in batches.
//! - [`deadline`]: how long a key surely lives after a call (the loss deadline's margin).
//! - [`close`]: `Client::shutdown`: what the client still holds, released and reported.
//! - [`tracked`]: what a close waits for or gives back: background clean-ups, live permits.
//! - [`presence`]: the presence keys of a live client.
//! - [`listener`]: the one subscription connection that wakes waiters.
//! - [`inspect`]: read-only queries shared by the hash-based kinds.
//! - [`observe`]: every metric and tracing span of the events above, in one place.
//!
//! Nothing here imports a lock kind or the `Client`: kinds are built on this module.

pub(crate) mod acquire;
pub(crate) mod batch;
pub(crate) mod call;
pub(crate) mod claim;
pub(crate) mod close;
mod core;
mod deadline;
pub(crate) mod handle;
pub(crate) mod hold;
pub(crate) mod inspect;
mod kinds;
pub(crate) mod listener;
mod lock_ref;
pub(crate) mod observe;
mod owner;
pub(crate) mod presence;
pub(crate) mod registry;
pub(crate) mod settle;
pub(crate) mod tracked;
pub(crate) mod wait;
pub(crate) mod watchdog;

pub(crate) use self::core::Core;
pub(crate) use call::{run_acquire, Ticket};
pub(crate) use deadline::safe_until;
pub(crate) use handle::{
    acquire_hold, attempt, check_owner_id, force_unlock, plain_reply, Base, Reply,
};
pub(crate) use hold::{Hold, HoldRef};
pub(crate) use kinds::KindId;
pub(crate) use lock_ref::{client_clock_ms, LockRef};
pub(crate) use owner::Owner;
pub(crate) use registry::HoldKey;
pub(crate) use wait::{deadline_after, never_timed_out, or_timeout, pttl_from, Attempt, Wake};
