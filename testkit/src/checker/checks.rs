//! The checks: on a recorded [`History`] (overlaps, tokens, stale writes, hold counts, TTL
//! rises) and against the server (keys without TTL, quiescence, samples).

use super::*;

impl History {
    // ---- checks on the history ----

    /// Every history check: overlaps, tokens, stale writes, hold counts, TTL rises.
    pub fn check(&self) -> Vec<Violation> {
        let mut v = self.check_overlaps();
        v.extend(self.check_tokens());
        v.extend(self.check_stale_writes());
        v.extend(self.check_hold_counts());
        v.extend(self.check_ttl_after_release());
        v
    }

    /// Two successful holds of one lock whose counted intervals
    /// `[acquired, min(released, invoke + validity))` overlap. Re-entry (the same owner
    /// acquiring again while it holds) is not an overlap.
    pub fn check_overlaps(&self) -> Vec<Violation> {
        let acqs = self.acquisitions();
        let mut by_lock: BTreeMap<&str, Vec<(u64, u64, &Acquisition)>> = BTreeMap::new();
        for a in &acqs {
            if let (Some(start), Some(end)) = (a.acquired, a.effective_end()) {
                if end > start {
                    by_lock.entry(&a.lock).or_default().push((start, end, a));
                }
            }
        }
        let mut out = Vec::new();
        for (lock, mut iv) in by_lock {
            iv.sort_by_key(|x| x.0);
            // Sweep: comparing each interval with the one reaching furthest so far finds an
            // overlap between different owners whenever there is one.
            let mut furthest: Option<(u64, &Acquisition)> = None;
            for &(start, end, a) in &iv {
                if let Some((fend, f)) = furthest {
                    let reentry = f.owner == a.owner && !a.owner.is_empty();
                    if start < fend && !reentry {
                        out.push(violation(
                            "overlap",
                            format!(
                                "lock {lock}: {} ({}, id {}, token {:?}) held [{:.3}, {:.3}) ms and {} ({}, id {}, token {:?}) from {:.3} ms: {:.3} ms overlap",
                                f.client,
                                f.owner,
                                f.id,
                                f.token,
                                ms(f.acquired.unwrap()),
                                ms(fend),
                                a.client,
                                a.owner,
                                a.id,
                                a.token,
                                ms(start),
                                ms(fend.min(end) - start)
                            ),
                        ));
                    }
                }
                if furthest.is_none_or(|(fend, _)| end > fend) {
                    furthest = Some((end, a));
                }
            }
        }
        out
    }

    /// Fencing tokens in acquisition order: a successful acquisition invoked after another one
    /// returned must get a larger token (equal is allowed only for re-entry by the same owner
    /// while it still held).
    pub fn check_tokens(&self) -> Vec<Violation> {
        let acqs = self.acquisitions();
        let mut by_lock: BTreeMap<&str, Vec<&Acquisition>> = BTreeMap::new();
        for a in &acqs {
            if a.op == Op::Ok && a.token.is_some() && a.acquired.is_some() {
                by_lock.entry(&a.lock).or_default().push(a);
            }
        }
        let mut out = Vec::new();
        for (lock, list) in by_lock {
            let mut by_acquired = list.clone();
            by_acquired.sort_by_key(|a| a.acquired.unwrap());
            let mut by_invoke = list;
            by_invoke.sort_by_key(|a| a.invoke);
            let mut i = 0;
            let mut best: Option<&Acquisition> = None; // largest token among those returned
            for b in by_invoke {
                while i < by_acquired.len() && by_acquired[i].acquired.unwrap() < b.invoke {
                    let a = by_acquired[i];
                    if best.is_none_or(|x| a.token > x.token) {
                        best = Some(a);
                    }
                    i += 1;
                }
                let Some(a) = best else { continue };
                let (ta, tb) = (a.token.unwrap(), b.token.unwrap());
                let reentry = a.owner == b.owner
                    && !a.owner.is_empty()
                    && a.released.is_none_or(|r| b.invoke < r);
                let ok = tb > ta || (reentry && tb == ta);
                if !ok {
                    out.push(violation(
                        "token",
                        format!(
                            "lock {lock}: {} (id {}) got token {tb} at {:.3} ms, but {} (id {}) already had token {ta} at {:.3} ms",
                            b.client,
                            b.id,
                            ms(b.acquired.unwrap()),
                            a.client,
                            a.id,
                            ms(a.acquired.unwrap())
                        ),
                    ));
                }
            }
        }
        out
    }

