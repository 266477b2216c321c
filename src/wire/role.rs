//! [`Role`]: every role a key or channel plays for a lock, the vocabulary both key layouts
//! name their keys by ([`super::keys`] for lockwise's names, `src/layout/redisson.rs` for
//! Redisson's).

/// Every role a key or channel plays for a lock: the part of its name after the namespace.
/// This is the whole layout; each line shows the key of a lock named `n` in the usual form
/// `<ns>:<role>:{n}` (see [`derive()`](super::keys::derive) for the other two).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Role {
    /// `<ns>:lock:{n}`: the lock hash (owner field -> hold count) of **every** mutex kind of
    /// the name: `RLock`, `FencedLock`, `FairLock`, a `MultiLock` member, and a `RedLock` on
    /// each of its nodes. So kinds of one name exclude each other.
    Lock,
    /// `<ns>:channel:{n}`: the pub/sub channel every release of the lock publishes to.
    Channel,
    /// `<ns>:claim:{n}`: the overtake claim queue of the lock: a sorted set of the waiters
    /// that waited longer than their client's overtake limit (owner field -> when it began
    /// waiting, server ms); while it is not empty, a free lock goes to its head only
    /// (`lua/claim.lua`).
    Claim,
    /// `<ns>:claimdeadlines:{n}`: the claim queue's deadlines (owner field -> server ms): an
    /// entry whose waiter stopped renewing it is dropped once its deadline passed.
    ClaimDeadlines,
    /// `<ns>:rwclaim:{n}`: a `RwLock`'s overtake claim queue, shared by its readers and
    /// writers (the layout of [`Role::Claim`]).
    RwClaim,
    /// `<ns>:rwclaimdeadlines:{n}`: its deadlines (the layout of [`Role::ClaimDeadlines`]).
    RwClaimDeadlines,
    /// `<ns>:fence:{n}`: a `FencedLock`'s token counter, the one key written without a TTL.
    Fence,
    /// `<ns>:fairqueue:{n}`: a `FairLock`'s waiters, a list, oldest first.
    FairQueue,
    /// `<ns>:fairtimeouts:{n}`: a `FairLock`'s waiter deadlines, a sorted set.
    FairTimeouts,
    /// `<ns>:fairchannel:{n}`: the prefix of a `FairLock`'s per-waiter channels (waiter `w`
    /// listens on `<prefix>:<w>`).
    FairChannel,
    /// `<ns>:latch:{n}`: a `CountDownLatch`'s count, a string; deleted when it opens.
    Latch,
    /// `<ns>:latchchannel:{n}`: the channel a `CountDownLatch` publishes to when it opens.
    LatchChannel,
    /// `<ns>:rwwrite:{n}`: a `RwLock`'s writer hash (owner -> write holds, one owner at most).
    RwWrite,
    /// `<ns>:rwread:{n}`: a `RwLock`'s readers hash (owner -> read holds, and `~<owner>` ->
    /// that reader's deadline in server ms).
    RwRead,
    /// `<ns>:rwwriters:{n}`: a `RwLock`'s waiting writers, a sorted set (owner -> intent
    /// deadline in server ms); new readers wait while it has a live entry.
    RwWriters,
    /// `<ns>:rwreadchannel:{n}`: the channel a `RwLock`'s readers wait on.
    RwReadChannel,
    /// `<ns>:rwwritechannel:{n}`: the channel a `RwLock`'s writers wait on.
    RwWriteChannel,
    /// `<ns>:semaphore:{n}`: a `Semaphore`'s permits, a hash (`p` = available permits,
    /// `v` = version, changed whenever permits are added); its TTL is the idle TTL.
    Semaphore,
    /// `<ns>:semaphorechannel:{n}`: the channel a `Semaphore` publishes to when permits are
    /// added (released, set or added).
    SemaphoreChannel,
    /// `<ns>:leasesem:{n}`: a `LeaseSemaphore`'s available permits, a string.
    LeaseSem,
    /// `<ns>:leasesemleases:{n}`: a `LeaseSemaphore`'s leased permits, a sorted set
    /// (permit id -> lease deadline in server ms).
    LeaseSemLeases,
    /// `<ns>:leasesemchannel:{n}`: the channel a `LeaseSemaphore` publishes to when permits
    /// come free.
    LeaseSemChannel,
    /// `<ns>:client:{id}`: a presence key, written by a live client for its own id and its
    /// `RedLockSet`s' ids, with the watchdog timeout as TTL (here `n` is that id, not a lock
    /// name).
    Client,
}

impl Role {
    /// Every role, for code that reads the layout back (the admin scan).
    pub(crate) const ALL: [Role; 23] = [
        Role::Lock,
        Role::Channel,
        Role::Claim,
        Role::ClaimDeadlines,
        Role::RwClaim,
        Role::RwClaimDeadlines,
        Role::Fence,
        Role::FairQueue,
        Role::FairTimeouts,
        Role::FairChannel,
        Role::Latch,
        Role::LatchChannel,
        Role::RwWrite,
        Role::RwRead,
        Role::RwWriters,
        Role::RwReadChannel,
        Role::RwWriteChannel,
        Role::Semaphore,
        Role::SemaphoreChannel,
        Role::LeaseSem,
        Role::LeaseSemLeases,
        Role::LeaseSemChannel,
        Role::Client,
    ];

    /// The role as it appears in the key.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Role::Lock => "lock",
            Role::Channel => "channel",
            Role::Claim => "claim",
            Role::ClaimDeadlines => "claimdeadlines",
            Role::RwClaim => "rwclaim",
            Role::RwClaimDeadlines => "rwclaimdeadlines",
            Role::Fence => "fence",
            Role::FairQueue => "fairqueue",
            Role::FairTimeouts => "fairtimeouts",
            Role::FairChannel => "fairchannel",
            Role::Latch => "latch",
            Role::LatchChannel => "latchchannel",
            Role::RwWrite => "rwwrite",
            Role::RwRead => "rwread",
            Role::RwWriters => "rwwriters",
            Role::RwReadChannel => "rwreadchannel",
            Role::RwWriteChannel => "rwwritechannel",
            Role::Semaphore => "semaphore",
            Role::SemaphoreChannel => "semaphorechannel",
            Role::LeaseSem => "leasesem",
            Role::LeaseSemLeases => "leasesemleases",
            Role::LeaseSemChannel => "leasesemchannel",
            Role::Client => "client",
        }
    }
}
