//! What every hash-based lock kind shares above the wait loop: the validated name and keys
//! ([`Base`]), the acquire prologue behind `lock` / `lock_with_lease` / `try_lock`
//! ([`acquire_hold`]), one ticketed script attempt with its reply parsed ([`attempt`]), the read-only
//! inspection (`inspect_methods!`), and the guard accessors (`guard_accessors!`).
//!
//! A kind supplies its keys, its script call and how to read the script's reply; this module
//! does the rest, once.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use redis::{ErrorKind, RedisError, RedisResult};
use tokio::time::Instant;
use tracing::Instrument;

use super::batch;
use super::call::{ticketed_call, Synced, Ticket};
use super::claim::{Claim, Withdraw, CLAIM_REFRESH};
use super::hold::Hold;
use super::kinds::KindId;
use super::lock_ref::LockRef;
use super::owner::Owner;
use super::registry::HoldKey;
use super::wait::{pttl_from, wait_loop, Attempt, Wake};
use super::{inspect, observe, Core};
use crate::error::{Error, Result};
use crate::layout::{self, ReleaseSpec};
use crate::wire::keys::{check_millis, ClaimKeys, Keys, Role};
use crate::wire::scripts::ToRedisArgsDyn;

/// A lock handle's name, checked once, and its keys. A rejected name is kept as its reason
/// and reported by every method, so building a handle never fails.
pub(crate) struct Base {
    pub(crate) core: Arc<Core>,
    /// The name as given (empty if rejected).
    pub(crate) name: String,
    pub(crate) keys: Keys,
    /// The overtake claim queue's keys.
    pub(crate) claims: ClaimKeys,
    /// The key of the hash that counts holds, shared with the hold registry entries.
    pub(crate) key: Arc<str>,
    /// Whose holds this handle's acquires take.
    pub(crate) owner: Owner,
    /// The handle as the engine sees it: `lua/unlock.lua` releases its holds unless the kind
    /// gave its own [`ReleaseSpec`] ([`Base::with_release`]).
    pub(crate) kind: LockRef,
    invalid: Option<(&'static str, String)>,
}

impl batch::LockKeys for Base {
    fn lock_key(&self) -> &str {
        &self.key
    }

    fn claim_queue(&self) -> &str {
        &self.claims.queue
    }
}

impl Base {
    /// Checks `name` and derives the keys; `hash` is the role of the hold-counting hash
    /// ([`Role::Lock`] for the reentrant layout).
    pub(crate) fn new(core: Arc<Core>, name: &str, hash: Role) -> Base {
        let layout = core.layout;
        let invalid = layout::check_name(layout, name, hash == Role::Latch)
            .err()
            .map(|e| match e {
                Error::InvalidArgument { reason, .. } => ("name", reason),
                other => ("name", other.to_string()),
            });
        let name = if invalid.is_some() { "" } else { name };
        let keys = layout::keys(layout, &core.namespace, name);
        let release = layout::release(layout, &keys, &core.id_str);
        Base {
            kind: LockRef::new(core.clone(), name, release),
            key: keys.key(hash).into(),
            claims: keys.claim_keys(hash),
            name: name.to_string(),
            keys,
            owner: core.default_owner.clone(),
            core,
            invalid,
        }
    }

    /// The same lock, with acquires owned by `owner`. A rejected owner id is kept as its
    /// reason and reported by every method, as a rejected name is.
    pub(crate) fn with_owner(&self, owner: Owner) -> Base {
        let invalid = self.invalid.clone().or_else(|| match &owner {
            Owner::Named(id) => check_owner_id(id).err(),
            _ => None,
        });
        Base {
            core: self.core.clone(),
            name: self.name.clone(),
            keys: self.keys.clone(),
            claims: self.claims.clone(),
            key: self.key.clone(),
            owner,
            kind: self.kind.clone(),
            invalid,
        }
    }

    /// The same lock, whose holds `release` releases (a kind with a hash of its own).
    pub(crate) fn with_release(mut self, release: ReleaseSpec) -> Base {
        self.kind = LockRef::new(self.core.clone(), &self.name, release);
        self
    }

    /// The owner field of the next acquire (see [`Owner`]).
    pub(crate) fn owner_field(&self) -> Arc<str> {
        self.owner.field(&self.core.id_str)
    }

