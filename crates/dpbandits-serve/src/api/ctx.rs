//! One request's context: the extractor [`Ctx`] every authenticated handler takes (the one
//! authentication, the timing, the metrics and the log line) and [`Body`], its typed body.

use super::error::{ApiError, ApiResult, short};
use crate::log::log;
use crate::service::Staged;
use crate::service::{Caller, Service, ServiceError, Tokens};
use crate::writer::{Job, Queued, Reply, Step};
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, MatchedPath, RawPathParams, Request};
use axum::http::Method;
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use std::marker::PhantomData;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// The shared state of the handlers: the writer's queue, the token table (read without the
/// writer: a request is authenticated before its body is read), the body timeout, the health
/// probes' write limit and the read-only connections.
#[derive(Clone)]
pub struct Shared {
    /// The writer's queue ([`crate::writer::writer`]).
    pub jobs: tokio::sync::mpsc::Sender<Queued>,
    /// The writer's thread: a request unparks it after queueing its operation (on PostgreSQL
    /// the writer parks while it gathers a batch: [`crate::writer`]).
    pub writer: std::thread::Thread,
    /// The token hashes ([`Service::tokens`]).
    pub tokens: Arc<RwLock<Tokens>>,
    /// A request body must arrive within this time after its header (else 408).
    pub body_timeout: Duration,
    /// The health probes' write limit and pace ([`super::health::HealthCache`]).
    pub health: Arc<super::health::HealthCache>,
    /// Read-only connections for the admin pages that need no session ([`crate::readers`]).
    pub readers: Arc<crate::readers::Readers>,
    /// Decisions waiting at their experiment's commitment boundary ([`Boundaries`]).
    pub boundaries: Arc<Boundaries>,
}

/// A decision at a commitment boundary waits this long at most for a reward that frees the
/// boundary before it is answered 409: a client does not poll, and its decision is issued as
/// soon as the reward is committed.
pub const BOUNDARY_WAIT: Duration = Duration::from_millis(100);

/// Per experiment that has met a commitment boundary, its [`Gate`]: the decisions waiting at
/// the boundary, and whether it is closed.
#[derive(Default)]
pub struct Boundaries(std::sync::Mutex<std::collections::HashMap<String, Arc<Gate>>>);

/// One experiment's commitment boundary as the decisions see it. The writer keeps `closed`:
/// set by a decision refused at the boundary, or by one that leaves the experiment at it (a
/// kind that serves one decision at a time); cleared by a decision that leaves it open and by
/// a committed reward or abandonment (`Boundaries::freed`). A decision that finds the gate
/// closed waits without trying (no writer operation); a freeing reward wakes one waiting
/// decision, and a decision that leaves the gate open wakes the next
/// (`Boundaries::decided`), so a reward that opens a commitment of many rounds lets them
/// through one after another while a kind that serves one at a time gets one try per reward,
/// not one per waiting client. `closed` is a hint: a decision that waited [`BOUNDARY_WAIT`]
/// tries once more whatever it says, and the session, in the writer, decides.
#[derive(Default)]
pub struct Gate {
    closed: std::sync::atomic::AtomicBool,
    woken: tokio::sync::Notify,
}

impl Gate {
    /// Whether the last decision found or left the experiment at its boundary, with no
    /// reward or abandonment since.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Wait while the gate is closed: until it is opened and this decision is woken, or
    /// `deadline`. Returns at once when it is open.
    pub(crate) async fn wait_open(&self, deadline: tokio::time::Instant) {
        loop {
            // Listening before the check: a reward committed after it wakes this decision
            // (a wake-up of a decision that returns without waiting goes to the next one).
            let woken = self.woken.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if !self.is_closed() {
                return;
            }
            if tokio::time::timeout_at(deadline, woken).await.is_err() {
                return;
            }
        }
    }

    /// Open the gate and wake one waiting decision.
    pub(crate) fn open(&self) {
        self.closed
            .store(false, std::sync::atomic::Ordering::Release);
        self.woken.notify_one();
    }
}

