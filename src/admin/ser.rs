//! The hand-written `Serialize` of the Admin result types (the `serde` feature), in the
//! shape the CLI's `--json` prints: kinds as their CLI names, a leak with its one-line
//! description and its structured reason. The other types derive it (`info.rs`, `leaks.rs`:
//! durations as whole milliseconds in `*_ms` fields, hold modes as their CLI names).

use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};

use super::{Leak, LockKind};

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