    /// [`Error::InvalidArgument`] if the name or owner id was rejected.
    pub(crate) fn check(&self) -> Result<()> {
        match &self.invalid {
            Some((argument, reason)) => Err(Error::invalid(argument, reason.clone())),
            None => Ok(()),
        }
    }

    pub(crate) async fn is_locked(&self) -> Result<bool> {
        self.check()?;
        inspect::is_locked(&self.core, &self.key).await
    }

    /// The holds of this handle's owner: the calling task's, or the named owner's; 0 on a
    /// non-reentrant handle, whose holds belong to their guards alone.
    pub(crate) async fn hold_count(&self) -> Result<u32> {
        self.check()?;
        if self.owner == Owner::PerHold {
            return Ok(0);
        }
        inspect::owner_holds(&self.core, &self.key, &self.owner_field()).await
    }

    pub(crate) async fn remaining_ttl(&self) -> Result<Option<Duration>> {
        self.check()?;
        inspect::remaining_ttl(&self.core, &self.key).await
    }
}

impl Base {
    /// Deletes the lock whoever holds it (any kind of this name) and wakes its waiters:
    /// those on its channel and the head of its fair queue. Returns whether it was locked.
    pub(crate) async fn force_unlock(&self) -> Result<bool> {
        self.check()?;
        let deleted = force_unlock(&self.core, &self.keys).await?;
        if deleted {
            tracing::debug!(lock = %self.name, "lock force-unlocked");
        }
        Ok(deleted)
    }
}

/// Deletes the lock hash of `keys` on `core`'s server whoever holds it and wakes its
/// waiters, as the client's layout does it ([`layout::force_unlock`]). Returns whether it
/// was locked.
pub(crate) async fn force_unlock(core: &Core, keys: &Keys) -> Result<bool> {
    let call = layout::force_unlock(core.layout, keys, &core.id_str, core.publish);
    let script_keys: Vec<&str> = call.keys.iter().map(String::as_str).collect();
    let args: Vec<&dyn ToRedisArgsDyn> =
        call.args.iter().map(|a| a as &dyn ToRedisArgsDyn).collect();
    let deleted: i64 = call
        .script
        .run(&mut core.conn.clone(), &script_keys, &args)
        .await?;
    if deleted == 1 {
        core.listener.notify_local(&keys.channel);
    }
    Ok(deleted == 1)
}

/// What a kind reads from its acquire script's reply.
pub(crate) enum Reply<T> {
    /// `holds` is the owner's hold count after the call; `T` what else the kind returns.
    Granted(u32, T),
    /// Held by another owner for about this long (None: unknown).
    Held(Option<Duration>),
    /// Held, and the attempt queued (or renewed) this owner in the overtake claim queue,
    /// at this score (its place: server ms).
    Claimant(Option<Duration>, i64),
}

/// Reads the common reply shapes: `[1, holds]` granted, `[0, pttl]` held (or free but
/// claimed by another waiter), `[0, pttl, score]` held and this owner queued at `score` (see
/// [`claim`](super::claim)).
pub(crate) fn plain_reply(reply: &[i64]) -> Option<Reply<()>> {
    match reply {
        [1, holds] if *holds >= 1 => Some(Reply::Granted(*holds as u32, ())),
        [0, pttl] => Some(Reply::Held(pttl_from(*pttl))),
        [0, pttl, score] if *score > 0 => Some(Reply::Claimant(pttl_from(*pttl), *score)),
        _ => None,
    }
}

/// One acquire attempt: counts the call in the hold registry (waiting first for another
/// call or a settlement of this owner on this lock), runs `call` so that it never leaks a
/// hold, and reads its reply with `parse`. `what` names the script in errors.
pub(crate) fn attempt<T: Send + 'static>(
    kind: &LockRef,
    hold_key: &HoldKey,
    call: BoxFuture<'static, redis::RedisResult<Synced>>,
    parse: impl Fn(&[i64]) -> Option<Reply<T>> + Send + 'static,
    what: &'static str,
) -> impl Future<Output = Result<Attempt<(Ticket, u32, T)>>> + Send + 'static {
    let (kind, hold_key) = (kind.clone(), hold_key.clone());
    async move {
        // A closed client (last `Client` dropped) takes nothing: no watchdog would keep it.
        kind.core().holds.check_open()?;
        let ticket = Ticket::begin(&kind, &hold_key).await;
        let (reply, ticket) = ticketed_call(ticket, call).await?;
        reply.check(kind.core())?;
        match (parse(&reply.reply), ticket) {
            (Some(Reply::Granted(holds, extra)), Some(ticket)) => {
                Ok(Attempt::Acquired((ticket, holds, extra)))
            }
            (Some(Reply::Held(pttl)), None) => Ok(Attempt::Held(pttl)),
            (Some(Reply::Claimant(pttl, score)), None) => Ok(Attempt::Claimant(pttl, score)),
            _ => Err(Error::UnexpectedReply(format!(
                "{what} script answered {:?}",
                reply.reply
            ))),
        }
    }
}

