//! The fault matrix: every fault-injection scenario, one test binary. Each scenario runs
//! against its own real `redis-server`; faults are real (signals, CLIENT KILL, SCRIPT FLUSH,
//! restarts, a black-holing proxy), and the larger scenarios are judged by the history checker
//! (`lockwise_testkit::checker`): no two holds of one lock overlap within their validity, fencing
//! tokens rise, no stale write is accepted, no key is left without a TTL, nothing is left after
//! quiescence. Scenarios are numbered as in the table below (the number in brackets).
//!
//! | module | scenario (test) | fault | what must hold |
//! |---|---|---|---|
//! | `server::stall` | `server_stall_sigstop_half_ttl` (3) | SIGSTOP the server for 0.5 x TTL while 2 clients x 4 tasks contend | renewals merely late; no overlap; every task goes on; no key without TTL; nothing left |
//! | `server::stall` | `server_stall_sigstop_twice_ttl` (3) | SIGSTOP the server for 2 x TTL | as above, and some holder learns its hold is gone (`lost()`, `NotHeld` or a retryable error) |
//! | `server::stall` | `slow_server_client_pause` (4) | `CLIENT PAUSE 1500 ALL` | calls late, some past the response timeout as typed retryable errors; no overlap; nothing leaked |
//! | `server::stall` | `slow_server_debug_sleep` (4) | `DEBUG SLEEP 1.5` (held locks expire meanwhile) | same checks |
//! | `server::stall` | `late_reply_after_response_timeout_leaves_no_hold` | `DEBUG SLEEP 0.8` under a 200 ms response timeout | the call fails retryably or succeeds late; the late hold is undone (key gone within 2 s); another client locks; the client works again |
//! | `server::stall` | `eviction_policy_warns_and_oom_fails_closed` (11) | `allkeys-lru`; then `noeviction` with a full server | one warning at connect; every kind fails closed with a typed retryable OOM error, writes nothing, works again once memory is freed |
//! | `server::loss` | `subscription_loss_every_200ms` (5) | `CLIENT KILL TYPE pubsub` every 200 ms for 3 s, 3 clients x 12 waiters, watchdog 30 s | no task stuck (all done within 10 s); no overlap; NUMSUB 0 at the end |
//! | `server::loss` | `client_kill_pubsub_then_unlock_at_once` | `CLIENT KILL TYPE pubsub` under 8 waiters, unlock right after | every waiter acquires within 5 s |
//! | `server::loss` | `client_kill_pubsub_then_unlock_after_reconnect` | same, unlock 500 ms later | every waiter acquires within 5 s |
//! | `server::loss` | `client_kill_pubsub_repeatedly_while_contending` | `CLIENT KILL TYPE pubsub` every 200 ms for 2 s, 2 clients x 6 tasks | every call succeeds; all done within 10 s (TTL 30 s); no overlap; no subscription left |
//! | `server::loss` | `script_cache_loss_every_second` (6) | `SCRIPT FLUSH` every second for 4 s, every lock kind | every call `Ok` (no NOSCRIPT reaches a caller); no overlap; tokens rise |
//! | `server::loss` | `script_flush_mid_run` | `SCRIPT FLUSH` every 100 ms for 3 s, 2 clients x 8 tasks and a watchdog hold | no call fails; no overlap; the watchdog hold survives; the EVAL fallback ran |
//! | `server::loss` | `watchdog_unlock_race_no_ttl_rise` (8) | 30 ms watchdog (renewal every 10 ms) racing unlock / drop / cancel / timeout | keyspace events show no renewal of a released key; nothing left |
//! | `restart` | `server_restart_marks_watchdog_lock_lost` | restart on the same port, empty dataset, under a held watchdog lock | `lost()` within 3 s; a new `lock()` works; the old guard's unlock is `NotHeld` and leaves the new hold alone |
//! | `restart` | `waiter_during_server_restart_does_not_hang` | restart under a holder and a waiter (TTL 30 s) | within 5 s the waiter acquires or fails retryably; the old holder's unlock is `NotHeld` or `Error::Redis`; nothing left |
//! | `restart` | `restart_without_persistence` (10) | `SHUTDOWN NOSAVE` + restart under a held RLock and FencedLock, contenders before and after | both held locks lost, unlocks `NotHeld`; tokens after the restart above every token before; both clients continue; checker clean |
//! | `restart` | `redis_down_while_waiting_is_a_retryable_error` | SIGKILL the server (no restart) under a holder and a waiter | the waiter returns a retryable `Error::Redis` (no wait for the 30 s TTL); the holder's unlock is `Error::Redis` |
//! | `process` | `baseline_8_processes_x_2_tasks` (1) | none: 8 child processes x 2 tasks on one lock, 10,000 non-atomic increments | no overlap; the counter is exact; no key without TTL (sampled every 50 ms); nothing left |
//! | `process` | `holder_stall_sigstop_2x_lease` (2) | SIGSTOP a holder process for 2 x its 1 s lease; another client takes over and writes | late writes `StaleToken`; `lost()` within 2 s; unlocks `NotHeld`; the new owner's hold and PTTL untouched; checker clean |
//! | `process` | `holder_crash_sigkill` (7) | SIGKILL a holder process (watchdog 1 s) under a waiter | the waiter acquires within TTL + 1 s; no overlap; nothing left |
//! | `process` | `fair_waiter_crash_sigkill` (9) | SIGKILL 2 of 6 queued FairLock waiter processes | the live waiters acquire in arrival order; the dead never do; no queue entry, key or channel left |
//! | `process` | `fair_killed_waiter_process_is_skipped` | SIGKILL a queued FairLock waiter process (no clean-up runs) | the waiter behind it acquires within its 1 s waiter lease (+0.7 s); queue empty; nothing left |
//! | `partition` | `partition_holder_told_within_lease` | a proxy black-holes the holder's link while another client waits | the holder's `lost()` fires no later than the other client acquires |
//! | `partition` | `short_lease_reentry_before_cut_does_not_delay_loss` | a 50 ms lease re-entry, then the cut | the re-entry does not move the loss deadline |
//! | `partition` | `late_lock_reply_then_cut_holder_told_first` | the lock reply 600 ms late, then the cut | the loss deadline runs from the send time; the holder is told first |
//! | `history_checker` | `checker_detects_*`, `checker_clock_is_the_hosts_monotonic_clock` | synthetic histories | the checker finds overlaps, token regressions, stale writes, hold-count and TTL rises; its clock is `CLOCK_MONOTONIC` |
//!
//! Faults whose consequence is specific to one lock kind stay with that kind:
//!
//! | file | scenario (test) | fault |
//! |---|---|---|
//! | tests/locks/fenced.rs | `tokens_after_a_restart_without_persistence_are_larger`, `tokens_after_a_restart_from_an_older_rdb_snapshot_are_larger`, `tokens_after_a_restart_from_an_aof_missing_its_last_writes_are_larger`, `tokens_after_a_failover_to_a_lagging_replica_are_larger` | restart wiping or rolling back the fence counter; failover to a lagging replica |
//! | tests/locks/multi.rs | `member_lost_to_restart_while_waiting_restarts_acquire`, `members_lost_to_restart_after_return_fire_lost` | restart wiping members of a multi-lock |
//! | tests/redlock/ | `two_nodes_down_still_acquires`, `three_nodes_down_fails_and_releases_the_rest`, `node_restarted_while_held_keeps_quorum_until_a_majority_is_gone`, `late_reply_from_a_stalled_node_is_released_after_it_answers` | Redlock nodes killed, restarted, stalled |
//! | tests/locks/hold_accounting.rs | `unlock_on_killed_connection_*`, `unlock_reply_lost_to_server_stall_is_settled`, `timed_out_reentry_then_reentry_leaks_no_hold` | `CLIENT KILL TYPE normal`, `DEBUG SLEEP` under an unlock or a re-entry |
//! | tests/locks/wakeup.rs | `crashed_leased_holder_is_taken_within_its_ttl`, `crashed_watchdog_holder_is_taken_within_its_ttl` | a holder that never unlocks |
//! | tests/locks/watchdog.rs | `paused_holder_sees_is_lost_at_once_on_resume` | a holder runtime paused past its TTL |
//! | tests/client/listener.rs | `refused_resubscription_after_reconnect_still_wakes_waiters`, `subscription_loss_wakes_one_waiter_per_lock_not_every_waiter` | a resubscription the server refuses (ACL) after a pub/sub kill; a pub/sub kill under 300 waiters |
//! | stress/src/bin/chaos/ (CI, not a test) | the multi-process chaos soak | normal and pub/sub connection kills, SCRIPT FLUSH, DEBUG SLEEP, server SIGSTOP, worker SIGSTOP past the watchdog timeout, worker SIGKILL, all at once |
//! | tests/deployments/ | `cluster_failover_with_waiters_checked`, `cluster_master_sigkill_with_waiters_checked`, `cluster_renewals_survive_failover`, `sentinel_master_sigkill_with_waiters_checked`, `sentinel_replica_sync_fails_closed_without_replica`, `sentinel_silence_stops_writes_and_loses_holds`, `sentinel_cut_off_client_takes_nothing_on_a_deposed_master` | Cluster / Sentinel failovers, a stopped replica, a client cut off from every sentinel (the `suite::proxy` black hole) |

use suite::checker;

mod history_checker;
mod partition;
mod process;
mod randomized;
mod restart;
mod server;
