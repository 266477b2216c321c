//! `lua/batch.lua` against the scripts it mirrors, so it cannot drift from them unseen. It
//! repeats the common paths of `lua/lock.lua` and `lua/unlock.lua` per item (it cannot be
//! spliced from them: an item may not `return`, and it answers "not tried" where its script
//! would go further), so this test runs both on every small state of one lock name and
//! compares:
//!
//! - states: this owner's count 0..=3, another owner's 0 or 1, the waiter mark, an overtake
//!   claim queue, a fair queue, and a key of another type at the name;
//! - inputs: a lock item with a lease below and above the key's TTL; an unlock item
//!   expecting any count, or 1, 2 or 3;
//! - each item runs once in a batch of its own and once as its script (from the same state),
//!   on a throwaway server (`REDIS_SERVER_BIN` picks Redis or Valkey).
//!
//! An item must either do exactly what its script does (the same answer in its encoding,
//! the same keys, fields and values, TTLs within 100 ms, the same messages) or answer -3
//! ("not tried"), change nothing, and do so only where its script needs more than the batch
//! serves: a free lock whose claim queue decides, a release that may serve a fair queue, a
//! key of another type. One difference is by design: a lock item that finds another owner's
//! hold does not set the waiter mark (the waiter's re-check after it subscribes goes alone
//! and sets it).

use std::collections::BTreeMap;
use std::time::Duration;

use lockwise_testkit::RedisServer;

const LOCK: &str = "{b}:lock";
const CLAIMS: &str = "{b}:claims";
const CLAIM_DEADLINES: &str = "{b}:claims:deadlines";
const CHANNEL: &str = "{b}:channel";
const FAIR: &str = "{b}:fair";
const FAIR_DEADLINES: &str = "{b}:fair:deadlines";
const FAIR_CHANNEL: &str = "{b}:fairchannel";
const ME: &str = "c0ffee:1";
const OTHER: &str = "beef:1";
const MESSAGE: &str = "c0ffee";
/// The TTL every key of a state starts with.
const TTL_MS: u64 = 10_000;

/// One state of the name's keys.
#[derive(Clone, Copy, Debug)]
struct State {
    mine: u8,
    other: u8,
    mark: bool,
    claims: bool,
    fair: bool,
    wrong_type: bool,
}

impl State {
    fn all() -> Vec<State> {
        let mut out = vec![State {
            mine: 0,
            other: 0,
            mark: false,
            claims: false,
            fair: false,
            wrong_type: true,
        }];
        for mine in 0..=3 {
            for other in 0..=1 {
                for mark in [false, true] {
                    if mark && mine + other == 0 {
                        continue; // the mark lives in the hash
                    }
                    for claims in [false, true] {
                        for fair in [false, true] {
                            out.push(State {
                                mine,
                                other,
                                mark,
                                claims,
                                fair,
                                wrong_type: false,
                            });
                        }
                    }
                }
            }
        }
        out
    }
}

/// What one key holds: its type's contents and its PTTL.
#[derive(Debug, Clone)]
struct Key {
    value: String,
    pttl: i64,
}

type Snapshot = BTreeMap<String, Key>;

struct Server {
    _server: RedisServer,
    conn: redis::Connection,
    /// Subscribed to every channel of the name.
    sub: redis::Connection,
    batch: String,
    lock: String,
    unlock: String,
}

impl Server {
    fn start() -> Server {
        let server = RedisServer::start();
        let client = redis::Client::open(server.url()).unwrap();
        let conn = client.get_connection().unwrap();
        let mut sub = client.get_connection().unwrap();
        redis::cmd("PSUBSCRIBE")
            .arg("{b}:*")
            .exec(&mut sub)
            .unwrap();
        sub.set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let mut s = Server {
            _server: server,
            conn,
            sub,
            batch: suite::lua::script("BATCH"),
            lock: suite::lua::script("LOCK"),
            unlock: suite::lua::script("UNLOCK"),
        };
        s.messages(); // the subscription's confirmation
        s
    }

    fn cmd(&mut self, args: &[&str]) {
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.exec(&mut self.conn).unwrap();
    }

