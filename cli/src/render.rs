//! Output: aligned text tables for people, one JSON document with `--json`.

use std::io::{self, Write};
use std::time::Duration;
use unicode_width::UnicodeWidthStr;

use lockwise::{Holder, KeyInfo, LeakReport, Listing, LockInfo, LockKind, OwnerCheck, QueueEntry};
use serde_json::{json, Value};

/// `d` as `12.3s`, `9m57s` or `23h59m`; `-` for none.
pub(crate) fn ttl(d: Option<Duration>) -> String {
    match d {
        None => "-".to_string(),
        Some(d) if d.as_secs() >= 3600 => {
            format!("{}h{:02}m", d.as_secs() / 3600, d.as_secs() / 60 % 60)
        }
        Some(d) if d.as_secs() >= 60 => format!("{}m{:02}s", d.as_secs() / 60, d.as_secs() % 60),
        Some(d) => format!("{:.1}s", d.as_secs_f64()),
    }
}

fn ms(d: Option<Duration>) -> Value {
    d.map_or(Value::Null, |d| json!(d.as_millis() as u64))
}

/// `<first 8 of the uuid>…:<task>`, short enough for a table.
fn short_owner(owner: &str) -> String {
    match owner.split_once(':') {
        Some((uuid, task)) if uuid.len() > 8 => format!("{}…:{task}", &uuid[..8]),
        _ => owner.to_string(),
    }
}

fn holders_cell(holders: &[Holder]) -> String {
    if holders.is_empty() {
        return "-".to_string();
    }
    let mut cell: Vec<String> = holders
        .iter()
        .take(3)
        .map(|h| format!("{} x{}", short_owner(&h.owner), h.count))
        .collect();
    if holders.len() > 3 {
        cell.push(format!("+{}", holders.len() - 3));
    }
    cell.join(", ")
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or("-".to_string(), |v| v.to_string())
}

