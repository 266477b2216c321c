//! Natural batching of the uncontended lock and unlock calls.
//!
//! A call that finds fewer than [`MAX_IN_FLIGHT`] calls in flight on its lane (the
//! connection; on a Cluster, the hash slot) goes out at once as its own script, so a lone
//! caller never waits. Calls that come while that many are in flight queue; when one of those
//! returns, the queue goes out as **one** call of `lua/batch.lua` (at most [`MAX_BATCH`]
//! items), which runs each item's common paths: a free lock is taken, an owner's lock
//! re-entered, another owner's reported with its TTL, a hold released. So the calls per lock
//! fall as concurrency rises, and with them what Redis and the client spend per call.
//!
//! An item the batch could not settle so (a free lock whose overtake claim queue decides, a
//! name with a fair queue, a refused write, a key of another type) is answered "not tried"
//! and changed nothing; its caller sends the full script alone. A batch whose reply is lost
//! gives every member the same error: each is then in doubt and goes through the engine's
//! settlement, as a single call would. A caller that gives up while its item waits in the
//! queue is dropped from it and never sent; an acquire's or an unlock's caller never gives
//! up mid-call anyway (the engine's `Inflight` finishes it in the background).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use redis::{ErrorKind, RedisError, RedisResult};
use tokio::sync::{oneshot, Notify};

use super::observe;
use crate::deploy::CommandConn;
use crate::wire::scripts::{ToRedisArgsDyn, BATCH};
use crate::wire::slot::hash_slot;

/// Calls in flight per lane before new ones queue. Two let the client build the next batch
/// while Redis runs the current one.
const MAX_IN_FLIGHT: usize = 2;

/// Most items in one batch: a batch runs on Redis as one script, so it is kept far below
/// anything that would stall other clients (128 items take Redis about 0.3 ms).
const MAX_BATCH: usize = 128;

/// How long a lane's queue waits with none of its calls in flight ending before the lane
/// stops counting them. A permit lives in its caller's future; a future that is kept but no
/// longer polled would otherwise hold its lane's place, and every call queued behind it,
/// forever. One task per client checks the lanes at this period while any has a queue (no
/// timer per call). Counting is only for batching: calls sent past it are correct, merely
/// not batched.
const STALL: std::time::Duration = std::time::Duration::from_millis(50);

/// The batch reply of an item that was not tried (`lua/batch.lua`).
pub(crate) const NOT_TRIED: i64 = -3;

/// The keys a batched lock call takes from its lock handle (the engine's `Base`): the
/// lock hash and its claim queue. Shared, not copied, while the call waits in its queue.
pub(crate) trait LockKeys: Send + Sync {
    fn lock_key(&self) -> &str;
    fn claim_queue(&self) -> &str;
}

/// The keys a batched release takes from its kind (the engine's `LockRef`): lock hash,
/// channel, fair queue, then any others of the release.
pub(crate) trait ReleaseKeys: Send + Sync {
    fn release_keys(&self) -> &[String];
}

/// One call that may be batched: what `lua/batch.lua` needs of it, as data.
pub(crate) enum Op {
    /// `lua/lock.lua` with no claim to stake: take or re-enter the lock for `owner`, or
    /// report its holder's TTL.
    Lock {
        keys: Arc<dyn LockKeys>,
        lease_ms: u64,
        owner: Arc<str>,
    },
    /// `lua/unlock.lua` when the name has no fair queue: release one hold of `owner`.
    Unlock {
        keys: Arc<dyn ReleaseKeys>,
        owner: Arc<str>,
        expected: u32,
    },
}

impl Op {
    fn lock_key(&self) -> &str {
        match self {
            Op::Lock { keys, .. } => keys.lock_key(),
            Op::Unlock { keys, .. } => &keys.release_keys()[0],
        }
    }
}

/// How a call goes out.
pub(crate) enum Turn {
    /// Send the full script now; the lane counts it in flight until the permit drops.
    Alone(Permit),
    /// The call went out in a batch: its reply there ([`NOT_TRIED`]: send the full script).
    Batched(RedisResult<i64>),
}

struct Item {
    op: Op,
    reply: oneshot::Sender<Turn>,
}

#[derive(Default)]
struct Lane {
    in_flight: usize,
    queue: Vec<Item>,
    /// Bumped when the lane stops waiting for its permits (see [`STALL`]): older permits
    /// no longer count.
    generation: u64,
    /// Calls of this lane that ended: the stall check's sign of progress.
    ended: u64,
    /// `ended` as the stall check last saw it.
    checked: u64,
}

