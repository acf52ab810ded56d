//! The HTTP/JSON layer (axum): routes, authentication, body parsing with field-naming errors,
//! structured logs (no reward values).

pub use crate::log::log;
mod health;
mod pages;
mod trial;
pub use health::{HEALTH_WRITE_EVERY, HealthCache};
pub(crate) use pages::read_page;
pub(crate) use trial::{abandon_bulk, interim, level_of, monitor};

use crate::service::{Caller, CreateRequest, Service, ServiceError, Tokens};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Map, Value, json};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

pub use crate::writer::{
    GATHER_FROM, GATHER_WAIT, Job, MAX_BATCH, QUANTUM, Queued, Reply, publish_tick, writer,
};

/// The shared state of the handlers: the writer's queue, the token table (read without the
/// writer: a request is authenticated before its body is read) and the body timeout.
#[derive(Clone)]
pub struct Shared {
    /// The writer's queue ([`writer`]).
    pub jobs: tokio::sync::mpsc::Sender<Queued>,
    /// The token hashes ([`Service::tokens`]).
    pub tokens: Arc<RwLock<Tokens>>,
    /// A request body must arrive within this time after its header (else 408).
    pub body_timeout: Duration,
    /// The health probes' one write limit ([`HealthCache`]).
    pub health: Arc<HealthCache>,
    /// Read-only connections for the admin pages that need no session ([`crate::readers`]).
    pub readers: Arc<crate::readers::Readers>,
}

/// The router of API version 1.
pub fn router(state: Shared) -> Router {
    Router::new()
        .route("/v1/health", get(health))
        .route("/v1/openapi.json", get(openapi))
        .route("/metrics", get(metrics))
        .route("/v1/experiments", post(create).get(list))
        .route("/v1/experiments/{name}", get(status))
        .route("/v1/experiments/{name}/token", post(rotate))
        .route("/v1/experiments/{name}/export", get(export))
        .route("/v1/experiments/{name}/decisions", post(decide))
        .route("/v1/experiments/{name}/rewards", post(reward))
        .route(
            "/v1/experiments/{name}/decisions/{id}/abandon",
            post(abandon),
        )
        .route("/v1/experiments/{name}/ledger", get(ledger))
        .route("/v1/experiments/{name}/close", post(close))
        .route("/v1/experiments/{name}/abandon", post(abandon_bulk))
        .route("/v1/experiments/{name}/interim", get(interim))
        .route("/v1/experiments/{name}/monitor", get(monitor))
        .route("/v1/experiments/{name}/report", get(report))
        .route("/v1/audit", get(audit))
        .fallback(not_found)
        .layer(axum::middleware::map_response(json_errors))
        .with_state(state)
}

/// The OpenAPI 3.1 document of this API (`api/openapi.json`; checked against this router by
/// the test `serve::openapi_matches_the_router`).
pub const OPENAPI: &str = include_str!("../../api/openapi.json");

async fn openapi() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        OPENAPI,
    )
        .into_response()
}

/// `GET /metrics` (admin): the Prometheus text format ([`crate::metrics`]).
async fn metrics(State(state): State<Shared>, headers: HeaderMap) -> Response {
    let t = Instant::now();
    let token = bearer(&headers);
    let r = with_service(&state, move |s| {
        admin(s, token.as_deref())?;
        Ok(s.metrics_gauges())
    })
    .await;
    match r {
        Ok(g) => {
            crate::metrics::record_request("metrics", 200, t.elapsed().as_secs_f64(), false);
            (
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                )],
                crate::metrics::render(&g),
            )
                .into_response()
        }
        Err(e) => done("metrics", t, Err(e), json!({})),
    }
}

/// Every error answer as JSON `{"error": ...}`: the router's own refusals (405 with its
/// `Allow` header, a path that does not decode, ...) are plain text or empty otherwise.
async fn json_errors(resp: Response) -> Response {
    let st = resp.status();
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !(st.is_client_error() || st.is_server_error()) || is_json {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, 4096)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let reason = st.canonical_reason().unwrap_or("error").to_lowercase();
    let message = if st == StatusCode::METHOD_NOT_ALLOWED {
        let allow = parts
            .headers
            .get(header::ALLOW)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        format!("method: not allowed on this path; allowed: {allow}")
    } else if text.is_empty() {
        reason
    } else {
        format!("{reason}: {text}")
    };
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(json!({"error": message}).to_string()))
}