impl Boundaries {
    /// Experiment `name`'s gate, if a decision of it has met a boundary.
    pub(crate) fn get(&self, name: &str) -> Option<Arc<Gate>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(name)
            .cloned()
    }

    /// Experiment `name`'s gate, made at its first boundary (an existing experiment: the map
    /// holds at most one entry per experiment). Called by the writer at every boundary: the
    /// name is copied only the first time.
    fn of(&self, name: &str) -> Arc<Gate> {
        let mut m = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match m.get(name) {
            Some(g) => g.clone(),
            None => m.entry(name.to_string()).or_default().clone(),
        }
    }

    /// In the writer, after a decision of `name` (in the order the writer runs them): whether
    /// it found or left the experiment at its commitment boundary. Only an experiment that
    /// has met a boundary gets a gate; a decision that leaves it open wakes the next waiting
    /// one at once (its try joins the batch being gathered, or the next one), so a reward that
    /// opens many rounds lets the waiting decisions through one after another without a
    /// commit between each two.
    pub(crate) fn decided(&self, name: &str, at_boundary: bool) {
        if at_boundary {
            self.of(name)
                .closed
                .store(true, std::sync::atomic::Ordering::Release);
        } else if let Some(g) = self.get(name) {
            g.open();
        }
    }

    /// A reward (or abandonment) of `name` was committed: open its gate and wake one waiting
    /// decision.
    pub(crate) fn freed(&self, name: &str) {
        if let Some(g) = self.get(name) {
            g.open();
        }
    }
}

/// The bearer token of a request's `Authorization` header.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<String> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let t = v.strip_prefix("Bearer ")?.trim();
    (!t.is_empty()).then(|| t.to_string())
}

/// Run `f` on the service through the writer's queue (the service-wide lane); the answer
/// comes after the commit of `f`'s batch (a failed commit answers 500).
pub(crate) async fn with_service<T: Send + 'static>(
    state: &Shared,
    f: impl FnOnce(&mut Service) -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    with_service_in(state, None, f).await
}

/// [`with_service`] in experiment `lane`'s lane of the writer ([`crate::writer::QUANTUM`]).
pub(crate) async fn with_service_in<T: Send + 'static>(
    state: &Shared,
    lane: Option<&str>,
    f: impl FnOnce(&mut Service) -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    with_service_staged(state, lane, move |s| f(s).map(Staged::Done)).await
}

/// [`with_service_in`] for an operation that may leave a step for after its batch's commit
/// ([`Staged::AfterCommit`], [`Step::Then`]): the request is answered by that step, after the
/// commit of the batch it runs in.
pub(crate) async fn with_service_staged<T: Send + 'static>(
    state: &Shared,
    lane: Option<&str>,
    f: impl FnOnce(&mut Service) -> ApiResult<Staged<T>> + Send + 'static,
) -> ApiResult<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move |s: &mut Service| match f(s) {
        Ok(Staged::AfterCommit(then)) => Step::Then(Box::new(move |s: &mut Service| {
            Step::Reply(answer(then(s).map_err(ApiError::from), tx))
        })),
        Ok(Staged::Done(v)) => Step::Reply(answer(Ok(v), tx)),
        Err(e) => Step::Reply(answer(Err(e), tx)),
    });
    let lane = lane.map(str::to_string);
    state
        .jobs
        .send(Queued { lane, job })
        .await
        .map_err(|_| {
            ApiError::new(
                503,
                "the writer has stopped (the service is stopping, or another node took over its database): retry on another node",
            )
        })?;
    state.writer.unpark();
    rx.await
        .map_err(|_| ApiError::internal("the operation was not committed (its batch failed)"))?
}

/// The reply that answers `r` on `tx` once the batch's commit is known.
fn answer<T: Send + 'static>(
    r: ApiResult<T>,
    tx: tokio::sync::oneshot::Sender<ApiResult<T>>,
) -> Reply {
    Box::new(move |committed: bool| {
        let _ = tx.send(if committed {
            r
        } else {
            Err(ApiError::internal("the batch's commit failed"))
        });
    })
}

