//! The HTTP errors: each refusal's status, message (naming the field, the value and what is
//! allowed), extra JSON fields and `Retry-After`.

use crate::log::log;
use crate::service::ServiceError;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

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
    /// Whether this is the refusal of a decision at a commitment boundary (409 with
    /// `Retry-After`: a reward will free it).
    pub fn at_boundary(&self) -> bool {
        self.status == 409 && self.retry_after.is_some()
    }

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

/// A JSON value as a refusal quotes it (at most 60 characters).
pub(crate) fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 60 {
        format!("{}...", s.chars().take(60).collect::<String>())
    } else {
        s
    }
}
