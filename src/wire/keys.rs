//! Key naming and argument checks ([`Role`] lists every key and channel lockwise uses):
//! lockwise's own names; a key layout that names some roles otherwise (Redisson's) hands
//! [`Keys::with_names`] its naming (the layout room, `src/layout/`, above this layer).

use std::time::Duration;

pub(crate) use super::role::Role;
use crate::error::{Error, Result};

/// Longest accepted lock name, in bytes. Names end up in keys and channel names that travel
/// with every call; a longer one is almost certainly a bug (e.g. a payload used as a name).
pub const MAX_NAME_LEN: usize = 64 * 1024;

/// The waiter mark: the field of a lock hash that an attempt finding the lock taken sets
/// (`lua/unlock.lua` publishes only for a marked hold). Not a holder.
pub(crate) const WAITER_MARK: &str = "waiting";

/// Longest accepted duration in milliseconds: Lua numbers are doubles, exact up to 2^53,
/// and now + 2^53 ms is far inside what PEXPIRE accepts.
pub(crate) const MAX_MILLIS: u128 = 1 << 53;

/// The Redis names used by one lock. Every key of a lock shares one Cluster hash tag, so each
/// script touches a single slot.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    /// The lock hash ([`Role::Lock`]).
    pub(crate) lock: String,
    /// The pub/sub channel releases publish to ([`Role::Channel`]).
    pub(crate) channel: String,
    /// The fair queue ([`Role::FairQueue`]).
    pub(crate) queue: String,
    /// The fair queue's deadlines ([`Role::FairTimeouts`]).
    pub(crate) deadlines: String,
    /// The prefix of the fair waiters' channels ([`Role::FairChannel`]).
    pub(crate) fair_channel: String,
    namespace: String,
    name: String,
    /// The layout's own name for a role, where it has one ([`Keys::with_names`]).
    renamed: Option<Renamer>,
}

/// A key layout's names: the key or channel of a role for a lock name, `None` where the
/// layout keeps lockwise's name.
pub(crate) type Renamer = fn(Role, &str) -> Option<String>;

impl Keys {
    /// The keys of the lock named `name` in `namespace`.
    pub(crate) fn new(namespace: &str, name: &str) -> Keys {
        Keys::with_names(None, namespace, name)
    }

