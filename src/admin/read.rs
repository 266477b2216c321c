//! One lock name read back: which of its keys exist (one pipeline of PTTLs), then the
//! holders, queue, counters and subscribers of each kind found.

use std::collections::HashMap;
use std::time::Duration;

use super::{nodes, unexpected, HoldMode, Holder, KeyInfo, LockInfo, LockKind, QueueEntry};
use crate::engine::Core;
use crate::error::Result;
use crate::wire::keys::{Keys, Role, WAITER_MARK};

/// Queue entries shown per lock, at most (the length is always exact).
const QUEUE_SHOWN: isize = 100;

/// One [`LockInfo`] per kind of `name` whose keys exist.
pub(super) async fn lock_infos(core: &Core, name: &str) -> Result<Vec<LockInfo>> {
    let keys = crate::layout::keys(core.layout, &core.namespace, name);
    let roles = crate::layout::admin(core.layout).roles;
    let mut pipe = redis::pipe();
    for &role in roles {
        pipe.cmd("PTTL").arg(keys.key(role));
    }
    let replies: Vec<redis::Value> = pipe.query_async(&mut core.conn.clone()).await?;
    let now_ms = server_now_ms(core).await?;
    let mut present: HashMap<Role, KeyInfo> = HashMap::new();
    for (&role, reply) in roles.iter().zip(replies) {
        let pttl: i64 = redis::from_redis_value(reply).map_err(|e| unexpected("PTTL", e))?;
        if pttl == -2 {
            continue;
        }
        present.insert(
            role,
            KeyInfo {
                key: keys.key(role),
                role: role.as_str(),
                ttl: (pttl >= 0).then(|| Duration::from_millis(pttl as u64)),
            },
        );
    }
    let reader = Reader {
        core,
        name,
        keys: &keys,
        present: &present,
        now_ms,
    };
    let mut out = Vec::new();
    if let Some(info) = reader.mutex().await? {
        out.push(info);
    }
    if let Some(info) = reader.latch().await? {
        out.push(info);
    }
    if let Some(info) = reader.rwlock().await? {
        out.push(info);
    }
    if let Some(info) = reader.semaphore().await? {
        out.push(info);
    }
    if let Some(info) = reader.lease_semaphore().await? {
        out.push(info);
    }
    Ok(out)
}

/// The server's clock in ms (the fair queue's deadlines are on it), or this host's when the
/// user may not run `TIME` (a read-only user with `+@read` only, which leaves out `TIME`).
async fn server_now_ms(core: &Core) -> Result<i64> {
    let reply: redis::RedisResult<(u64, u64)> =
        redis::cmd("TIME").query_async(&mut core.conn.clone()).await;
    match reply {
        Ok((secs, micros)) => Ok((secs * 1000 + micros / 1000) as i64),
        Err(e) if e.code() == Some("NOPERM") => Ok(crate::engine::client_clock_ms() as i64),
        Err(e) => Err(e.into()),
    }
}

struct Reader<'a> {
    core: &'a Core,
    name: &'a str,
    keys: &'a Keys,
    present: &'a HashMap<Role, KeyInfo>,
    now_ms: i64,
}

