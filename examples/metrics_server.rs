//! A small axum app whose handlers take locks, with a `/metrics` route served by the
//! Prometheus exporter (wait-time buckets from 1 ms to 5 s). It drives itself: 16 HTTP
//! keep-alive connections call the handlers for a few seconds, then it scrapes its own
//! `/metrics` and prints the `lockwise_` lines.
//!
//! ```text
//! cargo run --release --features metrics --example metrics_server              # own server
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --features metrics --example metrics_server
//! cargo run --features metrics --example metrics_server -- --serve 127.0.0.1:3000  # keep serving
//! ```
//!
//! - `GET /orders/{id}`: `try_lock` of `order:<id mod 4>` for at most 50 ms (503 when the
//!   wait runs out), 2 ms of work under the lock;
//! - `GET /checkout`: a `FairLock`, 1 ms of work, served in arrival order;
//! - `GET /metrics`: the Prometheus text format.

use lockwise_testkit::server;

use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use lockwise::metric_names::{ACQUIRE_WAIT_SECONDS, FAIR_QUEUE_LENGTH};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Wait-time buckets, seconds: 1 ms .. 5 s ("p99 wait above 1 s" is the usual alert).
const WAIT_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];
/// Fair-queue length buckets.
const QUEUE_BUCKETS: [f64; 8] = [0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0];

#[derive(Clone)]
struct App {
    locks: lockwise::Client,
    prometheus: PrometheusHandle,
}

async fn order(State(app): State<App>, Path(id): Path<u64>) -> (StatusCode, String) {
    // Non-reentrant: the one task serving a keep-alive connection must not re-enter a lock
    // that an earlier request of the same connection still holds.
    let lock = app.locks.lock(format!("order:{}", id % 4)).non_reentrant();
    match lock.try_lock(Duration::from_millis(50), None).await {
        Ok(guard) => {
            tokio::time::sleep(Duration::from_millis(2)).await;
            match guard.unlock().await {
                Ok(()) => (StatusCode::OK, format!("order {id} done\n")),
                Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
            }
        }
        Err(e) if e.is_timeout() => (StatusCode::SERVICE_UNAVAILABLE, "busy, retry\n".into()),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
    }
}

async fn checkout(State(app): State<App>) -> (StatusCode, String) {
    let lock = app.locks.fair_lock("checkout").non_reentrant();
    match lock.lock().await {
        Ok(guard) => {
            tokio::time::sleep(Duration::from_millis(1)).await;
            let _ = guard.unlock().await;
            (StatusCode::OK, "checked out\n".into())
        }
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
    }
}

async fn metrics(State(app): State<App>) -> String {
    app.prometheus.render()
}

/// One keep-alive connection sending `GET`s to `paths` in turn until `until`.
async fn load(addr: std::net::SocketAddr, paths: Vec<String>, until: Instant) -> u64 {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let mut done = 0;
    for path in paths.iter().cycle() {
        if Instant::now() >= until {
            break;
        }
        let req = hyper::Request::get(path.as_str())
            .header("host", "app")
            .body(Empty::<Bytes>::new())
            .expect("request");
        let res = sender.send_request(req).await.expect("response");
        res.into_body().collect().await.expect("body");
        done += 1;
    }
    done
}

async fn fetch(addr: std::net::SocketAddr, path: &str) -> String {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let req = hyper::Request::get(path)
        .header("host", "app")
        .body(Empty::<Bytes>::new())
        .expect("request");
    let body = sender.send_request(req).await.expect("response");
    let bytes = body.into_body().collect().await.expect("body").to_bytes();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let serve = args
        .iter()
        .position(|a| a == "--serve")
        .map(|i| args.get(i + 1).cloned().unwrap_or("127.0.0.1:3000".into()));
    let seconds: u64 = args
        .iter()
        .position(|a| a == "--seconds")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(3);

    // The exporter: histograms with these buckets instead of summaries.
    let prometheus = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(ACQUIRE_WAIT_SECONDS.into()), &WAIT_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(FAIR_QUEUE_LENGTH.into()), &QUEUE_BUCKETS)?
        .install_recorder()?;
    lockwise::describe_metrics();
    // Upkeep drains recorded histogram samples into the buckets (`install()` of the
    // exporter's own HTTP listener would run it; we serve `/metrics` through axum instead).
    let upkeep = prometheus.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            upkeep.run_upkeep();
        }
    });

    let (url, _server) = server::url_or_start(&[])?;
    let locks = lockwise::Client::builder(url)
        .namespace("metrics-demo")
        // Four fixed order names and one checkout lock: few enough to label by name.
        .metrics_lock_names(true)
        .build()
        .await?;
    let app = Router::new()
        .route("/orders/{id}", get(order))
        .route("/checkout", get(checkout))
        .route("/metrics", get(metrics))
        .with_state(App { locks, prometheus });

    let listener = tokio::net::TcpListener::bind(serve.as_deref().unwrap_or("127.0.0.1:0")).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });

    if serve.is_some() {
        println!("serving on http://{addr} (/orders/{{id}}, /checkout, /metrics); Ctrl-C stops");
        tokio::signal::ctrl_c().await?;
        return Ok(());
    }

    let until = Instant::now() + Duration::from_secs(seconds);
    let mut connections = Vec::new();
    for c in 0..16u64 {
        let paths = if c % 4 == 3 {
            vec!["/checkout".to_string()]
        } else {
            (0..8).map(|i| format!("/orders/{}", c * 8 + i)).collect()
        };
        connections.push(tokio::spawn(load(addr, paths, until)));
    }
    let mut requests = 0;
    for c in connections {
        requests += c.await?;
    }
    println!("# {requests} requests in {seconds} s over 16 connections; GET /metrics:");
    for line in fetch(addr, "/metrics").await.lines() {
        if line.contains("lockwise_") {
            println!("{line}");
        }
    }
    Ok(())
}