    /// The keys of the lock named `name`, each role named by `renamed` where it has a name
    /// for it, else lockwise's in `namespace`.
    pub(crate) fn with_names(renamed: Option<Renamer>, namespace: &str, name: &str) -> Keys {
        let mut keys = Keys {
            renamed,
            lock: String::new(),
            channel: String::new(),
            queue: String::new(),
            deadlines: String::new(),
            fair_channel: String::new(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        keys.lock = keys.key(Role::Lock);
        keys.channel = keys.key(Role::Channel);
        keys.queue = keys.key(Role::FairQueue);
        keys.deadlines = keys.key(Role::FairTimeouts);
        keys.fair_channel = keys.key(Role::FairChannel);
        keys
    }

    /// KEYS of the release scripts (`lua/unlock.lua`, `lua/force_unlock.lua`) and of the
    /// fair scripts: lock hash, channel, fair queue, fair deadlines.
    pub(crate) fn script_keys(&self) -> [&str; 4] {
        [&self.lock, &self.channel, &self.queue, &self.deadlines]
    }

    /// The overtake claim keys of the lock whose holds are counted in the hash of role
    /// `hash`: a read-write lock's ([`Role::RwRead`], [`Role::RwWrite`]) are its own, shared
    /// by both sides; every other kind's are the name's lock hash's.
    pub(crate) fn claim_keys(&self, hash: Role) -> ClaimKeys {
        match hash {
            Role::RwRead | Role::RwWrite => ClaimKeys {
                queue: self.key(Role::RwClaim),
                deadlines: self.key(Role::RwClaimDeadlines),
                lock: self.key(Role::RwWrite),
                channel: self.key(Role::RwWriteChannel),
                also: Some(self.key(Role::RwReadChannel)),
                member_prefix: if hash == Role::RwRead { "~" } else { "" },
            },
            _ => ClaimKeys {
                queue: self.key(Role::Claim),
                deadlines: self.key(Role::ClaimDeadlines),
                lock: self.lock.clone(),
                channel: self.channel.clone(),
                also: None,
                member_prefix: "",
            },
        }
    }

    /// The key (or channel) of `role` for this lock, in the same Cluster slot as the others:
    /// `key(Role::Fence)` is `<ns>:fence:{<name>}`. Append a suffix after it for per-waiter
    /// names (`key(Role::FairChannel) + ":" + waiter`): the tag stays the same.
    ///
    /// With a layout's names ([`Keys::with_names`]) a role it names gets that name; the
    /// others keep lockwise's (a client in Redisson's layout never writes them: it refuses
    /// what needs them).
    pub(crate) fn key(&self, role: Role) -> String {
        if let Some(key) = self.renamed.and_then(|rename| rename(role, &self.name)) {
            return key;
        }
        derive(&self.namespace, role.as_str(), &self.name)
    }
}

/// The keys of one lock's overtake claim queue (`lua/claim.lua`), and what a waiter that
/// leaves it looks at (`lua/claim_drop.lua`).
#[derive(Debug, Clone)]
pub(crate) struct ClaimKeys {
    /// The queue ([`Role::Claim`] or [`Role::RwClaim`]).
    pub(crate) queue: String,
    /// Its deadlines ([`Role::ClaimDeadlines`] or [`Role::RwClaimDeadlines`]).
    pub(crate) deadlines: String,
    /// The hash whose absence means "free" when the head leaves (a read-write lock's writer
    /// hash).
    pub(crate) lock: String,
    /// The channel to wake when the head leaves a free lock.
    pub(crate) channel: String,
    /// A second channel to wake then (a read-write lock's readers' channel).
    pub(crate) also: Option<String>,
    /// Put before the owner field in the queue: `~` for a read-write lock's readers, so
    /// the queue tells them from its writers.
    pub(crate) member_prefix: &'static str,
}

/// Three disjoint forms (the character after `role` tells them apart, so two names never
/// share a key):
/// * `<ns>:<role>:{<name>}`: the usual case, hashed by the name;
/// * `<ns>:<role>=<name>`: the name carries its own non-empty `{tag}` and keeps it, so locks
///   can be placed in one Cluster slot on purpose;
/// * `<ns>:<role>#{0}<name>`: the name starts with `}`, which would make the wrapping tag
///   empty (Redis would hash each key whole and split them across slots).
fn derive(namespace: &str, role: &str, name: &str) -> String {
    if has_hash_tag(name) {
        format!("{namespace}:{role}={name}")
    } else if name.starts_with('}') {
        format!("{namespace}:{role}#{{0}}{name}")
    } else {
        format!("{namespace}:{role}:{{{name}}}")
    }
}

/// The role and lock name of `key`, if it is a key of `namespace` in one of the three forms
/// [`derive()`] writes (the inverse of [`Keys::key`]); `None` for any other key.
pub(crate) fn parse(namespace: &str, key: &str) -> Option<(Role, String)> {
    let rest = key.strip_prefix(namespace)?.strip_prefix(':')?;
    let end = rest.find([':', '=', '#'])?;
    let role = Role::ALL.into_iter().find(|r| r.as_str() == &rest[..end])?;
    let tail = &rest[end..];
    let name = if let Some(wrapped) = tail.strip_prefix(":{") {
        wrapped.strip_suffix('}')?
    } else if let Some(tagged) = tail.strip_prefix('=') {
        tagged
    } else {
        tail.strip_prefix("#{0}")?
    };
    (derive(namespace, role.as_str(), name) == key).then(|| (role, name.to_string()))
}

/// Whether Redis Cluster would hash `name` by a `{tag}` inside it (first `{`, then a later
/// `}` with at least one byte between).
pub(crate) fn has_hash_tag(name: &str) -> bool {
    let bytes = name.as_bytes();
    match bytes.iter().position(|&b| b == b'{') {
        Some(open) => match bytes[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) => len > 0,
            None => false,
        },
        None => false,
    }
}

pub(crate) fn check_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid("name", "a lock name must not be empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::invalid(
            "name",
            format!(
                "a lock name may have at most {MAX_NAME_LEN} bytes, got {}",
                name.len()
            ),
        ));
    }
    Ok(())
}

pub(crate) fn check_namespace(ns: &str) -> Result<()> {
    if ns.is_empty() {
        return Err(Error::invalid("namespace", "must not be empty"));
    }
    if ns.contains(['{', '}']) {
        return Err(Error::invalid(
            "namespace",
            "must not contain '{' or '}' (the lock name supplies the cluster hash tag)",
        ));
    }
    if ns.len() > 1024 {
        return Err(Error::invalid("namespace", "may have at most 1024 bytes"));
    }
    Ok(())
}