/// The acquire behind every kind's `lock`, `lock_with_lease` and `try_lock` for `owner`
/// (from [`Base::owner_field`]): checks the name and lease, waits on `channel` until
/// `attempt(hold key, lease ms, claim)` acquires or `deadline` passes (`Ok(None)`), and
/// registers the hold before anything else can happen. Described kinds reach it through
/// [`acquire::run`](super::acquire::run); the fair lock, whose waiter may take a handoff
/// without a call, hands it an attempt of its own.
///
/// A kind that honours the overtake limit passes [`Claim::ms`] and `base.claims` to its lock
/// script (see [`claim`](super::claim)); a waiter the script names claimant is then woken at
/// every release its client hears and at least every [`CLAIM_REFRESH`] to renew its claim,
/// and its claim is withdrawn when it leaves without the lock. Other kinds ignore `claim`.
pub(crate) async fn acquire_hold<T, F, Fut>(
    base: &Base,
    owner: Arc<str>,
    wake: Wake<'_>,
    deadline: Option<Instant>,
    lease: Option<Duration>,
    label: KindId,
    mut attempt: F,
) -> Result<Option<(Hold, T)>>
where
    F: FnMut(&HoldKey, u64, &Claim) -> Fut,
    Fut: Future<Output = Result<Attempt<(Ticket, u32, T)>>>,
{
    base.check()?;
    base.core.holds.check_open()?;
    let lease_ms = match lease {
        Some(lease) => check_millis("lease", lease)?,
        None => base.core.watchdog_ms,
    };
    let observed = observe::Acquire::start(&base.core.metrics, label, &base.name, &owner);
    let hold_key: HoldKey = (base.key.clone(), owner);
    let member = format!("{}{}", base.claims.member_prefix, hold_key.1);
    // A waiter that does not subscribe (the spin lock) has no overtake limit: it never
    // queues, so it is never woken as a claimant; its script still honours the others' queue.
    // Nor has a fair lock's waiter: its own queue orders it.
    let (channel, limit) = match wake {
        Wake::Channel(channel) => (Some(channel), base.core.overtake_limit),
        Wake::Queued(channel) => (Some(channel), None),
        Wake::Backoff(_) => (None, None),
    };
    let claim = Claim::new(limit, member.into());
    let mut withdraw = Withdraw {
        claim: &claim,
        core: &base.core,
        keys: &base.claims,
        granted: false,
    };
    let listener = &base.core.listener;
    let ttl = Duration::from_millis(lease_ms);
    let granted = loop {
        let granted = wait_loop(
            &base.core,
            wake,
            &base.name,
            deadline,
            Some(&claim.wake),
            || {
                // An overdue waiter is marked before the attempt that queues it, so a
                // release right after the script wakes it (once subscribed).
                let was_due = claim.due();
                if let Some(channel) = channel.filter(|_| was_due) {
                    claim.hold(listener, channel, None);
                }
                let attempt = attempt(&hold_key, lease_ms, &claim);
                let claim = &claim;
                async move {
                    Ok(match attempt.await? {
                        // Newly marked or ranked: look again at once, in case a release came
                        // between the script and the mark (its wakeup went elsewhere). The
                        // client's first in the queue comes back before its entry lapses, to
                        // renew it; the others sleep as any waiter (their entries may lapse:
                        // each is woken to renew when it becomes first, and its renewal puts
                        // it back in its place, the score being when it began waiting).
                        Attempt::Claimant(pttl, score) => {
                            let Some(channel) = channel else {
                                return Ok(Attempt::Held(pttl));
                            };
                            if claim.hold(listener, channel, Some(score)) {
                                Attempt::Held(Some(Duration::ZERO))
                            } else if claim.is_first() {
                                Attempt::Held(Some(
                                    pttl.map_or(CLAIM_REFRESH, |p| p.min(CLAIM_REFRESH)),
                                ))
                            } else {
                                Attempt::Held(pttl)
                            }
                        }
                        // Not queued. Sent before the limit: wake when the waiter is
                        // overdue (at once if it became so while the attempt was on its
                        // way), to join the claim queue on time however the releases'
                        // wakeups fall. Sent overdue and still not queued (no script that
                        // honours claims answers so; the guard keeps such a waiter from
                        // trying again at once, forever): wait as any waiter.
                        Attempt::Held(pttl) => {
                            claim.let_go();
                            Attempt::Held(match claim.until_due() {
                                Some(due) if !was_due => Some(pttl.map_or(due, |p| p.min(due))),
                                _ => pttl,
                            })
                        }
                        acquired => acquired,
                    })
                }
            },
        )
        .instrument(observed.span().clone())
        .await;
        match granted {
            // A reply too late to trust takes no guard (see `Ticket::unless_late`).
            Ok(Some((ticket, holds, extra))) => match ticket
                .unless_late(holds, ttl, &base.name)
                .and_then(|t| t.unless_stacked(holds, &base.name))
            {
                Some(ticket) => break Ok(Some((ticket, holds, extra))),
                None if deadline.is_some_and(|d| Instant::now() >= d) => break Ok(None),
                None => {}
            },
            other => break other,
        }
    };
    withdraw.granted = matches!(granted, Ok(Some(_)));
    drop(withdraw);
    let span = observed.finish(&granted);
    let Some((ticket, holds, extra)) = granted? else {
        return Ok(None);
    };
    // No .await between the reply and the registration: the hold always gets its guard.
    observe::granted(&span, holds);
    let hold = Hold::register_observed(ticket, holds, lease, label, span);
    if let Err(e) = base.core.holds.check_open() {
        // The client went away while the call was in flight: no guard that is lost at
        // birth. Dropping the hold releases it in the background.
        drop(hold);
        return Err(e);
    }
    Ok(Some((hold, extra)))
}