/// The batching state of one client's command connection.
pub(crate) struct Batcher {
    lanes: Mutex<HashMap<u16, Lane>>,
    conn: CommandConn,
    /// `"spublish"` or `"publish"` (see `Core::publish`).
    publish: &'static str,
    /// What a last release publishes: the client's id.
    message: String,
    handle: tokio::runtime::Handle,
    /// Wakes the stall check when a queue starts (and when the batcher goes away).
    queued: Arc<Notify>,
}

/// A call in flight on its lane, as the lane counts it. Dropping it (the call returned or was
/// dropped) lets the lane's queue go out.
pub(crate) struct Permit {
    batcher: Arc<Batcher>,
    lane: u16,
    generation: u64,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.batcher.ended(self.lane, self.generation);
    }
}

/// What goes out of a lane now: a batch, or one call handed the lane's place.
type Sends = Vec<(Vec<Item>, u64)>;

impl Batcher {
    /// The batcher of `conn`, with its stall check running on `handle`.
    pub(crate) fn start(
        conn: CommandConn,
        publish: &'static str,
        message: String,
        handle: tokio::runtime::Handle,
    ) -> Arc<Batcher> {
        let queued = Arc::new(Notify::new());
        let batcher = Arc::new(Batcher {
            lanes: Mutex::new(HashMap::new()),
            conn,
            publish,
            message,
            handle: handle.clone(),
            queued: queued.clone(),
        });
        handle.spawn(stall_check(Arc::downgrade(&batcher), queued));
        batcher
    }

    fn lane(&self, op: &Op) -> u16 {
        if self.conn.is_cluster() {
            hash_slot(op.lock_key())
        } else {
            0
        }
    }

    fn lanes(&self) -> std::sync::MutexGuard<'_, HashMap<u16, Lane>> {
        self.lanes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for `op`'s turn: at once alone, or its reply in a batch.
    ///
    /// Cancel safe: dropped while the item waits in the queue, the item is never sent;
    /// dropped with a permit, the permit is given back.
    pub(crate) async fn turn(self: &Arc<Self>, op: Op) -> Turn {
        let lane = self.lane(&op);
        let waiting = {
            let mut lanes = self.lanes();
            let entry = lanes.entry(lane).or_default();
            if entry.in_flight < MAX_IN_FLIGHT && entry.queue.is_empty() {
                entry.in_flight += 1;
                return Turn::Alone(Permit {
                    batcher: self.clone(),
                    lane,
                    generation: entry.generation,
                });
            }
            let (reply, waiting) = oneshot::channel();
            if entry.queue.is_empty() {
                self.queued.notify_one();
            }
            entry.queue.push(Item { op, reply });
            waiting
        };
        // The sender is dropped unanswered only if the runtime dropped the batch's task: the
        // item may have been sent, so no error code (the outcome is unknown).
        waiting.await.unwrap_or_else(|_| {
            Turn::Batched(Err(RedisError::from((
                ErrorKind::Io,
                "batched call dropped before its reply",
            ))))
        })
    }

    /// A call of `lane` ended (its permit of `generation` dropped): sends what queued
    /// meanwhile.
    fn ended(self: &Arc<Self>, lane: u16, generation: u64) {
        let sends = {
            let mut lanes = self.lanes();
            let Some(entry) = lanes.get_mut(&lane) else {
                return;
            };
            if generation != entry.generation {
                return;
            }
            entry.ended += 1;
            entry.in_flight -= 1;
            let sends = fill(entry);
            if entry.in_flight == 0 && entry.queue.is_empty() {
                lanes.remove(&lane);
            }
            sends
        };
        self.send_all(lane, sends);
    }

    /// The stall check's round: a lane whose queue waited a whole [`STALL`] while none of
    /// its calls ended stops counting them and sends its queue. Returns whether any lane
    /// still has a queue.
    fn unstick(self: &Arc<Self>) -> bool {
        let mut queued = false;
        let mut stalled = Vec::new();
        {
            let mut lanes = self.lanes();
            for (&lane, entry) in lanes.iter_mut() {
                if entry.queue.is_empty() || entry.ended != entry.checked {
                    entry.checked = entry.ended;
                    queued |= !entry.queue.is_empty();
                    continue;
                }
                tracing::debug!(lane, "calls in flight stalled; sending the queue");
                entry.generation += 1;
                entry.in_flight = 0;
                stalled.push((lane, fill(entry)));
                queued |= !entry.queue.is_empty();
            }
        }
        for (lane, sends) in stalled {
            self.send_all(lane, sends);
        }
        queued
    }

