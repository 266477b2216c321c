//! Output: aligned text tables for people, one JSON document with `--json`.

use std::io::{self, Write};
use std::time::Duration;
use unicode_width::UnicodeWidthStr;

use lockwise::{Holder, LeakReport, Listing, LockInfo, LockKind, OwnerCheck};
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

/// The JSON form of a result (the library's `Serialize`, its `serde` feature).
fn to_json(value: &impl serde::Serialize) -> io::Result<Value> {
    serde_json::to_value(value).map_err(io::Error::other)
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

pub(crate) fn listing(
    out: &mut impl Write,
    l: &Listing,
    top: usize,
    as_json: bool,
) -> io::Result<()> {
    if as_json {
        let mut shown = l.clone();
        shown.locks.truncate(top);
        return writeln!(out, "{}", to_json(&shown)?);
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
        let doc = json!({"name": name, "locks": to_json(&infos)?});
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
        return writeln!(out, "{}", to_json(r)?);
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
    if as_json {
        let doc = json!({"name": name, "released": to_json(&released)?});
        return writeln!(out, "{doc}");
    }
    let kinds: Vec<&str> = released.iter().map(|k| k.as_str()).collect();
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