/// Who may call a route: [`AdminOnly`] or [`Client`].
pub(crate) trait Access: Send + Sync + 'static {
    /// Only the admin token.
    const ADMIN: bool;
}

/// The admin token only.
pub(crate) struct AdminOnly;

/// The experiment's client token (its `{name}` in the path) or the admin token.
pub(crate) struct Client;

impl Access for AdminOnly {
    const ADMIN: bool = true;
}

impl Access for Client {
    const ADMIN: bool = false;
}

/// What the log line and the metrics say of one request: its route's name, when it started and
/// its experiment (the path's `{name}`). Kept in the request's extensions for [`Body`].
#[derive(Clone)]
struct Info {
    route: &'static str,
    started: Instant,
    experiment: Option<String>,
}

impl Info {
    fn of(parts: &Parts) -> Info {
        if let Some(i) = parts.extensions.get::<Info>() {
            return i.clone();
        }
        let path = parts
            .extensions
            .get::<MatchedPath>()
            .map_or("", MatchedPath::as_str);
        Info {
            route: route_name(&parts.method, path),
            started: Instant::now(),
            experiment: None,
        }
    }

    /// Count the answer, write the log line (`fields` after the route, status, time and
    /// experiment: never a reward) .
    fn finish(&self, status: u16, retry_later: bool, fields: Value) {
        let seconds = self.started.elapsed();
        crate::metrics::record_request(self.route, status, seconds.as_secs_f64(), retry_later);
        let mut f =
            json!({"route": self.route, "status": status, "micros": seconds.as_micros() as u64});
        let o = f.as_object_mut().expect("an object");
        if let Some(n) = &self.experiment {
            o.insert("experiment".into(), json!(n));
        }
        if let Value::Object(extra) = fields {
            o.extend(extra);
        }
        log("request", f);
    }

    /// A refusal: counted, logged, answered.
    fn refuse(&self, e: ApiError) -> Response {
        self.finish(e.status, e.retry_after.is_some(), json!({}));
        e.into_response()
    }
}

/// The name of a route in the metrics and the log, from its method and its path pattern.
pub(crate) fn route_name(method: &Method, path: &str) -> &'static str {
    let tail = path.strip_prefix("/v1/experiments/{name}");
    match (method.as_str(), path, tail) {
        ("POST", "/v1/experiments", _) => "create",
        ("GET", "/v1/experiments", _) => "list",
        ("GET", "/v1/audit", _) => "audit",
        ("GET", "/metrics", _) => "metrics",
        ("GET", _, Some("")) => "status",
        ("POST", _, Some("/token")) => "rotate-token",
        ("GET", _, Some("/export")) => "export",
        ("POST", _, Some("/decisions")) => "decision",
        ("POST", _, Some("/rewards")) => "reward",
        ("POST", _, Some("/decisions/{id}/abandon")) => "abandon",
        ("GET", _, Some("/ledger")) => "ledger",
        ("POST", _, Some("/close")) => "close",
        ("POST", _, Some("/abandon")) => "abandon-bulk",
        ("GET", _, Some("/interim")) => "interim",
        ("GET", _, Some("/monitor")) => "monitor",
        ("GET", _, Some("/report")) => "report",
        _ => "other",
    }
}

/// One authenticated request. Extracting it authenticates the bearer token once, from the
/// header alone (the token table, not the writer), before any of the body is read: the admin
/// token, or with [`Client`] the experiment's client token too. A refusal is answered 401,
/// counted and logged. [`Ctx::run`] runs the operation on the service; [`Ctx::respond`] and
/// [`Ctx::finish`] count the answer and write the request's log line.
pub(crate) struct Ctx<A> {
    shared: Shared,
    info: Info,
    access: PhantomData<A>,
}

