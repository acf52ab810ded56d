//! The accept loop: HTTP/1.1 connections (hyper) with a header timeout, a connection limit that
//! answers 503 and logs, and a graceful shutdown with a deadline after which every connection
//! still open is closed (so a client holding a half-sent request cannot keep the process, and
//! its database lock, alive).

use crate::limits::Limits;
use crate::log::log;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tower_service::Service as _;

/// Refused connections answered at once at most (each holds a descriptor until its client
/// closes, at most a second); beyond that a refused connection is closed without an answer.
/// Part of [`crate::limits::FD_RESERVE`].
const REFUSING_AT_ONCE: usize = 128;

/// How the server stopped.
pub(crate) struct Stopped {
    /// Connections still open at the shutdown deadline, closed then.
    pub closed_at_deadline: usize,
}

/// Serve `router` on `listener` until `stop` completes; then stop accepting, let each open
/// connection finish its request (idle ones close at once), and close whatever is still open
/// after `limits.shutdown_deadline`.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Stopped {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let refusing = Arc::new(Semaphore::new(REFUSING_AT_ONCE));
    let refusals = Arc::new(Mutex::new(RefusalLog::default()));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut conns = tokio::task::JoinSet::new();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => {
                let sock = match accepted {
                    Ok((sock, _)) => sock,
                    Err(e) => {
                        // EMFILE and the like: logged, and accepting resumes shortly.
                        log("accept-error", json!({"error": e.to_string()}));
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                match permits.clone().try_acquire_owned() {
                    Ok(permit) => {
                        conns.spawn(connection(sock, router.clone(), limits, stop_rx.clone(), permit));
                    }
                    Err(_) => {
                        crate::metrics::record_refusal();
                        note_refusal(&refusals, limits.max_connections);
                        if let Ok(slot) = refusing.clone().try_acquire_owned() {
                            tokio::spawn(refuse(sock, limits.max_connections, slot));
                        }
                    }
                }
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let deadline = tokio::time::sleep(limits.shutdown_deadline);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            r = conns.join_next() => if r.is_none() {
                return Stopped { closed_at_deadline: 0 };
            },
            () = &mut deadline => {
                let n = conns.len();
                log(
                    "shutdown-deadline",
                    json!({"closed_connections": n, "deadline_ms": limits.shutdown_deadline.as_millis() as u64}),
                );
                conns.abort_all();
                return Stopped { closed_at_deadline: n };
            }
        }
    }
}

/// One connection: HTTP/1.1 with keep-alive; a request header must arrive within
/// `limits.header_timeout` (also the idle timeout between requests). At shutdown it finishes
/// the request in flight and closes.
async fn connection(
    sock: TcpStream,
    router: Router,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
    _permit: OwnedSemaphorePermit,
) {
    crate::metrics::record_connection(true);
    let _open = OnClose(|| crate::metrics::record_connection(false));
    let _ = sock.set_nodelay(true);
    let svc = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let mut r = router.clone();
        async move { r.call(req).await }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(sock), svc);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = stop.wait_for(|s| *s) => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}

/// Runs its closure when dropped (a connection task ends, or is aborted at the deadline).
struct OnClose<F: FnMut()>(F);

impl<F: FnMut()> Drop for OnClose<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

/// Answer a connection over the limit with 503 (JSON, `Retry-After: 1`) and close it, within a
/// second.
async fn refuse(mut sock: TcpStream, limit: usize, _slot: OwnedSemaphorePermit) {
    crate::metrics::record_request("connection-limit", 503, 0.0, true);
    let body = json!({"error": format!(
        "too many open connections (at most {limit}, --max-connections); retry later"
    )})
    .to_string();
    let resp = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        sock.write_all(resp.as_bytes()).await?;
        sock.shutdown().await?;
        // Read what the client sent until it closes (closing with unread data would reset the
        // connection and could lose the answer).
        let mut buf = [0u8; 1024];
        while sock.read(&mut buf).await? > 0 {}
        std::io::Result::Ok(())
    })
    .await;
}

/// Refused connections since the last log line (one line a second at most).
#[derive(Default)]
struct RefusalLog {
    last: Option<Instant>,
    since: u64,
}

fn note_refusal(l: &Mutex<RefusalLog>, limit: usize) {
    let mut l = l.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    l.since += 1;
    if l.last.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
        log(
            "connection-limit",
            json!({"max_connections": limit, "refused_since_last_line": l.since}),
        );
        l.last = Some(Instant::now());
        l.since = 0;
    }
}