impl Reader<'_> {
    /// An empty [`LockInfo`] of `kind` with the keys of `roles` that exist.
    fn info(&self, kind: LockKind, roles: &[Role], main: Role) -> Option<LockInfo> {
        let keys: Vec<KeyInfo> = roles
            .iter()
            .filter_map(|r| self.present.get(r).cloned())
            .collect();
        if keys.is_empty() {
            return None;
        }
        Some(LockInfo {
            name: self.name.to_string(),
            kind,
            holders: Vec::new(),
            ttl: self.present.get(&main).and_then(|k| k.ttl),
            queue_len: 0,
            queue: Vec::new(),
            waiters: 0,
            token: None,
            permits: None,
            keys,
        })
    }

    async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        cmd.query_async(&mut self.core.conn.clone())
            .await
            .map_err(|e| {
                if e.code() == Some("WRONGTYPE")
                    || matches!(
                        e.kind(),
                        redis::ErrorKind::Parse | redis::ErrorKind::UnexpectedReturnType
                    )
                {
                    unexpected(&format!("lock {:?}", self.name), e)
                } else {
                    e.into()
                }
            })
    }

    async fn hash(&self, role: Role) -> Result<Vec<(String, i64)>> {
        self.query(redis::cmd("HGETALL").arg(self.keys.key(role)))
            .await
    }

    async fn zset(&self, role: Role, count: isize) -> Result<Vec<(String, f64)>> {
        self.query(
            redis::cmd("ZRANGE")
                .arg(self.keys.key(role))
                .arg(0)
                .arg(count - 1)
                .arg("WITHSCORES"),
        )
        .await
    }

    async fn waiters(&self, roles: &[Role], extra: Vec<String>) -> Result<u64> {
        let mut channels: Vec<String> = roles.iter().map(|r| self.keys.key(*r)).collect();
        channels.extend(extra);
        nodes::subscribers(self.core, &channels).await
    }

    fn holders(fields: Vec<(String, i64)>, mode: HoldMode) -> Vec<Holder> {
        fields
            .into_iter()
            .map(|(owner, count)| Holder {
                owner,
                count,
                mode,
                expires_in: None,
            })
            .collect()
    }

    /// A Redisson read-write lock: the name's hash with a `mode` field, readers
    /// `<owner>` and writers `<owner>:write` (`None` for any other key).
    async fn redisson_rwlock(&self) -> Result<Option<LockInfo>> {
        let in_lock_hash = crate::layout::rw_in_lock_hash(self.core.layout);
        if !in_lock_hash || !self.present.contains_key(&Role::Lock) {
            return Ok(None);
        }
        let key = self.keys.key(Role::Lock);
        // The name's key may be a semaphore's or latch's string: not a read-write lock.
        let moded: redis::RedisResult<bool> = redis::cmd("HEXISTS")
            .arg(&key)
            .arg("mode")
            .query_async(&mut self.core.conn.clone())
            .await;
        match moded {
            Ok(true) => {}
            Ok(false) => return Ok(None),
            Err(e) if e.code() == Some("WRONGTYPE") => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        let fields: Vec<(String, String)> = self.query(redis::cmd("HGETALL").arg(&key)).await?;
        let Some(mut info) = self.info(LockKind::RwLock, &[Role::Lock], Role::Lock) else {
            return Ok(None);
        };
        for (owner, count) in fields.into_iter().filter(|(f, _)| f != "mode") {
            let count = count
                .parse()
                .map_err(|e| unexpected("a read-write lock's hold count", e))?;
            let mode = match owner.ends_with(":write") {
                true => HoldMode::Write,
                false => HoldMode::Read,
            };
            info.holders.push(Holder {
                owner,
                count,
                mode,
                expires_in: None,
            });
        }
        info.waiters = self.waiters(&[Role::RwReadChannel], Vec::new()).await?;
        Ok(Some(info))
    }

    async fn mutex(&self) -> Result<Option<LockInfo>> {
        if let Some(info) = self.redisson_rwlock().await? {
            return Ok(Some(info));
        }
        let roles = [Role::Lock, Role::Fence, Role::FairQueue, Role::FairTimeouts];
        let fair = self.present.contains_key(&Role::FairQueue)
            || self.present.contains_key(&Role::FairTimeouts);
        let kind = if fair {
            LockKind::FairLock
        } else if self.present.contains_key(&Role::Fence) {
            LockKind::FencedLock
        } else {
            LockKind::Lock
        };
        let Some(mut info) = self.info(kind, &roles, Role::Lock) else {
            return Ok(None);
        };
        if self.present.contains_key(&Role::Lock) {
            // A fenced hold keeps its token in the hash, under "token" (lua/fenced_lock.lua);
            // the waiter mark is not a holder.
            let (token, owners): (Vec<_>, Vec<_>) = self
                .hash(Role::Lock)
                .await?
                .into_iter()
                .filter(|(field, _)| field != WAITER_MARK)
                .partition(|(field, _)| field == "token");
            info.holders = Self::holders(owners, HoldMode::Exclusive);
            info.token = token.first().map(|(_, t)| *t as u64);
        }
        if info.token.is_none() && self.present.contains_key(&Role::Fence) {
            let token: Option<u64> = self
                .query(redis::cmd("GET").arg(self.keys.key(Role::Fence)))
                .await?;
            info.token = token;
        }
        let mut per_waiter = Vec::new();
        if fair {
            info.queue_len = self.query(redis::cmd("LLEN").arg(&self.keys.queue)).await?;
            let ids: Vec<String> = self
                .query(
                    redis::cmd("LRANGE")
                        .arg(&self.keys.queue)
                        .arg(0)
                        .arg(QUEUE_SHOWN - 1),
                )
                .await?;
            let deadlines: HashMap<String, f64> = self
                .zset(Role::FairTimeouts, isize::MAX)
                .await?
                .into_iter()
                .collect();
            for id in ids {
                per_waiter.push(format!("{}:{id}", self.keys.fair_channel));
                let deadline_in_ms = deadlines.get(&id).map(|d| *d as i64 - self.now_ms);
                info.queue.push(QueueEntry { id, deadline_in_ms });
            }
        }
        info.waiters = self.waiters(&[Role::Channel], per_waiter).await?;
        Ok(Some(info))
    }

    async fn latch(&self) -> Result<Option<LockInfo>> {
        let Some(mut info) = self.info(LockKind::CountDownLatch, &[Role::Latch], Role::Latch)
        else {
            return Ok(None);
        };
        info.permits = self
            .query(redis::cmd("GET").arg(self.keys.key(Role::Latch)))
            .await?;
        info.waiters = self.waiters(&[Role::LatchChannel], Vec::new()).await?;
        Ok(Some(info))
    }

    async fn rwlock(&self) -> Result<Option<LockInfo>> {
        let roles = [Role::RwWrite, Role::RwRead, Role::RwWriters];
        let main = if self.present.contains_key(&Role::RwWrite) {
            Role::RwWrite
        } else {
            Role::RwRead
        };
        let Some(mut info) = self.info(LockKind::RwLock, &roles, main) else {
            return Ok(None);
        };
        if self.present.contains_key(&Role::RwWrite) {
            info.holders = Self::holders(self.hash(Role::RwWrite).await?, HoldMode::Write);
        }
        if self.present.contains_key(&Role::RwRead) {
            let fields = self.hash(Role::RwRead).await?;
            let deadlines: HashMap<&str, i64> = fields
                .iter()
                .filter_map(|(f, v)| Some((f.strip_prefix('~')?, *v)))
                .collect();
            for (owner, count) in &fields {
                if owner.starts_with('~') {
                    continue;
                }
                let expires_in = deadlines
                    .get(owner.as_str())
                    .map(|d| Duration::from_millis((d - self.now_ms).max(0) as u64));
                info.holders.push(Holder {
                    owner: owner.clone(),
                    count: *count,
                    mode: HoldMode::Read,
                    expires_in,
                });
            }
        }
        if self.present.contains_key(&Role::RwWriters) {
            let writers = self.zset(Role::RwWriters, QUEUE_SHOWN).await?;
            info.queue_len = self
                .query(redis::cmd("ZCARD").arg(self.keys.key(Role::RwWriters)))
                .await?;
            info.queue = writers
                .into_iter()
                .map(|(id, d)| QueueEntry {
                    id,
                    deadline_in_ms: Some(d as i64 - self.now_ms),
                })
                .collect();
        }
        info.waiters = self
            .waiters(&[Role::RwReadChannel, Role::RwWriteChannel], Vec::new())
            .await?;
        Ok(Some(info))
    }

    async fn semaphore(&self) -> Result<Option<LockInfo>> {
        let Some(mut info) = self.info(LockKind::Semaphore, &[Role::Semaphore], Role::Semaphore)
        else {
            return Ok(None);
        };
        info.permits = self
            .query(
                redis::cmd("HGET")
                    .arg(self.keys.key(Role::Semaphore))
                    .arg("p"),
            )
            .await?;
        info.waiters = self.waiters(&[Role::SemaphoreChannel], Vec::new()).await?;
        Ok(Some(info))
    }

    async fn lease_semaphore(&self) -> Result<Option<LockInfo>> {
        let roles = [Role::LeaseSem, Role::LeaseSemLeases];
        let Some(mut info) = self.info(LockKind::LeaseSemaphore, &roles, Role::LeaseSem) else {
            return Ok(None);
        };
        if self.present.contains_key(&Role::LeaseSem) {
            info.permits = self
                .query(redis::cmd("GET").arg(self.keys.key(Role::LeaseSem)))
                .await?;
        }
        if self.present.contains_key(&Role::LeaseSemLeases) {
            let leases = self.zset(Role::LeaseSemLeases, QUEUE_SHOWN).await?;
            info.holders = leases
                .into_iter()
                .map(|(owner, d)| Holder {
                    owner,
                    count: 1,
                    mode: HoldMode::Lease,
                    expires_in: Some(Duration::from_millis((d as i64 - self.now_ms).max(0) as u64)),
                })
                .collect();
        }
        info.waiters = self.waiters(&[Role::LeaseSemChannel], Vec::new()).await?;
        Ok(Some(info))
    }
}