impl<A: Access> FromRequestParts<Shared> for Ctx<A> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &Shared) -> Result<Self, Response> {
        let mut info = Info::of(parts);
        info.experiment = RawPathParams::from_request_parts(parts, state)
            .await
            .ok()
            .and_then(|p| {
                p.iter()
                    .find(|(k, _)| *k == "name")
                    .map(|(_, v)| v.to_string())
            });
        parts.extensions.insert(info.clone());
        let token = bearer(&parts.headers);
        let caller = state
            .tokens
            .read()
            .map_err(|_| ApiError::internal("token table lock poisoned"))
            .and_then(|t| Ok(t.check(token.as_deref(), info.experiment.as_deref())?));
        match caller {
            Ok(Caller::Admin) => {}
            Ok(Caller::Client) if !A::ADMIN => {}
            Ok(Caller::Client) => {
                return Err(info.refuse(ServiceError::Unauthorized { admin: true }.into()));
            }
            Err(e) => return Err(info.refuse(e)),
        }
        Ok(Ctx {
            shared: state.clone(),
            info,
            access: PhantomData,
        })
    }
}

impl<A> Ctx<A> {
    /// The handlers' shared state.
    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// Run `f` on the service through the writer's queue ([`with_service`]).
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Service) -> ApiResult<T> + Send + 'static,
    ) -> ApiResult<T> {
        with_service(&self.shared, f).await
    }

    /// [`Ctx::run`] in the writer's lane of the request's experiment (its path's `{name}`):
    /// the writer serves the experiments' lanes in turn ([`crate::writer::QUANTUM`]).
    pub(crate) async fn run_in_lane<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Service) -> ApiResult<T> + Send + 'static,
    ) -> ApiResult<T> {
        with_service_in(&self.shared, self.info.experiment.as_deref(), f).await
    }

    /// [`Ctx::run_in_lane`] for an operation that may answer after its batch's commit
    /// ([`with_service_staged`]).
    pub(crate) async fn run_staged_in_lane<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Service) -> ApiResult<Staged<T>> + Send + 'static,
    ) -> ApiResult<T> {
        with_service_staged(&self.shared, self.info.experiment.as_deref(), f).await
    }

    /// Run `f` on a read-only connection beside the writer ([`crate::readers`]): it reads what
    /// is committed, without queueing behind the writer's batches.
    pub(crate) async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&crate::store::Reads) -> ApiResult<T> + Send + 'static,
    ) -> ApiResult<T> {
        self.shared
            .readers
            .read(f)
            .await
            .map_err(ApiError::internal)?
    }

    /// Count the answer `r` and log it (with `fields`, e.g. the decision), then answer it as
    /// JSON (200) or as its error.
    pub(crate) fn respond(&self, r: ApiResult<Value>, fields: Value) -> Response {
        match r {
            Ok(v) => {
                self.finish(200, false, fields);
                (StatusCode::OK, axum::Json(v)).into_response()
            }
            Err(e) => self.refuse(e),
        }
    }

    /// Count an answer of `status` and log it (the handler builds the response itself).
    pub(crate) fn finish(&self, status: u16, retry_later: bool, fields: Value) {
        self.info.finish(status, retry_later, fields);
    }

    /// A refusal: counted, logged, answered.
    pub(crate) fn refuse(&self, e: ApiError) -> Response {
        self.info.refuse(e)
    }
}

/// A typed request body, read after [`Ctx`] authenticated the request: at most
/// [`crate::limits::MAX_BODY`] bytes (else 413) within the body timeout (else 408), a JSON object
/// (else 400) of `T`'s fields (422 naming the field, the value and what is allowed). A refusal
/// is counted and logged as the route's.
pub(crate) struct Body<T>(pub(crate) T);

impl<T: Fields> FromRequest<Shared> for Body<T> {
    type Rejection = Response;

    async fn from_request(req: Request, state: &Shared) -> Result<Self, Response> {
        let (parts, body) = req.into_parts();
        let info = Info::of(&parts);
        let parsed = match read_body(state, &parts.headers, body).await {
            Ok(bytes) => parse::<T>(&bytes),
            Err(e) => Err(e),
        };
        parsed.map(Body).map_err(|e| info.refuse(e))
    }
}

