//! A standby's requests, forwarded (PostgreSQL, issue 42): a `serve` node that waits for the
//! database's lease (another node is its writer) passes each request to the writer's node,
//! named with its claim (`owner.addr`), and returns its answer unchanged. One internal hop on a
//! keep-alive connection from a small pool per writer address ([`POOL`]: a connection goes back
//! once its answer has been read to the end; at most [`POOL_SIZE`] idle ones are kept), so a
//! standby under load does not open (and leave in `TIME_WAIT`) a connection per request; a
//! request that already made the hop is not forwarded again (two standbys never pass a request
//! back and forth).

use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use std::time::Duration;

/// The header a forwarded request carries.
pub const FORWARDED: &str = "x-dpbandits-forwarded";

/// How long a forwarded request may take in all (connect, send, answer).
const FORWARD_TIMEOUT: Duration = Duration::from_secs(30);

fn unavailable(message: String) -> Response {
    let mut r = (
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        axum::Json(serde_json::json!({"error": message})),
    )
        .into_response();
    r.headers_mut()
        .insert("retry-after", axum::http::HeaderValue::from_static("1"));
    r
}

/// Forward `req` to the writer's node at `to`; its answer, or 503 when it cannot be reached.
pub async fn forward(to: &str, mut req: axum::extract::Request) -> Response {
    if req.headers().contains_key(FORWARDED) {
        return unavailable(
            "this node is a standby and the request was forwarded to it already: retry shortly"
                .to_string(),
        );
    }
    req.headers_mut()
        .insert(FORWARDED, axum::http::HeaderValue::from_static("1"));
    // Hop-by-hop: the client's connection is not the hop's (a client's `Connection: close`
    // would close the pooled connection to the writer).
    strip_hop_by_hop(req.headers_mut());
    match tokio::time::timeout(FORWARD_TIMEOUT, send(to, req)).await {
        Ok(Ok(resp)) => resp,
        Ok(Err(e)) => unavailable(format!(
            "this node is a standby; the writer's node {to} could not be reached ({e}): retry shortly"
        )),
        Err(_) => unavailable(format!(
            "this node is a standby; the writer's node {to} did not answer within {} s: retry shortly",
            FORWARD_TIMEOUT.as_secs()
        )),
    }
}

/// Remove the hop-by-hop headers (RFC 9110, 7.6.1) from a forwarded request or answer.
fn strip_hop_by_hop(h: &mut axum::http::HeaderMap) {
    for name in [
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "upgrade",
    ] {
        h.remove(name);
    }
}

/// Idle keep-alive connections to writers' nodes, by address.
static POOL: std::sync::LazyLock<
    std::sync::Mutex<
        std::collections::HashMap<
            String,
            Vec<hyper::client::conn::http1::SendRequest<axum::body::Body>>,
        >,
    >,
> = std::sync::LazyLock::new(Default::default);

/// Idle connections kept per writer address (more in flight are opened, then closed).
const POOL_SIZE: usize = 32;

/// An idle pooled connection to `to` that can take a request now, if any.
fn pooled(to: &str) -> Option<hyper::client::conn::http1::SendRequest<axum::body::Body>> {
    let mut pool = POOL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let idle = pool.get_mut(to)?;
    while let Some(s) = idle.pop() {
        if s.is_ready() && !s.is_closed() {
            return Some(s);
        }
    }
    None
}

/// Give `sender` back to the pool of `to` once its answer has been read (its connection ready
/// for the next request); dropped (closing the connection) when the pool is full or the
/// connection closed.
fn give_back(to: String, mut sender: hyper::client::conn::http1::SendRequest<axum::body::Body>) {
    tokio::spawn(async move {
        if sender.ready().await.is_err() {
            return;
        }
        let mut pool = POOL
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let idle = pool.entry(to).or_default();
        if idle.len() < POOL_SIZE {
            idle.push(sender);
        }
    });
}

async fn connect(
    to: &str,
) -> anyhow::Result<hyper::client::conn::http1::SendRequest<axum::body::Body>> {
    let stream = tokio::net::TcpStream::connect(to).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

async fn send(to: &str, req: axum::extract::Request) -> anyhow::Result<Response> {
    let mut sender = match pooled(to) {
        Some(s) => s,
        None => connect(to).await?,
    };
    // A pooled connection the writer closed just now gives the request back unsent
    // (`into_error`'s request): sent again once, on a new connection.
    let resp = match sender.try_send_request(req).await {
        Ok(resp) => resp,
        Err(mut e) => match e.take_message() {
            Some(req) => {
                sender = connect(to).await?;
                sender.send_request(req).await?
            }
            None => return Err(e.into_error().into()),
        },
    };
    give_back(to.to_string(), sender);
    let mut resp = resp.map(axum::body::Body::new);
    strip_hop_by_hop(resp.headers_mut());
    Ok(resp)
}
