//! The service's state machine, independent of HTTP: experiments, decisions, rewards, the ledger.
//!
//! Each experiment is one core [`Session`] (`dpbandits::session`): decisions come from
//! [`Session::decide`], rewards go through [`Session::observe`] (which validates them at the
//! privacy boundary and checks the protocol), and the stored state is [`Session::snapshot`].
//! Every operation runs on one thread (the server's writer owns the [`Service`], `api::writer`)
//! and every state change is one SQLite savepoint ([`crate::store`] holds every statement).
//! Outside a batch a savepoint is its own transaction, committed before the operation returns;
//! inside a batch ([`Service::begin_batch`], group commit) the batch's operations share one
//! transaction, committed once before any of their responses leaves (see `docs/service.md`). Errors are [`ServiceError`]s; `api.rs` maps them to HTTP statuses.

use crate::store::{self, Counters};
use anyhow::{Context, bail};
use dpbandits::config::Setting;
use dpbandits::contextual::ActionSet;
use dpbandits::privacy::{Budget, PrivacyGuarantee};
use dpbandits::registry;
use dpbandits::session::{Decision, Next, Problem, Session};
use dpbandits::snapshot::Snapshot;
use rusqlite::Connection;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, RwLock};

/// Why an operation was refused. Every message names the field, the value and what is allowed;
/// the state is unchanged.
#[derive(Debug, Clone, PartialEq)]
pub enum ServiceError {
    /// No such experiment, decision or endpoint.
    NotFound(String),
    /// A value the service or the policy refuses; `field` is what it names (`name`, `arms`,
    /// `policy`, `policy.kind`, `policy.noise`, `request_id`, `reward`, ...).
    Invalid {
        /// The field.
        field: String,
        /// The whole message (`field = value: expected ...`).
        message: String,
    },
    /// A decision at a commitment boundary: every round of the open commitment is issued and
    /// `pending` rewards are outstanding.
    Conflict {
        /// Decisions waiting for their reward.
        pending: u64,
        /// Rounds of the open commitment not yet observed.
        rounds_left: u64,
    },
    /// A best-arm identification experiment whose stopping rule fired: no further decisions.
    Stopped {
        /// The recommended arm.
        recommendation: usize,
    },
    /// A closed experiment: no further decisions or rewards; its report is published.
    Closed {
        /// The experiment.
        name: String,
    },
    /// An experiment of that name exists.
    Exists {
        /// The name.
        name: String,
    },
    /// No valid token (`admin`: the admin token was required).
    Unauthorized {
        /// Whether the admin token was required.
        admin: bool,
    },
    /// A storage or internal failure (logged; clients see a generic text).
    Internal(String),
}

impl ServiceError {
    /// An [`ServiceError::Invalid`] naming `field`.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        ServiceError::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }
    /// An [`ServiceError::Internal`].
    pub fn internal(e: impl std::fmt::Display) -> Self {
        ServiceError::Internal(format!("internal error: {e}"))
    }
}

impl std::fmt::Display for ServiceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServiceError::NotFound(m) | ServiceError::Internal(m) => f.write_str(m),
            ServiceError::Invalid { message, .. } => f.write_str(message),
            ServiceError::Conflict {
                pending,
                rounds_left,
            } => write!(
                f,
                "pending = {pending}: the policy's commitment ({rounds_left} round(s) left) is fully issued; \
                 report the pending rewards, then ask again"
            ),
            ServiceError::Stopped { recommendation } => write!(
                f,
                "the experiment has stopped (its stopping rule fired) with recommendation = {recommendation}; \
                 it takes no further decisions"
            ),
            ServiceError::Exists { name } => {
                write!(f, "name = {name:?}: an experiment of that name exists")
            }
            ServiceError::Closed { name } => write!(
                f,
                "experiment {name:?} is closed: it takes no further decisions or rewards; its report is at GET /v1/experiments/{name}/report"
            ),
            ServiceError::Unauthorized { admin: true } => {
                f.write_str("authorization: the admin token is required")
            }
            ServiceError::Unauthorized { admin: false } => {
                f.write_str("authorization: a valid bearer token is required")
            }
        }
    }
}

impl std::error::Error for ServiceError {}

impl From<rusqlite::Error> for ServiceError {
    fn from(e: rusqlite::Error) -> Self {
        ServiceError::internal(e)
    }
}

impl From<anyhow::Error> for ServiceError {
    fn from(e: anyhow::Error) -> Self {
        ServiceError::internal(format!("{e:#}"))
    }
}

/// Result of a service operation.
pub type ServiceResult<T> = std::result::Result<T, ServiceError>;

/// The request that creates an experiment (the HTTP layer deserializes it). The problem's keys
/// depend on the kind's setting ([`Problem::keys`]): finite-armed `arms` (an integer >= 2),
/// linear `arms` (the arm vectors: K >= 2 arrays of d numbers), contextual `dim` and `horizon`,
/// best-arm identification `arms` and `delta`.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct CreateRequest {
    /// The experiment's name: 1 to 64 characters from `[A-Za-z0-9_.-]`.
    pub name: String,
    /// Finite-armed and BAI: the number of arms (treatments); linear: the arm vectors.
    #[serde(default)]
    pub arms: Option<Value>,
    /// Contextual: the dimension of the actions.
    #[serde(default)]
    pub dim: Option<Value>,
    /// Contextual: the horizon (it enters the confidence radii).
    #[serde(default)]
    pub horizon: Option<Value>,
    /// BAI: the risk in (0, 1).
    #[serde(default)]
    pub delta: Option<Value>,
    /// The policy: a `[[policy]]` table of an experiment file, as TOML text or a JSON object.
    pub policy: Value,
    /// Allow a non-private kind (default false).
    #[serde(default)]
    pub allow_non_private: bool,
    /// Seed of a simulation-grade policy's generators (default: from the operating system).
    #[serde(default)]
    pub seed: Option<u64>,
    /// Idempotent creation: the same body with the same `request_id` again answers 200 with the
    /// experiment (and a fresh client token: the one of the lost answer is revoked).
    #[serde(default)]
    pub request_id: Option<String>,
    /// Delayed outcomes: the reward recorded for an abandoned decision (a dropout recorded as an
    /// outcome value; admitted by the policy's boundary). Needed to abandon decisions.
    #[serde(default)]
    pub dropout_reward: Option<f64>,
    /// Delayed outcomes: seconds after which a pending decision is abandoned automatically (its
    /// reward recorded as `dropout_reward`), so that enrolment never waits longer.
    #[serde(default)]
    pub reward_deadline: Option<f64>,
    /// Delayed outcomes: `"wait"` (default) or `"pipeline"` (the episodic finite-armed kinds:
    /// the next commitment is opened from the released statistics while earlier ones wait for
    /// their rewards; `dpbandits::session::WhilePending`).
    #[serde(default)]
    pub while_pending: Option<String>,
}

impl CreateRequest {
    /// The body's keys, in the order error messages list them.
    pub const FIELDS: &'static [&'static str] = &[
        "name",
        "arms",
        "dim",
        "horizon",
        "delta",
        "policy",
        "allow_non_private",
        "seed",
        "request_id",
        "dropout_reward",
        "reward_deadline",
        "while_pending",
    ];

    /// The problem's keys as a TOML table for [`Problem::take_from`]; a key the setting does
    /// not take is refused naming it.
    fn problem(&self, setting: Setting) -> ServiceResult<Problem> {
        let wanted = Problem::keys(setting);
        let mut t = toml::Table::new();
        for (key, v) in [
            ("arms", &self.arms),
            ("dim", &self.dim),
            ("horizon", &self.horizon),
            ("delta", &self.delta),
        ] {
            let Some(v) = v else { continue };
            if !wanted.contains(&key) {
                return Err(ServiceError::invalid(
                    key,
                    format!(
                        "{key} = {v}: not a key of a {setting} experiment (it takes {})",
                        wanted.join(", ")
                    ),
                ));
            }
            let tv = toml::Value::try_from(v).map_err(|_| {
                ServiceError::invalid(key, format!("{key} = {v}: expected a number or an array"))
            })?;
            t.insert(key.into(), tv);
        }
        Problem::take_from(setting, &mut t).map_err(|e| core_error(e, "arms"))
    }
}

/// A core-library refusal as the service's: a parameter error names its field (`default`
/// otherwise).
fn core_error(e: dpbandits::Error, default: &str) -> ServiceError {
    let field = match &e {
        dpbandits::Error::Param { field, .. } | dpbandits::Error::UnknownField { field, .. } => {
            field.clone()
        }
        _ => default.to_string(),
    };
    ServiceError::invalid(field, e.to_string())
}

/// The problem as the status shows it (linear: the arm vectors too).
fn problem_json(p: &Problem) -> Value {
    match p {
        Problem::Finite { arms } => json!({"setting": "finite", "arms": arms}),
        Problem::Linear { arms } => json!({"setting": "linear", "arms": arms.len(),
                                           "dim": arms.first().map_or(0, Vec::len), "arm_vectors": arms}),
        Problem::Contextual { dim, horizon } => {
            json!({"setting": "contextual", "dim": dim, "horizon": horizon})
        }
        Problem::Bai { arms, delta } => json!({"setting": "bai", "arms": arms, "delta": delta}),
    }
}

/// The number stored in the `arms` column: arms (finite, BAI), arm vectors (linear), 0
/// (contextual: each round brings its own action set).
fn arms_of(p: &Problem) -> usize {
    match p {
        Problem::Finite { arms } | Problem::Bai { arms, .. } => *arms,
        Problem::Linear { arms } => arms.len(),
        Problem::Contextual { .. } => 0,
    }
}

/// A contextual decision's action set from JSON: `k >= 1` arrays of the same length `d`.
fn action_set(v: &Value) -> ServiceResult<(usize, usize, Vec<f64>)> {
    let bad = || {
        let s = v.to_string();
        let s = if s.chars().count() > 60 {
            format!("{}...", s.chars().take(60).collect::<String>())
        } else {
            s
        };
        ServiceError::invalid(
            "actions",
            format!(
                "actions = {s}: expected the round's action set, an array of k >= 1 arrays of d numbers"
            ),
        )
    };
    let rows = v.as_array().filter(|r| !r.is_empty()).ok_or_else(bad)?;
    let d = rows[0].as_array().map_or(0, Vec::len);
    let mut features = Vec::with_capacity(rows.len() * d);
    for (i, row) in rows.iter().enumerate() {
        let cells = row.as_array().ok_or_else(bad)?;
        if cells.len() != d || d == 0 {
            return Err(ServiceError::invalid(
                "actions",
                format!(
                    "actions[{i}]: {} numbers, expected {d} (every action of the set has the same dimension >= 1)",
                    cells.len()
                ),
            ));
        }
        for (j, x) in cells.iter().enumerate() {
            features.push(x.as_f64().ok_or_else(|| {
                ServiceError::invalid(
                    "actions",
                    format!("actions[{i}][{j}] = {x}: expected a number"),
                )
            })?);
        }
    }
    Ok((rows.len(), d, features))
}

/// One live experiment: its core session and what the service keeps beside it.
struct Experiment {
    session: Session,
    arms: usize,
    /// The problem as the status shows it ([`problem_json`]).
    problem: Value,
    /// The reward recorded for an abandoned decision.
    dropout: Option<f64>,
    /// Seconds after which a pending decision is abandoned.
    deadline: Option<f64>,
    token_hash: String,
    guarantee: PrivacyGuarantee,
    /// Completed commitments (releases): the ledger's release numbers.
    releases: u64,
    /// The closing report, once closed (the body of the audit log's `close` entry).
    closed: Option<Value>,
    /// Charged and lost ledger rows: maintained with each charge (read from the database once,
    /// at start-up and after a failed commit), so the status reads no ledger row.
    charges: u64,
    /// The largest number of charged or lost rows of one release.
    max_per_release: u64,
}

impl Experiment {
    /// The service's counters as the session has them (with the service's release count).
    fn counters(&self) -> Counters {
        counters_of(&self.session, self.releases)
    }
}

/// Store experiment `name`'s state (its session snapshot and counters) inside `tx` after an
/// operation changed its session: at once outside a batch; inside one, once for the whole batch
/// before its commit ([`Service::write_stale_snapshots`]), so that group commit serialises and
/// writes a session once per batch, not once per request. (Nothing reads the stored state
/// inside a batch: the service reads its experiments from memory, and a failed operation
/// fails its batch, whose rollback reloads the last committed state.)
fn store_state(
    tx: &Connection,
    e: &Experiment,
    stale: &mut HashSet<String>,
    name: &str,
    releases: u64,
    in_batch: bool,
) -> ServiceResult<()> {
    if in_batch {
        if !stale.contains(name) {
            stale.insert(name.to_string());
        }
    } else {
        let snap = e.session.snapshot().map_err(ServiceError::internal)?;
        store::update_state(tx, name, &snap, &counters_of(&e.session, releases))?;
    }
    Ok(())
}

/// The queryable copies of a session's counters.
fn counters_of(s: &Session, releases: u64) -> Counters {
    Counters {
        issued: s.issued(),
        observed: s.t(),
        commit: s
            .commitment()
            .map(|(arm, rounds, _, observed)| (arm, rounds - observed)),
        releases,
    }
}

/// The service: the database connection and the live experiments.
pub struct Service {
    conn: Connection,
    experiments: HashMap<String, Experiment>,
    /// The token hashes, shared with the HTTP layer (authentication before a body is read).
    tokens: Arc<RwLock<Tokens>>,
    /// The open batch failed (see [`Service::begin_batch`]).
    batch_failed: bool,
    /// The experiments whose stored state (snapshot and counters) is behind their session: an
    /// operation of the open batch changed them; each is written once for the batch, before its
    /// commit ([`Service::write_stale_snapshots`]).
    stale: HashSet<String>,
}

/// The SHA-256 hashes of the admin token and of every experiment's client token: what
/// [`Tokens::check`] compares a bearer token with. Shared (behind a lock of its own) so the HTTP
/// layer can refuse an unauthenticated request before it reads the body and without waiting for
/// the service. The service keeps it equal to its experiments' stored hashes.
#[derive(Debug, Default)]
pub struct Tokens {
    admin: String,
    clients: HashMap<String, String>,
}

