//! A counterexample as text: [`explain`] walks the path the checker found, and
//! [`State::summary`] prints each state on one line.

use stateright::Property;

use crate::model::Action;
use crate::state::State;
use crate::Accounting;

/// A counterexample of `property`, one line per step up to the first state that breaks it:
/// the action, then what the server, the registry and the guards hold after it. Returns the
/// text and the number of steps.
pub fn explain(
    model: &Accounting,
    property: &Property<Accounting>,
    path: &stateright::Path<State, Action>,
) -> (String, usize) {
    let mut out = String::new();
    let steps = path.clone().into_vec();
    let mut n = 0;
    for (i, (state, action)) in steps.iter().enumerate() {
        let Some(action) = action else { continue };
        let next = steps.get(i + 1).map_or(state, |s| &s.0);
        n += 1;
        out.push_str(&format!("{n:>3}. {action:?}\n     {}\n", next.summary()));
        if !(property.condition)(model, next) {
            break;
        }
    }
    (out, n)
}

impl State {
    /// One line: the hash's fields (`owner=count@run`), the registry's entries, the guards.
    pub fn summary(&self) -> String {
        let names = ["A0", "A1", "B"];
        let fields: Vec<String> = self
            .hash
            .fields
            .iter()
            .enumerate()
            .filter_map(|(o, f)| f.map(|f| format!("{}={}@{}", names[o], f.count, f.run)))
            .collect();
        let entries: Vec<String> = self
            .registry
            .entries
            .iter()
            .enumerate()
            .filter_map(|(o, h)| {
                h.map(|h| {
                    format!(
                        "{}:e{} holds {} inflight {}{}{}{}",
                        names[o],
                        h.epoch,
                        h.holds,
                        h.inflight,
                        if h.is_lost { " lost" } else { "" },
                        if h.doubt { " doubt" } else { "" },
                        if h.settling { " settling" } else { "" },
                    )
                })
            })
            .collect();
        let guards: Vec<String> = self
            .guards
            .iter()
            .enumerate()
            .filter_map(|(slot, g)| {
                g.map(|g| {
                    format!(
                        "g{slot}(e{} run {} {:?}{})",
                        g.epoch,
                        g.run,
                        g.phase,
                        if self.registry.is_lost(g.epoch) {
                            " lost"
                        } else {
                            ""
                        }
                    )
                })
            })
            .collect();
        format!(
            "server [{}]{} | registry [{}] | guards [{}]{}",
            fields.join(" "),
            if self.expirable { " expirable" } else { "" },
            entries.join("; "),
            guards.join(" "),
            self.violation
                .map_or(String::new(), |v| format!(" | VIOLATED: {v}"))
        )
    }
}