/// Read a request body: at most [`crate::limits::MAX_BODY`] bytes (else 413) within the body
/// timeout (else 408).
async fn read_body(
    state: &Shared,
    headers: &HeaderMap,
    body: axum::body::Body,
) -> ApiResult<Bytes> {
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

/// A request body's shape as its refusals name it: its keys, the required ones (with the
/// message when missing), the keys whose `null` counts as absent, what each key takes, and the
/// checks beyond its type.
pub(crate) trait Fields: serde::de::DeserializeOwned + Send + 'static {
    /// The body's keys, in the order error messages list them.
    const FIELDS: &'static [&'static str];
    /// The required keys, each with its message when missing.
    const REQUIRED: &'static [(&'static str, &'static str)] = &[];
    /// The keys whose `null` counts as absent.
    const NULL_IS_ABSENT: &'static [&'static str] = &[];
    /// What `key` takes, as a refusal says it.
    fn expected(key: &str) -> &'static str;
    /// The checks beyond the types (ranges), naming the field.
    ///
    /// # Errors
    /// A value out of its range (422).
    fn check(&self) -> ApiResult<()> {
        Ok(())
    }
}

/// Parse a body of shape `T`: a JSON object (an empty body is `{}`; else 400), no unknown key
/// (422 naming the allowed ones), the required keys present, every value of its type (422
/// `field = value: expected ...`), then `T`'s own checks.
pub(crate) fn parse<T: Fields>(body: &Bytes) -> ApiResult<T> {
    let mut m = object(body, T::FIELDS)?;
    for key in T::NULL_IS_ABSENT {
        if m.get(*key) == Some(&Value::Null) {
            m.remove(*key);
        }
    }
    if let Some((_, missing)) = T::REQUIRED.iter().find(|(k, _)| !m.contains_key(*k)) {
        return Err(ApiError::invalid(*missing));
    }
    let v = Value::Object(m);
    let t = serde_path_to_error::deserialize::<_, T>(&v).map_err(|e| {
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
                T::expected(&key)
            )),
            None => ApiError::invalid(format!("body: {}", e.inner())),
        }
    })?;
    t.check()?;
    Ok(t)
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    /// The gate (paused time: exact). No gate before a boundary; a freeing reward lets one
    /// waiting decision through, not all of them; a decision that leaves the gate open lets
    /// the next one through; a closed gate holds a decision until its deadline; an open one
    /// holds none.
    #[tokio::test(start_paused = true)]
    async fn a_freed_gate_lets_one_waiting_decision_through() {
        let b = Arc::new(Boundaries::default());
        b.decided("x", false);
        assert!(b.get("x").is_none(), "a gate before any boundary");
        b.decided("x", true);
        let gate = b.get("x").expect("a gate at the first boundary");
        assert!(gate.is_closed());
        let start = Instant::now();
        let deadline = start + BOUNDARY_WAIT;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for i in 0..3 {
            let (gate, tx) = (gate.clone(), tx.clone());
            tokio::spawn(async move {
                gate.wait_open(deadline).await;
                let _ = tx.send((i, Instant::now()));
            });
        }
        let settle = || async {
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
        };
        settle().await;
        assert!(rx.try_recv().is_err(), "a decision passed a closed gate");
        // A reward: one decision through, and (its decision leaves the experiment at its
        // boundary again) no other.
        b.freed("x");
        settle().await;
        assert_eq!(
            rx.try_recv().map(|(i, t)| (i, t - start)),
            Ok((0, Duration::ZERO))
        );
        b.decided("x", true);
        settle().await;
        assert!(
            rx.try_recv().is_err(),
            "a second decision passed on one reward"
        );
        // A decision that leaves the gate open hands on to the next one.
        b.decided("x", false);
        settle().await;
        assert_eq!(rx.try_recv().map(|(i, _)| i), Ok(1));
        // Closed again and no reward: the last one waits until its deadline, not longer.
        b.decided("x", true);
        let (i, at) = rx.recv().await.expect("the last decision");
        assert_eq!((i, at - start), (2, BOUNDARY_WAIT));
        // An open gate holds nobody.
        b.freed("x");
        let t = Instant::now();
        gate.wait_open(t + BOUNDARY_WAIT).await;
        assert_eq!(Instant::now(), t);
    }
}