    /// A write accepted although a write with a larger token had been accepted before it was
    /// invoked.
    pub fn check_stale_writes(&self) -> Vec<Violation> {
        let writes = self.writes();
        let mut out = Vec::new();
        for w in writes.iter().filter(|w| w.accepted == Some(true)) {
            if let Some(newer) = writes.iter().find(|v| {
                v.resource == w.resource
                    && v.accepted == Some(true)
                    && v.complete < w.invoke
                    && v.token > w.token
            }) {
                out.push(violation(
                    "stale-write",
                    format!(
                        "{}: {} wrote with token {} at {:.3} ms after {} had written with token {} at {:.3} ms",
                        w.resource,
                        w.client,
                        w.token,
                        ms(w.invoke),
                        newer.client,
                        newer.token,
                        ms(newer.complete)
                    ),
                ));
            }
        }
        out
    }

    /// A hold count below 1 in a lock hash (a field at 0 must have been deleted; below 0 is
    /// an unlock that released more than was held).
    pub fn check_hold_counts(&self) -> Vec<Violation> {
        self.with(|h| {
            h.holds
                .iter()
                .filter(|s| s.count < 1)
                .map(|s| {
                    violation(
                        "hold-count",
                        format!(
                            "lock {} owner {}: hold count {} at {:.3} ms",
                            s.lock,
                            s.owner,
                            s.count,
                            ms(s.at)
                        ),
                    )
                })
                .collect()
        })
    }

