//! A standby's requests, forwarded (PostgreSQL, issue 42): a `serve` node that waits for the
//! database's lease (another node is its writer) passes each request to the writer's node,
//! named with its claim (`owner.addr`), and returns its answer unchanged. One internal hop on a
//! new connection per request; a request that already made the hop is not forwarded again
//! (two standbys never pass a request back and forth).

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

async fn send(to: &str, req: axum::extract::Request) -> anyhow::Result<Response> {
    let stream = tokio::net::TcpStream::connect(to).await?;
    stream.set_nodelay(true)?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let resp = sender.send_request(req).await?;
    Ok(resp.map(axum::body::Body::new))
}