/// Authenticate a request from its header alone (the token table, not the service's lock), then
/// read its body: at most [`crate::limits::MAX_BODY`] bytes (else 413) within the body timeout (else
/// 408). An unauthenticated request is refused (401) before any of its body is read, so a
/// stalled upload without a valid token holds no buffer. `admin`: only the admin token.
async fn authed_body(
    state: &Shared,
    headers: &HeaderMap,
    experiment: Option<&str>,
    admin: bool,
    body: Body,
) -> ApiResult<Bytes> {
    let token = bearer(headers);
    let caller = state
        .tokens
        .read()
        .map_err(|_| ApiError::internal("token table lock poisoned"))?
        .check(token.as_deref(), experiment)?;
    if admin && caller != Caller::Admin {
        return Err(ServiceError::Unauthorized { admin: true }.into());
    }
    let too_large = || {
        ApiError::new(
            413,
            format!(
                "body: larger than {} bytes; expected a JSON object of at most that size",
                crate::limits::MAX_BODY
            ),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > crate::limits::MAX_BODY as u64) {
        return Err(too_large());
    }
    match tokio::time::timeout(
        state.body_timeout,
        axum::body::to_bytes(body, crate::limits::MAX_BODY),
    )
    .await
    {
        Ok(Ok(b)) => Ok(b),
        Ok(Err(e)) => {
            let mut src: Option<&dyn std::error::Error> = Some(&e);
            while let Some(x) = src {
                if x.is::<http_body_util::LengthLimitError>() {
                    return Err(too_large());
                }
                src = x.source();
            }
            Err(ApiError::bad(format!("body: could not be read ({e})")))
        }
        Err(_) => Err(ApiError::new(
            408,
            format!(
                "body: not received within {} s of the request header",
                state.body_timeout.as_secs_f64()
            ),
        )),
    }
}

/// An HTTP error: a status, a message naming the field, the value and what is allowed, extra
/// JSON fields and a `Retry-After`.
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status code.
    pub status: u16,
    /// The message.
    pub message: String,
    /// Extra JSON fields (e.g. `pending`).
    pub extra: Option<Value>,
    /// `Retry-After` seconds, if any.
    pub retry_after: Option<u32>,
}

impl ApiError {
    /// A `status` error with `message`.
    pub fn new(status: u16, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            extra: None,
            retry_after: None,
        }
    }
    /// 400: a body that is not a JSON object.
    pub fn bad(message: impl Into<String>) -> Self {
        Self::new(400, message)
    }
    /// 422: a bad field.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(422, message)
    }
    /// 500.
    pub fn internal(e: impl std::fmt::Display) -> Self {
        Self::new(500, format!("internal error: {e}"))
    }
}

/// The polling hint of a 409 at a commitment boundary (`retry_after_ms`, milliseconds): a
/// kind in wait mode waits for a reward that may arrive at any moment.
pub const CONFLICT_RETRY_MS: u64 = 10;

/// Each refusal of the state machine as HTTP: its status, its message, and for a commitment
/// boundary `{"pending": n}` with `Retry-After: 1`.
impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        let message = e.to_string();
        match e {
            ServiceError::NotFound(_) => ApiError::new(404, message),
            ServiceError::Invalid { .. } => ApiError::new(422, message),
            ServiceError::Conflict { pending, .. } => ApiError {
                status: 409,
                message,
                // `Retry-After` counts whole seconds; the body's hint is the sub-second one a
                // client should honour (a reward may come any moment).
                extra: Some(json!({"pending": pending, "retry_after_ms": CONFLICT_RETRY_MS})),
                retry_after: Some(1),
            },
            ServiceError::Stopped { recommendation } => ApiError {
                status: 409,
                message,
                extra: Some(json!({"stopped": true, "recommendation": recommendation})),
                retry_after: None,
            },
            ServiceError::Exists { .. } => ApiError::new(409, message),
            ServiceError::Closed { .. } => ApiError {
                status: 409,
                message,
                extra: Some(json!({"closed": true})),
                retry_after: None,
            },
            ServiceError::Unauthorized { .. } => ApiError::new(401, message),
            ServiceError::Internal(_) => ApiError::new(500, message),
        }
    }
}

