//! The HTTP/JSON layer (axum): routes, authentication, body parsing with field-naming errors,
//! structured logs (no reward values).

pub use crate::log::log;
mod bodies;
mod ctx;
mod error;
mod health;
mod trial;
use bodies::{CloseBody, DecideBody, Empty, RewardBody};
use ctx::{AdminOnly, Body, Client, Ctx, with_service};
pub use ctx::{BOUNDARY_WAIT, Boundaries, Gate, Shared};
use error::short;
pub use error::{ApiError, ApiResult, CONFLICT_RETRY_MS};
pub use health::{
    HEALTH_BURST, HEALTH_MAX_WAIT, HEALTH_PER_SECOND, HEALTH_WRITE_EVERY, HealthCache,
};
pub(crate) use trial::{abandon_bulk, interim, monitor};

use crate::service::{CreateRequest, ServiceError};
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use std::time::Instant;

pub use crate::writer::{
    GATHER_FROM, GATHER_WAIT, Job, MAX_BATCH, QUANTUM, Queued, Reply, Step, publish_tick, writer,
};

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
/// the test `http::openapi_matches_the_router`).
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
async fn metrics(ctx: Ctx<AdminOnly>) -> Response {
    match ctx.run(|s| Ok(s.metrics_gauges())).await {
        Ok(g) => {
            ctx.finish(200, false, json!({}));
            (
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                )],
                crate::metrics::render(&g),
            )
                .into_response()
        }
        Err(e) => ctx.refuse(e),
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
    Response::from_parts(
        parts,
        axum::body::Body::from(json!({"error": message}).to_string()),
    )
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

/// `POST /v1/experiments` (admin): 201 with the new experiment, 200 for a repeated create
/// (`"repeat": true`).
async fn create(ctx: Ctx<AdminOnly>, Body(req): Body<CreateRequest>) -> Response {
    match ctx.run(move |s| Ok(s.create(req)?)).await {
        Ok(v) => {
            let status = if v["repeat"] == true {
                StatusCode::OK
            } else {
                StatusCode::CREATED
            };
            ctx.finish(status.as_u16(), false, json!({}));
            (status, axum::Json(v)).into_response()
        }
        Err(e) => ctx.refuse(e),
    }
}

async fn list(ctx: Ctx<AdminOnly>) -> Response {
    ctx.respond(ctx.run(|s| Ok(s.list()?)).await, json!({}))
}

async fn rotate(Path(name): Path<String>, ctx: Ctx<AdminOnly>, _: Body<Empty>) -> Response {
    let r = ctx
        .run(move |s| Ok(s.rotate_token(&name, "admin request")?))
        .await;
    ctx.respond(r, json!({}))
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
    Path(name): Path<String>,
    ctx: Ctx<AdminOnly>,
    Body(b): Body<CloseBody>,
) -> Response {
    let r = ctx
        .run(move |s| {
            if b.abandon_overdue == Some(true) {
                s.expire_now(&name)?;
            }
            Ok(s.close(&name, b.level()?)?)
        })
        .await;
    ctx.respond(r, json!({}))
}

