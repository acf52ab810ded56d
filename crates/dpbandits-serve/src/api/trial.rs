//! A trial's endpoints (issue 43): bulk abandon, the interim look and the monitor page.

use super::*;

/// A confidence level from a body or query value: absent (the default), or a number in (0, 1).
pub(crate) fn level_of(v: Option<&Value>) -> ApiResult<Option<f64>> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            Some(x) if x > 0.0 && x < 1.0 => Ok(Some(x)),
            _ => Err(ApiError::invalid(format!(
                "level = {}: expected a confidence level in (0, 1), e.g. 0.95",
                short(v)
            ))),
        },
    }
}

/// `POST /v1/experiments/{name}/abandon` (the experiment's token or admin): abandon pending
/// decisions in bulk, `{"older_than": seconds}` (0: every pending decision).
pub(crate) async fn abandon_bulk(
    State(state): State<Shared>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let t = Instant::now();
    let token = bearer(&headers);
    let body = match authed_body(&state, &headers, Some(&name), false, body).await {
        Ok(b) => b,
        Err(e) => return done("abandon-bulk", t, Err(e), json!({"experiment": name})),
    };
    let n = name.clone();
    let r = with_service(&state, move |s| {
        s.authenticate(token.as_deref(), Some(&n))?;
        let m = object(&body, &["older_than"])?;
        let older = match m.get("older_than") {
            Some(v) => v.as_f64().filter(|x| x.is_finite() && *x >= 0.0).ok_or_else(|| {
                ApiError::invalid(format!(
                    "older_than = {}: expected seconds, a finite number >= 0 (0: every pending decision)",
                    short(v)
                ))
            })?,
            None => {
                return Err(ApiError::invalid(
                    "older_than: missing; expected seconds, a finite number >= 0 (0: every pending decision)",
                ));
            }
        };
        Ok(s.abandon_pending(&n, older)?)
    })
    .await;
    let fields = match &r {
        Ok(v) => json!({"experiment": name, "abandoned": v["abandoned"]}),
        Err(_) => json!({"experiment": name}),
    };
    done("abandon-bulk", t, r, fields)
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
    State(state): State<Shared>,
    Path(name): Path<String>,
    headers: HeaderMap,
    q: Result<Query<LookQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let t = Instant::now();
    let token = bearer(&headers);
    let n = name.clone();
    let r = with_service(&state, move |s| {
        admin(s, token.as_deref())?;
        let Query(q) = q.map_err(|e| ApiError::invalid(format!("query: {e}")))?;
        let level = level_of(q.level.map(Value::from).as_ref())?;
        if q.format.is_some() {
            return Err(ApiError::invalid(
                "format: not a parameter of interim (JSON only)",
            ));
        }
        Ok(s.interim(&n, level)?)
    })
    .await;
    done("interim", t, r, json!({"experiment": name}))
}

/// `GET /v1/experiments/{name}/monitor[?format=json]` (admin): the trial monitor page
/// ([`crate::monitor_html`]), or its numbers.
pub(crate) async fn monitor(
    State(state): State<Shared>,
    Path(name): Path<String>,
    headers: HeaderMap,
    q: Result<Query<LookQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let t = Instant::now();
    let token = bearer(&headers);
    let n = name.clone();
    let r = with_service(&state, move |s| {
        admin(s, token.as_deref())?;
        let Query(q) = q.map_err(|e| ApiError::invalid(format!("query: {e}")))?;
        if q.level.is_some() {
            return Err(ApiError::invalid(
                "level: not a parameter of monitor (its intervals are at 0.95)",
            ));
        }
        let format = q.format.unwrap_or_else(|| "html".into());
        if format != "json" && format != "html" {
            return Err(ApiError::invalid(format!(
                "format = {format:?}: expected html or json"
            )));
        }
        Ok((format, s.monitor(&n)?))
    })
    .await;
    crate::metrics::record_request(
        "monitor",
        r.as_ref().map_or_else(|e| e.status, |_| 200),
        t.elapsed().as_secs_f64(),
        false,
    );
    match r {
        Ok((f, v)) if f == "html" => (
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            crate::monitor_html::render(&v),
        )
            .into_response(),
        Ok((_, v)) => axum::Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}