    /// Sends each batch of `lane` (one item: hands that caller the lane's place instead).
    fn send_all(self: &Arc<Self>, lane: u16, sends: Sends) {
        for (mut items, generation) in sends {
            let permit = Permit {
                batcher: self.clone(),
                lane,
                generation,
            };
            if items.len() == 1 {
                let item = items.pop().expect("one item");
                // Refused (the caller left meanwhile): the permit drops here and tries the
                // next.
                let _ = item.reply.send(Turn::Alone(permit));
            } else {
                self.handle.spawn(self.clone().send(items, permit));
            }
        }
    }

    /// Sends `items` as one call of `lua/batch.lua` and answers each.
    async fn send(self: Arc<Self>, items: Vec<Item>, permit: Permit) {
        let reply = self.call(&items).await;
        // The next batch may go out while this one is answered.
        drop(permit);
        observe::batch_call(
            items.len(),
            matches!(&reply, Ok(r) if r.len() == items.len()),
        );
        let replies = match reply {
            Ok(replies) if replies.len() == items.len() => replies.into_iter().map(Ok).collect(),
            Ok(replies) => {
                let e = RedisError::from((
                    ErrorKind::UnexpectedReturnType,
                    "batch script answered the wrong number of replies",
                    format!("{} for {} calls", replies.len(), items.len()),
                ));
                vec![Err(e); items.len()]
            }
            // A script error mid-batch (`ERR user_script:...`) comes after some items may
            // have run: every member's outcome is unknown, so each goes to the settlement.
            Err(e) if e.code() == Some("ERR") => {
                let e = RedisError::from((
                    ErrorKind::Io,
                    "batch script failed after it may have run",
                    e.to_string(),
                ));
                vec![Err(e); items.len()]
            }
            Err(e) => vec![Err(e); items.len()],
        };
        for (item, reply) in items.into_iter().zip(replies) {
            let _ = item.reply.send(Turn::Batched(reply));
        }
    }

    /// The call of `lua/batch.lua` for `items`.
    async fn call(&self, items: &[Item]) -> RedisResult<Vec<i64>> {
        let mut keys: Vec<&str> = Vec::with_capacity(items.len() * 3);
        let mut numbers: Vec<i64> = Vec::with_capacity(items.len());
        for item in items {
            match &item.op {
                Op::Lock {
                    keys: lock,
                    lease_ms,
                    ..
                } => {
                    keys.extend([lock.lock_key(), lock.claim_queue()]);
                    numbers.push(i64::try_from(*lease_ms).unwrap_or(i64::MAX));
                }
                Op::Unlock {
                    keys: release,
                    expected,
                    ..
                } => {
                    keys.extend(release.release_keys()[..3].iter().map(String::as_str));
                    numbers.push(-1 - i64::from(*expected));
                }
            }
        }
        let owners: Vec<&str> = items
            .iter()
            .map(|item| match &item.op {
                Op::Lock { owner, .. } | Op::Unlock { owner, .. } => &**owner,
            })
            .collect();
        let message = self.message.as_str();
        let mut args: Vec<&dyn ToRedisArgsDyn> = Vec::with_capacity(2 + items.len() * 2);
        args.extend([&self.publish as &dyn ToRedisArgsDyn, &message]);
        for (number, owner) in numbers.iter().zip(&owners) {
            args.extend([number as &dyn ToRedisArgsDyn, owner]);
        }
        BATCH.run(&mut self.conn.clone(), &keys, &args).await
    }
}

/// Takes the batches `entry` may send now, counting each in flight.
fn fill(entry: &mut Lane) -> Sends {
    entry.queue.retain(|item| !item.reply.is_closed());
    let mut sends = Vec::new();
    while entry.in_flight < MAX_IN_FLIGHT && !entry.queue.is_empty() {
        let rest = entry.queue.split_off(entry.queue.len().min(MAX_BATCH));
        sends.push((std::mem::replace(&mut entry.queue, rest), entry.generation));
        entry.in_flight += 1;
    }
    sends
}

/// Checks the lanes every [`STALL`] while any has a queue; sleeps otherwise. Ends with the
/// batcher.
async fn stall_check(batcher: Weak<Batcher>, queued: Arc<Notify>) {
    loop {
        queued.notified().await;
        loop {
            tokio::time::sleep(STALL).await;
            let Some(batcher) = batcher.upgrade() else {
                return;
            };
            if !batcher.unstick() {
                break;
            }
        }
    }
}

impl Drop for Batcher {
    fn drop(&mut self) {
        // Lets the stall check see that the batcher is gone.
        self.queued.notify_one();
    }
}
