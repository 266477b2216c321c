//! The history's text form: one line per record, so a child process can print its history
//! and the parent merge it ([`History::to_text`], [`History::line_of`],
//! [`History::merge_text`]).

use super::*;

impl History {
    /// One line for the acquisition `id` (its current state).
    pub fn line_of(&self, id: &AcqId) -> String {
        acq_line(&self.get(id))
    }

    /// Every record, one line each.
    pub fn to_text(&self) -> String {
        self.with(|h| {
            let mut out = String::new();
            for a in &h.acqs {
                out.push_str(&acq_line(a));
                out.push('\n');
            }
            for w in &h.writes {
                out.push_str(&format!(
                    "{LINE_PREFIX} write id={} client={} resource={} token={} invoke={} complete={} accepted={}\n",
                    w.id,
                    no_space(&w.client),
                    no_space(&w.resource),
                    w.token,
                    w.invoke,
                    w.complete,
                    match w.accepted {
                        Some(true) => "yes",
                        Some(false) => "no",
                        None => "unknown",
                    }
                ));
            }
            for s in &h.holds {
                out.push_str(&format!(
                    "{LINE_PREFIX} hold lock={} owner={} at={} count={}\n",
                    no_space(&s.lock),
                    no_space(&s.owner),
                    s.at,
                    s.count
                ));
            }
            for s in &h.ttls {
                out.push_str(&format!(
                    "{LINE_PREFIX} ttl lock={} at={} pttl={} holders={}\n",
                    no_space(&s.lock),
                    s.at,
                    s.pttl,
                    no_space(&s.holders)
                ));
            }
            out
        })
    }

    /// Merges every history line of `text` (other lines are ignored); returns how many lines
    /// were merged. Acquisition lines replace the record with the same id.
    pub fn merge_text(&self, text: &str) -> usize {
        let mut n = 0;
        for line in text.lines() {
            // Anywhere in the line: libtest prints `test name ... ` before a test's output.
            let Some(at) = line.find(LINE_PREFIX) else {
                continue;
            };
            let rest = &line[at + LINE_PREFIX.len()..];
            let mut parts = rest.split_whitespace();
            let kind = parts.next().unwrap_or("");
            let kv: HashMap<&str, &str> = parts.filter_map(|p| p.split_once('=')).collect();
            let s = |k: &str| kv.get(k).copied().unwrap_or("").to_string();
            let opt = |k: &str| -> Option<u64> {
                kv.get(k)
                    .and_then(|v| if *v == "-" { None } else { v.parse().ok() })
            };
            let int = |k: &str| -> i64 {
                kv.get(k)
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("history line without {k}: {line}"))
            };
            match kind {
                "acq" => self.record(Acquisition {
                    id: s("id"),
                    client: s("client"),
                    lock: s("lock"),
                    owner: s("owner"),
                    op: Op::parse(&s("op")).unwrap_or_else(|| panic!("bad op: {line}")),
                    invoke: int("invoke") as u64,
                    acquired: opt("acquired"),
                    released: opt("released"),
                    validity: opt("validity"),
                    token: opt("token"),
                    note: s("note"),
                }),
                "write" => {
                    let w = FencedWrite {
                        id: s("id"),
                        client: s("client"),
                        resource: s("resource"),
                        token: int("token") as u64,
                        invoke: int("invoke") as u64,
                        complete: int("complete") as u64,
                        accepted: match s("accepted").as_str() {
                            "yes" => Some(true),
                            "no" => Some(false),
                            _ => None,
                        },
                    };
                    self.with(|h| {
                        if !h.writes.iter().any(|x| x.id == w.id) {
                            h.writes.push(w)
                        }
                    });
                }
                "hold" => self.hold_sample(HoldSample {
                    lock: s("lock"),
                    owner: s("owner"),
                    at: int("at") as u64,
                    count: int("count"),
                }),
                "ttl" => self.ttl_sample(TtlSample {
                    lock: s("lock"),
                    at: int("at") as u64,
                    pttl: int("pttl"),
                    holders: s("holders"),
                }),
                _ => panic!("unknown history line: {line}"),
            }
            n += 1;
        }
        n
    }
}

fn acq_line(a: &Acquisition) -> String {
    let o = |v: Option<u64>| v.map_or("-".to_string(), |x| x.to_string());
    format!(
        "{LINE_PREFIX} acq id={} client={} lock={} owner={} op={} invoke={} acquired={} released={} validity={} token={} note={}",
        a.id,
        no_space(&a.client),
        no_space(&a.lock),
        no_space(&a.owner),
        a.op.as_str(),
        a.invoke,
        o(a.acquired),
        o(a.released),
        o(a.validity),
        o(a.token),
        no_space(&a.note)
    )
}
