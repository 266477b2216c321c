//! The lock kinds against real servers: each module takes one kind, or one property that
//! every kind shares, through its paces. What Redis holds is checked after every test.
//!
//! | module | what |
//! |---|---|
//! | [`rlock`], [`rlock_leases`] | `RLock`: key layout, re-entry, hold counts; leases and timing |
//! | [`fair`], [`fair_handoff`], [`fenced`], [`multi`], [`rwlock`], [`spin`] | the other kinds |
//! | [`fenced_postgres`] | fencing tokens checked by a real PostgreSQL table |
//! | [`contract`] | the contract every kind offers (`Lock`, `LockGuard`, `run`), for every kind |
//! | [`same_name`] | one name, one lock: every mutex kind of a name excludes the others |
//! | [`mutual_exclusion`], [`overtake`], [`wakeup`] | contention: exclusion, the overtake bound, wakeups |
//! | [`ownership`], [`stale_guard`], [`hold_accounting`], [`hold_runs`] | who holds, guards that no longer do, hold counts, runs of holds |
//! | [`settlement`] | settlements a count cannot fool: a re-entry run after a force unlock, a vanished hold handed over |
//! | [`watchdog`], [`cancellation`] | renewal and loss; dropping a future at any point |
//! | [`wait_budget`] | a wait budget is a promise: bounded under a stall, retried while it lasts |
//! | [`batching`] | calls that queue on the connection go out as one script call: faults and edge cases |

mod batching;
mod cancellation;
mod contract;
mod fair;
mod fair_handoff;
mod fenced;
mod fenced_postgres;
mod hold_accounting;
mod hold_runs;
mod multi;
mod mutual_exclusion;
mod overtake;
mod ownership;
mod rlock;
mod rlock_leases;
mod rwlock;
mod same_name;
mod settlement;
mod spin;
mod stale_guard;
mod wait_budget;
mod waiter_mark;
mod wakeup;
mod watchdog;