    /// Writes `state` after clearing every key; every key gets [`TTL_MS`].
    fn set(&mut self, s: State) {
        self.cmd(&["FLUSHALL"]);
        if s.wrong_type {
            self.cmd(&["SET", LOCK, "x", "PX", &TTL_MS.to_string()]);
            return;
        }
        for (field, n) in [(ME, s.mine), (OTHER, s.other)] {
            if n > 0 {
                self.cmd(&["HSET", LOCK, field, &n.to_string()]);
            }
        }
        if s.mark {
            self.cmd(&["HSET", LOCK, "waiting", "1"]);
        }
        let far = "99999999999999";
        if s.claims {
            self.cmd(&["ZADD", CLAIMS, "1", "waiter:1"]);
            self.cmd(&["ZADD", CLAIM_DEADLINES, far, "waiter:1"]);
        }
        if s.fair {
            self.cmd(&["RPUSH", FAIR, "waiter:2"]);
            self.cmd(&["ZADD", FAIR_DEADLINES, far, "waiter:2"]);
        }
        for key in [LOCK, CLAIMS, CLAIM_DEADLINES, FAIR, FAIR_DEADLINES] {
            self.cmd(&["PEXPIRE", key, &TTL_MS.to_string()]);
        }
    }

    /// Every key, with its contents and PTTL.
    fn snapshot(&mut self) -> Snapshot {
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut self.conn).unwrap();
        let mut out = Snapshot::new();
        for key in keys {
            let kind: String = redis::cmd("TYPE").arg(&key).query(&mut self.conn).unwrap();
            let value = match kind.as_str() {
                "hash" => {
                    let h: BTreeMap<String, String> = redis::cmd("HGETALL")
                        .arg(&key)
                        .query(&mut self.conn)
                        .unwrap();
                    format!("{h:?}")
                }
                "string" => redis::cmd("GET").arg(&key).query(&mut self.conn).unwrap(),
                "list" => {
                    let l: Vec<String> = redis::cmd("LRANGE")
                        .arg(&key)
                        .arg(0)
                        .arg(-1)
                        .query(&mut self.conn)
                        .unwrap();
                    format!("{l:?}")
                }
                "zset" => {
                    let z: Vec<(String, String)> = redis::cmd("ZRANGE")
                        .arg(&key)
                        .arg(0)
                        .arg(-1)
                        .arg("WITHSCORES")
                        .query(&mut self.conn)
                        .unwrap();
                    format!("{z:?}")
                }
                other => panic!("{key} of type {other}"),
            };
            let pttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut self.conn).unwrap();
            out.insert(key, Key { value, pttl });
        }
        out
    }

    /// The messages published since the last call, as (channel, payload).
    fn messages(&mut self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        loop {
            match self.sub.recv_response() {
                Ok(redis::Value::Array(parts)) | Ok(redis::Value::Push { data: parts, .. }) => {
                    let text: Vec<String> = parts
                        .iter()
                        .filter_map(|p| redis::from_redis_value::<String>(p.clone()).ok())
                        .collect();
                    if text.first().map(String::as_str) == Some("pmessage") {
                        out.push((text[2].clone(), text[3].clone()));
                    }
                }
                Ok(_) => {}
                Err(e) if e.is_timeout() => return out,
                Err(e) => panic!("{e}"),
            }
        }
    }

    /// Runs `script` by EVAL; its reply as integers (one for an integer reply).
    fn eval(&mut self, script: &str, keys: &[&str], args: &[&str]) -> redis::RedisResult<Vec<i64>> {
        let script = match script {
            "BATCH" => &self.batch,
            "LOCK" => &self.lock,
            _ => &self.unlock,
        };
        let reply: redis::Value = redis::cmd("EVAL")
            .arg(script)
            .arg(keys.len())
            .arg(keys)
            .arg(args)
            .query(&mut self.conn)?;
        Ok(ints(&reply))
    }

    /// Runs `script` from `state`.
    fn run(&mut self, state: State, script: &str, keys: &[&str], args: &[&str]) -> Run {
        self.set(state);
        let before = self.snapshot();
        let reply = self.eval(script, keys, args).ok();
        let after = self.snapshot();
        Run {
            reply,
            before,
            after,
            messages: self.messages(),
        }
    }
}

/// One script run from a state: its answer (an error as `None`), the keys before and after
/// it, and the messages it published.
struct Run {
    reply: Option<Vec<i64>>,
    before: Snapshot,
    after: Snapshot,
    messages: Vec<(String, String)>,
}

impl Run {
    /// A batch run's one item answer.
    fn item(&self) -> i64 {
        self.reply.as_ref().expect("batch.lua never fails")[0]
    }

    /// The item was not tried (`needs_more`: its script needs more than the batch serves):
    /// nothing changed, nothing was published.
    fn assert_untried(&self, needs_more: bool, case: &str) {
        assert!(
            needs_more,
            "{case}: not tried, where the script needs nothing more"
        );
        assert!(
            same(&self.after, &self.before),
            "{case}: not tried, but changed"
        );
        assert!(self.messages.is_empty(), "{case}");
    }