/// Result of a handler.
pub type ApiResult<T> = std::result::Result<T, ApiError>;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let message = if self.status == 500 {
            log("internal-error", json!({"message": self.message}));
            "internal error (see the server log)".to_string()
        } else {
            self.message
        };
        let mut body = json!({"error": message});
        if let (Some(Value::Object(extra)), Some(o)) = (self.extra, body.as_object_mut()) {
            o.extend(extra);
        }
        let mut resp = (status, axum::Json(body)).into_response();
        if let Some(s) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        resp
    }
}

/// The admin token is required: anything else is a 401 naming it.
fn admin(s: &Service, token: Option<&str>) -> ApiResult<()> {
    if s.authenticate(token, None)? == Caller::Admin {
        Ok(())
    } else {
        Err(ServiceError::Unauthorized { admin: true }.into())
    }
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let t = v.strip_prefix("Bearer ")?.trim();
    (!t.is_empty()).then(|| t.to_string())
}

/// Run `f` on the service through the writer's queue (the service-wide lane); the answer
/// comes after the commit of `f`'s batch (a failed commit answers 500).
async fn with_service<T: Send + 'static>(
    state: &Shared,
    f: impl FnOnce(&mut Service) -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    with_service_in(state, None, f).await
}

/// [`with_service`] in experiment `lane`'s lane of the writer ([`crate::writer::QUANTUM`]).
async fn with_service_in<T: Send + 'static>(
    state: &Shared,
    lane: Option<&str>,
    f: impl FnOnce(&mut Service) -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move |s: &mut Service| {
        let r = f(s);
        Box::new(move |committed: bool| {
            let _ = tx.send(if committed {
                r
            } else {
                Err(ApiError::internal("the batch's commit failed"))
            });
        }) as Reply
    });
    let lane = lane.map(str::to_string);
    state
        .jobs
        .send(Queued { lane, job })
        .await
        .map_err(|_| ApiError::internal("the writer has stopped"))?;
    rx.await
        .map_err(|_| ApiError::internal("the operation was not committed (its batch failed)"))?
}

fn done(route: &'static str, started: Instant, r: ApiResult<Value>, fields: Value) -> Response {
    let status = r.as_ref().map_or_else(|e| e.status, |_| 200);
    crate::metrics::record_request(
        route,
        status,
        started.elapsed().as_secs_f64(),
        r.as_ref().is_err_and(|e| e.retry_after.is_some()),
    );
    let mut f =
        json!({"route": route, "status": status, "micros": started.elapsed().as_micros() as u64});
    if let (Some(o), Value::Object(extra)) = (f.as_object_mut(), fields) {
        o.extend(extra);
    }
    log("request", f);
    match r {
        Ok(v) => (StatusCode::OK, axum::Json(v)).into_response(),
        Err(e) => e.into_response(),
    }
}

/// Parse a JSON object body; malformed JSON or another type is a 400 naming the body.
fn object(body: &Bytes, allowed: &[&str]) -> ApiResult<Map<String, Value>> {
    let v: Value = if body.is_empty() {
        Value::Object(Map::new())
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad(format!("body: not valid JSON ({e})")))?
    };
    let Value::Object(m) = v else {
        return Err(ApiError::bad(format!(
            "body = {}: expected a JSON object",
            short(&v)
        )));
    };
    if let Some(k) = m.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(ApiError::invalid(format!(
            "{k}: unknown field; expected one of {}",
            allowed.join(", ")
        )));
    }
    Ok(m)
}

