//! Two lockwise clients and two Redisson peers take one `RwLock` for reading and writing in
//! turn; every hold is recorded as its holder saw it, and no writer's overlaps another hold.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockwise::Client;
use suite::kit::within;
use suite::redisson::RedissonPeer;
use suite::RedisServer;

use super::super::client;
use super::{nothing_left, TTL, TTL_MS};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Side {
    Read,
    Write,
}

/// One hold as its holder saw it: from after its acquire returned to before its release.
#[derive(Debug)]
struct Span {
    who: String,
    side: Side,
    from: Instant,
    to: Instant,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_and_writers_of_both_sides_contending_never_overlap_a_writer() {
    let server = RedisServer::start();
    const ROUNDS: usize = 20;
    let spans = Arc::new(Mutex::new(Vec::<Span>::new()));
    let side = |round: usize, actor: usize| match (round + actor) % 3 {
        0 => Side::Write,
        _ => Side::Read,
    };
    let mut tasks = Vec::new();
    let clients: Vec<Client> = vec![client(&server, TTL).await, client(&server, TTL).await];
    for (actor, c) in clients.iter().enumerate() {
        let (c, spans) = (c.clone(), spans.clone());
        tasks.push(tokio::spawn(async move {
            let rw = c.rw_lock("shared");
            for round in 0..ROUNDS {
                let side = side(round, actor);
                let release = match side {
                    Side::Read => {
                        futures::FutureExt::boxed(rw.read().lock().await.unwrap().unlock())
                    }
                    Side::Write => {
                        futures::FutureExt::boxed(rw.write().lock().await.unwrap().unlock())
                    }
                };
                let from = Instant::now();
                tokio::time::sleep(Duration::from_millis(3)).await;
                let who = format!("lockwise-{actor}");
                spans.lock().unwrap().push(Span {
                    who,
                    side,
                    from,
                    to: Instant::now(),
                });
                release.await.unwrap();
            }
        }));
    }
    let peers = [
        Arc::new(RedissonPeer::connect(server.url()).await),
        Arc::new(RedissonPeer::connect(server.url()).await),
    ];
    for (i, peer) in peers.iter().enumerate() {
        let (peer, spans, actor) = (peer.clone(), spans.clone(), i + 2);
        tasks.push(tokio::spawn(async move {
            let wait = Duration::from_secs(20);
            for round in 0..ROUNDS {
                let side = side(round, actor);
                match side {
                    Side::Read => assert!(peer.read_lock("shared", 1, TTL_MS, wait).await),
                    Side::Write => assert!(peer.write_lock("shared", 1, TTL_MS, wait).await),
                }
                let from = Instant::now();
                tokio::time::sleep(Duration::from_millis(3)).await;
                let who = format!("redisson-{i}");
                spans.lock().unwrap().push(Span {
                    who,
                    side,
                    from,
                    to: Instant::now(),
                });
                match side {
                    Side::Read => assert!(peer.read_unlock("shared", 1).await.is_some()),
                    Side::Write => {
                        assert_eq!(peer.write_unlock("shared", 1, TTL_MS).await, Some(1))
                    }
                }
            }
        }));
    }
    for t in tasks {
        within(120, t).await.unwrap();
    }
    let spans = std::mem::take(&mut *spans.lock().unwrap());
    for who in ["lockwise-0", "lockwise-1", "redisson-0", "redisson-1"] {
        assert_eq!(
            spans.iter().filter(|s| s.who == who).count(),
            ROUNDS,
            "{who}"
        );
    }
    for (i, a) in spans.iter().enumerate() {
        for b in spans.iter().skip(i + 1) {
            let overlap = a.from < b.to && b.from < a.to;
            let writer = a.side == Side::Write || b.side == Side::Write;
            assert!(!(overlap && writer), "a writer overlapped: {a:?} / {b:?}");
        }
    }
    let refs: Vec<&RedissonPeer> = peers.iter().map(|p| &**p).collect();
    nothing_left(&mut server.conn().await, &refs).await;
}