impl Tokens {
    /// Check a bearer token: the admin token, or (with `experiment`) that experiment's client
    /// token. Every failure is the same refusal and touches nothing.
    ///
    /// # Errors
    /// [`ServiceError::Unauthorized`].
    pub fn check(&self, token: Option<&str>, experiment: Option<&str>) -> ServiceResult<Caller> {
        let unauthorized = || ServiceError::Unauthorized { admin: false };
        let token = token.ok_or_else(unauthorized)?;
        let h = store::sha256_hex(token.as_bytes());
        if same(&h, &self.admin) {
            return Ok(Caller::Admin);
        }
        if let Some(c) = experiment.and_then(|n| self.clients.get(n))
            && same(&h, c)
        {
            return Ok(Caller::Client);
        }
        Err(unauthorized())
    }
}

/// Who a request authenticated as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// The admin token.
    Admin,
    /// An experiment's client token.
    Client,
}

/// Constant-time comparison of two equal-length hex digests.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The per-release cost and measure of a guarantee (`rho` of zCDP, `epsilon` of pure or approximate
/// DP), or `None` for a non-private policy.
/// Settle ledger row `id` (release `release_no` of `name`'s `arm`) as charged inside `tx`, with
/// its `budget-charge` audit entry.
fn charge(
    tx: &Connection,
    name: &str,
    id: i64,
    release_no: u64,
    arm: usize,
    measure: &str,
    cost: f64,
) -> ServiceResult<()> {
    store::set_ledger_status(tx, id, "charged")?;
    store::audit(
        tx,
        name,
        "budget-charge",
        &json!({"ledger_id": id, "release": release_no, "arm": arm, "measure": measure, "cost": cost, "status": "charged"}),
    )?;
    Ok(())
}

fn cost_of(g: &PrivacyGuarantee) -> Option<(&'static str, f64)> {
    match g.budget {
        Budget::NonPrivate => None,
        Budget::Zcdp { rho } => Some(("rho", rho)),
        Budget::PureDp { epsilon } => Some(("epsilon", epsilon)),
        Budget::ApproxDp { epsilon, .. } => Some(("epsilon", epsilon)),
        // A budget kind this build does not know: charged as non-private would be wrong, so
        // the experiment is refused at creation (see `Service::create`).
        _ => None,
    }
}

fn check_name(name: &str) -> ServiceResult<()> {
    // `.` and `..` are path segments, not names: a URL with them is normalised by clients and
    // proxies to another path.
    let ok = (1..=64).contains(&name.len())
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(ServiceError::invalid(
            "name",
            format!(
                "name = {name:?}: expected 1 to 64 characters from [A-Za-z0-9_.-], not \".\" or \"..\""
            ),
        ))
    }
}

fn check_request_id(rid: &str) -> ServiceResult<()> {
    if rid.is_empty() || rid.chars().count() > 128 {
        return Err(ServiceError::invalid(
            "request_id",
            format!("request_id = {rid:?}: expected 1 to 128 characters"),
        ));
    }
    Ok(())
}

/// The policy table from the request's `policy` (TOML text or a JSON object).
fn policy_table(v: &Value) -> ServiceResult<toml::Table> {
    let bad = |m: String| ServiceError::invalid("policy", m);
    match v {
        Value::String(s) => s
            .parse::<toml::Table>()
            .map_err(|e| bad(format!("policy: not a TOML table ({})", e.message().trim()))),
        Value::Object(_) => toml::Table::try_from(v)
            .map_err(|e| bad(format!("policy: not representable as a TOML table ({e})"))),
        other => Err(bad(format!(
            "policy = {other}: expected a TOML table as text (\"kind = \\\"adac_ucb\\\"\\nrho = 0.5\") or a JSON object"
        ))),
    }
}

/// The session of a policy table with the service's rules: a reward outside the boundary is
/// refused (`boundary = "reject"` unless the table says otherwise, where the kind takes the key),
/// and deployment-grade noise unless the table says `noise = "simulation"` (kinds without a
/// deployment path need that explicitly). Which keys a kind takes is the registry's answer
/// ([`registry::PolicyEntry::takes_in`]).
fn build_session(
    mut t: toml::Table,
    req: &CreateRequest,
    seed: u64,
) -> ServiceResult<(Session, Problem)> {
    let allow_non_private = req.allow_non_private;
    let kind = match t.remove("kind") {
        Some(toml::Value::String(k)) => k,
        Some(v) => {
            return Err(ServiceError::invalid(
                "policy.kind",
                format!("policy.kind = {v}: expected a string"),
            ));
        }
        None => {
            return Err(ServiceError::invalid(
                "policy.kind",
                "policy.kind = (missing): expected a registry kind (`dpbandits list`)",
            ));
        }
    };
    let entry = registry::policy(&kind)
        .map_err(|e| ServiceError::invalid("policy.kind", format!("policy.kind: {e}")))?;
    let problem = req.problem(entry.setting())?;
    // A refusal of a problem key (e.g. `delta` outside (0, 1)) names that key; any other, the
    // policy table.
    let problem_keys = Problem::keys(entry.setting());
    let bad = |e: dpbandits::Error| match &e {
        dpbandits::Error::Param { field, .. }
            if problem_keys
                .iter()
                .any(|k| field == k || field.starts_with(&format!("{k}["))) =>
        {
            core_error(e, "policy")
        }
        _ => ServiceError::invalid("policy", format!("policy: {e}")),
    };
    let build = |t: toml::Table| Session::new(&kind, t, &problem, seed);
    // A trial's rewards are data: one outside the boundary is refused (naming `reward`), not
    // clipped, unless the table asks for `boundary = "clip"` (kinds without a `boundary` key keep
    // their own: the non-private kinds reject at the numeric boundary anyway).
    if !t.contains_key("boundary") && entry.takes_in("boundary", &t) {
        t.insert("boundary".into(), toml::Value::String("reject".into()));
    }
    let explicit = t.get("noise").cloned();
    let session = match explicit.as_ref().and_then(|v| v.as_str()) {
        Some("simulation") if !entry.takes_in("noise", &t) => {
            t.remove("noise");
            build(t).map_err(bad)?
        }
        _ if explicit.is_some() => build(t).map_err(bad)?,
        _ if entry.takes_in("noise", &t) => {
            let mut dep = t.clone();
            dep.insert("noise".into(), toml::Value::String("deployment".into()));
            match build(dep) {
                Ok(s) => s,
                Err(e) => {
                    // A non-private member of a family has no deployment path: served as is.
                    let plain = build(t).map_err(bad)?;
                    if is_private(&plain)? {
                        return Err(bad(e));
                    }
                    plain
                }
            }
        }
        _ => {
            let plain = build(t).map_err(bad)?;
            if is_private(&plain)? {
                return Err(ServiceError::invalid(
                    "policy.noise",
                    format!(
                        "policy.noise = (missing): kind {kind:?} has no deployment-grade noise path; \
                         set noise = \"simulation\" explicitly to serve it with simulation-grade noise \
                         (seeded floating-point noise, not fit for deployment)"
                    ),
                ));
            }
            plain
        }
    };
    if !is_private(&session)? && !allow_non_private {
        return Err(ServiceError::invalid(
            "policy.kind",
            format!(
                "policy.kind = {kind:?}: not private (no guarantee); set allow_non_private = true to serve it"
            ),
        ));
    }
    Ok((session, problem))
}

fn is_private(s: &Session) -> ServiceResult<bool> {
    Ok(s.guarantee().map_err(ServiceError::internal)?.is_private())
}

/// A schema-1 experiment's session: the stored bare policy snapshot after `observed` rewards,
/// with the decisions issued but not yet rewarded (`issued - observed`, all of the open
/// commitment) issued again from it, so the session stands where the service stood.
fn migrate(row: &store::ExperimentRow) -> anyhow::Result<Session> {
    let name = &row.name;
    let c = row.counters;
    let snap = Snapshot::decode(&row.snapshot)
        .with_context(|| format!("experiment {name:?}: its policy snapshot does not decode"))?;
    let mut s = Session::from_policy_snapshot(&snap, c.observed)
        .with_context(|| format!("experiment {name:?}: its policy snapshot does not restore"))?;
    let pending = c.issued.checked_sub(c.observed).with_context(|| {
        format!(
            "experiment {name:?}: issued = {} < observed = {}",
            c.issued, c.observed
        )
    })?;
    if pending > 0 {
        let Some((arm, left)) = c.commit else {
            bail!("experiment {name:?}: {pending} pending decision(s) without a commitment");
        };
        for i in 0..pending {
            let d = s.decide().with_context(|| {
                format!("experiment {name:?}: re-issuing its pending decisions")
            })?;
            let want = Decision::Play {
                arm,
                opened: (i == 0).then_some(left),
            };
            if d != want {
                bail!(
                    "experiment {name:?}: its policy continues with {d:?}, but the stored commitment is arm {arm}, {left} round(s) left"
                );
            }
        }
    }
    Ok(s)
}

/// Turn every open release intent into a charged `lost` row with its audit entry (a crash, or
/// a failed batch, between the intent and its state change: the release may have been drawn).
fn settle_intents(tx: &Connection) -> anyhow::Result<()> {
    for i in store::open_intents(tx)? {
        store::set_ledger_status(tx, i.id, "lost")?;
        store::audit(
            tx,
            &i.experiment,
            "budget-charge",
            &json!({"ledger_id": i.id, "release": i.release, "arm": i.arm, "cost": i.cost,
                    "status": "lost", "why": "a release intent without its state change (crash): charged, a redo is charged again"}),
        )?;
    }
    Ok(())
}

/// Every experiment of the database, restored (refusing, naming the experiment, when a snapshot
/// does not restore or its stored counters disagree with it). The ledger's counts are read here,
/// once (SQL aggregates), and maintained with each charge afterwards.
fn load_all(conn: &Connection) -> anyhow::Result<HashMap<String, Experiment>> {
    let mut experiments = HashMap::new();
    for row in store::load_experiments(conn)? {
        let name = row.name;
        let closed = store::close_entry(conn, &name)?;
        let mut session = Session::restore(&row.snapshot)
            .with_context(|| format!("experiment {name:?}: its snapshot does not restore"))?;
        // Which decisions wait for a reward: the decisions table is the record (a snapshot
        // written before per-decision tracking holds only counts).
        if session.pending() > 0 {
            let ids: Vec<u64> = store::pending_decisions(conn, &name)?
                .into_iter()
                .map(|id| id.saturating_sub(1))
                .collect();
            session.adopt_pending(&ids).with_context(|| {
                format!("experiment {name:?}: its pending decisions disagree with its session snapshot; refusing to start")
            })?;
        }
        let restored = counters_of(&session, row.counters.releases);
        if restored != row.counters || session.kind() != row.kind {
            bail!(
                "experiment {name:?}: the stored counters ({:?}, kind {:?}) disagree with its session snapshot ({restored:?}, kind {:?}); refusing to start",
                row.counters,
                row.kind,
                session.kind()
            );
        }
        let guarantee = session
            .guarantee()
            .with_context(|| format!("experiment {name:?}"))?
            .clone();
        // Experiments created before the service served every setting are finite-armed.
        let config = serde_json::from_str::<Value>(&row.config).unwrap_or(Value::Null);
        let problem = config
            .get("problem")
            .cloned()
            .unwrap_or_else(|| json!({"setting": "finite", "arms": row.arms}));
        let totals = store::ledger_totals(conn, &name)?;
        experiments.insert(
            name,
            Experiment {
                session,
                arms: row.arms,
                problem,
                dropout: config.get("dropout_reward").and_then(Value::as_f64),
                deadline: config.get("reward_deadline").and_then(Value::as_f64),
                token_hash: row.token_hash,
                guarantee,
                releases: row.counters.releases,
                closed,
                charges: totals.charges,
                max_per_release: totals.max_per_release,
            },
        );
    }
    Ok(experiments)
}

impl Service {
    /// Open the database, migrate a schema-1 database (bare policy snapshots) to session
    /// snapshots, restore every experiment's session (refusing to start, naming the experiment,
    /// when a snapshot does not restore or its stored counters disagree with it) and settle
    /// release intents left open by a crash (each becomes a `lost` ledger row: charged).
    ///
    /// # Errors
    /// The database cannot be opened, a stored snapshot does not restore or migrate, or an
    /// experiment's counters disagree with its session.
    pub fn open(db: &Path, admin_token: &str) -> anyhow::Result<Self> {
        Service::open_keyed(db, admin_token, None)
    }

    /// [`Service::open`] with the audit chain's key file `key_file` (default
    /// [`store::default_key_path`]: `<db>.audit-key`). The key file is created (0600, a fresh
    /// key) only for a database whose chain is not keyed yet; a keyed database without its key
    /// is refused. Before anything is written, the database must verify
    /// ([`crate::verify::verify_conn`]: the chain, and the tables against the log); a database
    /// that does not is refused, naming what is inconsistent.
    ///
    /// # Errors
    /// As [`Service::open`], a missing or wrong key, or a database that does not verify.
    pub fn open_keyed(
        db: &Path,
        admin_token: &str,
        key_file: Option<&Path>,
    ) -> anyhow::Result<Self> {
        Service::open_inner(db, admin_token, key_file, true)
    }

    /// [`Service::open`] without the start-up self-check: for tests that fill tables directly
    /// (rows the log does not explain) to measure something else.
    #[cfg(test)]
    pub(crate) fn open_unchecked(db: &Path, admin_token: &str) -> anyhow::Result<Self> {
        Service::open_inner(db, admin_token, None, false)
    }