/// The create body through serde (`serde_path_to_error`, so a type error names its field):
/// unknown keys refused naming the allowed ones, missing required keys and mistyped values
/// refused as `field = value: expected ...` (422); a body that is not a JSON object is a 400.
fn create_request(body: &Bytes) -> ApiResult<CreateRequest> {
    /// What each key takes, as the messages say it.
    fn expected(key: &str) -> &'static str {
        match key {
            "name" => "a string",
            "arms" => "an integer >= 2 (linear: an array of arm vectors)",
            "dim" => "an integer >= 1",
            "horizon" => "an integer >= 1",
            "delta" => "a number in (0, 1)",
            "request_id" => "a string of 1 to 128 characters",
            "dropout_reward" => "a number the policy's boundary admits",
            "reward_deadline" => "seconds, a number > 0",
            "while_pending" => "\"wait\" (default) or \"pipeline\"",
            "policy" => "a TOML table as text or a JSON object",
            "allow_non_private" => "true or false",
            "seed" => "a non-negative integer",
            _ => "nothing (unknown field)",
        }
    }
    let m = object(body, CreateRequest::FIELDS)?;
    // Required keys first (`null` counts as given, and is refused as a wrong type below).
    for (key, what) in [
        ("name", "a string"),
        ("policy", "a TOML table as text or a JSON object"),
    ] {
        if !m.contains_key(key) {
            return Err(ApiError::invalid(format!(
                "{key} = (missing): expected {what}"
            )));
        }
    }
    let mut m = m;
    for key in [
        "seed",
        "request_id",
        "arms",
        "dim",
        "horizon",
        "delta",
        "dropout_reward",
        "reward_deadline",
        "while_pending",
    ] {
        if m.get(key) == Some(&Value::Null) {
            m.remove(key);
        }
    }
    let v = Value::Object(m);
    serde_path_to_error::deserialize::<_, CreateRequest>(&v).map_err(|e| {
        let key = e
            .path()
            .iter()
            .next()
            .map_or_else(String::new, |seg| match seg {
                serde_path_to_error::Segment::Map { key } => key.clone(),
                other => other.to_string(),
            });
        match v.get(&key) {
            Some(value) => ApiError::invalid(format!(
                "{key} = {}: expected {}",
                short(value),
                expected(&key)
            )),
            None => ApiError::invalid(format!("body: {}", e.inner())),
        }
    })
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 60 {
        format!("{}...", s.chars().take(60).collect::<String>())
    } else {
        s
    }
}

fn u64_field(m: &Map<String, Value>, key: &str) -> ApiResult<Option<u64>> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            ApiError::invalid(format!(
                "{key} = {}: expected a non-negative integer",
                short(v)
            ))
        }),
    }
}

fn required<T>(key: &str, v: Option<T>, what: &str) -> ApiResult<T> {
    v.ok_or_else(|| ApiError::invalid(format!("{key} = (missing): expected {what}")))
}

