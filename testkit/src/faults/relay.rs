//! One forwarded connection: requests from the client to the server, each paired with what
//! to do with its reply (its fault, if one was armed for it), and replies from the server to
//! the client, delivered, swallowed, held, dropped or replaced by a reset in request order.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::resp::{frame_end, parse_request};
use super::{Fault, Shared};

/// What to do with one reply.
#[derive(Clone, Copy, Debug)]
enum Action {
    Deliver,
    Swallow,
    Hold(Duration),
    Drop,
    Reset,
}

/// Per connection: the reply actions in request order, and whether it is a pass-through.
struct Conn {
    actions: Mutex<VecDeque<Action>>,
    passthrough: AtomicBool,
}

pub(super) async fn serve(shared: Arc<Shared>, down: TcpStream) {
    shared.connections.fetch_add(1, Ordering::Relaxed);
    if shared.refuse.load(Ordering::Relaxed) {
        return;
    }
    let delay = shared.connect_delay_ms.load(Ordering::Relaxed);
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    let Ok(up) = TcpStream::connect(("127.0.0.1", shared.upstream)).await else {
        return;
    };
    let _ = down.set_nodelay(true);
    let _ = up.set_nodelay(true);
    let mut generation = shared.generation.subscribe();
    let conn = Arc::new(Conn {
        actions: Mutex::new(VecDeque::new()),
        passthrough: AtomicBool::new(false),
    });
    let (dr, dw) = down.into_split();
    let (ur, uw) = up.into_split();
    tokio::select! {
        _ = requests(&shared, &conn, dr, uw) => {}
        _ = replies(&shared, &conn, ur, dw) => {}
        _ = generation.changed() => {}
    }
}

/// Client to server: parse requests, decide each one's fault, forward.
async fn requests(
    shared: &Shared,
    conn: &Conn,
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
) {
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut out: Vec<u8> = Vec::new();
        while !buf.is_empty() {
            if conn.passthrough.load(Ordering::Relaxed) {
                out.append(&mut buf);
                break;
            }
            let (len, request) = match parse_request(&buf) {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(()) => {
                    conn.passthrough.store(true, Ordering::Relaxed);
                    continue;
                }
            };
            let frame: Vec<u8> = buf.drain(..len).collect();
            let Some(name) = request.first() else {
                out.extend_from_slice(&frame);
                continue;
            };
            if [&b"SUBSCRIBE"[..], b"SSUBSCRIBE", b"PSUBSCRIBE"]
                .iter()
                .any(|s| s.eq_ignore_ascii_case(name))
            {
                conn.passthrough.store(true, Ordering::Relaxed);
                out.extend_from_slice(&frame);
                continue;
            }
            let fault = shared.pick(&request);
            {
                let mut actions = conn.actions.lock().unwrap();
                match fault {
                    None => actions.push_back(Action::Deliver),
                    Some(Fault::SendTwice) => {
                        actions.push_back(Action::Deliver);
                        actions.push_back(Action::Swallow);
                    }
                    Some(Fault::HoldReply(d)) => actions.push_back(Action::Hold(d)),
                    Some(Fault::DropReply) => actions.push_back(Action::Drop),
                    Some(Fault::ResetAfterSend) => actions.push_back(Action::Reset),
                }
            }
            out.extend_from_slice(&frame);
            if fault == Some(Fault::SendTwice) {
                out.extend_from_slice(&frame);
            }
        }
        if !out.is_empty() && to.write_all(&out).await.is_err() {
            return;
        }
    }
}

/// Server to client: pair each reply with its request's action.
async fn replies(
    shared: &Shared,
    conn: &Conn,
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
) {
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut raw = false;
    loop {
        let n = match from.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut out: Vec<u8> = Vec::new();
        while !buf.is_empty() {
            if raw
                || (conn.passthrough.load(Ordering::Relaxed)
                    && conn.actions.lock().unwrap().is_empty())
            {
                out.append(&mut buf);
                break;
            }
            let len = match frame_end(&buf, 0) {
                Ok(Some(end)) => end,
                Ok(None) => break,
                Err(()) => {
                    raw = true;
                    continue;
                }
            };
            let frame: Vec<u8> = buf.drain(..len).collect();
            if frame[0] == b'>' {
                out.extend_from_slice(&frame);
                continue;
            }
            let action = conn
                .actions
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or(Action::Deliver);
            match action {
                Action::Deliver => out.extend_from_slice(&frame),
                Action::Swallow => {}
                Action::Hold(d) => {
                    if !out.is_empty() && to.write_all(&out).await.is_err() {
                        return;
                    }
                    out.clear();
                    tokio::time::sleep(d).await;
                    out.extend_from_slice(&frame);
                }
                Action::Drop => {
                    let _ = to.write_all(&out).await;
                    let after = shared.drop_close_after_ms.load(Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(after)).await;
                    return;
                }
                Action::Reset => {
                    let _ = to.write_all(&out).await;
                    return;
                }
            }
        }
        if !out.is_empty() && to.write_all(&out).await.is_err() {
            return;
        }
    }
}