/// Most bytes of a named owner id.
const MAX_OWNER_LEN: usize = 256;

/// A named owner id: not empty, at most [`MAX_OWNER_LEN`] bytes, no control characters.
pub(crate) fn check_owner_id(id: &str) -> std::result::Result<(), (&'static str, String)> {
    let reason = if id.is_empty() {
        "an owner id must not be empty".to_string()
    } else if id.len() > MAX_OWNER_LEN {
        format!(
            "an owner id may have at most {MAX_OWNER_LEN} bytes, got {}",
            id.len()
        )
    } else if id.chars().any(char::is_control) {
        "an owner id must not contain control characters".to_string()
    } else {
        return Ok(());
    };
    Err(("owner", reason))
}

/// What an acquire's first attempt does after [`first_lock`] (the client's batcher decides).
pub(crate) enum FirstLock {
    /// The batch answered, as `lua/lock.lua` would have.
    Answered(RedisResult<Synced>),
    /// Send `lua/lock.lua` now, holding the lane's place if given.
    Send(Option<batch::Permit>),
}

/// The turn of `lua/lock.lua` with no claim to stake, for `owner` on `base`'s lock hash
/// (lockwise's layout), on its client's batcher. For an acquire's first attempt, when the
/// lock is most likely free; the client has no replica sync (a batch has no `WAIT`).
pub(crate) async fn first_lock(base: &Arc<Base>, owner: &Arc<str>, lease_ms: u64) -> FirstLock {
    let op = batch::Op::Lock {
        keys: base.clone(),
        lease_ms,
        owner: owner.clone(),
    };
    let reply = match base.core.batcher.turn(op).await {
        batch::Turn::Alone(permit) => return FirstLock::Send(Some(permit)),
        batch::Turn::Batched(Ok(batch::NOT_TRIED)) => return FirstLock::Send(None),
        batch::Turn::Batched(Ok(holds)) if holds >= 1 => Ok(vec![1, holds]),
        batch::Turn::Batched(Ok(held)) if held <= -9 => Ok(vec![0, -10 - held]),
        batch::Turn::Batched(Ok(other)) => Err(RedisError::from((
            ErrorKind::UnexpectedReturnType,
            "batch script answered a lock call",
            other.to_string(),
        ))),
        batch::Turn::Batched(Err(e)) => Err(e),
    };
    FirstLock::Answered(reply.map(Synced::plain))
}