async fn health(State(state): State<Shared>) -> Response {
    let t = Instant::now();
    // The answer comes after its batch's commit, and the batch holds a write: a 200 proves the
    // database took a durable write within the last HEALTH_WRITE_EVERY.
    let r = state
        .health
        .probe(|| {
            with_service(&state, |s| {
                s.health_write()?;
                Ok(s.experiment_count())
            })
        })
        .await;
    crate::metrics::record_request(
        "health",
        r.as_ref().map_or_else(|e| e.status, |_| 200),
        t.elapsed().as_secs_f64(),
        false,
    );
    match r {
        Ok(v) => (StatusCode::OK, axum::Json(v)).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn not_found() -> Response {
    ApiError::from(ServiceError::NotFound(
        "no such endpoint (see docs/service.md: /v1/health, /v1/experiments, ...)".into(),
    ))
    .into_response()
}

async fn create(State(state): State<Shared>, headers: HeaderMap, body: Body) -> Response {
    let t = Instant::now();
    let token = bearer(&headers);
    let body = match authed_body(&state, &headers, None, true, body).await {
        Ok(b) => b,
        Err(e) => return done("create", t, Err(e), json!({})),
    };
    let r = with_service(&state, move |s| {
        admin(s, token.as_deref())?;
        let req = create_request(&body)?;
        Ok(s.create(req)?)
    })
    .await;
    // 201 for a new experiment, 200 for a repeated create (`"repeat": true`).
    let status = r.as_ref().map_or_else(
        |e| e.status,
        |v| if v["repeat"] == true { 200 } else { 201 },
    );
    log(
        "request",
        json!({"route": "create", "status": status, "micros": t.elapsed().as_micros() as u64}),
    );
    match r {
        Ok(v) => (
            StatusCode::from_u16(status).unwrap_or(StatusCode::CREATED),
            axum::Json(v),
        )
            .into_response(),
        Err(e) => e.into_response(),
    }
}

async fn list(State(state): State<Shared>, headers: HeaderMap) -> Response {
    let t = Instant::now();
    let token = bearer(&headers);
    let r = with_service(&state, move |s| {
        admin(s, token.as_deref())?;
        Ok(s.list()?)
    })
    .await;
    done("list", t, r, json!({}))
}

async fn rotate(
    State(state): State<Shared>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let t = Instant::now();
    let token = bearer(&headers);
    let body = match authed_body(&state, &headers, Some(&name), true, body).await {
        Ok(b) => b,
        Err(e) => return done("rotate-token", t, Err(e), json!({"experiment": name})),
    };
    let n = name.clone();
    let r = with_service(&state, move |s| {
        admin(s, token.as_deref())?;
        object(&body, &[])?;
        Ok(s.rotate_token(&n, "admin request")?)
    })
    .await;
    done("rotate-token", t, r, json!({"experiment": name}))
}

/// `after` and `limit` of a paginated read: `limit` in 1..=10000 (default 1000).
#[derive(serde::Deserialize)]
struct PageQuery {
    after: Option<i64>,
    limit: Option<i64>,
    format: Option<String>,
}

fn page(
    q: Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<(i64, u64, Option<String>)> {
    let Query(q) = q.map_err(|e| {
        ApiError::bad(format!(
            "query: {e}; expected after=N (integer >= 0), limit=N (1..=10000), format=jsonl|csv (export)"
        ))
    })?;
    let limit = q.limit.unwrap_or(1000);
    if !(1..=10_000).contains(&limit) {
        return Err(ApiError::invalid(format!(
            "limit = {limit}: expected 1..=10000"
        )));
    }
    let after = q.after.unwrap_or(0);
    if after < 0 {
        return Err(ApiError::invalid(format!(
            "after = {after}: expected an integer >= 0"
        )));
    }
    Ok((after, limit as u64, q.format))
}

/// A CSV field: quoted when it holds a comma, a quote or a line break.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// `POST /v1/experiments/{name}/close` (admin), body `{"level": 0.95}` (optional): close and
/// publish the report.
async fn close(
    State(state): State<Shared>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let t = Instant::now();
    let token = bearer(&headers);
    let body = match authed_body(&state, &headers, Some(&name), true, body).await {
        Ok(b) => b,
        Err(e) => return done("close", t, Err(e), json!({"experiment": name})),
    };
    let n = name.clone();
    let r = with_service(&state, move |s| {
        admin(s, token.as_deref())?;
        let m = object(&body, &["level", "abandon_overdue"])?;
        let level = level_of(m.get("level"))?;
        match m.get("abandon_overdue") {
            None | Some(Value::Null | Value::Bool(false)) => {}
            Some(Value::Bool(true)) => s.expire_now(&n)?,
            Some(v) => {
                return Err(ApiError::invalid(format!(
                    "abandon_overdue = {}: expected true or false",
                    short(v)
                )));
            }
        }
        Ok(s.close(&n, level)?)
    })
    .await;
    done("close", t, r, json!({"experiment": name}))
}

/// `GET /v1/experiments/{name}/report[?format=html]`: the report of a closed experiment (any
/// valid token of the experiment: the report is public output).
async fn report(
    State(state): State<Shared>,
    Path(name): Path<String>,
    headers: HeaderMap,
    q: Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let t = Instant::now();
    let token = bearer(&headers);
    let n = name.clone();
    let r = with_service(&state, move |s| {
        s.authenticate(token.as_deref(), Some(&n))?;
        let format = match q {
            Ok(Query(p)) => p.format,
            Err(e) => return Err(ApiError::invalid(format!("query: {e}"))),
        };
        let format = format.unwrap_or_else(|| "json".into());
        if format != "json" && format != "html" {
            return Err(ApiError::invalid(format!(
                "format = {format:?}: expected json or html"
            )));
        }
        Ok((format, s.report(&n)?))
    })
    .await;
    log(
        "request",
        json!({"route": "report", "experiment": name, "status": r.as_ref().map_or_else(|e| e.status, |_| 200),
               "micros": t.elapsed().as_micros() as u64}),
    );
    match r {
        Ok((f, v)) if f == "html" => (
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            crate::report_html::render(&v),
        )
            .into_response(),
        Ok((_, v)) => axum::Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

/// One decision as a CSV line (without its newline), in the export's column order.
fn csv_row(d: &crate::store::DecisionRow) -> String {
    let num = |x: Option<f64>| x.map_or_else(String::new, |v| format!("{v:?}"));
    let fields = [
        d.decision_id.to_string(),
        d.round.to_string(),
        d.arm.to_string(),
        csv_field(d.request_id.as_deref().unwrap_or("")),
        d.issued.clone(),
        num(d.reward),
        num(d.admitted),
        d.rewarded.clone().unwrap_or_default(),
        d.outcome.clone().unwrap_or_default(),
        num(d.propensity),
        csv_field(
            &d.actions
                .as_ref()
                .map_or_else(String::new, Value::to_string),
        ),
        num(d.late_reward),
        d.late_received.clone().unwrap_or_default(),
    ];
    fields.join(",")
}

async fn export(
    State(state): State<Shared>,
    Path(name): Path<String>,
    headers: HeaderMap,
    q: Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let t = Instant::now();
    let token = bearer(&headers);
    let n = name.clone();
    let r = read_page(&state, token, move |conn| {
        let (after, limit, format) = page(q)?;
        let format = format.unwrap_or_else(|| "jsonl".into());
        if format != "jsonl" && format != "csv" {
            return Err(ApiError::invalid(format!(
                "format = {format:?}: expected jsonl or csv"
            )));
        }
        let (rows, next) = crate::service::export_rows(conn, &n, after as u64, limit)?;
        // Formatted on the blocking thread too (milliseconds of work for 10,000 rows).
        let mut out = String::new();
        if format == "csv" {
            out.push_str(
                "decision_id,round,arm,request_id,issued,reward,admitted,rewarded,outcome,propensity,actions,late_reward,late_received\n",
            );
            for d in &rows {
                out.push_str(&csv_row(d));
                out.push('\n');
            }
        } else {
            for d in &rows {
                out.push_str(&serde_json::to_string(d).unwrap_or_default());
                out.push('\n');
            }
        }
        Ok((format, out, next))
    })
    .await;
    log(
        "request",
        json!({"route": "export", "experiment": name, "status": r.as_ref().map_or_else(|e| e.status, |_| 200),
               "micros": t.elapsed().as_micros() as u64}),
    );
    let (format, out, next) = match r {
        Ok(x) => x,
        Err(e) => return e.into_response(),
    };
    let mut resp = (StatusCode::OK, out).into_response();
    let ct = if format == "csv" {
        "text/csv; charset=utf-8"
    } else {
        "application/x-ndjson"
    };
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    if let Some(next) = next
        && let Ok(v) = HeaderValue::from_str(&next.to_string())
    {
        // The next page: `?after=<this>`.
        resp.headers_mut().insert("x-next-after", v);
    }
    resp
}

async fn status(
    State(state): State<Shared>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    let t = Instant::now();
    let token = bearer(&headers);
    let n = name.clone();
    let r = with_service(&state, move |s| {
        s.authenticate(token.as_deref(), Some(&n))?;
        Ok(s.status(&n)?)
    })
    .await;
    done("status", t, r, json!({"experiment": name}))
}

async fn ledger(
    State(state): State<Shared>,
    Path(name): Path<String>,
    headers: HeaderMap,
    q: Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let t = Instant::now();
    let token = bearer(&headers);
    let n = name.clone();
    let r = with_service(&state, move |s| {
        s.authenticate(token.as_deref(), Some(&n))?;
        let (after, limit, format) = page(q)?;
        if let Some(f) = format {
            return Err(ApiError::invalid(format!(
                "format = {f:?}: the ledger is JSON only (format is for /export)"
            )));
        }
        Ok(s.ledger_rows(&n, after, limit)?)
    })
    .await;
    done("ledger", t, r, json!({"experiment": name}))
}

async fn decide(
    State(state): State<Shared>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let t = Instant::now();
    let token = bearer(&headers);
    let body = match authed_body(&state, &headers, Some(&name), false, body).await {
        Ok(b) => b,
        Err(e) => return done("decision", t, Err(e), json!({"experiment": name})),
    };
    let n = name.clone();
    let r = with_service_in(&state, Some(&name), move |s| {
        s.authenticate(token.as_deref(), Some(&n))?;
        let m = object(&body, &["request_id", "actions"])?;
        let rid = match m.get("request_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(v) => {
                return Err(ApiError::invalid(format!(
                    "request_id = {}: expected a string of 1 to 128 characters",
                    short(v)
                )));
            }
        };
        Ok(s.decide(&n, rid, m.get("actions").filter(|v| !v.is_null()))?)
    })
    .await;
    let fields = match &r {
        Ok(v) => json!({"experiment": name, "decision_id": v["decision_id"], "arm": v["arm"]}),
        Err(_) => json!({"experiment": name}),
    };
    done("decision", t, r, fields)
}

async fn reward(
    State(state): State<Shared>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let t = Instant::now();
    let token = bearer(&headers);
    let body = match authed_body(&state, &headers, Some(&name), false, body).await {
        Ok(b) => b,
        Err(e) => return done("reward", t, Err(e), json!({"experiment": name})),
    };
    let n = name.clone();
    let r = with_service_in(&state, Some(&name), move |s| {
        s.authenticate(token.as_deref(), Some(&n))?;
        let m = object(&body, &["decision_id", "reward"])?;
        let id = required(
            "decision_id",
            u64_field(&m, "decision_id")?,
            "a decision_id this experiment issued",
        )?;
        let reward = match m.get("reward") {
            Some(Value::Number(x)) => x.as_f64().filter(|x| x.is_finite()).ok_or_else(|| {
                ApiError::invalid(format!("reward = {x}: expected a finite number"))
            })?,
            Some(v) => {
                return Err(ApiError::invalid(format!(
                    "reward = {}: expected a finite number",
                    short(v)
                )));
            }
            None => {
                return Err(ApiError::invalid(
                    "reward = (missing): expected a finite number",
                ));
            }
        };
        Ok(s.reward(&n, id, reward)?)
    })
    .await;
    // The log names the decision and the outcome, never the reward.
    let fields = match &r {
        Ok(v) => {
            json!({"experiment": name, "decision_id": v["decision_id"], "outcome": v["status"]})
        }
        Err(_) => json!({"experiment": name}),
    };
    done("reward", t, r, fields)
}

async fn abandon(
    State(state): State<Shared>,
    Path((name, id)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let t = Instant::now();
    let token = bearer(&headers);
    let body = match authed_body(&state, &headers, Some(&name), false, body).await {
        Ok(b) => b,
        Err(e) => return done("abandon", t, Err(e), json!({"experiment": name})),
    };
    let n = name.clone();
    let r = with_service_in(&state, Some(&name), move |s| {
        s.authenticate(token.as_deref(), Some(&n))?;
        object(&body, &[])?;
        let id: u64 = id.parse().map_err(|_| {
            ApiError::invalid(format!(
                "decision_id = {}: expected a decision_id this experiment issued (a non-negative integer)",
                short(&Value::String(id.clone()))
            ))
        })?;
        Ok(s.abandon(&n, id)?)
    })
    .await;
    let fields = match &r {
        Ok(v) => {
            json!({"experiment": name, "decision_id": v["decision_id"], "outcome": v["status"]})
        }
        Err(_) => json!({"experiment": name}),
    };
    done("abandon", t, r, fields)
}

#[derive(serde::Deserialize)]
struct AuditQuery {
    experiment: Option<String>,
    after: Option<i64>,
    limit: Option<i64>,
}

async fn audit(
    State(state): State<Shared>,
    headers: HeaderMap,
    q: Result<Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let t = Instant::now();
    let token = bearer(&headers);
    let r = read_page(&state, token, move |conn| {
        let Query(q) = q.map_err(|e| {
            ApiError::bad(format!(
                "query: {e}; expected experiment=NAME, after=SEQ (integer), limit=N (1..=10000)"
            ))
        })?;
        let limit = q.limit.unwrap_or(1000);
        if !(1..=10_000).contains(&limit) {
            return Err(ApiError::invalid(format!(
                "limit = {limit}: expected 1..=10000"
            )));
        }
        Ok(crate::service::audit_page(
            conn,
            q.experiment.as_deref(),
            q.after.unwrap_or(0),
            limit,
        )?)
    })
    .await;
    done("audit", t, r, json!({}))
}
