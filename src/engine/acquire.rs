//! An acquire as data: a kind describes one attempt (script, keys, arguments, how to read
//! the reply, whether it may ride in a batch) and [`run`] does the rest: tickets, in-flight
//! tracking, batching, replica sync and waiting.
//!
//! The fair lock in lockwise's layout is the one kind that still hands
//! [`handle::acquire_hold`] an attempt of its own: a waiter that heard its handoff takes the
//! lock without a call, which no script description can say.
//!
//! The parts of an attempt ([`AttemptArgs`], [`ScriptCall`], [`Arg`]) are defined in the
//! layout room (`crate::layout`), so a layout's twin of a kind's script is built there.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::time::Instant;

use super::handle::{self, Base, FirstLock, Reply};
use super::{Attempt, Hold, HoldKey, KindId, LockRef, Ticket, Wake};
pub(crate) use crate::layout::{Arg, AttemptArgs, ScriptCall};

use crate::error::Result;
use crate::wire::scripts::ToRedisArgsDyn;

/// A kind's acquire, described: the engine runs it ([`run`]).
///
/// The value is cloned into each attempt's call, which may outlive the caller (a dropped
/// acquire's call is finished in the background), so it is cheap to clone (`Arc`s).
pub(crate) trait AcquireScript: Clone + Send + Sync + 'static {
    /// What the kind reads from a granted reply besides the hold count (a fencing token).
    type Extra: Send + 'static;

    /// Names the script in errors ("lock", "fenced lock").
    fn what(&self) -> &'static str;

    /// The call of one attempt.
    fn call<'a>(&'a self, args: &'a AttemptArgs) -> ScriptCall<'a>;

    /// Reads the script's reply; `None` for a reply it does not know.
    fn parse(&self, reply: &[i64]) -> Option<Reply<Self::Extra>>;

    /// A clean-up to run once the script answered, inside the call, so it runs even when the
    /// caller dropped the acquire meanwhile: a kind whose waiter leaves a mark (a writer's
    /// intent, a fair queue entry) removes what a late attempt wrote after the waiter left.
    /// Nothing by default.
    fn after_call(&self, owner: &Arc<str>) -> Option<BoxFuture<'static, ()>> {
        let _ = owner;
        None
    }

    /// The lock hash whose `lua/lock.lua` (with its claim keys) this attempt is, when it is
    /// one: the client's batcher may then run a first attempt in `lua/batch.lua`.
    fn batched(&self) -> Option<&Arc<Base>> {
        None
    }
}

/// The acquire behind every described kind's `lock`, `lock_with_lease` and `try_lock`: waits
/// as `wake` says until an attempt of `spec` for `owner` on `base` acquires (`Ok(Some)`, the
/// hold registered) or `deadline` passes (`Ok(None)`). `id` names the kind in metrics and
/// spans.
///
/// The first attempt may go out in a batch with other calls on the connection when the
/// kind is [`batched`](AcquireScript::batched), it stakes no claim and the client has no replica
/// sync (a batch has no `WAIT`); a waiter's attempts go alone.
pub(crate) async fn run<S: AcquireScript>(
    base: &Base,
    spec: &S,
    owner: Arc<str>,
    wake: Wake<'_>,
    deadline: Option<Instant>,
    lease: Option<Duration>,
    id: KindId,
) -> Result<Option<(Hold, S::Extra)>> {
    let mut first = true;
    handle::acquire_hold(
        base,
        owner,
        wake,
        deadline,
        lease,
        id,
        |hold_key, lease_ms, claim| {
            let args = AttemptArgs {
                owner: hold_key.1.clone(),
                lease_ms,
                claim_ms: claim.ms(),
                waited_ms: claim.waited_ms(),
                limit_ms: claim.limit_ms(),
            };
            let batch = std::mem::take(&mut first)
                && args.claim_ms == 0
                && base.core.replica_sync.is_none();
            attempt(&base.kind, hold_key, spec, args, batch)
        },
    )
    .await
}

/// One attempt of `spec` for the owner of `hold_key` outside a wait loop (a RedLock node's
/// share of a round), with a TTL of `lease_ms`: counted in the hold registry, never leaking
/// a hold (see [`handle::attempt`]).
pub(crate) fn once<S: AcquireScript>(
    kind: &LockRef,
    hold_key: &HoldKey,
    spec: &S,
    lease_ms: u64,
) -> impl Future<Output = Result<Attempt<(Ticket, u32, S::Extra)>>> + Send + 'static {
    let args = AttemptArgs {
        owner: hold_key.1.clone(),
        lease_ms,
        claim_ms: 0,
        waited_ms: 0,
        limit_ms: 0,
    };
    attempt(kind, hold_key, spec, args, false)
}

/// One attempt: the described call (first offered to the client's batcher when `batch` and
/// the kind is [`batched`](AcquireScript::batched)), then its clean-up, read by the kind.
fn attempt<S: AcquireScript>(
    kind: &LockRef,
    hold_key: &HoldKey,
    spec: &S,
    args: AttemptArgs,
    batch: bool,
) -> impl Future<Output = Result<Attempt<(Ticket, u32, S::Extra)>>> + Send + 'static {
    // One copy for the call, which may outlive the caller, one for reading its reply.
    let (spec, reader) = (spec.clone(), spec.clone());
    let call_kind = kind.clone();
    let call = async move {
        let owner = &args.owner;
        let mut permit = None;
        if let Some(hash) = spec.batched().filter(|_| batch) {
            match handle::first_lock(hash, owner, args.lease_ms).await {
                FirstLock::Answered(reply) => return reply,
                FirstLock::Send(alone) => permit = alone,
            }
        }
        let call = spec.call(&args);
        let argv: Vec<&dyn ToRedisArgsDyn> =
            call.args.iter().map(|a| a as &dyn ToRedisArgsDyn).collect();
        let reply = super::run_acquire(&call_kind, owner, call.script, &call.keys, &argv).await;
        drop(permit);
        if let Some(after) = spec.after_call(owner) {
            after.await;
        }
        reply
    }
    .boxed();
    let what = reader.what();
    handle::attempt(kind, hold_key, call, move |r| reader.parse(r), what)
}
