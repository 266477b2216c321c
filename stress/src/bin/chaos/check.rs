//! The checks: the barrier, the belief check, quiescence and the analysis of every hold.

use super::*;
use lockwise_testkit::checker::{Acquisition, History, Op};

/// The barrier, the belief check, the release and the quiescence check.
pub(super) async fn check_phase(
    c: &Arc<Coordinator>,
    conn: &mut ConnectionManager,
) -> Result<Vec<String>, BoxError> {
    let mut failures = Vec::new();
    let live = {
        let s = c.state();
        for info in &s.workers {
            if info.eof && info.killed_at.is_none() {
                failures.push(format!(
                    "worker {} (pid {}) exited on its own before the check",
                    info.label, info.pid
                ));
            }
        }
        s.live()
    };
    for &w in &live {
        c.tell(w, "STOP");
    }
    let parked = c
        .wait_for(Duration::from_secs(20), |s| {
            live.iter()
                .all(|&w| s.workers[w].parked || s.workers[w].eof)
        })
        .await;
    if !parked {
        failures.push("not every worker parked within 20 s of STOP".into());
    }
    // Abandoned waits release what a late reply granted in the background: a moment for that.
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Redis holds exactly what the parked tasks believe they hold.
    let expected = {
        let s = c.state();
        let mut e: Vec<Belief> = live
            .iter()
            .flat_map(|&w| s.workers[w].beliefs.clone())
            .collect();
        e.sort();
        e
    };
    let mut diff = Vec::new();
    let mut actual = Vec::new();
    // A few samples: a background release in flight may still be on its way; a phantom that a
    // watchdog keeps alive, or a missing hold, stays.
    for _ in 0..5 {
        actual = holds_in_redis(conn, &c.ns).await?;
        diff = compare_holds(&expected, &actual, &|owner| c.state().owner_label(owner));
        if diff.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    println!(
        "  check: {} hold(s) believed by parked tasks, {} in Redis, {} difference(s)",
        expected.len(),
        actual.len(),
        diff.len()
    );
    for d in &diff {
        failures.push(format!("Redis vs believed holds: {d}"));
    }
    for (k, pttl) in keys_of(conn, &format!("{}:*", c.ns)).await? {
        if pttl == -1 && !is_fence(&k) {
            c.state().no_ttl.insert(k);
        }
    }

    // Release everything; then nothing may be left while the workers are still connected.
    for &w in &live {
        c.tell(w, "RELEASE");
    }
    if !c
        .wait_for(Duration::from_secs(20), |s| {
            live.iter()
                .all(|&w| s.workers[w].released || s.workers[w].eof)
        })
        .await
    {
        failures.push("not every worker released within 20 s of RELEASE".into());
    }
    let deadline = now_ns() + ns(Duration::from_secs(3));
    let (keys, channels) = loop {
        let keys: Vec<(String, i64)> = keys_of(conn, &format!("{}:*", c.ns))
            .await?
            .into_iter()
            .filter(|(k, _)| !is_fence(k))
            .collect();
        let channels = channels_of(conn, &c.ns).await?;
        if (keys.is_empty() && channels.is_empty()) || now_ns() >= deadline {
            break (keys, channels);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    println!(
        "  check: after release {} key(s) besides fencing counters, {} channel(s) subscribed",
        keys.len(),
        channels.len()
    );
    for (k, pttl) in &keys {
        failures.push(format!(
            "leaked key {k} (pttl {pttl} ms) after every release"
        ));
    }
    for ch in &channels {
        failures.push(format!("channel {ch} still subscribed after every release"));
    }

    for &w in &live {
        c.tell(w, "EXIT");
    }
    if !c
        .wait_for(Duration::from_secs(15), |s| {
            live.iter().all(|&w| s.workers[w].eof)
        })
        .await
    {
        failures.push("not every worker exited within 15 s of EXIT".into());
    }
    let s = c.state();
    for &w in &live {
        if s.workers[w].stats.is_empty() {
            failures.push(format!(
                "worker {} ended without its STATS",
                s.workers[w].label
            ));
        }
    }
    Ok(failures)
}

/// The differences between believed and actual holds, one line each.
pub(super) fn compare_holds(
    expected: &[Belief],
    actual: &[Belief],
    label: &dyn Fn(&str) -> String,
) -> Vec<String> {
    let index = |v: &[Belief]| -> BTreeMap<(String, String), Belief> {
        v.iter()
            .map(|b| ((b.key.clone(), b.owner.clone()), b.clone()))
            .collect()
    };
    let (e, a) = (index(expected), index(actual));
    let mut out = Vec::new();
    for (k, b) in &a {
        match e.get(k) {
            None => out.push(format!(
                "phantom hold: {} owner {} of {} with count {} is in Redis, no live task believes it holds it",
                b.key,
                b.owner,
                label(&b.owner),
                b.count
            )),
            Some(x) if x.count != b.count => out.push(format!(
                "count mismatch: {} owner {} of {}: Redis {}, believed {}",
                b.key,
                b.owner,
                label(&b.owner),
                b.count,
                x.count
            )),
            Some(x) if x.token.is_some() && x.token != b.token => out.push(format!(
                "token mismatch: {} owner {}: Redis {:?}, believed {:?}",
                b.key, b.owner, b.token, x.token
            )),
            Some(_) => {}
        }
    }
    for (k, b) in &e {
        if !a.contains_key(k) {
            out.push(format!(
                "missing hold: {} owner {} of {} believes it holds (count {}), Redis has no such hold",
                b.key,
                b.owner,
                label(&b.owner),
                b.count
            ));
        }
    }
    out
}

/// The checks on the merged history, and the figures.
pub(super) fn analyse(c: &Coordinator, tl: Timeline) -> Vec<String> {
    let s = c.state();
    let mut failures = Vec::new();
    let rel = |t: u64| c.rel(t);
    let end_of_run = now_ns();
    let who = |h: &Hold| format!("{}/t{}", s.workers[h.worker].label, h.task);

    // Intervals that count for mutual exclusion: [acquired, last confirmed valid], a killed
    // worker's open hold ending at its kill, a lease hold at invoke + lease at the latest.
    // They go into the history checker the tests use (lockwise-testkit), which finds
    // overlapping holds and fencing tokens that do not rise.
    let history = History::new();
    let mut open = 0;
    for (&(worker, seq), h) in &s.holds {
        let end = match (h.end, s.workers[h.worker].killed_at) {
            (Some(e), _) => e,
            // Killed after sending its unlock but before its `E` line: the unlock may have
            // freed the lock before the kill, so the hold ends at its last check.
            (None, Some(k)) => h.unlocking.map_or(k, |u| u.min(k)),
            (None, None) => {
                open += 1;
                end_of_run
            }
        };
        let end = h.lease_end.map_or(end, |l| end.min(l));
        history.record(Acquisition {
            id: format!("{worker}-{seq}"),
            client: format!(
                "{} ({} {}, {}){}",
                who(h),
                h.mode,
                h.how,
                h.owner,
                stopped_note(&s, h, end)
            ),
            lock: h.lock.to_string(),
            owner: h.owner.clone(),
            op: Op::Ok,
            invoke: h.invoke,
            acquired: Some(h.acq),
            released: Some(end),
            validity: None,
            token: h.token,
            note: String::new(),
        });
    }
    if open > 0 {
        failures.push(format!(
            "{open} hold(s) of live workers never ended (no E line)"
        ));
    }
    // 1. No overlap. 2. Fencing tokens rise: an acquire invoked after another returned gets
    // a larger token.
    let overlaps = history.check_overlaps();
    let token_errors = history.check_tokens();

    // 3. Quiet phase: how long a released lock stayed free while somebody waited for it.
    let (w0, w1) = tl.handoff_window();
    let mut gaps: Vec<(u64, String)> = Vec::new();
    for lock in 0..c.args.locks {
        let mut hs: Vec<&Hold> = s.holds.values().filter(|h| h.lock == lock).collect();
        hs.sort_by_key(|h| h.acq);
        for h in &hs {
            let (Some(release), Some(done)) = (h.end, h.done) else {
                continue;
            };
            if h.how != "unlocked" || done < w0 || done > w1 {
                continue;
            }
            let from = hs.partition_point(|g| g.acq <= release);
            let Some(next) = hs.get(from) else { continue };
            // Somebody waited: called lock before this release and got the lock after it,
            // or was still waiting at the barrier.
            let waited = hs[from..]
                .iter()
                .take_while(|g| g.acq < release + ns(Duration::from_secs(30)))
                .any(|g| g.invoke < release)
                || s.abandoned
                    .iter()
                    .any(|&(l, invoke, _)| l == lock && invoke < release);
            if !waited {
                continue;
            }
            let gap = next.acq.saturating_sub(done);
            // A free-looking lock may not be free: an unlock that failed shortly before (its
            // reply lost to a killed connection) may have left its hold in Redis until its TTL.
            let failed_unlock = hs.iter().find(|g| {
                g.how == "error"
                    && g.lock == lock
                    && g.done
                        .is_some_and(|d| d <= release && d + ns(LEASES[1]) > release)
            });
            let note = failed_unlock.map_or(String::new(), |g| {
                format!(
                    " (the unlock of {} ({}) on this lock failed at {:.3} s: a hold it left in Redis may have kept the lock)",
                    who(g),
                    g.owner,
                    rel(g.done.unwrap_or(0))
                )
            });
            gaps.push((
                gap,
                format!(
                    "lock {lock}: {} ({} {}) released at {:.3} s, {} ({}) acquired at {:.3} s{note}",
                    who(h),
                    h.owner,
                    h.mode,
                    rel(done),
                    who(next),
                    next.mode,
                    rel(next.acq)
                ),
            ));
        }
    }
    gaps.sort_by_key(|g| g.0);
    let pct = |p: f64| -> f64 {
        if gaps.is_empty() {
            0.0
        } else {
            ms(gaps[((gaps.len() - 1) as f64 * p) as usize].0)
        }
    };
    let max_gap = gaps.last().map_or(0, |g| g.0);

    // 4. Calls and ends.
    let other: Vec<&Failed> = s.failed.iter().filter(|f| !f.retryable).collect();
    let after_faults: Vec<&Failed> = s.failed.iter().filter(|f| f.at >= tl.calm()).collect();
    // An unlock that found its hold gone is a late loss signal, unless the hold may have
    // expired after the guard last vouched for it and before the unlock ran:
    // - the worker was SIGSTOPped between that check and the unlock's reply (a paused holder,
    //   the documented TTL caveat; e.g. an unlock whose connection was killed, settled after
    //   the stop);
    // - a lease hold's unlock replied after its lease end (the server stalled, or the call
    //   was retried, past the lease the caller chose; the lease end is an inner bound of the
    //   expiry, so a reply before it proves the unlock ran while the hold lived).
    // - a nested hold whose re-entry failed with its outcome unknown: the settlement reads
    //   a count of 1 where the holds lasted, or where a fresh hold was taken after the run's
    //   were forgotten, and cannot tell them apart, so it gives the run up (engine docs,
    //   "Settling"): its guards are told lost first, then the hold is released, and an
    //   unlock waiting for that settlement answers NotHeld.
    // Those are counted, not failed. A stop's start is stamped after `kill` returned, but the
    // signal takes effect a moment later, so a check may be stamped just after that start
    // and still come before the stop. A stopped worker checks nothing: a stop that began
    // (was stamped) before the reply and ended after the check lies between the two.
    let may_have_expired = |h: &Hold| match (h.end, h.done) {
        (Some(end), Some(done)) => {
            h.lease_end.is_some_and(|l| done >= l)
                || s.workers[h.worker]
                    .stops
                    .iter()
                    .any(|st| st.0 <= done && (st.1 == 0 || st.1 > end))
        }
        _ => false,
    };
    let (notheld_expired, notheld): (Vec<&Hold>, Vec<&Hold>) = s
        .holds
        .values()
        .filter(|h| h.how == "notheld")
        .partition(|h| may_have_expired(h));
    let (notheld_given_up, notheld): (Vec<&Hold>, Vec<&Hold>) =
        notheld.into_iter().partition(|h| h.reentry_failed);
    let unlock_errors_quiet = s
        .holds
        .values()
        .filter(|h| h.how == "error" && h.done.is_some_and(|d| d >= tl.calm()))
        .count();

    // Figures.
    println!(
        "workers           {} started ({} killed), {} tasks each",
        s.workers.len(),
        s.workers.iter().filter(|w| w.killed_at.is_some()).count(),
        c.args.tasks
    );
    for w in &s.workers {
        let mine: Vec<&Hold> = s
            .holds
            .values()
            .filter(|h| s.workers[h.worker].label == w.label)
            .collect();
        let quiet = mine
            .iter()
            .filter(|h| h.acq >= tl.settled && h.acq <= tl.quiet_end)
            .count();
        let lost = mine.iter().filter(|h| h.how == "lost").count();
        let status = match w.killed_at {
            Some(k) => format!("SIGKILLed at +{:.1} s", rel(k)),
            None if w.stops.is_empty() => "live".to_string(),
            None => format!("live, SIGSTOPped {}x", w.stops.len()),
        };
        println!(
            "  {:<4} pid {:<7} {:>6} acquisitions ({:>5} in the quiet window), {:>3} lost; {status}",
            w.label,
            w.pid,
            mine.len(),
            quiet,
            lost
        );
        if w.killed_at.is_none() && quiet == 0 {
            failures.push(format!(
                "no progress: {} acquired nothing in the quiet window",
                w.label
            ));
        }
    }
    println!(
        "holds             {} recorded ({} fenced, {} fair), {} lost, {} unlocks found the hold gone \
         (+{} that may have expired first: worker SIGSTOPped between its last check and the \
         unlock's reply, or a lease that ran out before the reply; +{} given up by a \
         settlement after a re-entry's outcome was lost)",
        s.holds.len(),
        s.holds.values().filter(|h| h.token.is_some()).count(),
        s.holds
            .values()
            .filter(|h| h.mode.starts_with("fair"))
            .count(),
        s.holds.values().filter(|h| h.how == "lost").count(),
        notheld.len(),
        notheld_expired.len(),
        notheld_given_up.len()
    );
    let killed_open: Vec<&Hold> = s
        .holds
        .values()
        .filter(|h| h.end.is_none() && s.workers[h.worker].killed_at.is_some())
        .collect();
    println!(
        "killed mid-hold   {} open hold(s) of killed workers, {} of them with the unlock sent \
         (they end at their last check, not at the kill)",
        killed_open.len(),
        killed_open.iter().filter(|h| h.unlocking.is_some()).count()
    );
    println!(
        "failed calls      {} retryable, {} other; {} after the faults stopped",
        s.failed.len() - other.len(),
        other.len(),
        after_faults.len()
    );
    println!(
        "quiet handoffs    {} waited-for releases: free for p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (bound {:?})",
        gaps.len(),
        pct(0.5),
        pct(0.99),
        ms(max_gap),
        c.args.quiet_bound
    );
    for (gap, what) in gaps.iter().rev().take(3) {
        println!("  {:.1} ms: {what}", ms(*gap));
    }
    println!("overlaps          {}", overlaps.len());
    println!("token regressions {}", token_errors.len());
    println!("keys without TTL  {}", s.no_ttl.len());

    // Failures, each naming its check.
    for o in overlaps.iter().take(10) {
        failures.push(o.to_string());
    }
    if overlaps.len() > 10 {
        failures.push(format!("overlap: ... and {} more", overlaps.len() - 10));
    }
    for t in token_errors.iter().take(10) {
        failures.push(t.to_string());
    }
    if token_errors.len() > 10 {
        failures.push(format!(
            "token order: ... and {} more",
            token_errors.len() - 10
        ));
    }
    if gaps.is_empty() && c.args.faults {
        failures.push("quiet phase: no waited-for release measured".into());
    }
    if max_gap > ns(c.args.quiet_bound) {
        let slow = gaps.iter().filter(|g| g.0 > ns(c.args.quiet_bound)).count();
        failures.push(format!(
            "quiet phase: a free lock stayed untaken while waited for up to {:.1} ms ({slow} of {} handoffs above {:?}); worst: {}",
            ms(max_gap),
            gaps.len(),
            c.args.quiet_bound,
            gaps.last().map_or("", |g| g.1.as_str())
        ));
    }
    for h in notheld.iter().take(10) {
        failures.push(format!(
            "late loss signal: {} ({}) on lock {} confirmed its hold valid at {:.3} s, but unlock found it gone",
            who(h),
            h.mode,
            h.lock,
            rel(h.end.unwrap_or(0))
        ));
    }
    for f in other.iter().take(10) {
        failures.push(format!(
            "non-retryable error in {} at {:.3} s: {}",
            s.workers[f.worker].label,
            rel(f.at),
            f.message
        ));
    }
    if !after_faults.is_empty() {
        failures.push(format!(
            "{} lock call(s) failed after the faults stopped, first: {}",
            after_faults.len(),
            after_faults[0].message
        ));
    }
    if unlock_errors_quiet > 0 {
        failures.push(format!(
            "{unlock_errors_quiet} unlock(s) failed after the faults stopped"
        ));
    }
    for k in s.no_ttl.iter().take(10) {
        failures.push(format!("key without TTL: {k}"));
    }
    for v in s.violations.iter().take(10) {
        failures.push(v.clone());
    }
    failures
}