    /// A lock's TTL that rose between two samples with the same holders while none of them
    /// held it (per the history: no attempt of theirs on that lock spans the two samples,
    /// an attempt of unknown outcome or one never released counting as holding forever).
    pub fn check_ttl_after_release(&self) -> Vec<Violation> {
        let (acqs, mut ttls) = self.with(|h| (h.acqs.clone(), h.ttls.clone()));
        ttls.sort_by(|a, b| (&a.lock, a.at).cmp(&(&b.lock, b.at)));
        let mut out = Vec::new();
        for w in ttls.windows(2) {
            let (s1, s2) = (&w[0], &w[1]);
            if s1.lock != s2.lock || s1.holders.is_empty() || s1.holders != s2.holders {
                continue;
            }
            if s1.pttl < 0 || s2.pttl <= s1.pttl {
                continue;
            }
            let holders: Vec<&str> = s1.holders.split(',').collect();
            let holding = acqs.iter().any(|a| {
                a.lock == s1.lock
                    && holders.contains(&a.owner.as_str())
                    && a.op != Op::Fail
                    && a.invoke <= s2.at
                    && (a.op != Op::Ok || a.released.is_none_or(|r| r >= s1.at))
            });
            if !holding {
                out.push(violation(
                    "ttl-rise",
                    format!(
                        "lock {}: PTTL rose from {} ms at {:.3} ms to {} ms at {:.3} ms while its holders {} had released it",
                        s1.lock,
                        s1.pttl,
                        ms(s1.at),
                        s2.pttl,
                        ms(s2.at),
                        s1.holders
                    ),
                ));
            }
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------
// Checks against the server

type Conn = redis::aio::MultiplexedConnection;

/// Keys of namespace `ns` (prefix `<ns>:`) without a TTL, except fencing counters (`:fence:`).
pub async fn check_ttls(conn: &mut Conn, ns: &str) -> Vec<Violation> {
    let prefix = format!("{ns}:");
    crate::keys_with_pttl(conn)
        .await
        .into_iter()
        .filter(|(k, pttl)| *pttl == -1 && k.starts_with(&prefix) && !k.contains(":fence:"))
        .map(|(k, _)| violation("no-ttl", format!("key {k} has no TTL")))
        .collect()
}

/// Waits up to `timeout` for quiescence: no key of namespace `ns` left (fencing counters
/// excepted) and no channel subscribed (PUBSUB CHANNELS and NUMSUB of each); then reports
/// what is left, and keys without TTL.
pub async fn check_quiescent(conn: &mut Conn, ns: &str, timeout: Duration) -> Vec<Violation> {
    let prefix = format!("{ns}:");
    let leftovers = |keys: Vec<(String, i64)>| -> Vec<(String, i64)> {
        keys.into_iter()
            .filter(|(k, _)| k.starts_with(&prefix) && !k.contains(":fence:"))
            .collect()
    };
    let deadline = Instant::now() + timeout;
    loop {
        let keys = leftovers(crate::keys_with_pttl(conn).await);
        let channels = subscribed_channels(conn).await;
        if (keys.is_empty() && channels.is_empty()) || Instant::now() >= deadline {
            let mut out = check_ttls(conn, ns).await;
            out.extend(keys.into_iter().map(|(k, pttl)| {
                violation(
                    "leftover-key",
                    format!("key {k} left after quiescence (pttl {pttl} ms)"),
                )
            }));
            out.extend(channels.into_iter().map(|(c, n)| {
                violation(
                    "channel",
                    format!("channel {c} still has {n} subscriber(s) after quiescence"),
                )
            }));
            return out;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Channels with subscribers (PUBSUB CHANNELS), each with its NUMSUB.
pub async fn subscribed_channels(conn: &mut Conn) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for c in crate::active_channels(conn).await {
        let n = crate::numsub(conn, &c).await;
        if n > 0 {
            out.push((c, n));
        }
    }
    out
}

/// Reads every owner field of the lock hash `key` into hold samples of `history` (label `lock`),
/// and a TTL sample with the holders; returns the PTTL.
pub async fn sample_lock(history: &History, conn: &mut Conn, lock: &str, key: &str) -> i64 {
    let (fields, pttl): (Vec<(String, i64)>, i64) = redis::pipe()
        .cmd("HGETALL")
        .arg(key)
        .cmd("PTTL")
        .arg(key)
        .query_async(conn)
        .await
        .expect("sample lock");
    let at = now_ns();
    let mut owners: Vec<String> = Vec::new();
    // A fenced lock's hash also has the field `token`, a waited-for one `waiting`.
    for (owner, count) in fields.into_iter().filter(|(f, _)| crate::is_owner_field(f)) {
        history.hold_sample(HoldSample {
            lock: lock.to_string(),
            owner: owner.clone(),
            at,
            count,
        });
        owners.push(owner);
    }
    owners.sort();
    history.ttl_sample(TtlSample {
        lock: lock.to_string(),
        at,
        pttl,
        holders: owners.join(","),
    });
    pttl
}

/// Hold counts of every lock hash (`*:lock*` keys of type hash) of namespace `ns`, recorded
/// into `history` as samples (checked by [`History::check_hold_counts`]).
pub async fn sample_all_hold_counts(history: &History, conn: &mut Conn, ns: &str) {
    let keys: Vec<String> = conn.keys(format!("{ns}:lock*")).await.unwrap();
    for k in keys {
        let fields: Vec<(String, i64)> = match conn.hgetall(&k).await {
            Ok(f) => f,
            Err(_) => continue, // not a hash
        };
        let at = now_ns();
        for (owner, count) in fields.into_iter().filter(|(f, _)| crate::is_owner_field(f)) {
            history.hold_sample(HoldSample {
                lock: k.clone(),
                owner,
                at,
                count,
            });
        }
    }
}