    fn open_inner(
        db: &Path,
        admin_token: &str,
        key_file: Option<&Path>,
        self_check: bool,
    ) -> anyhow::Result<Self> {
        let mut conn = store::open(db)?;
        let key_path = key_file.map_or_else(|| store::default_key_path(db), Path::to_path_buf);
        let keying = store::audit_keying(&conn)?;
        let key = match &keying {
            Some((f, from)) if !key_path.exists() => bail!(
                "--audit-key-file {}: no such file; the audit log of --db {} is keyed (key fingerprint {f}, from entry {from}): give its key file",
                key_path.display(),
                db.display()
            ),
            Some(_) => store::AuditKey::load(&key_path)?,
            None => store::AuditKey::load_or_create(&key_path)?.0,
        };
        if self_check {
            crate::verify::verify_conn(
                &conn,
                keying.as_ref().map(|_| &key),
                &crate::verify::Expect::default(),
            )
            .with_context(|| {
            format!(
                "--db {}: refusing to start: the database does not verify against its audit log (dpbandits audit-log verify names the same)",
                db.display()
            )
            })?;
        }
        store::init_audit_key(&conn, &key, db)?;
        let tx = conn.transaction()?;
        if store::schema_version(&tx)? == store::SCHEMA_VERSION_POLICY_SNAPSHOTS {
            for row in store::load_experiments(&tx)? {
                let s = migrate(&row).with_context(|| {
                    format!(
                        "--db {}: migrating schema {} to {} (session snapshots)",
                        db.display(),
                        store::SCHEMA_VERSION_POLICY_SNAPSHOTS,
                        store::SCHEMA_VERSION
                    )
                })?;
                let snap = s.snapshot()?;
                let c = counters_of(&s, row.counters.releases);
                store::update_state(&tx, &row.name, &snap, &c)?;
                store::audit(
                    &tx,
                    &row.name,
                    "config",
                    &json!({"action": "migrate", "schema": store::SCHEMA_VERSION,
                            "state": "session snapshot", "issued": c.issued, "observed": c.observed}),
                )?;
            }
            store::set_schema_version(&tx, store::SCHEMA_VERSION)?;
        }
        settle_intents(&tx)?;
        tx.commit()?;
        let experiments = load_all(&conn)?;
        let tokens = Tokens {
            admin: store::sha256_hex(admin_token.as_bytes()),
            clients: experiments
                .iter()
                .map(|(n, e)| (n.clone(), e.token_hash.clone()))
                .collect(),
        };
        Ok(Service {
            conn,
            experiments,
            tokens: Arc::new(RwLock::new(tokens)),
            batch_failed: false,
            stale: HashSet::new(),
        })
    }

    /// Rebuild every experiment from the database (after a failed commit: the in-memory state
    /// goes back to the stored one, experiments created in the failed batch disappear).
    ///
    /// # Errors
    /// The database cannot be read or a snapshot does not restore.
    pub fn reload_all(&mut self) -> anyhow::Result<()> {
        // A release intent made durable in the failed batch may have had its release drawn: it
        // is charged (`lost`) now, as at a restart.
        let tx = self.conn.transaction()?;
        settle_intents(&tx)?;
        tx.commit()?;
        let experiments = load_all(&self.conn)?;
        let mut t = self
            .tokens
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        t.clients = experiments
            .iter()
            .map(|(n, e)| (n.clone(), e.token_hash.clone()))
            .collect();
        drop(t);
        self.experiments = experiments;
        self.stale.clear();
        Ok(())
    }

    /// Open a batch: one transaction that the operations until [`Service::commit_batch`] share
    /// (each operation's writes are a savepoint inside it). Group commit: the server runs many
    /// requests in one batch and answers them after its one commit.
    pub fn begin_batch(&mut self) {
        self.batch_failed = self.conn.execute_batch("BEGIN IMMEDIATE").is_err();
    }

    /// Whether the open batch failed (its remaining operations are not run; all are answered 500).
    pub fn batch_failed(&self) -> bool {
        self.batch_failed
    }

    /// Mark the open batch failed (an operation panicked).
    pub fn fail_batch(&mut self) {
        self.batch_failed = true;
    }

    /// Commit the open batch (one fsync for all its operations). On failure, or when the batch
    /// failed before, roll back what is not committed and reload every experiment from the
    /// database, so the in-memory state is the stored one.
    ///
    /// # Errors
    /// The batch failed or its commit failed.
    pub fn commit_batch(&mut self) -> ServiceResult<()> {
        let r = if self.batch_failed {
            Err(ServiceError::internal("an operation of the batch failed"))
        } else if self.conn.is_autocommit() {
            Ok(())
        } else {
            self.write_stale_snapshots().and_then(|()| {
                self.conn
                    .execute_batch("COMMIT")
                    .map_err(ServiceError::from)
            })
        };
        self.batch_failed = false;
        if let Err(e) = r {
            if !self.conn.is_autocommit() {
                let _ = self.conn.execute_batch("ROLLBACK");
            }
            crate::api::log(
                "batch-failed",
                json!({"error": e.to_string(), "action": "state reloaded from the database"}),
            );
            if let Err(re) = self.reload_all() {
                crate::api::log("reload-failed", json!({"error": format!("{re:#}")}));
            }
            return Err(e);
        }
        Ok(())
    }

    /// Inside a batch, commit what it holds so far (with the snapshots it has not written yet)
    /// and open a new transaction (a release intent must be durable before its release is
    /// drawn). Outside a batch nothing is open: no-op.
    fn flush_batch(&mut self) -> ServiceResult<()> {
        if self.conn.is_autocommit() {
            return Ok(());
        }
        let r = self.write_stale_snapshots().and_then(|()| {
            self.conn
                .execute_batch("COMMIT")
                .and_then(|()| self.conn.execute_batch("BEGIN IMMEDIATE"))
                .map_err(ServiceError::from)
        });
        if r.is_err() {
            self.batch_failed = true;
        }
        r
    }

    /// Write the state (snapshot and counters) of every experiment whose session changed in the
    /// open batch: once per experiment and batch, however many operations changed it.
    fn write_stale_snapshots(&mut self) -> ServiceResult<()> {
        for name in std::mem::take(&mut self.stale) {
            if let Some(e) = self.experiments.get(&name) {
                let snap = e.session.snapshot().map_err(ServiceError::internal)?;
                store::update_state(&self.conn, &name, &snap, &e.counters())?;
            }
        }
        Ok(())
    }

    /// Write the health probe's time (`meta.health`): with the batch's commit, proof that the
    /// database takes a durable write.
    ///
    /// # Errors
    /// The write fails.
    pub fn health_write(&mut self) -> ServiceResult<()> {
        let tx = self.conn.savepoint()?;
        store::set_meta(&tx, "health", &store::now())?;
        tx.commit()?;
        Ok(())
    }

    /// Number of experiments.
    pub fn experiment_count(&self) -> usize {
        self.experiments.len()
    }

    /// Check a bearer token: the admin token, or (with `experiment`) that experiment's client
    /// token. Every failure is the same refusal and touches nothing.
    pub fn authenticate(
        &self,
        token: Option<&str>,
        experiment: Option<&str>,
    ) -> ServiceResult<Caller> {
        self.tokens
            .read()
            .map_err(|_| ServiceError::internal("token table lock poisoned"))?
            .check(token, experiment)
    }

    /// The token table, shared with the HTTP layer.
    pub fn tokens(&self) -> Arc<RwLock<Tokens>> {
        self.tokens.clone()
    }

    /// Set (or remove, with `None`) an experiment's client token hash in the shared table.
    fn set_token(&self, name: &str, hash: Option<&str>) {
        let mut t = self
            .tokens
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match hash {
            Some(h) => t.clients.insert(name.to_string(), h.to_string()),
            None => t.clients.remove(name),
        };
    }

    fn experiment(&self, name: &str) -> ServiceResult<&Experiment> {
        self.experiments.get(name).ok_or_else(|| {
            ServiceError::NotFound(format!("experiment = {name:?}: no such experiment"))
        })
    }

    /// Create an experiment; returns the response body (with the client token, shown once,
    /// and `"repeat": true` when `request_id` repeats an earlier create of the same body: the
    /// experiment is not created again and a fresh client token replaces the lost one).
    pub fn create(&mut self, req: CreateRequest) -> ServiceResult<Value> {
        check_name(&req.name)?;
        let body_hash = store::sha256_hex(
            serde_json::to_string(&req)
                .map_err(ServiceError::internal)?
                .as_bytes(),
        );
        if let Some(rid) = &req.request_id {
            check_request_id(rid)?;
            if let Some((name, hash)) = store::find_create_request(&self.conn, rid)? {
                if name == req.name && hash == body_hash {
                    let mut v = self.rotate_token(&name, "repeated create")?;
                    let e = self.experiment(&name)?;
                    let o = v.as_object_mut().expect("an object");
                    o.insert("kind".into(), json!(e.session.kind()));
                    o.insert(
                        "label".into(),
                        json!(e.session.label().unwrap_or(e.session.kind())),
                    );
                    o.insert("arms".into(), json!(e.arms));
                    o.insert("problem".into(), e.problem.clone());
                    o.insert("guarantee".into(), json!(e.guarantee));
                    o.insert("repeat".into(), json!(true));
                    return Ok(v);
                }
                return Err(ServiceError::invalid(
                    "request_id",
                    format!(
                        "request_id = {rid:?}: already created experiment {name:?} from another body; \
                         a repeated create must send the same body"
                    ),
                ));
            }
        }
        if self.experiments.contains_key(&req.name) {
            return Err(ServiceError::Exists { name: req.name });
        }
        let table = policy_table(&req.policy)?;
        let seed = match req.seed {
            Some(s) => s,
            None => {
                let mut b = [0u8; 8];
                fill_os(&mut b)?;
                u64::from_le_bytes(b)
            }
        };
        let (mut session, problem) = build_session(table.clone(), &req, seed)?;
        if let Some(w) = &req.while_pending {
            dpbandits::session::WhilePending::parse(w)
                .and_then(|m| session.set_while_pending(m))
                .map_err(|e| core_error(e, "while_pending"))?;
        }
        if let Some(d) = req.dropout_reward {
            session.boundary().single(d).map_err(|e| {
                ServiceError::invalid("dropout_reward", format!("dropout_reward: {e}"))
            })?;
        }
        match req.reward_deadline {
            Some(x) if !(x.is_finite() && x > 0.0) => {
                return Err(ServiceError::invalid(
                    "reward_deadline",
                    format!("reward_deadline = {x}: expected seconds, a finite number > 0"),
                ));
            }
            Some(_) if req.dropout_reward.is_none() => {
                return Err(ServiceError::invalid(
                    "reward_deadline",
                    "reward_deadline needs dropout_reward: the reward recorded for a decision abandoned at its deadline",
                ));
            }
            _ => {}
        }
        let kind = session.kind().to_string();
        let label = session.label().unwrap_or(&kind).to_string();
        let snap = session.snapshot().map_err(|e| {
            ServiceError::invalid("policy", format!("policy: cannot be stored: {e}"))
        })?;
        let guarantee = session.guarantee().map_err(ServiceError::internal)?.clone();
        if guarantee.is_private() && cost_of(&guarantee).is_none() {
            return Err(ServiceError::invalid(
                "policy.kind",
                format!("policy.kind = {kind:?}: its budget kind cannot be charged by the ledger"),
            ));
        }
        let mut tok = [0u8; 32];
        fill_os(&mut tok)?;
        let token: String = store::hex(&tok);
        let token_hash = store::sha256_hex(token.as_bytes());
        let token_hash_shared = token_hash.clone();
        let g = serde_json::to_value(&guarantee).map_err(ServiceError::internal)?;
        let arms = arms_of(&problem);
        let pj = problem_json(&problem);
        let config = json!({"policy": toml::Value::Table(table).to_string(), "label": label, "arms": arms,
                            "problem": pj, "allow_non_private": req.allow_non_private,
                            "dropout_reward": req.dropout_reward, "reward_deadline": req.reward_deadline,
                            "while_pending": req.while_pending, "seed": req.seed.map(|_| "given")});
        let tx = self.conn.savepoint()?;
        store::insert_experiment(
            &tx,
            &store::NewExperiment {
                name: &req.name,
                kind: &kind,
                arms,
                config: &config.to_string(),
                token_hash: &token_hash,
                guarantee: &g.to_string(),
                snapshot: &snap,
                create_request: req.request_id.as_deref().map(|r| (r, body_hash.as_str())),
            },
        )?;
        store::audit(
            &tx,
            &req.name,
            "config",
            &json!({"action": "create", "kind": kind, "label": label, "arms": arms, "problem": pj, "guarantee": g,
                    "dropout_reward": req.dropout_reward, "reward_deadline": req.reward_deadline,
                    "token_sha256": token_hash}),
        )?;
        tx.commit()?;
        self.experiments.insert(
            req.name.clone(),
            Experiment {
                session,
                arms,
                problem: pj.clone(),
                dropout: req.dropout_reward,
                deadline: req.reward_deadline,
                token_hash,
                guarantee,
                releases: 0,
                closed: None,
                charges: 0,
                max_per_release: 0,
            },
        );
        self.set_token(&req.name, Some(&token_hash_shared));
        Ok(
            json!({"experiment": req.name, "kind": kind, "label": label, "arms": arms, "problem": pj,
                  "client_token": token, "guarantee": g}),
        )
    }

    /// Replace experiment `name`'s client token (admin): the old one stops working at once.
    /// Returns `{"experiment", "client_token"}`; the audit log records the rotation (not the token).
    pub fn rotate_token(&mut self, name: &str, why: &str) -> ServiceResult<Value> {
        self.experiment(name)?;
        let mut tok = [0u8; 32];
        fill_os(&mut tok)?;
        let token: String = store::hex(&tok);
        let token_hash = store::sha256_hex(token.as_bytes());
        let tx = self.conn.savepoint()?;
        store::set_token_hash(&tx, name, &token_hash)?;
        store::audit(
            &tx,
            name,
            "config",
            &json!({"action": "rotate-token", "why": why, "token_sha256": token_hash}),
        )?;
        tx.commit()?;
        self.experiments
            .get_mut(name)
            .expect("checked above")
            .token_hash = token_hash.clone();
        self.set_token(name, Some(&token_hash));
        Ok(json!({"experiment": name, "client_token": token}))
    }

    /// Every experiment (admin): name, kind, problem, counts, whether it has stopped.
    pub fn list(&self) -> ServiceResult<Value> {
        let mut names: Vec<&String> = self.experiments.keys().collect();
        names.sort();
        let rows: Vec<Value> = names
            .into_iter()
            .map(|n| {
                let e = &self.experiments[n];
                let c = e.counters();
                json!({"experiment": n, "kind": e.session.kind(), "problem": e.problem,
                       "decisions": c.issued, "rewarded": c.observed, "pending": e.session.pending(),
                       "stopped": e.session.stopped().map(|r| json!({"recommendation": r}))})
            })
            .collect();
        Ok(json!({"experiments": rows}))
    }

