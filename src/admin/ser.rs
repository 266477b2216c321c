//! `Serialize` for the Admin result types (the `serde` feature), in the shape the CLI's
//! `--json` prints: durations as whole milliseconds in `*_ms` fields, kinds and hold modes
//! as their CLI names, a leak with its one-line description and its structured reason.

use std::time::Duration;

use serde::ser::{SerializeMap, SerializeStruct};
use serde::{Serialize, Serializer};

use super::{Leak, LockKind};

/// An optional duration as whole milliseconds (`null` when absent).
pub(super) fn ms<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_some(&(d.as_millis() as u64)),
        None => s.serialize_none(),
    }
}

/// `(name, error)` pairs as `[{"name": .., "error": ..}]`.
pub(super) fn unreadable<S: Serializer>(
    pairs: &[(String, String)],
    s: S,
) -> Result<S::Ok, S::Error> {
    struct Entry<'a>(&'a str, &'a str);
    impl Serialize for Entry<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut m = s.serialize_map(Some(2))?;
            m.serialize_entry("name", self.0)?;
            m.serialize_entry("error", self.1)?;
            m.end()
        }
    }
    s.collect_seq(pairs.iter().map(|(n, e)| Entry(n, e)))
}

impl Serialize for LockKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl Serialize for Leak {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("Leak", 4)?;
        st.serialize_field("key", &self.key)?;
        st.serialize_field("name", &self.name)?;
        st.serialize_field("reason", &self.reason.describe())?;
        st.serialize_field("problem", &self.reason)?;
        st.end()
    }
}