/// Rows as columns padded to the widest cell, by display width (a CJK character or an
/// emoji takes two columns of a terminal).
pub(crate) fn table(out: &mut impl Write, rows: &[Vec<String>]) -> io::Result<()> {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map_or(0, |s| s.width()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.push_str(&" ".repeat(widths[c] - cell.width() + 2));
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

/// The table of `locks` (at most `top` rows).
pub(crate) fn lock_rows(locks: &[LockInfo], top: usize) -> Vec<Vec<String>> {
    let mut rows = vec![[
        "NAME", "KIND", "HOLDERS", "TTL", "QUEUE", "WAITERS", "TOKEN", "PERMITS",
    ]
    .map(String::from)
    .to_vec()];
    for l in locks.iter().take(top) {
        rows.push(vec![
            l.name.clone(),
            l.kind.as_str().to_string(),
            holders_cell(&l.holders),
            ttl(l.ttl),
            l.queue_len.to_string(),
            l.waiters.to_string(),
            opt(l.token),
            opt(l.permits),
        ]);
    }
    rows
}

fn holder_json(h: &Holder) -> Value {
    json!({"owner": h.owner, "count": h.count, "mode": h.mode.as_str(), "expires_in_ms": ms(h.expires_in)})
}

fn queue_json(q: &QueueEntry) -> Value {
    json!({"id": q.id, "deadline_in_ms": q.deadline_in_ms})
}

fn key_json(k: &KeyInfo) -> Value {
    json!({"key": k.key, "role": k.role, "ttl_ms": ms(k.ttl)})
}

pub(crate) fn lock_json(l: &LockInfo) -> Value {
    json!({
        "name": l.name,
        "kind": l.kind.as_str(),
        "holders": l.holders.iter().map(holder_json).collect::<Vec<_>>(),
        "ttl_ms": ms(l.ttl),
        "queue_len": l.queue_len,
        "queue": l.queue.iter().map(queue_json).collect::<Vec<_>>(),
        "waiters": l.waiters,
        "token": l.token,
        "permits": l.permits,
        "keys": l.keys.iter().map(key_json).collect::<Vec<_>>(),
    })
}

pub(crate) fn listing(
    out: &mut impl Write,
    l: &Listing,
    top: usize,
    as_json: bool,
) -> io::Result<()> {
    if as_json {
        let doc = json!({
            "locks": l.locks.iter().take(top).map(lock_json).collect::<Vec<_>>(),
            "scanned": l.scanned,
            "complete": l.complete,
            "unreadable": l.unreadable.iter().map(|(name, why)| json!({"name": name, "error": why})).collect::<Vec<_>>(),
        });
        return writeln!(out, "{doc}");
    }
    table(out, &lock_rows(&l.locks, top))?;
    for (name, why) in &l.unreadable {
        writeln!(out, "unreadable: {name}: {why}")?;
    }
    let more = if l.complete {
        ""
    } else {
        " (limit reached: not every key was scanned)"
    };
    writeln!(
        out,
        "{} locks, {} keys scanned{more}",
        l.locks.len(),
        l.scanned
    )
}

pub(crate) fn inspection(
    out: &mut impl Write,
    name: &str,
    infos: &[LockInfo],
    as_json: bool,
) -> io::Result<()> {
    if as_json {
        let doc = json!({"name": name, "locks": infos.iter().map(lock_json).collect::<Vec<_>>()});
        return writeln!(out, "{doc}");
    }
    if infos.is_empty() {
        return writeln!(out, "{name}: no keys (free, never used, or expired)");
    }
    for (i, l) in infos.iter().enumerate() {
        if i > 0 {
            writeln!(out)?;
        }
        writeln!(out, "{} ({})", l.name, l.kind.as_str())?;
        writeln!(out, "  ttl:      {}", ttl(l.ttl))?;
        if let Some(t) = l.token {
            writeln!(out, "  token:    {t}")?;
        }
        if let Some(p) = l.permits {
            let what = if l.kind == LockKind::CountDownLatch {
                "count"
            } else {
                "permits"
            };
            writeln!(out, "  {what:<8}  {p}")?;
        }
        writeln!(out, "  waiters:  {}", l.waiters)?;
        if l.holders.is_empty() {
            writeln!(out, "  holders:  none")?;
        } else {
            writeln!(out, "  holders:")?;
        }
        for h in &l.holders {
            let until = h
                .expires_in
                .map(|d| format!(" (expires in {})", ttl(Some(d))))
                .unwrap_or_default();
            writeln!(
                out,
                "    {} {} x{}{until}",
                h.owner,
                h.mode.as_str(),
                h.count
            )?;
        }
        if l.queue_len > 0 {
            writeln!(out, "  queue:    {} entries", l.queue_len)?;
            for q in &l.queue {
                let deadline = match q.deadline_in_ms {
                    None => "no deadline".to_string(),
                    Some(ms) if ms < 0 => format!("deadline passed {} ms ago", -ms),
                    Some(ms) => format!("deadline in {ms} ms"),
                };
                writeln!(out, "    {} ({deadline})", q.id)?;
            }
        }
        writeln!(out, "  keys:")?;
        for k in &l.keys {
            writeln!(
                out,
                "    {:<40} {:<13} ttl {}",
                k.key,
                k.role,
                k.ttl
                    .map_or("none (persistent)".to_string(), |d| ttl(Some(d)))
            )?;
        }
    }
    Ok(())
}

pub(crate) fn leaks(out: &mut impl Write, r: &LeakReport, as_json: bool) -> io::Result<()> {
    let owner_check = match &r.owner_check {
        OwnerCheck::Done { live_clients } => {
            format!("owners checked against {live_clients} live clients")
        }
        OwnerCheck::Skipped { reason } => format!("owner check skipped: {reason}"),
        other => format!("{other:?}"),
    };
    if as_json {
        let leaks: Vec<Value> = r
            .leaks
            .iter()
            .map(|l| json!({"key": l.key, "name": l.name, "reason": l.reason.describe()}))
            .collect();
        let doc = json!({
            "leaks": leaks,
            "scanned": r.scanned,
            "complete": r.complete,
            "owner_check": owner_check,
        });
        return writeln!(out, "{doc}");
    }
    let mut rows = vec![vec!["KEY".to_string(), "PROBLEM".to_string()]];
    for l in &r.leaks {
        rows.push(vec![l.key.clone(), l.reason.describe()]);
    }
    if r.leaks.is_empty() {
        writeln!(out, "no leaks")?;
    } else {
        table(out, &rows)?;
    }
    let more = if r.complete {
        ""
    } else {
        " (limit reached: not every key was scanned)"
    };
    let n = r.leaks.len();
    let s = if n == 1 { "" } else { "s" };
    writeln!(
        out,
        "{n} leak{s}, {} keys scanned{more}; {owner_check}",
        r.scanned
    )
}

pub(crate) fn unlocked(
    out: &mut impl Write,
    name: &str,
    released: &[LockKind],
    as_json: bool,
) -> io::Result<()> {
    let kinds: Vec<&str> = released.iter().map(|k| k.as_str()).collect();
    if as_json {
        return writeln!(out, "{}", json!({"name": name, "released": kinds}));
    }
    if kinds.is_empty() {
        writeln!(out, "{name}: was not held; nothing changed")
    } else {
        writeln!(
            out,
            "{name}: released ({}); waiters woken",
            kinds.join(", ")
        )
    }
}
