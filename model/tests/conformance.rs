//! The model's script effects ([`lockwise_model::scripts`]) against the real scripts: every
//! small lock hash (three owners, counts 0 to 3 each) and every input the accounting uses,
//! run on a throwaway server (`REDIS_SERVER_BIN` picks Redis or Valkey) and by the model;
//! replies, owner counts and TTLs must agree. The scripts are assembled from `lua/` as the
//! engine sends them (`suite::lua`), in both key layouts. A script whose reply table or effect changes fails here until the model does.

use std::collections::HashMap;

use lockwise_model::scripts::{self, Field, Hash, LockReply};
use lockwise_testkit::RedisServer;

/// The engine's script `name` as Redis receives it.
fn script(name: &str) -> String {
    suite::lua::script(name)
}

const FIELDS: [&str; scripts::OWNERS] = ["c0ffee:1", "c0ffee:2", "beef:1"];
const HASH: &str = "{m}:lock";
const KEYS_LOCKWISE: [&str; 3] = [HASH, "{m}:claims", "{m}:claims:deadlines"];
const LEASE_MS: u64 = 30_000;

struct Server {
    _server: RedisServer,
    conn: redis::Connection,
    /// SHA1 of each script by name.
    sha: HashMap<&'static str, String>,
}

impl Server {
    fn start() -> Server {
        let server = RedisServer::start();
        let mut conn = redis::Client::open(server.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let mut sha = HashMap::new();
        for name in ["LOCK", "UNLOCK", "REDISSON_UNLOCK", "FORCE_UNLOCK"] {
            let s: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(script(name))
                .query(&mut conn)
                .unwrap();
            sha.insert(name, s);
        }
        Server {
            _server: server,
            conn,
            sha,
        }
    }

    /// Writes `hash` (owner counts) with a TTL, after clearing every key.
    fn set(&mut self, hash: &Hash) {
        redis::cmd("FLUSHALL").exec(&mut self.conn).unwrap();
        for (o, f) in hash.fields.iter().enumerate() {
            if let Some(f) = f {
                redis::cmd("HSET")
                    .arg(HASH)
                    .arg(FIELDS[o])
                    .arg(f.count)
                    .exec(&mut self.conn)
                    .unwrap();
            }
        }
        if hash.exists() {
            redis::cmd("PEXPIRE")
                .arg(HASH)
                .arg(10_000)
                .exec(&mut self.conn)
                .unwrap();
        }
    }

    /// The owner counts the server holds now; asserts every key has a TTL.
    fn get(&mut self) -> [u8; scripts::OWNERS] {
        let all: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(HASH)
            .query(&mut self.conn)
            .unwrap();
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut self.conn).unwrap();
        for k in keys {
            let pttl: i64 = redis::cmd("PTTL").arg(&k).query(&mut self.conn).unwrap();
            assert!(pttl > 0, "{k} has no TTL ({pttl})");
        }
        FIELDS.map(|f| all.get(f).map_or(0, |c| c.parse().unwrap()))
    }

    fn evalsha(&mut self, name: &str, keys: &[&str], args: &[String]) -> redis::Value {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&self.sha[name]).arg(keys.len()).arg(keys).arg(args);
        cmd.query(&mut self.conn).unwrap()
    }
}

fn counts(hash: &Hash) -> [u8; scripts::OWNERS] {
    std::array::from_fn(|o| hash.hget(o))
}

/// Every hash of three owners with counts 0..=3.
fn hashes() -> Vec<Hash> {
    let mut out = Vec::new();
    for n in 0..4u32.pow(scripts::OWNERS as u32) {
        let mut h = Hash::default();
        for (o, field) in h.fields.iter_mut().enumerate() {
            let count = (n / 4u32.pow(o as u32) % 4) as u8;
            *field = (count > 0).then_some(Field { count, run: 1 });
        }
        out.push(h);
    }
    out
}