    /// Every experiment's gauges for `/metrics` (maintained counts: no table is read).
    pub fn metrics_gauges(&self) -> Vec<crate::metrics::ExperimentGauges> {
        let mut names: Vec<&String> = self.experiments.keys().collect();
        names.sort();
        names
            .into_iter()
            .map(|n| {
                let e = &self.experiments[n];
                let c = e.counters();
                let cost = cost_of(&e.guarantee);
                crate::metrics::ExperimentGauges {
                    name: n.clone(),
                    decisions: c.issued,
                    rewarded: c.observed,
                    pending: e.session.pending(),
                    charges: e.charges,
                    charged_total: cost.map_or(0.0, |(_, c)| c * e.charges as f64),
                    measure: cost.map_or("none", |(m, _)| m).to_string(),
                }
            })
            .collect()
    }

    /// Issue a decision. A repeated `request_id` returns the decision it already got. A
    /// contextual experiment needs the round's action set (`actions`, `k x d`); the answer's
    /// `arm` is the chosen action's index. A best-arm identification experiment answers
    /// [`ServiceError::Stopped`] once its stopping rule fired (recorded once, in the audit log
    /// and the status).
    pub fn decide(
        &mut self,
        name: &str,
        request_id: Option<String>,
        actions: Option<&Value>,
    ) -> ServiceResult<Value> {
        self.experiment(name)?;
        if let Some(rid) = &request_id {
            check_request_id(rid)?;
            if let Some((id, arm)) = store::find_request(&self.conn, name, rid)? {
                return Ok(json!({"decision_id": id, "arm": arm, "repeat": true}));
            }
        }
        if self.experiment(name)?.closed.is_some() {
            return Err(ServiceError::Closed { name: name.into() });
        }
        let actions = actions.map(action_set).transpose()?;
        self.expire(name)?;
        let e = self.experiments.get_mut(name).expect("checked above");
        // Whether an action set belongs in the request does not depend on the state: refused
        // first, naming `actions`.
        match (e.session.dim(), &actions) {
            (Some(d), None) => {
                return Err(ServiceError::invalid(
                    "actions",
                    format!(
                        "actions = (missing): expected the round's action set, an array of k >= 1 arrays of d = {d} numbers"
                    ),
                ));
            }
            (None, Some((k, d, _))) => {
                return Err(ServiceError::invalid(
                    "actions",
                    format!(
                        "actions = a {k} x {d} array: a {} experiment decides without an action set",
                        e.session.setting()
                    ),
                ));
            }
            _ => {}
        }
        match e.session.next() {
            Next::Stopped { recommendation } => {
                return Err(ServiceError::Stopped { recommendation });
            }
            // At a commitment boundary the session would refuse (a protocol error): answered
            // as a conflict with the counts, before the session is asked.
            Next::Reward { pending, .. } => {
                let rounds_left = e
                    .session
                    .commitment()
                    .map_or(0, |(_, rounds, _, observed)| rounds - observed);
                return Err(ServiceError::Conflict {
                    pending,
                    rounds_left,
                });
            }
            Next::Decision | Next::ActionSet { .. } => {}
        }
        // The action set is validated before anything is drawn.
        if let Some((k, d, features)) = &actions {
            e.session
                .check_actions(&ActionSet {
                    d: *d,
                    k: *k,
                    features,
                })
                .map_err(|err| core_error(err, "actions"))?;
        }
        // Releases the decision draws first (contextual: an episode ends; pipelined: a
        // commitment completed from rewards received): each one's intent is committed first.
        self.releases_before_decision(name)?;
        let e = self.experiments.get_mut(name).expect("checked above");
        let round = e.session.issued();
        let at_round = e.session.t();
        // The session validates the action set (or its absence) before the policy sees it; a
        // refusal leaves it unchanged.
        let decided = match &actions {
            Some((k, d, features)) => e.session.decide_with(&ActionSet {
                d: *d,
                k: *k,
                features,
            }),
            None => e.session.decide(),
        }
        .map_err(|err| match err {
            dpbandits::Error::Param { .. } | dpbandits::Error::UnknownField { .. } => {
                core_error(err, "actions")
            }
            other => ServiceError::internal(other),
        })?;
        let propensity = e.session.propensity();
        let in_batch = !self.conn.is_autocommit();
        let stored: ServiceResult<Value> = (|| {
            let (arm, opened) = match decided {
                Decision::Play { arm, opened } => (arm, opened),
                Decision::Stop { recommendation } => {
                    // The stopping rule fired now: recorded once, then refused as stopped.
                    let tx = self.conn.savepoint()?;
                    let releases = e.releases;
                    store_state(&tx, e, &mut self.stale, name, releases, in_batch)?;
                    store::audit(
                        &tx,
                        name,
                        "stop",
                        &json!({"recommendation": recommendation, "at_round": at_round}),
                    )?;
                    tx.commit()?;
                    return Err(ServiceError::Stopped { recommendation });
                }
            };
            let id = e.session.issued();
            let actions_json = actions.as_ref().map(|(k, d, f)| {
                Value::Array(
                    (0..*k)
                        .map(|i| json!(f[i * d..(i + 1) * d]))
                        .collect::<Vec<_>>(),
                )
                .to_string()
            });
            let tx = self.conn.savepoint()?;
            let releases = e.releases;
            store_state(&tx, e, &mut self.stale, name, releases, in_batch)?;
            if let Some(rounds) = opened {
                store::audit(
                    &tx,
                    name,
                    "commitment",
                    &json!({"arm": arm, "rounds": rounds, "at_round": at_round}),
                )?;
            }
            store::insert_decision(
                &tx,
                name,
                &store::NewDecision {
                    id,
                    arm,
                    round,
                    request_id: request_id.as_deref(),
                    actions: actions_json.as_deref(),
                    propensity,
                },
            )?;
            let mut body = json!({"decision_id": id, "arm": arm});
            if let Some(a) = &actions_json {
                // The chained entry pins the action set by its hash (the set is in `decisions`).
                body["actions_sha256"] = json!(store::sha256_hex(a.as_bytes()));
            }
            store::audit(&tx, name, "decision", &body)?;
            tx.commit()?;
            let mut answer = json!({"decision_id": id, "arm": arm});
            if let Some(p) = propensity {
                answer["propensity"] = json!(p);
            }
            Ok(answer)
        })();
        match stored {
            Ok(v) => Ok(v),
            Err(err @ ServiceError::Stopped { .. }) => Err(err),
            Err(err) => {
                // The session decided in memory but nothing was stored: back to the stored state.
                self.undo(name)?;
                Err(err)
            }
        }
    }

    /// Draw, one at a time, the releases `name`'s next decision draws before it is issued
    /// ([`Session::prepare_decision`]): each one's ledger intent is committed (durable) before
    /// its draw, then the release, its charge and the state are stored, as a reward's release is.
    fn releases_before_decision(&mut self, name: &str) -> ServiceResult<()> {
        loop {
            let e = self
                .experiments
                .get_mut(name)
                .expect("checked by the caller");
            let prepared = e.session.prepare_decision();
            // The preparation may have changed the session (the policy's next commitment,
            // rewards it took): its state is written with the batch's next commit.
            if !self.conn.is_autocommit() && !self.stale.contains(name) {
                self.stale.insert(name.to_string());
            }
            let Some(release) = prepared.map_err(ServiceError::internal)? else {
                return Ok(());
            };
            let e = self
                .experiments
                .get_mut(name)
                .expect("checked by the caller");
            let Some((measure, c)) = cost_of(&e.guarantee) else {
                e.session
                    .release_prepared()
                    .map_err(ServiceError::internal)?;
                continue;
            };
            let release_no = e.releases + 1;
            let intent = store::insert_intent(
                &mut self.conn,
                name,
                release_no,
                release.arm,
                release.rounds,
                measure,
                c,
            )
            .map_err(ServiceError::from)
            .and_then(|id| self.flush_batch().map(|()| id));
            let id = match intent {
                Ok(id) => id,
                Err(err) => {
                    // Nothing drawn: back to the stored state (the preparation included).
                    self.undo(name)?;
                    return Err(err);
                }
            };
            let in_batch = !self.conn.is_autocommit();
            let e = self
                .experiments
                .get_mut(name)
                .expect("checked by the caller");
            if let Err(err) = e.session.release_prepared() {
                self.undo(name)?;
                return Err(ServiceError::internal(err));
            }
            let result: ServiceResult<()> = (|| {
                let tx = self.conn.savepoint()?;
                store_state(&tx, e, &mut self.stale, name, release_no, in_batch)?;
                store::audit(
                    &tx,
                    name,
                    "release",
                    &json!({"release": release_no, "arm": release.arm, "episode_rounds": release.rounds, "at": "decision"}),
                )?;
                charge(&tx, name, id, release_no, release.arm, measure, c)?;
                tx.commit()?;
                Ok(())
            })();
            if let Err(err) = result {
                self.undo(name)?;
                return Err(err);
            }
            e.releases = release_no;
            self.count_charge(name, release_no)?;
        }
    }

    /// A charge of `name`'s release `release_no` is stored: the maintained counts follow (the
    /// release's rows through the ledger's index by release, so no scan).
    fn count_charge(&mut self, name: &str, release_no: u64) -> ServiceResult<()> {
        let per_release = store::ledger_release_charges(&self.conn, name, release_no)?;
        let e = self
            .experiments
            .get_mut(name)
            .expect("checked by the caller");
        e.charges += 1;
        e.max_per_release = e.max_per_release.max(per_release);
        Ok(())
    }

    /// After an operation changed `name`'s session but failed to store it: outside a batch,
    /// put the session back to its stored state; inside one, fail the batch (its rollback
    /// reloads every experiment from the last commit, since the snapshots of the batch's earlier
    /// operations are written only at its end).
    fn undo(&mut self, name: &str) -> ServiceResult<()> {
        if !self.conn.is_autocommit() {
            self.batch_failed = true;
            return Ok(());
        }
        let snap = store::load_snapshot(&self.conn, name)?;
        let s = Session::restore(&snap).map_err(ServiceError::internal)?;
        if let Some(e) = self.experiments.get_mut(name) {
            e.session = s;
        }
        Ok(())
    }

    /// Report the reward of a decision (idempotent per `decision_id`: a second report is not
    /// applied; the answer says whether it differs from the applied one, or that the decision
    /// was abandoned).
    pub fn reward(&mut self, name: &str, decision_id: u64, reward: f64) -> ServiceResult<Value> {
        self.apply(name, decision_id, reward, None)
    }

    /// Abandon a pending decision (the client: the outcome will never come): its reward is
    /// recorded as the experiment's `dropout_reward`, so its commitment can complete. Refused
    /// naming `dropout_reward` when the experiment has none.
    pub fn abandon(&mut self, name: &str, decision_id: u64) -> ServiceResult<Value> {
        let e = self.experiment(name)?;
        let Some(d) = e.dropout else {
            return Err(ServiceError::invalid(
                "dropout_reward",
                format!(
                    "dropout_reward = (not set): experiment {name:?} was created without a dropout reward, so a decision cannot be abandoned"
                ),
            ));
        };
        self.apply(name, decision_id, d, Some("client"))
    }

    /// Abandon every pending decision of `name` older than its `reward_deadline` (oldest first).
    fn expire(&mut self, name: &str) -> ServiceResult<()> {
        let e = self.experiment(name)?;
        let (Some(deadline), Some(d)) = (e.deadline, e.dropout) else {
            return Ok(());
        };
        let cutoff = store::unix_now() - deadline;
        for id in store::expired_decisions(&self.conn, name, cutoff)? {
            self.apply(name, id, d, Some("deadline"))?;
        }
        Ok(())
    }

