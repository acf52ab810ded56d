//! The HTTP/JSON layer (axum): routes, authentication, body parsing with field-naming errors,
//! structured logs (no reward values).

use crate::service::{Caller, CreateRequest, Service, ServiceError};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Map, Value, json};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The shared state of the handlers.
pub type Shared = Arc<Mutex<Service>>;

/// The router of API version 1.
pub fn router(state: Shared) -> Router {
    Router::new()
        .route("/v1/health", get(health))
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
        .route("/v1/experiments/{name}/report", get(report))
        .route("/v1/audit", get(audit))
        .fallback(not_found)
        .with_state(state)
}

/// One structured log line on stderr (JSON). Never carries reward values.
pub fn log(event: &str, fields: Value) {
    let mut m = Map::new();
    m.insert("ts".into(), Value::String(crate::store::now()));
    m.insert("event".into(), Value::String(event.into()));
    if let Value::Object(f) = fields {
        m.extend(f);
    }
    eprintln!("{}", Value::Object(m));
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
                extra: Some(json!({"pending": pending})),
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

/// Run `f` on the service under its lock, on a blocking thread (SQLite commits block).
async fn with_service<T: Send + 'static>(
    state: &Shared,
    f: impl FnOnce(&mut Service) -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    let state = state.clone();
    tokio::task::spawn_blocking(move || {
        let mut s = state
            .lock()
            .map_err(|_| ApiError::internal("service lock poisoned"))?;
        f(&mut s)
    })
    .await
    .map_err(ApiError::internal)?
}

fn done(route: &str, started: Instant, r: ApiResult<Value>, fields: Value) -> Response {
    let status = r.as_ref().map_or_else(|e| e.status, |_| 200);
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
    let r = with_service(&state, |s| {
        Ok(json!({"status": "ok", "experiments": s.experiment_count()}))
    })
    .await;
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

async fn create(State(state): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let t = Instant::now();
    let token = bearer(&headers);
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
    body: Bytes,
) -> Response {
    let t = Instant::now();
    let token = bearer(&headers);
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
    body: Bytes,
) -> Response {
    let t = Instant::now();
    let token = bearer(&headers);
    let n = name.clone();
    let r = with_service(&state, move |s| {
        admin(s, token.as_deref())?;
        let m = object(&body, &["level"])?;
        let level = match m.get("level") {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_f64() {
                Some(x) if x > 0.0 && x < 1.0 => Some(x),
                _ => {
                    return Err(ApiError::invalid(format!(
                        "level = {}: expected a confidence level in (0, 1), e.g. 0.95",
                        short(v)
                    )));
                }
            },
        };
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

async fn export(
    State(state): State<Shared>,
    Path(name): Path<String>,
    headers: HeaderMap,
    q: Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let t = Instant::now();
    let token = bearer(&headers);
    let n = name.clone();
    let r = with_service(&state, move |s| {
        admin(s, token.as_deref())?;
        let (after, limit, format) = page(q)?;
        let format = format.unwrap_or_else(|| "jsonl".into());
        if format != "jsonl" && format != "csv" {
            return Err(ApiError::invalid(format!(
                "format = {format:?}: expected jsonl or csv"
            )));
        }
        let (rows, next) = s.export(&n, after as u64, limit)?;
        Ok((format, rows, next))
    })
    .await;
    log(
        "request",
        json!({"route": "export", "experiment": name, "status": r.as_ref().map_or_else(|e| e.status, |_| 200),
               "micros": t.elapsed().as_micros() as u64}),
    );
    let (format, rows, next) = match r {
        Ok(x) => x,
        Err(e) => return e.into_response(),
    };
    let mut out = String::new();
    if format == "csv" {
        out.push_str(
            "decision_id,round,arm,request_id,issued,reward,admitted,rewarded,outcome,propensity,actions\n",
        );
        let num = |x: Option<f64>| x.map_or_else(String::new, |v| format!("{v:?}"));
        for d in &rows {
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
            ];
            out.push_str(&fields.join(","));
            out.push('\n');
        }
    } else {
        for d in &rows {
            out.push_str(&serde_json::to_string(d).unwrap_or_default());
            out.push('\n');
        }
    }
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
    body: Bytes,
) -> Response {
    let t = Instant::now();
    let token = bearer(&headers);
    let n = name.clone();
    let r = with_service(&state, move |s| {
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
    body: Bytes,
) -> Response {
    let t = Instant::now();
    let token = bearer(&headers);
    let n = name.clone();
    let r = with_service(&state, move |s| {
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
    body: Bytes,
) -> Response {
    let t = Instant::now();
    let token = bearer(&headers);
    let n = name.clone();
    let r = with_service(&state, move |s| {
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
    let r = with_service(&state, move |s| {
        admin(s, token.as_deref())?;
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
        Ok(s.audit_export(q.experiment.as_deref(), q.after.unwrap_or(0), limit)?)
    })
    .await;
    done("audit", t, r, json!({}))
}