fn ints(v: &redis::Value) -> Vec<i64> {
    match v {
        redis::Value::Array(items) => items.iter().flat_map(ints).collect(),
        redis::Value::Int(n) => vec![*n],
        other => panic!("unexpected reply {other:?}"),
    }
}

#[test]
fn lock_script_matches_the_model_in_both_layouts() {
    let mut server = Server::start();
    let mut checked = 0;
    for layout_keys in [&KEYS_LOCKWISE[..], &KEYS_LOCKWISE[..1]] {
        for hash in hashes() {
            for (owner, field) in FIELDS.iter().enumerate() {
                server.set(&hash);
                // ARGV: lease, owner, claim TTL 0 (no claim), waited 0.
                let args = [
                    LEASE_MS.to_string(),
                    field.to_string(),
                    "0".to_string(),
                    "0".to_string(),
                ];
                let reply = ints(&server.evalsha("LOCK", layout_keys, &args));
                let mut model = hash;
                let mut run = 1;
                let expected = scripts::lock(&mut model, owner, &mut run);
                match expected {
                    LockReply::Granted(n) => assert_eq!(reply[..2], [1, n as i64], "{hash:?}"),
                    LockReply::Held => assert_eq!(reply[0], 0, "{hash:?} owner {owner}"),
                }
                assert_eq!(server.get(), counts(&model), "lock {hash:?} owner {owner}");
                checked += 1;
            }
        }
    }
    eprintln!("lock.lua: {checked} cases agree with the model");
}

#[test]
fn unlock_scripts_match_the_model_in_both_layouts() {
    let mut server = Server::start();
    let mut checked = 0;
    for redisson in [false, true] {
        for hash in hashes() {
            for (owner, field) in FIELDS.iter().enumerate() {
                for expected in 0..=3u8 {
                    server.set(&hash);
                    let reply = if redisson {
                        let args = [
                            field.to_string(),
                            "0".to_string(),
                            expected.to_string(),
                            "publish".to_string(),
                        ];
                        server.evalsha("REDISSON_UNLOCK", &[HASH, "{m}:chan"], &args)
                    } else {
                        let args = [
                            field.to_string(),
                            "c0ffee".to_string(),
                            expected.to_string(),
                            "publish".to_string(),
                            "{m}:w".to_string(),
                        ];
                        let keys = [HASH, "{m}:chan", "{m}:fair", "{m}:fair:deadlines"];
                        server.evalsha("UNLOCK", &keys, &args)
                    };
                    let mut model = hash;
                    let want = scripts::unlock(&mut model, owner, expected);
                    assert_eq!(
                        ints(&reply),
                        [want as i64],
                        "unlock {hash:?} owner {owner} expected {expected} (redisson {redisson})"
                    );
                    assert_eq!(server.get(), counts(&model), "unlock {hash:?}");
                    checked += 1;
                }
            }
        }
    }
    eprintln!("unlock.lua, redisson_unlock.lua: {checked} cases agree with the model");
}

#[test]
fn hget_and_force_unlock_match_the_model() {
    let mut server = Server::start();
    for hash in hashes() {
        server.set(&hash);
        for (owner, field) in FIELDS.iter().enumerate() {
            let n: Option<u8> = redis::cmd("HGET")
                .arg(HASH)
                .arg(field)
                .query(&mut server.conn)
                .unwrap();
            assert_eq!(n.unwrap_or(0), hash.hget(owner));
        }
        let args = [
            "c0ffee".to_string(),
            "publish".to_string(),
            "{m}:w".to_string(),
        ];
        let keys = [HASH, "{m}:chan", "{m}:fair", "{m}:fair:deadlines"];
        let reply = ints(&server.evalsha("FORCE_UNLOCK", &keys, &args));
        let mut model = hash;
        assert_eq!(reply, [scripts::force_unlock(&mut model) as i64]);
        assert_eq!(server.get(), counts(&model));
    }
}