/// `GET /v1/experiments/{name}/report[?format=html]`: the report of a closed experiment (any
/// valid token of the experiment: the report is public output).
async fn report(
    Path(name): Path<String>,
    q: Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>,
    ctx: Ctx<Client>,
) -> Response {
    let format = match q {
        Ok(Query(p)) => p.format.unwrap_or_else(|| "json".into()),
        Err(e) => return ctx.refuse(ApiError::invalid(format!("query: {e}"))),
    };
    if format != "json" && format != "html" {
        return ctx.refuse(ApiError::invalid(format!(
            "format = {format:?}: expected json or html"
        )));
    }
    match ctx.run(move |s| Ok(s.report(&name)?)).await {
        Ok(v) if format == "html" => {
            ctx.finish(200, false, json!({}));
            (
                [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                crate::report_html::render(&v),
            )
                .into_response()
        }
        r => ctx.respond(r, json!({})),
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
    Path(name): Path<String>,
    q: Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>,
    ctx: Ctx<AdminOnly>,
) -> Response {
    let (after, limit, format) = match page(q) {
        Ok(p) => p,
        Err(e) => return ctx.refuse(e),
    };
    let format = format.unwrap_or_else(|| "jsonl".into());
    if format != "jsonl" && format != "csv" {
        return ctx.refuse(ApiError::invalid(format!(
            "format = {format:?}: expected jsonl or csv"
        )));
    }
    // Read beside the writer ([`crate::readers`]) and formatted on the blocking thread too
    // (milliseconds of work for 10,000 rows).
    let csv = format == "csv";
    let page = ctx
        .read(move |r| {
            let (rows, next) = crate::service::export_rows(r, &name, after as u64, limit)?;
            Ok((export_text(csv, &rows), next))
        })
        .await;
    let (out, next) = match page {
        Ok(x) => x,
        Err(e) => return ctx.refuse(e),
    };
    ctx.finish(200, false, json!({}));
    export_response(&format, out, next)
}

/// The export's page as JSON lines or (`csv`) CSV.
fn export_text(csv: bool, rows: &[crate::store::DecisionRow]) -> String {
    let mut out = String::new();
    if csv {
        out.push_str(
            "decision_id,round,arm,request_id,issued,reward,admitted,rewarded,outcome,propensity,actions,late_reward,late_received\n",
        );
        for d in rows {
            out.push_str(&csv_row(d));
            out.push('\n');
        }
    } else {
        for d in rows {
            out.push_str(&serde_json::to_string(d).unwrap_or_default());
            out.push('\n');
        }
    }
    out
}

/// The export's page answered, with the next page's `x-next-after`.
fn export_response(format: &str, out: String, next: Option<u64>) -> Response {
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

async fn status(Path(name): Path<String>, ctx: Ctx<Client>) -> Response {
    ctx.respond(ctx.run(move |s| Ok(s.status(&name)?)).await, json!({}))
}

async fn ledger(
    Path(name): Path<String>,
    q: Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>,
    ctx: Ctx<Client>,
) -> Response {
    let r = match page(q) {
        Ok((_, _, Some(f))) => Err(ApiError::invalid(format!(
            "format = {f:?}: the ledger is JSON only (format is for /export)"
        ))),
        Ok((after, limit, None)) => {
            ctx.run(move |s| Ok(s.ledger_rows(&name, after, limit)?))
                .await
        }
        Err(e) => Err(e),
    };
    ctx.respond(r, json!({}))
}

/// A decision; at a commitment boundary it waits (at most [`ctx::BOUNDARY_WAIT`]) at the
/// experiment's [`ctx::Gate`] for a reward that frees it, and tries again, before it answers
/// 409.
async fn decide(Path(name): Path<String>, ctx: Ctx<Client>, Body(b): Body<DecideBody>) -> Response {
    let deadline = tokio::time::Instant::now() + ctx::BOUNDARY_WAIT;
    let boundaries = &ctx.shared().boundaries;
    let r = loop {
        if let Some(gate) = boundaries.get(&name) {
            gate.wait_open(deadline).await;
        }
        let attempt = {
            let (name, b, boundaries) = (name.clone(), b.clone(), boundaries.clone());
            move |s: &mut crate::service::Service| {
                let r = s.decide(&name, b.request_id, b.actions.as_ref());
                match &r {
                    Ok(_) => boundaries.decided(&name, s.at_boundary(&name)),
                    Err(crate::service::ServiceError::Conflict { .. }) => {
                        boundaries.decided(&name, true);
                    }
                    Err(_) => {}
                }
                Ok(r?)
            }
        };
        match ctx.run_in_lane(attempt).await {
            Err(e) if e.at_boundary() && tokio::time::Instant::now() < deadline => {}
            r => {
                // A refusal that says nothing of the boundary (a bad body, a closed
                // experiment): the next waiting decision's turn, while the gate is open.
                if r.is_err()
                    && let Some(gate) = boundaries.get(&name)
                    && !gate.is_closed()
                {
                    gate.open();
                }
                break r;
            }
        }
    };
    let fields = match &r {
        Ok(v) => json!({"decision_id": v["decision_id"], "arm": v["arm"]}),
        Err(_) => json!({}),
    };
    ctx.respond(r, fields)
}

/// The log names a reward's decision and its outcome, never the reward.
fn outcome_fields(r: &ApiResult<Value>) -> Value {
    match r {
        Ok(v) => json!({"decision_id": v["decision_id"], "outcome": v["status"]}),
        Err(_) => json!({}),
    }
}

async fn reward(Path(name): Path<String>, ctx: Ctx<Client>, Body(b): Body<RewardBody>) -> Response {
    let r = ctx
        .run_staged_in_lane({
            let name = name.clone();
            move |s| Ok(s.reward_staged(&name, b.decision_id, b.reward)?)
        })
        .await;
    if r.is_ok() {
        ctx.shared().boundaries.freed(&name);
    }
    let fields = outcome_fields(&r);
    ctx.respond(r, fields)
}

async fn abandon(
    Path((name, id)): Path<(String, String)>,
    ctx: Ctx<Client>,
    _: Body<Empty>,
) -> Response {
    let r = match id.parse::<u64>() {
        Ok(id) => {
            let r = ctx
                .run({
                    let name = name.clone();
                    move |s| Ok(s.abandon(&name, id)?)
                })
                .await;
            if r.is_ok() {
                ctx.shared().boundaries.freed(&name);
            }
            r
        }
        Err(_) => Err(ApiError::invalid(format!(
            "decision_id = {}: expected a decision_id this experiment issued (a non-negative integer)",
            short(&Value::String(id))
        ))),
    };
    let fields = outcome_fields(&r);
    ctx.respond(r, fields)
}

#[derive(serde::Deserialize)]
struct AuditQuery {
    experiment: Option<String>,
    after: Option<i64>,
    limit: Option<i64>,
}

async fn audit(
    q: Result<Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
    ctx: Ctx<AdminOnly>,
) -> Response {
    let r = match q {
        Err(e) => Err(ApiError::bad(format!(
            "query: {e}; expected experiment=NAME, after=SEQ (integer >= 0), limit=N (1..=10000)"
        ))),
        Ok(Query(q)) => match (q.limit.unwrap_or(1000), q.after.unwrap_or(0)) {
            (limit, _) if !(1..=10_000).contains(&limit) => Err(ApiError::invalid(format!(
                "limit = {limit}: expected 1..=10000"
            ))),
            (_, after) if after < 0 => Err(ApiError::invalid(format!(
                "after = {after}: expected an integer >= 0"
            ))),
            (limit, after) => {
                // Read beside the writer ([`crate::readers`]).
                ctx.read(move |r| {
                    Ok(crate::service::audit_page(
                        r,
                        q.experiment.as_deref(),
                        after,
                        limit,
                    )?)
                })
                .await
            }
        },
    };
    ctx.respond(r, json!({}))
}