    /// Apply a reward (`abandoned`: `Some(why)` for a dropout recorded as the reward).
    fn apply(
        &mut self,
        name: &str,
        decision_id: u64,
        reward: f64,
        abandoned: Option<&str>,
    ) -> ServiceResult<Value> {
        if self.experiment(name)?.closed.is_some() {
            return Err(ServiceError::Closed { name: name.into() });
        }
        let Some((arm, previous, outcome)) = store::decision(&self.conn, name, decision_id)? else {
            return Err(ServiceError::NotFound(format!(
                "decision_id = {decision_id}: no such decision in experiment {name:?}"
            )));
        };
        if let Some(prev) = previous {
            let mut v = json!({"decision_id": decision_id, "status": "duplicate"});
            if outcome.as_deref() == Some("abandoned") {
                v["note"] = json!(
                    "the decision was abandoned (its dropout reward is recorded); this report was not applied"
                );
                v["abandoned"] = json!(true);
            } else if prev.to_bits() != reward.to_bits() && abandoned.is_none() {
                v["note"] = json!(
                    "a different reward was reported first and applied; this report was not applied"
                );
                v["differs"] = json!(true);
            }
            return Ok(v);
        }
        let e = self.experiments.get_mut(name).expect("checked above");
        let invalid =
            |err: dpbandits::Error| ServiceError::invalid("reward", format!("reward: {err}"));
        // The policy's own boundary admits the reward first (clip, or refuse in reject mode);
        // a refused reward changes nothing and the decision stays pending.
        let admitted = e.session.boundary().single(reward).map_err(invalid)?;
        let clipped = admitted.sum() != reward;
        // Whether this reward completes a commitment (a release; pipelined experiments have
        // several commitments open).
        let index = decision_id.saturating_sub(1);
        match e.session.pending_arm(index) {
            Some(carm) if carm == arm => {}
            other => {
                return Err(ServiceError::internal(format!(
                    "decision {decision_id} (arm {arm}) has no reward, but the session has it {}",
                    other.map_or("observed".to_string(), |a| format!("of arm {a}"))
                )));
            }
        }
        let release = e
            .session
            .observe_releases(index)
            .map_err(ServiceError::internal)?;
        let completes = release.is_some();
        let rounds = release.map_or(1, |r| r.rounds);
        let cost = cost_of(&e.guarantee);
        let release_no = e.releases + 1;
        // A release is about to be drawn: its intent is committed first, so a crash between the
        // draw and the state change leaves a charged (`lost`) row, and a redo is charged again.
        let intent = match (completes, cost) {
            (true, Some((measure, c))) => {
                let id = store::insert_intent(
                    &mut self.conn,
                    name,
                    release_no,
                    arm,
                    rounds,
                    measure,
                    c,
                )?;
                // Durable before the draw, also inside a batch (the batch so far is committed).
                self.flush_batch()?;
                Some((id, measure, c))
            }
            _ => None,
        };
        let in_batch = !self.conn.is_autocommit();
        let e = self.experiments.get_mut(name).expect("checked above");
        if let Err(err) = e
            .session
            .observe_decision(decision_id.saturating_sub(1), reward)
        {
            return Err(match err {
                dpbandits::Error::Boundary { .. } => invalid(err),
                dpbandits::Error::Param { ref field, .. } if field == "reward" => invalid(err),
                other => ServiceError::internal(other),
            });
        }
        let releases = if completes { release_no } else { e.releases };
        let result: ServiceResult<()> = (|| {
            let tx = self.conn.savepoint()?;
            store_state(&tx, e, &mut self.stale, name, releases, in_batch)?;
            store::record_reward(
                &tx,
                name,
                decision_id,
                reward,
                admitted.sum(),
                if abandoned.is_some() {
                    "abandoned"
                } else {
                    "reward"
                },
            )?;
            let mut body = json!({"decision_id": decision_id, "arm": arm, "reward": reward, "admitted": admitted.sum()});
            if let Some(why) = abandoned {
                body["abandoned"] = json!(why);
            }
            store::audit(
                &tx,
                name,
                if abandoned.is_some() {
                    "abandon"
                } else {
                    "reward"
                },
                &body,
            )?;
            if completes {
                store::audit(
                    &tx,
                    name,
                    "release",
                    &json!({"release": release_no, "arm": arm, "episode_rounds": "complete"}),
                )?;
            }
            if let Some((id, measure, c)) = intent {
                charge(&tx, name, id, release_no, arm, measure, c)?;
            }
            tx.commit()?;
            Ok(())
        })();
        if let Err(err) = result {
            // Nothing stored: put the session back to its stored state (the drawn release, if
            // any, stays charged through its open intent once the service restarts).
            self.undo(name)?;
            return Err(err);
        }
        // Stored: the release count follows at once (the batch's end writes it with the
        // snapshot); then the maintained counts (the release's rows through the ledger's index
        // by release, so no scan).
        e.releases = releases;
        if intent.is_some() {
            self.count_charge(name, release_no)?;
        }
        if let Some(why) = abandoned {
            api_log_abandon(name, decision_id, why);
            return Ok(json!({"decision_id": decision_id, "status": "abandoned", "why": why}));
        }
        Ok(json!({"decision_id": decision_id, "status": "applied", "clipped": clipped}))
    }

    /// The ledger summary of an experiment (maintained counts: no row is read).
    fn ledger_summary(&self, name: &str) -> ServiceResult<Value> {
        let e = self.experiment(name)?;
        let cost = cost_of(&e.guarantee);
        let effective =
            cost.map(|(m, c)| json!({"measure": m, "value": c * e.max_per_release.max(1) as f64}));
        // Every row of an experiment costs the same (its guarantee's per-release cost).
        let total = cost.map_or(0.0, |(_, c)| c * e.charges as f64);
        Ok(json!({
            "charged_total": total,
            "charges": e.charges,
            "releases": e.releases,
            "max_charges_per_release": e.max_per_release,
            "effective_budget": effective,
            "note": "each completed commitment is charged once as a release (an upper bound: a kind may release at fewer of them); \
                     a release redone after a crash is charged again. The kinds release on disjoint rewards (parallel composition), \
                     so the guarantee holds with the budget multiplied by max_charges_per_release.",
        }))
    }

    /// An experiment's status (public counts, the problem, the guarantee, the ledger summary;
    /// BAI: the stop and its recommendation once the stopping rule fired).
    pub fn status(&self, name: &str) -> ServiceResult<Value> {
        let e = self.experiment(name)?;
        let ledger = self.ledger_summary(name)?;
        let c = e.counters();
        Ok(json!({
            "experiment": name,
            "kind": e.session.kind(),
            "arms": e.arms,
            "problem": e.problem,
            "decisions": c.issued,
            "rewarded": c.observed,
            "pending": e.session.pending(),
            "commitment": c.commit.map(|(arm, left)| json!({"arm": arm, "rounds_left": left})),
            "stopped": e.session.stopped().map(|r| json!({"recommendation": r})),
            "dropout_reward": e.dropout,
            "reward_deadline": e.deadline,
            "guarantee": e.guarantee,
            "ledger": ledger,
            "closed": e.closed.as_ref().map(|r| json!({"at_round": r["rounds"], "recommended_arm": r["recommended_arm"], "audit_seq": r["audit_seq"]})),
        }))
    }

    /// Close an experiment (admin): no further decisions or rewards, and the report — per-arm
    /// pulls (public counts of completed decisions), the private estimates and intervals at
    /// `level` computed from released statistics only (`dpbandits::report`), the recommended
    /// arm, the guarantee and the ledger — recorded once in the audit log (`close`) and
    /// returned. Refused while decisions are pending (abandon them or wait for their rewards or
    /// their deadline). Closing again returns the same report (`"repeat": true`).
    pub fn close(&mut self, name: &str, level: Option<f64>) -> ServiceResult<Value> {
        let e = self.experiment(name)?;
        if let Some(r) = &e.closed {
            let mut r = r.clone();
            r["repeat"] = json!(true);
            return Ok(r);
        }
        let level = level.unwrap_or(0.95);
        let report = e
            .session
            .report(level)
            .map_err(|err| core_error(err, "level"))?;
        let pending = e.session.pending();
        if pending > 0 {
            return Err(ServiceError::invalid(
                "pending",
                format!(
                    "pending = {pending}: decisions wait for their rewards; report them, abandon them \
                     (POST /v1/experiments/{name}/decisions/{{id}}/abandon) or wait for their reward_deadline, then close"
                ),
            ));
        }
        let pulls = store::completed_by_arm(&self.conn, name, e.arms)?;
        // The recommended arm: BAI's stopping-rule recommendation, else the most-pulled arm
        // (ties: the lowest index); both are post-processing of the published decisions.
        let (recommended, rule) = match report.recommendation {
            Some(r) => (Some(r), "the stopping rule's recommendation"),
            None if pulls.iter().any(|&p| p > 0) => {
                let best = pulls
                    .iter()
                    .enumerate()
                    .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(&a.0)))
                    .map(|(a, _)| a);
                (best, "the most-pulled arm (ties: the lowest index)")
            }
            None => (None, "no completed decision"),
        };
        let ledger = self.ledger_summary(name)?;
        let e = self.experiment(name)?;
        let mut body = json!({
            "experiment": name,
            "kind": report.kind,
            "problem": e.problem,
            "rounds": report.rounds,
            "decisions": e.session.issued(),
            "pulls": pulls,
            "recommended_arm": recommended,
            "recommendation_rule": rule,
            "level": level,
            "estimates": report.estimates,
            "method": report.method,
            "why_no_estimates": report.why_no_estimates,
            "guarantee": e.guarantee,
            "ledger": ledger,
            "cost": "none: the report is post-processing of released statistics and public counts",
        });
        let tx = self.conn.savepoint()?;
        let (seq, head) = store::audit(&tx, name, "close", &body)?;
        tx.commit()?;
        body["audit_seq"] = json!(seq);
        body["audit_hash"] = json!(head);
        self.experiments
            .get_mut(name)
            .expect("checked above")
            .closed = Some(body.clone());
        Ok(body)
    }

    /// The report of a closed experiment.
    pub fn report(&self, name: &str) -> ServiceResult<Value> {
        let e = self.experiment(name)?;
        e.closed.clone().ok_or_else(|| {
            ServiceError::NotFound(format!(
                "experiment {name:?} is not closed: POST /v1/experiments/{name}/close (admin) publishes its report"
            ))
        })
    }

    /// The ledger summary and its rows with `id > after`, at most `limit` (`next_after`: the
    /// last row's id when more may follow).
    pub fn ledger_rows(&self, name: &str, after: i64, limit: u64) -> ServiceResult<Value> {
        let mut v = self.ledger_summary(name)?;
        let rows = store::ledger_rows(&self.conn, name, after, limit)?;
        let next = (rows.len() as u64 == limit)
            .then(|| rows.last().map(|r| r.id))
            .flatten();
        v["rows"] = json!(rows);
        v["next_after"] = json!(next);
        Ok(v)
    }

    /// Decisions with their rewards (admin; protected data), `decision_id > after`, at most
    /// `limit`: `(rows, next_after)`.
    pub fn export(
        &self,
        name: &str,
        after: u64,
        limit: u64,
    ) -> ServiceResult<(Vec<store::DecisionRow>, Option<u64>)> {
        self.experiment(name)?;
        let rows = store::decision_rows(&self.conn, name, after, limit)?;
        let next = (rows.len() as u64 == limit)
            .then(|| rows.last().map(|r| r.decision_id))
            .flatten();
        Ok((rows, next))
    }

    /// The audit log (admin only): entries after `after`, at most `limit`.
    pub fn audit_export(
        &self,
        experiment: Option<&str>,
        after: i64,
        limit: i64,
    ) -> ServiceResult<Value> {
        let rows = store::audit_entries(&self.conn, experiment, after, limit)?;
        Ok(json!({"entries": rows}))
    }
}

/// One log line per abandoned decision (never the reward).
fn api_log_abandon(name: &str, decision_id: u64, why: &str) {
    crate::api::log(
        "abandon",
        json!({"experiment": name, "decision_id": decision_id, "why": why}),
    );
}