    /// Both runs left the same keys and published the same messages.
    fn assert_same_effects(&self, script: &Run, case: &str) {
        let (b, s) = (&self.after, &script.after);
        assert!(same(b, s), "{case}: {b:?} vs {s:?}");
        assert_eq!(self.messages, script.messages, "{case}");
    }
}

fn ints(v: &redis::Value) -> Vec<i64> {
    match v {
        redis::Value::Array(items) => items.iter().flat_map(ints).collect(),
        redis::Value::Int(n) => vec![*n],
        other => panic!("unexpected reply {other:?}"),
    }
}

/// `a` and `b` hold the same keys with the same contents, TTLs within 100 ms.
fn same(a: &Snapshot, b: &Snapshot) -> bool {
    a.len() == b.len()
        && a.iter().all(|(k, x)| {
            b.get(k)
                .is_some_and(|y| x.value == y.value && (x.pttl - y.pttl).abs() <= 100)
        })
}

#[test]
fn lock_items_do_what_lock_lua_does() {
    let mut server = Server::start();
    let (mut compared, mut untried) = (0, 0);
    for state in State::all() {
        for lease in ["5000", "30000"] {
            let batch = server.run(
                state,
                "BATCH",
                &[LOCK, CLAIMS],
                &["publish", MESSAGE, lease, ME],
            );
            // The engine's call of an acquire that stakes no claim.
            let mut run = server.run(
                state,
                "LOCK",
                &[LOCK, CLAIMS, CLAIM_DEADLINES],
                &[lease, ME, "0", "0"],
            );
            let item = batch.item();
            let case = format!("{state:?} lease {lease}");
            if item == -3 {
                let free = state.mine + state.other == 0;
                batch.assert_untried(state.wrong_type || (free && state.claims), &case);
                untried += 1;
                continue;
            }
            let script = run
                .reply
                .clone()
                .unwrap_or_else(|| panic!("{case}: the item answered {item}; lock.lua failed"));
            match item {
                n if n >= 1 => assert_eq!(script[..2], [1, n], "{case}"),
                n if n <= -9 => {
                    assert_eq!(script[0], 0, "{case}");
                    assert!(
                        (script[1] - (-10 - n)).abs() <= 100,
                        "{case}: {script:?} vs {n}"
                    );
                    // By design: the item leaves the waiter mark to the waiter's re-check.
                    if let Some(lock) = run.after.get_mut(LOCK) {
                        if !state.mark {
                            lock.value = lock.value.replace(", \"waiting\": \"1\"", "");
                            lock.value = lock.value.replace("\"waiting\": \"1\", ", "");
                        }
                    }
                }
                other => panic!("{case}: batch answered {other}"),
            }
            batch.assert_same_effects(&run, &case);
            compared += 1;
        }
    }
    assert!(
        compared > 50 && untried > 0,
        "{compared} compared, {untried} untried"
    );
    eprintln!("batch.lua lock items: {compared} agree with lock.lua, {untried} left to it");
}

#[test]
fn unlock_items_do_what_unlock_lua_does() {
    let mut server = Server::start();
    let (mut compared, mut untried) = (0, 0);
    for state in State::all() {
        for expected in 0..=3i64 {
            let encoded = (-1 - expected).to_string();
            let batch = server.run(
                state,
                "BATCH",
                &[LOCK, CHANNEL, FAIR],
                &["publish", MESSAGE, &encoded, ME],
            );
            let run = server.run(
                state,
                "UNLOCK",
                &[LOCK, CHANNEL, FAIR, FAIR_DEADLINES],
                &[ME, MESSAGE, &expected.to_string(), "publish", FAIR_CHANNEL],
            );
            let item = batch.item();
            let case = format!("{state:?} expected {expected}");
            if item == -3 {
                let last = state.mine == 0 || (state.mine == 1 && state.mark);
                batch.assert_untried(state.wrong_type || (state.fair && last), &case);
                untried += 1;
                continue;
            }
            let script = run
                .reply
                .as_ref()
                .unwrap_or_else(|| panic!("{case}: the item answered {item}; unlock.lua failed"));
            assert_eq!(script, &[item], "{case}");
            batch.assert_same_effects(&run, &case);
            compared += 1;
        }
    }
    assert!(
        compared > 100 && untried > 0,
        "{compared} compared, {untried} untried"
    );
    eprintln!("batch.lua unlock items: {compared} agree with unlock.lua, {untried} left to it");
}
