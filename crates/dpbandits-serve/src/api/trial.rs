//! A trial's endpoints (issue 43): bulk abandon, the interim look and the monitor page.

use super::bodies::{AbandonBody, level_of};
use super::*;

/// `POST /v1/experiments/{name}/abandon` (the experiment's token or admin): abandon pending
/// decisions in bulk, `{"older_than": seconds}` (0: every pending decision).
pub(crate) async fn abandon_bulk(
    Path(name): Path<String>,
    ctx: Ctx<Client>,
    Body(b): Body<AbandonBody>,
) -> Response {
    let r = ctx
        .run({
            let name = name.clone();
            move |s| Ok(s.abandon_pending(&name, b.older_than()?)?)
        })
        .await;
    if r.is_ok() {
        ctx.shared().boundaries.freed(&name);
    }
    let fields = match &r {
        Ok(v) => json!({"abandoned": v["abandoned"]}),
        Err(_) => json!({}),
    };
    ctx.respond(r, fields)
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LookQuery {
    level: Option<f64>,
    format: Option<String>,
}

/// `GET /v1/experiments/{name}/interim[?level=]` (admin): the interim look
/// ([`Service::interim`]).
pub(crate) async fn interim(
    Path(name): Path<String>,
    q: Result<Query<LookQuery>, axum::extract::rejection::QueryRejection>,
    ctx: Ctx<AdminOnly>,
) -> Response {
    let level = q
        .map_err(|e| ApiError::invalid(format!("query: {e}")))
        .and_then(|Query(q)| {
            let level = level_of(q.level.map(Value::from).as_ref())?;
            match q.format {
                Some(_) => Err(ApiError::invalid(
                    "format: not a parameter of interim (JSON only)",
                )),
                None => Ok(level),
            }
        });
    let r = match level {
        Ok(level) => ctx.run(move |s| Ok(s.interim(&name, level)?)).await,
        Err(e) => Err(e),
    };
    ctx.respond(r, json!({}))
}

/// `GET /v1/experiments/{name}/monitor[?format=json]` (admin): the trial monitor page
/// ([`crate::monitor_html`]), or its numbers.
pub(crate) async fn monitor(
    Path(name): Path<String>,
    q: Result<Query<LookQuery>, axum::extract::rejection::QueryRejection>,
    ctx: Ctx<AdminOnly>,
) -> Response {
    let format = q
        .map_err(|e| ApiError::invalid(format!("query: {e}")))
        .and_then(|Query(q)| match (q.level, q.format.as_deref()) {
            (Some(_), _) => Err(ApiError::invalid(
                "level: not a parameter of monitor (its intervals are at 0.95)",
            )),
            (None, None | Some("html")) => Ok(true),
            (None, Some("json")) => Ok(false),
            (None, Some(f)) => Err(ApiError::invalid(format!(
                "format = {f:?}: expected html or json"
            ))),
        });
    let html = match format {
        Ok(html) => html,
        Err(e) => return ctx.refuse(e),
    };
    match ctx.run(move |s| Ok(s.monitor(&name)?)).await {
        Ok(v) if html => {
            ctx.finish(200, false, json!({}));
            (
                [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                crate::monitor_html::render(&v),
            )
                .into_response()
        }
        r => ctx.respond(r, json!({})),
    }
}