/// Fill `buf` from the operating system's entropy source.
fn fill_os(buf: &mut [u8]) -> ServiceResult<()> {
    use rand::TryRng;
    rand::rngs::SysRng.try_fill_bytes(buf).map_err(|e| {
        ServiceError::internal(format!("the operating system's entropy source failed: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ADMIN: &str = "unit-admin-token-0123456789";

    /// A create request from its JSON body.
    fn req(body: Value) -> CreateRequest {
        serde_json::from_value(body).unwrap()
    }

    fn create(s: &mut Service) {
        s.create(req(
            json!({"name": "t", "arms": 2, "policy": {"kind": "adac_ucb", "rho": 0.5}}),
        ))
        .unwrap();
    }

    /// Every private kind of the registry (all 21), in every setting, created at its example
    /// parameters without `noise`: deployment-grade (the service's default; never silently
    /// simulation-grade).
    #[test]
    fn private_kinds_default_to_deployment_noise() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Service::open(&dir.path().join("s.sqlite"), ADMIN).unwrap();
        let mut deployed = vec![];
        for (i, entry) in registry::POLICIES.iter().enumerate() {
            let mut t: toml::Table = toml::from_str(entry.info.example).unwrap();
            t.remove("noise");
            t.insert("kind".into(), toml::Value::String(entry.kind().into()));
            let mut body = json!({"name": format!("e{i}"), "allow_non_private": true, "seed": 1,
                                  "policy": toml::to_string(&t).unwrap()});
            let problem = match entry.setting() {
                Setting::FiniteArmed => json!({"arms": 3}),
                Setting::Linear => json!({"arms": [[1.0, 0.0], [0.0, 1.0], [0.7, 0.7]]}),
                Setting::Contextual => json!({"dim": 3, "horizon": 1000}),
                Setting::Bai => json!({"arms": 3, "delta": 0.1}),
            };
            for (k, v) in problem.as_object().unwrap() {
                body[k] = v.clone();
            }
            match s.create(req(body)) {
                Ok(v) => match v["guarantee"]["noise"].as_str().unwrap() {
                    "deployment-grade" => deployed.push(entry.kind()),
                    "not-applicable" => {}
                    g => panic!("{}: served with {g} noise by default", entry.kind()),
                },
                Err(e) => panic!("{}: refused at its example parameters: {e:?}", entry.kind()),
            }
        }
        // Every kind the registry declares private, in registry order (read from the registry's
        // data, so a new private kind needs no edit here).
        let private: Vec<&str> = registry::POLICIES
            .iter()
            .filter(|e| e.info.privacy != "none")
            .map(|e| e.kind())
            .collect();
        assert!(private.len() >= 17, "{private:?}");
        assert_eq!(
            deployed, private,
            "kinds served with deployment noise by default"
        );
    }

    fn pair(s: &mut Service, reward: f64) {
        let d = s.decide("t", None, None).unwrap();
        let id = d["decision_id"].as_u64().unwrap();
        assert_eq!(s.reward("t", id, reward).unwrap()["status"], "applied");
    }

    /// A crash between a release intent and its state change (simulated: the intent row is
    /// committed, the reward is not) leaves a charged `lost` row after the restart; the redo is
    /// charged again, and the effective budget doubles.
    #[test]
    fn a_lost_release_is_charged_and_its_redo_too() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("s.sqlite");
        let mut s = Service::open(&db, ADMIN).unwrap();
        create(&mut s);
        pair(&mut s, 1.0);
        pair(&mut s, 0.0); // two initial episodes of one round: two releases
        let d = s.decide("t", None, None).unwrap();
        let id = d["decision_id"].as_u64().unwrap();
        let arm = d["arm"].as_i64().unwrap();
        assert_eq!(s.status("t").unwrap()["commitment"]["rounds_left"], 1);
        // What `reward` commits before drawing the release, then the process dies.
        s.conn
            .execute(
                "INSERT INTO ledger (experiment, release, arm, rewards, measure, cost, status, created)
                 VALUES ('t', 3, ?1, 0, 'rho', 0.5, 'intent', 'x')",
                [arm],
            )
            .unwrap();
        drop(s);
        let mut s = Service::open(&db, ADMIN).unwrap();
        let l = s.ledger_rows("t", 0, 10_000).unwrap();
        assert_eq!(l["charges"], 3, "{l}");
        assert_eq!(l["rows"][2]["status"], "lost");
        assert_eq!(s.status("t").unwrap()["pending"], 1);
        assert_eq!(s.reward("t", id, 0.5).unwrap()["status"], "applied");
        assert_eq!(s.reward("t", id, 0.5).unwrap()["status"], "duplicate");
        let l = s.ledger_rows("t", 0, 10_000).unwrap();
        assert_eq!(l["charges"], 4, "{l}");
        assert_eq!(l["charged_total"], 2.0);
        assert_eq!(l["max_charges_per_release"], 2);
        assert_eq!(l["effective_budget"]["value"], 1.0);
        drop(s);
        let chain = crate::verify::verify_default(&db).unwrap();
        assert!(chain.entries > 10);
        let ins = store::inspect(&db, "t").unwrap();
        assert_eq!(
            (ins.ledger_charged, ins.ledger_lost, ins.releases),
            (3, 1, 3)
        );
    }

    /// A service on a fresh database (in memory-backed storage) with experiment `t` and `n`
    /// decision + reward pairs committed in one batch.
    fn with_committed_pairs(n: usize) -> (tempfile::TempDir, std::path::PathBuf, Service) {
        let dir = shm_dir();
        let db = dir.path().join("s.sqlite");
        let mut s = Service::open(&db, ADMIN).unwrap();
        create(&mut s);
        s.begin_batch();
        for _ in 0..n {
            pair(&mut s, 1.0);
        }
        s.commit_batch().unwrap();
        (dir, db, s)
    }

    /// Group commit: operations of one batch share its transaction; a committed batch is all
    /// stored (seen after a reopen), a failed one (here: an operation "panicked") is all rolled
    /// back and the in-memory state reloaded, including an experiment created in it.
    #[test]
    fn a_batch_commits_all_its_operations_or_none() {
        let (_dir, db, mut s) = with_committed_pairs(5);
        s.begin_batch();
        pair(&mut s, 0.0);
        s.decide("t", None, None).unwrap();
        let mut r =
            req(json!({"name": "u", "arms": 2, "policy": "kind = \"adac_ucb\"\nrho = 1.0"}));
        r.seed = Some(1);
        let token = s.create(r).unwrap()["client_token"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(s.status("t").unwrap()["decisions"], 7);
        s.fail_batch();
        assert!(s.commit_batch().is_err());
        // The reward completing a commitment made the batch so far durable before its release
        // was drawn (a flush); what followed it is rolled back: the in-memory state is the
        // stored one.
        let st = s.status("t").unwrap();
        assert!(st["decisions"].as_u64().unwrap() < 7, "{st}");
        assert!(
            s.status("u").is_err(),
            "the experiment created in the failed batch is gone"
        );
        assert!(s.authenticate(Some(&token), Some("u")).is_err());
        drop(s);
        let s = Service::open(&db, ADMIN).unwrap();
        assert_eq!(s.status("t").unwrap(), st);
        assert_eq!(s.experiment_count(), 1);
    }

    /// An operation that fails after its session changed (here: the decision's row cannot be
    /// inserted, a failure injected with a temporary trigger) fails its whole batch: inside a
    /// batch the sessions' snapshots are written only at its end, so the batch's rollback is
    /// what puts every session back to the stored state. Outside a batch only that operation is
    /// undone. Either way memory and database agree after a reopen.
    #[test]
    fn a_failed_operation_fails_its_batch_and_memory_follows_the_database() {
        let (_dir, db, mut s) = with_committed_pairs(3);
        let stored = s.status("t").unwrap();
        s.conn
            .execute_batch(
                "CREATE TEMP TRIGGER inject BEFORE INSERT ON decisions WHEN NEW.id = 6
                 BEGIN SELECT RAISE(ABORT, 'injected'); END",
            )
            .unwrap();
        s.begin_batch();
        pair(&mut s, 0.0);
        pair(&mut s, 1.0);
        let e = s.decide("t", None, None).unwrap_err();
        assert!(e.to_string().contains("injected"), "{e}");
        assert!(s.batch_failed());
        assert!(s.commit_batch().is_err());
        // What the batch did in memory is gone with it, except what a flush made durable
        // before a release was drawn (a reward completing a commitment): memory is what a
        // restart reads.
        let after = s.status("t").unwrap();
        assert_ne!(after, stored);
        assert!(after["decisions"].as_u64().unwrap() < 6, "{after}");
        drop(s);
        let mut s = Service::open(&db, ADMIN).unwrap();
        assert_eq!(s.status("t").unwrap(), after);
        s.conn
            .execute_batch(
                "CREATE TEMP TRIGGER inject BEFORE INSERT ON decisions WHEN NEW.id = 6
                 BEGIN SELECT RAISE(ABORT, 'injected'); END",
            )
            .unwrap();
        while s.status("t").unwrap()["pending"] != 0 {
            let id = s.status("t").unwrap()["decisions"].as_u64().unwrap();
            s.reward("t", id, 1.0).unwrap();
        }
        // Outside a batch: only the failing operation is undone.
        while s.status("t").unwrap()["decisions"] != 5 {
            pair(&mut s, 0.0);
        }
        let before = s.status("t").unwrap();
        let e = s.decide("t", None, None).unwrap_err();
        assert!(e.to_string().contains("injected"), "{e}");
        assert!(!s.batch_failed());
        assert_eq!(s.status("t").unwrap(), before);
        s.conn.execute_batch("DROP TRIGGER temp.inject").unwrap();
        s.begin_batch();
        assert_eq!(s.decide("t", None, None).unwrap()["decision_id"], 6);
        s.commit_batch().unwrap();
        let now = s.status("t").unwrap();
        drop(s);
        let s = Service::open(&db, ADMIN).unwrap();
        assert_eq!(s.status("t").unwrap(), now);
    }

    /// Status and a ledger page read a bounded amount whatever the ledger's size: `n` ledger
    /// rows are inserted directly, then SQLite's virtual-machine steps are counted (a progress
    /// callback every 1,000 steps) while the status and two ledger pages are read. A scan of
    /// the experiment's ledger rows (what the status did before its counts were maintained)
    /// is measured the same way, to show the count sees it.
    fn reads_stay_bounded(n: u64) {
        use std::sync::atomic::{AtomicU64, Ordering};
        let dir = shm_dir();
        let db = dir.path().join("s.sqlite");
        let mut s = Service::open(&db, ADMIN).unwrap();
        create(&mut s);
        pair(&mut s, 1.0);
        drop(s);
        let conn = Connection::open(&db).unwrap();
        conn.execute(
            "WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < ?1)
             INSERT INTO ledger (experiment, release, arm, rewards, measure, cost, status, created)
             SELECT 't', 100 + i, i % 2, 1, 'rho', 0.5, 'charged', 'x' FROM k",
            [n as i64],
        )
        .unwrap();
        drop(conn);
        // The rows are not in the audit log: the start-up self-check would refuse them.
        assert!(Service::open(&db, ADMIN).is_err());
        let mut s = Service::open_unchecked(&db, ADMIN).unwrap();
        let steps = std::sync::Arc::new(AtomicU64::new(0));
        let counter = steps.clone();
        s.conn
            .progress_handler(
                1000,
                Some(move || {
                    counter.fetch_add(1, Ordering::Relaxed);
                    false
                }),
            )
            .unwrap();
        let measure = |what: &str, f: &mut dyn FnMut(&Service) -> usize| {
            steps.store(0, Ordering::Relaxed);
            let bytes = f(&s);
            let k = steps.load(Ordering::Relaxed);
            eprintln!("{what}: {k} thousand SQLite steps, {bytes} bytes");
            (k, bytes)
        };
        let (k, bytes) = measure("status", &mut |s| {
            let v = s.status("t").unwrap();
            assert_eq!(v["ledger"]["charges"], n + 1, "{v}");
            v.to_string().len()
        });
        assert!(
            k <= 1 && bytes < 4096,
            "status: {k} thousand steps, {bytes} bytes"
        );
        for after in [0, n as i64 / 2] {
            let (k, bytes) = measure("ledger page", &mut |s| {
                let v = s.ledger_rows("t", after, 100).unwrap();
                assert_eq!(v["rows"].as_array().unwrap().len(), 100);
                v.to_string().len()
            });
            assert!(
                k <= 5 && bytes < 64 * 1024,
                "ledger page after {after}: {k} thousand steps, {bytes} bytes"
            );
        }
        let (scan, _) = measure("scan", &mut |s| {
            store::ledger_totals(&s.conn, "t").unwrap().charges as usize
        });
        assert!(scan >= n / 1000, "the step count must see a scan: {scan}");
    }

    #[test]
    fn status_and_ledger_pages_read_a_bounded_amount() {
        reads_stay_bounded(100_000);
    }

    /// The full form (1M ledger rows, 3.3 s in the test profile):
    /// `cargo test -p dpbandits-serve --lib -- --ignored status_and_ledger_pages_at_1m_rows`.
    #[test]
    #[ignore = "1M ledger rows: run with --ignored"]
    fn status_and_ledger_pages_at_1m_rows() {
        reads_stay_bounded(1_000_000);
    }

    /// The service's state machine gives the decisions of a core `Session` built with the same
    /// kind, parameters and seed and fed the same rewards, across a restart of the service in
    /// the middle (an episodic kind with several decisions of one commitment outstanding, and a
    /// per-step kind).
    #[test]
    fn the_service_decides_as_the_core_session() {
        use dpbandits::session::{Problem, Session};
        for (kind, table) in [
            (
                "adac_ucb",
                r#"rho = 0.5
noise = "simulation""#,
            ),
            (
                "dp_ts",
                r#"epsilon = 1.0
noise = "simulation""#,
            ),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let db = dir.path().join("s.sqlite");
            let mut s = Service::open(&db, ADMIN).unwrap();
            let mut policy: toml::Table = table.parse().unwrap();
            policy.insert("kind".into(), toml::Value::String(kind.into()));
            s.create(req(json!({"name": "t", "arms": 3, "seed": 17,
                                "policy": toml::to_string(&policy).unwrap()})))
                .unwrap();
            // The same table the service builds: `boundary = "reject"` where the kind takes it,
            // `noise` only where it takes it.
            let entry = dpbandits::registry::policy(kind).unwrap();
            let mut t: toml::Table = table.parse().unwrap();
            if entry.takes_in("boundary", &t) {
                t.insert("boundary".into(), toml::Value::String("reject".into()));
            }
            if !entry.takes_in("noise", &t) {
                t.remove("noise");
            }
            let mut core = Session::new(kind, t, &Problem::Finite { arms: 3 }, 17).unwrap();
            let reward =
                |round: u64, arm: usize| f64::from(u8::from((round * 7 + arm as u64 * 3) % 5 < 2));
            let mut round = 0u64;
            while round < 400 {
                if round == 200 {
                    drop(s);
                    s = Service::open(&db, ADMIN).unwrap();
                }
                // Issue up to 3 decisions before their rewards (within the open commitment).
                let mut ids = vec![];
                for _ in 0..3 {
                    match s.decide("t", None, None) {
                        Ok(d) => {
                            let arm = d["arm"].as_u64().unwrap() as usize;
                            let c = core.decide().unwrap().arm().unwrap();
                            assert_eq!(arm, c, "{kind}: decision {}", core.issued());
                            ids.push((d["decision_id"].as_u64().unwrap(), arm));
                        }
                        Err(ServiceError::Conflict { .. }) => {
                            // the core session refuses the same decision
                            assert!(core.decide().is_err(), "{kind}: round {round}");
                            break;
                        }
                        Err(e) => panic!("{kind}: {e:?}"),
                    }
                }
                for (id, arm) in ids {
                    let r = reward(round, arm);
                    assert_eq!(s.reward("t", id, r).unwrap()["status"], "applied");
                    core.observe(arm, r).unwrap();
                    round += 1;
                }
            }
        }
    }

    /// A schema-1 database written by the service before it held a core session (generated by
    /// that build with `tests/fixtures/schema1-gen.py`, dumped as SQL) is migrated on open: the
    /// schema becomes 2, the counters and outstanding decisions stand where they stood, the audit
    /// chain still verifies with one `migrate` entry per experiment, and the seeded experiments
    /// continue exactly as a core session fed the same history (an episodic kind with a decision
    /// outstanding inside its commitment, a per-step kind); the deployment-grade one continues.
    #[test]
    fn a_schema_1_database_is_migrated_and_continues() {
        use dpbandits::session::{Problem, Session};
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("s1.sqlite");
        rusqlite::Connection::open(&db)
            .unwrap()
            .execute_batch(include_str!("../tests/fixtures/schema1.sql"))
            .unwrap();
        let history: Value =
            serde_json::from_str(include_str!("../tests/fixtures/schema1.json")).unwrap();
        let admin = "fixture-admin-token-0123456789";
        let mut s = Service::open(&db, admin).unwrap();
        assert_eq!(
            store::schema_version(&s.conn).unwrap(),
            store::SCHEMA_VERSION
        );
        let reward = |round: u64, arm: u64| f64::from(u8::from((round * 7 + arm * 3) % 5 < 2));
        for (name, h) in history.as_object().unwrap() {
            let rewarded = h["rewarded"].as_array().unwrap();
            let outstanding = h["outstanding"].as_array().unwrap();
            let st = s.status(name).unwrap();
            assert_eq!(st["pending"], outstanding.len() as u64, "{name}: {st}");
            // The seeded kinds: a core session fed the stored history decides as the migrated one.
            let mut core = (name != "deployed").then(|| {
                let mut t = toml::Table::new();
                for (k, v) in h["policy"].as_object().unwrap() {
                    let v = match v {
                        Value::String(x) => toml::Value::String(x.clone()),
                        Value::Number(x) => toml::Value::Float(x.as_f64().unwrap()),
                        other => panic!("{other}"),
                    };
                    t.insert(k.clone(), v);
                }
                let kind = t.remove("kind").unwrap();
                let kind = kind.as_str().unwrap().to_string();
                // The table the service builds (as in the test above).
                let entry = dpbandits::registry::policy(&kind).unwrap();
                if entry.takes_in("boundary", &t) {
                    t.insert("boundary".into(), toml::Value::String("reject".into()));
                }
                if !entry.takes_in("noise", &t) {
                    t.remove("noise");
                }
                let mut c = Session::new(&kind, t, &Problem::Finite { arms: 3 }, 17).unwrap();
                for e in rewarded {
                    let arm = e[1].as_u64().unwrap() as usize;
                    assert_eq!(c.decide().unwrap().arm().unwrap(), arm, "{name}");
                    c.observe(arm, e[2].as_f64().unwrap()).unwrap();
                }
                for e in outstanding {
                    assert_eq!(
                        c.decide().unwrap().arm().unwrap(),
                        e[1].as_u64().unwrap() as usize,
                        "{name}"
                    );
                }
                c
            });
            let mut round = rewarded.len() as u64;
            let mut open: Vec<(u64, u64)> = outstanding
                .iter()
                .map(|e| (e[0].as_u64().unwrap(), e[1].as_u64().unwrap()))
                .collect();
            while round < 120 {
                for (id, arm) in open.drain(..) {
                    let r = reward(round, arm);
                    assert_eq!(
                        s.reward(name, id, r).unwrap()["status"],
                        "applied",
                        "{name}"
                    );
                    if let Some(c) = core.as_mut() {
                        c.observe(arm as usize, r).unwrap();
                    }
                    round += 1;
                }
                let d = s.decide(name, None, None).unwrap();
                let arm = d["arm"].as_u64().unwrap();
                if let Some(c) = core.as_mut() {
                    assert_eq!(
                        c.decide().unwrap().arm().unwrap() as u64,
                        arm,
                        "{name} round {round}"
                    );
                }
                open.push((d["decision_id"].as_u64().unwrap(), arm));
            }
        }
        drop(s);
        let chain = crate::verify::verify_default(&db).unwrap();
        assert!(chain.entries > 100, "{chain:?}");
        let migrations: i64 = rusqlite::Connection::open(&db)
            .unwrap()
            .query_row(
                "SELECT COUNT(*) FROM audit WHERE body LIKE '%\"action\":\"migrate\"%'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(migrations, 3);
        // Opening again does not migrate again.
        drop(Service::open(&db, admin).unwrap());
        assert_eq!(
            crate::verify::verify_default(&db).unwrap().entries,
            chain.entries
        );
    }

    /// The core session the service builds from a policy table (`boundary = "reject"` where
    /// the kind takes it, `noise` only where it takes it).
    fn core_session(kind: &str, table: &str, problem: &Problem, seed: u64) -> Session {
        let entry = dpbandits::registry::policy(kind).unwrap();
        let mut t: toml::Table = table.parse().unwrap();
        if entry.takes_in("boundary", &t) {
            t.insert("boundary".into(), toml::Value::String("reject".into()));
        }
        if !entry.takes_in("noise", &t) {
            t.remove("noise");
        }
        Session::new(kind, t, problem, seed).unwrap()
    }

    fn policy_json(kind: &str, table: &str) -> Value {
        let mut t: toml::Table = table.parse().unwrap();
        t.insert("kind".into(), toml::Value::String(kind.into()));
        json!(toml::to_string(&t).unwrap())
    }

    /// A deterministic reward in {0, 1} with mean about `p` (a hash of the round and the arm).
    fn coin(round: u64, arm: usize, p: f64) -> f64 {
        let mut x = round
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .wrapping_add((arm as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9));
        x ^= x >> 31;
        x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^= x >> 29;
        f64::from(u8::from(((x >> 11) as f64 / (1u64 << 53) as f64) < p))
    }

    fn shm_dir() -> tempfile::TempDir {
        tempfile::Builder::new()
            .tempdir_in("/dev/shm")
            .unwrap_or_else(|_| tempfile::tempdir().unwrap())
    }

    /// Linear (arm vectors at creation, up to 3 decisions of a commitment outstanding) and
    /// contextual (each decision carries its action set; stored with the decision and its
    /// propensity) experiments decide as core sessions of the same kind, parameters and seed fed
    /// the same rewards, across a restart; a malformed action set or none is refused naming
    /// `actions` and changes nothing.
    #[test]
    fn linear_and_contextual_experiments_decide_as_the_core_session() {
        let dir = shm_dir();
        let db = dir.path().join("s.sqlite");
        let mut s = Service::open(&db, ADMIN).unwrap();
        // Linear.
        let vecs = vec![vec![1.0, 0.0], vec![0.0, 1.0], vec![0.7, 0.7]];
        let table = "rho = 1.0\ndelta = 0.001\nnoise = \"simulation\"";
        s.create(req(json!({"name": "lin", "arms": vecs, "seed": 5,
                            "policy": policy_json("adac_gope", table)})))
            .unwrap();
        let mut core = core_session(
            "adac_gope",
            table,
            &Problem::Linear { arms: vecs.clone() },
            5,
        );
        let means = [0.8, 0.3, 0.6];
        let mut round = 0u64;
        while round < 600 {
            if round == 300 {
                drop(s);
                s = Service::open(&db, ADMIN).unwrap();
            }
            let mut ids = vec![];
            for _ in 0..3 {
                match s.decide("lin", None, None) {
                    Ok(d) => {
                        let arm = d["arm"].as_u64().unwrap() as usize;
                        assert_eq!(
                            arm,
                            core.decide().unwrap().arm().unwrap(),
                            "lin round {round}"
                        );
                        ids.push((d["decision_id"].as_u64().unwrap(), arm));
                    }
                    Err(ServiceError::Conflict { .. }) => break,
                    Err(e) => panic!("{e:?}"),
                }
            }
            for (id, arm) in ids {
                let r = coin(round, arm, means[arm]);
                assert_eq!(s.reward("lin", id, r).unwrap()["status"], "applied");
                core.observe(arm, r).unwrap();
                round += 1;
            }
        }
        assert_eq!(s.status("lin").unwrap()["problem"]["setting"], "linear");
        // Contextual.
        let table = "rho = 1.0\nnoise = \"simulation\"";
        s.create(req(
            json!({"name": "ctx", "dim": 3, "horizon": 400, "seed": 9,
                            "policy": policy_json("adac_oful", table)}),
        ))
        .unwrap();
        let mut core = core_session(
            "adac_oful",
            table,
            &Problem::Contextual {
                dim: 3,
                horizon: 400,
            },
            9,
        );
        let theta = [0.5, -0.2, 0.4];
        for round in 0..200u64 {
            if round == 100 {
                drop(s);
                s = Service::open(&db, ADMIN).unwrap();
            }
            let set: Vec<Vec<f64>> = (0..4)
                .map(|i| {
                    (0..3)
                        .map(|j| coin(round * 31 + j, i, 0.5) - 0.3 * j as f64)
                        .collect()
                })
                .collect();
            let before = s.status("ctx").unwrap();
            for bad in [
                None,
                Some(json!([[1.0, 2.0]])),
                Some(json!([[1.0, "x", 0.0]])),
                Some(json!([])),
            ] {
                match s.decide("ctx", None, bad.as_ref()) {
                    Err(ServiceError::Invalid { field, .. }) => assert_eq!(field, "actions"),
                    other => panic!("{other:?}"),
                }
            }
            assert_eq!(s.status("ctx").unwrap(), before);
            let d = s.decide("ctx", None, Some(&json!(set))).unwrap();
            assert_eq!(d["propensity"], 1.0);
            let flat: Vec<f64> = set.concat();
            let c = core
                .decide_with(&ActionSet {
                    d: 3,
                    k: 4,
                    features: &flat,
                })
                .unwrap()
                .arm()
                .unwrap();
            let arm = d["arm"].as_u64().unwrap() as usize;
            assert_eq!(arm, c, "ctx round {round}");
            // One round at a time: the next decision waits for this reward.
            assert!(matches!(
                s.decide("ctx", None, Some(&json!(set))),
                Err(ServiceError::Conflict { .. })
            ));
            let mean: f64 = set[arm].iter().zip(theta).map(|(a, t)| a * t).sum();
            let r = mean.clamp(0.0, 1.0);
            assert_eq!(
                s.reward("ctx", d["decision_id"].as_u64().unwrap(), r)
                    .unwrap()["status"],
                "applied"
            );
            core.observe(arm, r).unwrap();
        }
        let (rows, next) = s.export("ctx", 0, 1000).unwrap();
        assert_eq!((rows.len(), next), (200, None));
        assert_eq!(rows[7].propensity, Some(1.0));
        assert_eq!(
            rows[7].actions.as_ref().unwrap().as_array().unwrap().len(),
            4
        );
        assert!(rows.iter().all(|r| r.reward.is_some()));
        drop(s);
        assert!(crate::verify::verify_default(&db).unwrap().entries > 800);
    }

    /// A best-arm identification experiment decides as the core session until its stopping rule
    /// fires; the stop is recorded once (one `stop` audit entry, the status), and every later
    /// decision request is refused as stopped with the same recommendation, also after a restart.
    #[test]
    fn a_bai_experiment_stops_once_and_says_so() {
        let dir = shm_dir();
        let db = dir.path().join("s.sqlite");
        let mut s = Service::open(&db, ADMIN).unwrap();
        let table = "epsilon = 10.0";
        s.create(req(json!({"name": "bai", "arms": 3, "delta": 0.1, "seed": 3,
                            "policy": policy_json("dp_tt", &format!("{table}\nnoise = \"simulation\""))})))
            .unwrap();
        let mut core = core_session(
            "dp_tt",
            table,
            &Problem::Bai {
                arms: 3,
                delta: 0.1,
            },
            3,
        );
        let means = [0.9, 0.2, 0.1];
        let mut round = 0u64;
        let rec = loop {
            assert!(round < 50_000, "no stop within 50,000 rounds");
            let mut ids = vec![];
            let mut stopped = None;
            for _ in 0..4 {
                match s.decide("bai", None, None) {
                    Ok(d) => {
                        let arm = d["arm"].as_u64().unwrap() as usize;
                        assert_eq!(core.decide().unwrap().arm(), Some(arm), "bai round {round}");
                        ids.push((d["decision_id"].as_u64().unwrap(), arm));
                    }
                    Err(ServiceError::Conflict { .. }) => break,
                    Err(ServiceError::Stopped { recommendation }) => {
                        assert_eq!(core.decide().unwrap(), Decision::Stop { recommendation });
                        stopped = Some(recommendation);
                        break;
                    }
                    Err(e) => panic!("{e:?}"),
                }
            }
            if let Some(r) = stopped {
                assert!(ids.is_empty());
                break r;
            }
            for (id, arm) in ids {
                let r = coin(round, arm, means[arm]);
                assert_eq!(s.reward("bai", id, r).unwrap()["status"], "applied");
                core.observe(arm, r).unwrap();
                round += 1;
            }
        };
        assert_eq!(rec, 0);
        let st = s.status("bai").unwrap();
        assert_eq!(st["stopped"]["recommendation"], 0, "{st}");
        drop(s);
        let mut s = Service::open(&db, ADMIN).unwrap();
        for _ in 0..3 {
            assert_eq!(
                s.decide("bai", None, None),
                Err(ServiceError::Stopped { recommendation: 0 })
            );
        }
        assert_eq!(
            s.list().unwrap()["experiments"][0]["stopped"]["recommendation"],
            0
        );
        let stops = s.audit_export(Some("bai"), 0, 10_000).unwrap()["entries"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["event"] == "stop")
            .count();
        assert_eq!(stops, 1);
    }

    /// Creation is idempotent per `request_id` (the same body: 200-style repeat with a fresh
    /// token, the old one revoked; another body: refused naming `request_id`); a rotated token
    /// replaces the old one at once; the problem's keys are checked against the kind's setting.
    #[test]
    fn create_is_idempotent_and_tokens_rotate() {
        let dir = shm_dir();
        let db = dir.path().join("s.sqlite");
        let mut s = Service::open(&db, ADMIN).unwrap();
        let body = json!({"name": "t", "arms": 2, "request_id": "create-1",
                          "policy": {"kind": "adac_ucb", "rho": 0.5}});
        let first = s.create(req(body.clone())).unwrap();
        let t1 = first["client_token"].as_str().unwrap().to_string();
        assert_eq!(s.authenticate(Some(&t1), Some("t")), Ok(Caller::Client));
        let again = s.create(req(body.clone())).unwrap();
        assert_eq!(again["repeat"], true);
        assert_eq!(again["guarantee"], first["guarantee"]);
        let t2 = again["client_token"].as_str().unwrap().to_string();
        assert_ne!(t1, t2);
        assert!(s.authenticate(Some(&t1), Some("t")).is_err());
        assert_eq!(s.authenticate(Some(&t2), Some("t")), Ok(Caller::Client));
        assert_eq!(s.experiment_count(), 1);
        let mut other = body.clone();
        other["arms"] = json!(3);
        match s.create(req(other)) {
            Err(ServiceError::Invalid { field, .. }) => assert_eq!(field, "request_id"),
            r => panic!("{r:?}"),
        }
        let t3 = s.rotate_token("t", "test").unwrap()["client_token"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(s.authenticate(Some(&t2), Some("t")).is_err());
        drop(s);
        let s = Service::open(&db, ADMIN).unwrap();
        assert_eq!(s.authenticate(Some(&t3), Some("t")), Ok(Caller::Client));
        let mut s = s;
        for (body, field) in [
            (
                json!({"name": "u", "arms": 2, "dim": 3, "policy": {"kind": "adac_ucb", "rho": 0.5}}),
                "dim",
            ),
            (
                json!({"name": "u", "arms": 1, "policy": {"kind": "adac_ucb", "rho": 0.5}}),
                "arms",
            ),
            (
                json!({"name": "u", "dim": 3, "policy": {"kind": "adac_oful", "rho": 0.5, "noise": "simulation"}}),
                "horizon",
            ),
            (
                json!({"name": "u", "arms": 3, "delta": 1.5, "policy": {"kind": "dp_tt", "epsilon": 1.0}}),
                "delta",
            ),
            (
                json!({"name": "u", "arms": [[1.0], [1.0, 2.0]], "policy": {"kind": "gope", "delta": 0.01}, "allow_non_private": true}),
                "arms",
            ),
        ] {
            match s.create(req(body.clone())) {
                Err(ServiceError::Invalid { field: f, message }) => {
                    assert!(f.starts_with(field), "{body}: {f}: {message}")
                }
                r => panic!("{body}: {r:?}"),
            }
        }
        assert_eq!(s.experiment_count(), 1);
    }

    /// Delayed outcomes: with `reward_deadline` a pending decision is abandoned (its reward
    /// recorded as `dropout_reward`) once it is older than the deadline, so enrolment never
    /// waits longer than the deadline at a commitment boundary; a client can abandon a decision
    /// itself; a later report for it is not applied and says why. The decisions equal a core
    /// session fed the dropout reward for the abandoned rounds, every abandonment is in the
    /// decisions table and the audit log, the ledger charges every completed commitment, and the
    /// guarantee is the one stated at creation.
    #[test]
    fn closing_publishes_the_report_once() {
        let dir = shm_dir();
        let db = dir.path().join("s.sqlite");
        let table = "rho = 1\nnoise = \"simulation\"";
        let mut core = core_session("adac_ucb", table, &Problem::Finite { arms: 3 }, 4);
        {
            let mut s = Service::open(&db, ADMIN).unwrap();
            s.create(req(json!({"name": "t", "arms": 3, "seed": 4,
                                "policy": policy_json("adac_ucb", table)})))
                .unwrap();
            for round in 0..300u64 {
                let d = s.decide("t", None, None).unwrap();
                let arm = d["arm"].as_u64().unwrap() as usize;
                assert_eq!(core.decide().unwrap().arm(), Some(arm));
                let r = coin(round, arm, [0.2, 0.5, 0.7][arm]);
                s.reward("t", d["decision_id"].as_u64().unwrap(), r)
                    .unwrap();
                core.observe(arm, r).unwrap();
                if round == 150 {
                    // One pending decision: closing is refused, naming `pending`.
                    let d = s.decide("t", None, None).unwrap();
                    let err = s.close("t", None).unwrap_err();
                    assert!(
                        matches!(&err, ServiceError::Invalid { field, .. } if field == "pending"),
                        "{err:?}"
                    );
                    let arm = d["arm"].as_u64().unwrap() as usize;
                    assert_eq!(core.decide().unwrap().arm(), Some(arm));
                    s.reward("t", d["decision_id"].as_u64().unwrap(), 0.5)
                        .unwrap();
                    core.observe(arm, 0.5).unwrap();
                }
            }
            assert!(matches!(
                s.close("t", Some(1.5)).unwrap_err(),
                ServiceError::Invalid { .. }
            ));
            let r = s.close("t", Some(0.9)).unwrap();
            // The estimates are the core session's report from the same released statistics.
            let expected = core.report(0.9).unwrap();
            assert_eq!(r["estimates"], json!(expected.estimates));
            let est = r["estimates"].as_array().unwrap();
            assert_eq!(est.len(), 3);
            for e in est {
                let (lo, x, hi) = (
                    e["low"].as_f64().unwrap(),
                    e["estimate"].as_f64().unwrap(),
                    e["high"].as_f64().unwrap(),
                );
                assert!(lo < x && x < hi);
            }
            let pulls: Vec<u64> = serde_json::from_value(r["pulls"].clone()).unwrap();
            assert_eq!(pulls.iter().sum::<u64>(), 301);
            let most = (0..3)
                .max_by_key(|&a| (pulls[a], std::cmp::Reverse(a)))
                .unwrap();
            assert_eq!(r["recommended_arm"], json!(most));
            // Closed: no decisions or rewards; closing again returns the same report.
            assert!(matches!(
                s.decide("t", None, None).unwrap_err(),
                ServiceError::Closed { .. }
            ));
            assert!(matches!(
                s.reward("t", 1, 1.0).unwrap_err(),
                ServiceError::Closed { .. }
            ));
            let again = s.close("t", None).unwrap();
            assert_eq!(again["repeat"], json!(true));
            assert_eq!(again["audit_hash"], r["audit_hash"]);
            assert_eq!(s.report("t").unwrap()["estimates"], r["estimates"]);
            let html = crate::report_html::render(&r);
            assert!(
                html.contains("Closing report") && html.contains(r["audit_hash"].as_str().unwrap())
            );
        }
        // After a restart: still closed, the same report (read back from the audit log).
        let s = Service::open(&db, ADMIN).unwrap();
        let back = s.report("t").unwrap();
        assert_eq!(
            back["estimates"],
            json!(core.report(0.9).unwrap().estimates)
        );
        assert_eq!(
            s.status("t").unwrap()["closed"]["audit_seq"],
            back["audit_seq"]
        );
        let log = s.audit_export(Some("t"), 0, 100_000).unwrap();
        let closes = log["entries"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["event"] == "close")
            .count();
        assert_eq!(closes, 1);
    }

    #[test]
    fn delayed_outcomes_are_abandoned_at_the_deadline() {
        let dir = shm_dir();
        let db = dir.path().join("s.sqlite");
        let mut s = Service::open(&db, ADMIN).unwrap();
        let table = "rho = 0.5\nnoise = \"simulation\"";
        let created = s
            .create(req(
                json!({"name": "t", "arms": 2, "seed": 4, "dropout_reward": 0.0,
                               "reward_deadline": 0.25, "policy": policy_json("adac_ucb", table)}),
            ))
            .unwrap();
        let mut core = core_session("adac_ucb", table, &Problem::Finite { arms: 2 }, 4);
        let mut abandoned = 0u64;
        let mut waits = vec![];
        let mut round = 0u64;
        while round < 60 {
            // Issue up to 8 decisions; reward all but the last of each batch (which never comes).
            let mut ids = vec![];
            let started = std::time::Instant::now();
            loop {
                match s.decide("t", None, None) {
                    Ok(d) => {
                        let arm = d["arm"].as_u64().unwrap() as usize;
                        ids.push((d["decision_id"].as_u64().unwrap(), arm));
                        if ids.len() == 8 {
                            break;
                        }
                    }
                    Err(ServiceError::Conflict { .. }) if ids.is_empty() => {
                        assert!(started.elapsed().as_secs() < 5, "enrolment stalled 5 s");
                        std::thread::sleep(std::time::Duration::from_millis(20));
                    }
                    Err(ServiceError::Conflict { .. }) => break,
                    Err(e) => panic!("{e:?}"),
                }
            }
            waits.push(started.elapsed().as_secs_f64());
            let last = ids.len() - 1;
            for (i, (id, arm)) in ids.into_iter().enumerate() {
                // The core session sees the same rounds: the reward, or the dropout reward.
                assert_eq!(core.decide().unwrap().arm(), Some(arm), "round {round}");
                if i == last {
                    if round.is_multiple_of(3) {
                        // The client abandons it itself.
                        assert_eq!(s.abandon("t", id).unwrap()["status"], "abandoned");
                        let again = s.reward("t", id, 1.0).unwrap();
                        assert_eq!(again["status"], "duplicate");
                        assert_eq!(again["abandoned"], true);
                    }
                    abandoned += 1;
                    core.observe(arm, 0.0).unwrap();
                } else {
                    let r = coin(round, arm, 0.5);
                    assert_eq!(s.reward("t", id, r).unwrap()["status"], "applied");
                    if i == 0 {
                        let other = s.reward("t", id, 1.0 - r).unwrap();
                        assert_eq!(
                            (other["status"].clone(), other["differs"].clone()),
                            (json!("duplicate"), json!(true))
                        );
                    }
                    core.observe(arm, r).unwrap();
                }
                round += 1;
            }
        }
        // No decision waited much longer than the deadline (0.25 s; 0.2 s of slack for a loaded
        // machine's sleeps).
        let worst = waits.iter().copied().fold(0.0, f64::max);
        assert!(worst < 0.45, "waited {worst} s");
        // Settle the last batch's abandonment.
        std::thread::sleep(std::time::Duration::from_millis(300));
        s.decide("t", None, None).unwrap();
        let (rows, _) = s.export("t", 0, 10_000).unwrap();
        let n_abandoned = rows
            .iter()
            .filter(|r| r.outcome.as_deref() == Some("abandoned"))
            .count() as u64;
        assert_eq!(n_abandoned, abandoned);
        assert!(
            rows.iter()
                .filter(|r| r.outcome.as_deref() == Some("abandoned"))
                .all(|r| r.reward == Some(0.0))
        );
        let audit = s.audit_export(Some("t"), 0, 10_000).unwrap();
        let entries = audit["entries"].as_array().unwrap();
        assert_eq!(
            entries.iter().filter(|e| e["event"] == "abandon").count() as u64,
            abandoned
        );
        let st = s.status("t").unwrap();
        assert_eq!(st["guarantee"], created["guarantee"]);
        assert_eq!(st["ledger"]["charges"], st["ledger"]["releases"], "{st}");
        // Refusals: no dropout reward, a deadline without one, a dropout the boundary refuses.
        s.create(req(
            json!({"name": "u", "arms": 2, "policy": {"kind": "adac_ucb", "rho": 0.5}}),
        ))
        .unwrap();
        let id = s.decide("u", None, None).unwrap()["decision_id"]
            .as_u64()
            .unwrap();
        match s.abandon("u", id) {
            Err(ServiceError::Invalid { field, .. }) => assert_eq!(field, "dropout_reward"),
            r => panic!("{r:?}"),
        }
        for (body, field) in [
            (
                json!({"name": "v", "arms": 2, "reward_deadline": 5.0, "policy": {"kind": "adac_ucb", "rho": 0.5}}),
                "reward_deadline",
            ),
            (
                json!({"name": "v", "arms": 2, "reward_deadline": -1.0, "dropout_reward": 0.0, "policy": {"kind": "adac_ucb", "rho": 0.5}}),
                "reward_deadline",
            ),
            (
                json!({"name": "v", "arms": 2, "dropout_reward": 2.0, "policy": {"kind": "adac_ucb", "rho": 0.5}}),
                "dropout_reward",
            ),
        ] {
            match s.create(req(body.clone())) {
                Err(ServiceError::Invalid { field: f, .. }) => assert_eq!(f, field, "{body}"),
                r => panic!("{body}: {r:?}"),
            }
        }
        drop(s);
        assert!(crate::verify::verify_default(&db).is_ok());
    }

    /// The audit chain detects an edited entry (the triggers are dropped first, as an attacker
    /// with file access could), and names it.
    #[test]
    fn an_edited_audit_entry_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("s.sqlite");
        let mut s = Service::open(&db, ADMIN).unwrap();
        create(&mut s);
        pair(&mut s, 1.0);
        pair(&mut s, 1.0);
        assert!(
            s.conn
                .execute("UPDATE audit SET body = '{}' WHERE seq = 2", [])
                .unwrap_err()
                .to_string()
                .contains("append-only")
        );
        assert!(
            s.conn
                .execute("DELETE FROM audit WHERE seq = 2", [])
                .is_err()
        );
        s.conn
            .execute_batch("DROP TRIGGER audit_no_update; UPDATE audit SET body = '{\"arm\":1}' WHERE seq = 3;")
            .unwrap();
        drop(s);
        let e = crate::verify::verify_default(&db).unwrap_err().to_string();
        assert!(e.starts_with("audit entry seq = 3"), "{e}");
    }

    /// Delayed outcomes, strategy (b): a `while_pending = "pipeline"` experiment serves
    /// decisions while earlier commitments wait for their rewards (a `wait` experiment answers
    /// 409 at the first boundary), applies each reward to its own decision's commitment, decides
    /// as a pipelined core session fed the same rewards in the same order, and continues the same
    /// after a restart; every kind pipelines (a per-step kind too), and a mode that is neither
    /// `wait` nor `pipeline` is refused naming `while_pending`.
    #[test]
    fn a_pipelined_experiment_serves_while_rewards_are_pending() {
        let dir = shm_dir();
        let db = dir.path().join("s.sqlite");
        let table = "rho = 1\nnoise = \"simulation\"";
        let mut core = core_session("adac_ucb", table, &Problem::Finite { arms: 3 }, 4);
        core.set_while_pending(dpbandits::session::WhilePending::Pipeline)
            .unwrap();
        let mut s = Service::open(&db, ADMIN).unwrap();
        for (name, mode) in [("p", "pipeline"), ("w", "wait")] {
            s.create(req(
                json!({"name": name, "arms": 3, "seed": 4, "while_pending": mode,
                                "policy": policy_json("adac_ucb", table)}),
            ))
            .unwrap();
        }
        // Wait: the second decision is at a boundary (the first commitment is one round).
        s.decide("w", None, None).unwrap();
        assert!(matches!(
            s.decide("w", None, None),
            Err(ServiceError::Conflict { .. })
        ));
        // Pipeline: 40 decisions with no reward in.
        let mut ids = vec![];
        for _ in 0..40 {
            let d = s.decide("p", None, None).unwrap();
            let arm = d["arm"].as_u64().unwrap() as usize;
            assert_eq!(core.decide().unwrap().arm(), Some(arm));
            ids.push((d["decision_id"].as_u64().unwrap(), arm));
        }
        assert_eq!(s.status("p").unwrap()["pending"], json!(40));
        // Rewards in reverse order, each to its own decision; halfway, a restart with rewards
        // held in commitments still in flight (the start-up self-check must accept it).
        for (k, &(id, arm)) in ids.iter().rev().enumerate() {
            if k == ids.len() / 2 {
                drop(s);
                s = Service::open(&db, ADMIN).unwrap();
            }
            let r = coin(id, arm, [0.2, 0.5, 0.7][arm]);
            s.reward("p", id, r).unwrap();
            core.observe_decision(id - 1, r).unwrap();
        }
        assert_eq!(s.status("p").unwrap()["pending"], json!(0));
        drop(s);
        let mut s = Service::open(&db, ADMIN).unwrap();
        for _ in 0..20 {
            let d = s.decide("p", None, None).unwrap();
            assert_eq!(
                core.decide().unwrap().arm(),
                Some(d["arm"].as_u64().unwrap() as usize)
            );
        }
        // Every kind pipelines (a per-step kind by the rewards received); a mode that is not
        // one of the two is refused naming the field.
        s.create(req(
            json!({"name": "q", "arms": 3, "while_pending": "pipeline",
                                  "policy": {"kind": "dp_ts", "epsilon": 1.0}}),
        ))
        .unwrap();
        match s.create(req(
            json!({"name": "q2", "arms": 3, "while_pending": "later",
                                  "policy": {"kind": "dp_ts", "epsilon": 1.0}}),
        )) {
            Err(ServiceError::Invalid { field, .. }) => assert_eq!(field, "while_pending"),
            r => panic!("{r:?}"),
        }
    }
}