/// A duration Redis accepts as a PEXPIRE argument: at least 1 ms, at most 2^53 ms.
/// Returns whole milliseconds.
pub(crate) fn check_millis(argument: &'static str, d: Duration) -> Result<u64> {
    let ms = d.as_millis();
    if ms == 0 {
        return Err(Error::invalid(
            argument,
            format!("must be at least 1 ms, got {d:?}"),
        ));
    }
    if ms > MAX_MILLIS {
        return Err(Error::invalid(
            argument,
            format!("must be at most {MAX_MILLIS} ms, got {d:?}"),
        ));
    }
    Ok(ms as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_are_wrapped_in_a_hash_tag() {
        let k = Keys::new("lockwise", "order:1001");
        assert_eq!(k.lock, "lockwise:lock:{order:1001}");
        assert_eq!(k.channel, "lockwise:channel:{order:1001}");
    }

    #[test]
    fn names_with_their_own_tag_keep_it() {
        let k = Keys::new("ns", "user:{42}:profile");
        assert_eq!(k.lock, "ns:lock=user:{42}:profile");
        assert_eq!(k.channel, "ns:channel=user:{42}:profile");
    }

    /// The hash tag Redis Cluster uses for `key` (None: the whole key is hashed).
    fn cluster_tag(key: &str) -> Option<&str> {
        let open = key.find('{')?;
        let close = key[open + 1..].find('}')? + open + 1;
        (close > open + 1).then(|| &key[open + 1..close])
    }

    #[test]
    fn key_and_channel_always_share_a_nonempty_tag() {
        for name in [
            "a", "}", "}}", "}a{b}", "{}", "{", "a}b", "{x}y", "x{}", "a{b", "ü {ß}",
        ] {
            let k = Keys::new("ns", name);
            let tag = cluster_tag(&k.lock);
            assert!(tag.is_some(), "{name:?} -> {}", k.lock);
            assert_eq!(tag, cluster_tag(&k.channel), "{name:?}");
        }
    }

    #[test]
    fn derived_keys_share_the_tag() {
        for name in ["a", "}", "{x}y", "a{b"] {
            let k = Keys::new("ns", name);
            let fence = k.key(Role::Fence);
            let waiter = format!("{}:w1", k.key(Role::FairChannel));
            assert_eq!(cluster_tag(&fence), cluster_tag(&k.lock), "{name:?}");
            assert_eq!(cluster_tag(&waiter), cluster_tag(&k.lock), "{name:?}");
        }
    }

    #[test]
    fn every_role_has_its_key() {
        // Every role's spelling is checked against the guide's key table by tests/project/key_layout.rs.
        let expected = Role::ALL.map(|r| (r, r.as_str()));
        let (plain, tagged, odd) = (
            Keys::new("lockwise", "order:1001"),
            Keys::new("ns", "user:{42}"),
            Keys::new("ns", "}x"),
        );
        for (role, spelled) in expected {
            assert_eq!(
                plain.key(role),
                format!("lockwise:{spelled}:{{order:1001}}")
            );
            assert_eq!(tagged.key(role), format!("ns:{spelled}=user:{{42}}"));
            assert_eq!(odd.key(role), format!("ns:{spelled}#{{0}}}}x"));
        }
        assert_eq!(plain.lock, plain.key(Role::Lock));
        assert_eq!(plain.channel, plain.key(Role::Channel));
        assert_eq!(plain.queue, "lockwise:fairqueue:{order:1001}");
        assert_eq!(
            plain.script_keys(),
            [
                "lockwise:lock:{order:1001}",
                "lockwise:channel:{order:1001}",
                "lockwise:fairqueue:{order:1001}",
                "lockwise:fairtimeouts:{order:1001}"
            ]
        );
    }

    #[test]
    fn keys_parse_back_to_role_and_name() {
        for name in ["a", "}", "}}", "{x}y", "a{b", "a{}b", "x:y", "ü {ß}"] {
            let k = Keys::new("ns:app", name);
            for role in Role::ALL {
                assert_eq!(
                    parse("ns:app", &k.key(role)),
                    Some((role, name.to_string())),
                    "{role:?} {name:?}"
                );
            }
        }
        assert_eq!(parse("ns", "ns:lock:{a"), None);
        assert_eq!(parse("ns", "ns:nosuchrole:{a}"), None);
        assert_eq!(parse("ns", "other:lock:{a}"), None);
        assert_eq!(parse("ns", "ns:fairchannel:{a}:w1"), None);
    }

    #[test]
    fn wrapped_and_tagged_names_never_collide() {
        assert_ne!(Keys::new("ns", "}").lock, Keys::new("ns", "0}").lock);
        assert_ne!(Keys::new("ns", "a").lock, Keys::new("ns", "{a}").lock);
        assert_ne!(Keys::new("ns", "a").channel, Keys::new("ns", "{a}").channel);
    }

    #[test]
    fn empty_or_unclosed_tags_do_not_count() {
        assert!(!has_hash_tag("a{}b"));
        assert!(!has_hash_tag("a{b"));
        assert!(!has_hash_tag("a}b{"));
        assert!(has_hash_tag("{x}"));
        // Wrapped anyway: both keys still hash by the same tag.
        assert_eq!(Keys::new("n", "a{}b").lock, "n:lock:{a{}b}");
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("").is_err());
        assert!(check_name(&"x".repeat(MAX_NAME_LEN)).is_ok());
        assert!(check_name(&"x".repeat(MAX_NAME_LEN + 1)).is_err());
        assert!(check_name("ünïcødé {with} spaces").is_ok());
    }

    #[test]
    fn namespaces_are_checked() {
        assert!(check_namespace("").is_err());
        assert!(check_namespace("a{b").is_err());
        assert!(check_namespace("app:prod").is_ok());
    }

    #[test]
    fn durations_are_checked() {
        assert!(check_millis("lease", Duration::ZERO).is_err());
        assert!(check_millis("lease", Duration::from_micros(999)).is_err());
        assert_eq!(
            check_millis("lease", Duration::from_micros(1500)).unwrap(),
            1
        );
        assert!(check_millis("lease", Duration::from_secs(u64::MAX)).is_err());
        assert!(check_millis("lease", Duration::from_millis(MAX_MILLIS as u64)).is_ok());
    }
}
