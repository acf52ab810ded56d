//! The service's state machine, independent of HTTP: experiments, decisions, rewards, the ledger.
//!
//! Each experiment is one core [`Session`] (`dpbandits::session`): decisions come from
//! [`Session::decide`], rewards go through [`Session::observe`] (which validates them at the
//! privacy boundary and checks the protocol), and the stored state is [`Session::snapshot`].
//! Every operation runs under one lock (the [`Service`] is wrapped in a `Mutex` by the server)
//! and every state change is one SQLite transaction ([`crate::store`] holds every statement),
//! committed before the operation returns, so before any response leaves (see
//! `docs/service.md`). Errors are [`ServiceError`]s; `api.rs` maps them to HTTP statuses.

use crate::store::{self, Counters};
use anyhow::{Context, bail};
use dpbandits::config::Setting;
use dpbandits::privacy::{Budget, PrivacyGuarantee};
use dpbandits::registry;
use dpbandits::session::{Decision, Next, Problem, Session};
use dpbandits::snapshot::Snapshot;
use rusqlite::Connection;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;

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
            ServiceError::Exists { name } => {
                write!(f, "name = {name:?}: an experiment of that name exists")
            }
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

/// The request that creates an experiment (the HTTP layer deserializes it).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateRequest {
    /// The experiment's name: 1 to 64 characters from `[A-Za-z0-9_.-]`.
    pub name: String,
    /// Number of arms (treatments).
    pub arms: usize,
    /// The policy: a `[[policy]]` table of an experiment file, as TOML text or a JSON object.
    pub policy: Value,
    /// Allow a non-private kind (default false).
    #[serde(default)]
    pub allow_non_private: bool,
    /// Seed of a simulation-grade policy's generators (default: from the operating system).
    #[serde(default)]
    pub seed: Option<u64>,
}

impl CreateRequest {
    /// The body's keys, in the order error messages list them.
    pub const FIELDS: &'static [&'static str] =
        &["name", "arms", "policy", "allow_non_private", "seed"];
}

/// One live experiment: its core session and what the service keeps beside it.
struct Experiment {
    session: Session,
    arms: usize,
    token_hash: String,
    guarantee: PrivacyGuarantee,
    /// Completed commitments (releases): the ledger's release numbers.
    releases: u64,
}

impl Experiment {
    /// The service's counters as the session has them (with the service's release count).
    fn counters(&self) -> Counters {
        counters_of(&self.session, self.releases)
    }
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
    admin_hash: String,
    experiments: HashMap<String, Experiment>,
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
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(ServiceError::invalid(
            "name",
            format!("name = {name:?}: expected 1 to 64 characters from [A-Za-z0-9_.-]"),
        ))
    }
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
    arms: usize,
    seed: u64,
    allow_non_private: bool,
) -> ServiceResult<Session> {
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
    // The next issue opens the other settings (their problems need more than `arms`).
    if entry.setting() != Setting::FiniteArmed {
        return Err(ServiceError::invalid(
            "policy.kind",
            format!(
                "policy.kind = {kind:?}: a {} kind; the service runs finite-armed kinds only",
                entry.setting()
            ),
        ));
    }
    let problem = Problem::Finite { arms };
    let bad = |e: dpbandits::Error| ServiceError::invalid("policy", format!("policy: {e}"));
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
    Ok(session)
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
        let mut conn = store::open(db)?;
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
        for i in store::open_intents(&tx)? {
            store::set_ledger_status(&tx, i.id, "lost")?;
            store::audit(
                &tx,
                &i.experiment,
                "budget-charge",
                &json!({"ledger_id": i.id, "release": i.release, "arm": i.arm, "cost": i.cost,
                        "status": "lost", "why": "a release intent without its state change (crash): charged, a redo is charged again"}),
            )?;
        }
        tx.commit()?;
        let mut experiments = HashMap::new();
        for row in store::load_experiments(&conn)? {
            let name = row.name;
            let session = Session::restore(&row.snapshot)
                .with_context(|| format!("experiment {name:?}: its snapshot does not restore"))?;
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
            experiments.insert(
                name,
                Experiment {
                    session,
                    arms: row.arms,
                    token_hash: row.token_hash,
                    guarantee,
                    releases: row.counters.releases,
                },
            );
        }
        Ok(Service {
            conn,
            admin_hash: store::sha256_hex(admin_token.as_bytes()),
            experiments,
        })
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
        let unauthorized = || ServiceError::Unauthorized { admin: false };
        let token = token.ok_or_else(unauthorized)?;
        let h = store::sha256_hex(token.as_bytes());
        if same(&h, &self.admin_hash) {
            return Ok(Caller::Admin);
        }
        if let Some(e) = experiment.and_then(|n| self.experiments.get(n))
            && same(&h, &e.token_hash)
        {
            return Ok(Caller::Client);
        }
        Err(unauthorized())
    }

    fn experiment(&self, name: &str) -> ServiceResult<&Experiment> {
        self.experiments.get(name).ok_or_else(|| {
            ServiceError::NotFound(format!("experiment = {name:?}: no such experiment"))
        })
    }

    /// Create an experiment; returns the response body (with the client token, shown once).
    pub fn create(&mut self, req: CreateRequest) -> ServiceResult<Value> {
        check_name(&req.name)?;
        dpbandits::error::check::arms("arms", req.arms)
            .map_err(|e| ServiceError::invalid("arms", e.to_string()))?;
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
        let session = build_session(table.clone(), req.arms, seed, req.allow_non_private)?;
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
        let token: String = tok.iter().map(|b| format!("{b:02x}")).collect();
        let token_hash = store::sha256_hex(token.as_bytes());
        let g = serde_json::to_value(&guarantee).map_err(ServiceError::internal)?;
        let config = json!({"policy": toml::Value::Table(table).to_string(), "label": label, "arms": req.arms,
                            "allow_non_private": req.allow_non_private, "seed": req.seed.map(|_| "given")});
        let tx = self.conn.transaction()?;
        store::insert_experiment(
            &tx,
            &store::NewExperiment {
                name: &req.name,
                kind: &kind,
                arms: req.arms,
                config: &config.to_string(),
                token_hash: &token_hash,
                guarantee: &g.to_string(),
                snapshot: &snap,
            },
        )?;
        store::audit(
            &tx,
            &req.name,
            "config",
            &json!({"action": "create", "kind": kind, "label": label, "arms": req.arms, "guarantee": g}),
        )?;
        tx.commit()?;
        self.experiments.insert(
            req.name.clone(),
            Experiment {
                session,
                arms: req.arms,
                token_hash,
                guarantee,
                releases: 0,
            },
        );
        Ok(
            json!({"experiment": req.name, "kind": kind, "label": label, "arms": req.arms,
                  "client_token": token, "guarantee": g}),
        )
    }

    /// Issue a decision. A repeated `request_id` returns the decision it already got.
    pub fn decide(&mut self, name: &str, request_id: Option<String>) -> ServiceResult<Value> {
        self.experiment(name)?;
        if let Some(rid) = &request_id {
            if rid.is_empty() || rid.len() > 128 {
                return Err(ServiceError::invalid(
                    "request_id",
                    format!("request_id = {rid:?}: expected 1 to 128 characters"),
                ));
            }
            if let Some((id, arm)) = store::find_request(&self.conn, name, rid)? {
                return Ok(json!({"decision_id": id, "arm": arm, "repeat": true}));
            }
        }
        let e = self.experiments.get_mut(name).expect("checked above");
        // At a commitment boundary the session would refuse (a protocol error): answered as a
        // conflict with the counts, before the session is asked.
        if let Next::Reward { pending, .. } = e.session.next() {
            let rounds_left = e
                .session
                .commitment()
                .map_or(0, |(_, rounds, _, observed)| rounds - observed);
            return Err(ServiceError::Conflict {
                pending,
                rounds_left,
            });
        }
        let round = e.session.issued();
        let at_round = e.session.t();
        let decided = e.session.decide();
        let stored: ServiceResult<(u64, usize)> = (|| {
            let (arm, opened) = match decided.map_err(ServiceError::internal)? {
                Decision::Play { arm, opened } => (arm, opened),
                d @ Decision::Stop { .. } => {
                    return Err(ServiceError::internal(format!(
                        "a finite-armed session answered {d:?}"
                    )));
                }
            };
            let id = e.session.issued();
            let snap = e.session.snapshot().map_err(ServiceError::internal)?;
            let tx = self.conn.transaction()?;
            store::update_state(&tx, name, &snap, &e.counters())?;
            if let Some(rounds) = opened {
                store::audit(
                    &tx,
                    name,
                    "commitment",
                    &json!({"arm": arm, "rounds": rounds, "at_round": at_round}),
                )?;
            }
            store::insert_decision(&tx, name, id, arm, round, request_id.as_deref())?;
            store::audit(
                &tx,
                name,
                "decision",
                &json!({"decision_id": id, "arm": arm}),
            )?;
            tx.commit()?;
            Ok((id, arm))
        })();
        match stored {
            Ok((id, arm)) => Ok(json!({"decision_id": id, "arm": arm})),
            Err(err) => {
                // The session decided in memory but nothing was stored: back to the stored state.
                self.reload(name)?;
                Err(err)
            }
        }
    }

    /// Reload one experiment's session from the database (after a failed commit).
    fn reload(&mut self, name: &str) -> ServiceResult<()> {
        let snap = store::load_snapshot(&self.conn, name)?;
        let s = Session::restore(&snap).map_err(ServiceError::internal)?;
        if let Some(e) = self.experiments.get_mut(name) {
            e.session = s;
        }
        Ok(())
    }

    /// Report the reward of a decision (idempotent per `decision_id`).
    pub fn reward(&mut self, name: &str, decision_id: u64, reward: f64) -> ServiceResult<Value> {
        self.experiment(name)?;
        let Some((arm, previous)) = store::decision(&self.conn, name, decision_id)? else {
            return Err(ServiceError::NotFound(format!(
                "decision_id = {decision_id}: no such decision in experiment {name:?}"
            )));
        };
        if previous.is_some() {
            return Ok(json!({"decision_id": decision_id, "status": "duplicate"}));
        }
        let e = self.experiments.get_mut(name).expect("checked above");
        let invalid =
            |err: dpbandits::Error| ServiceError::invalid("reward", format!("reward: {err}"));
        // The policy's own boundary admits the reward first (clip, or refuse in reject mode);
        // a refused reward changes nothing and the decision stays pending.
        let admitted = e.session.boundary().single(reward).map_err(invalid)?;
        let clipped = admitted.sum() != reward;
        let (carm, rounds, _, observed) = e
            .session
            .commitment()
            .ok_or_else(|| ServiceError::internal("a pending decision without a commitment"))?;
        if carm != arm {
            return Err(ServiceError::internal(format!(
                "decision {decision_id} is of arm {arm}, the open commitment of arm {carm}"
            )));
        }
        let completes = observed + 1 == rounds;
        let cost = cost_of(&e.guarantee);
        let release_no = e.releases + 1;
        // A release is about to be drawn: its intent is committed first, so a crash between the
        // draw and the state change leaves a charged (`lost`) row, and a redo is charged again.
        let intent = match (completes, cost) {
            (true, Some((measure, c))) => Some((
                store::insert_intent(&mut self.conn, name, release_no, arm, measure, c)?,
                measure,
                c,
            )),
            _ => None,
        };
        if let Err(err) = e.session.observe(arm, reward) {
            return Err(match err {
                dpbandits::Error::Boundary { .. } => invalid(err),
                dpbandits::Error::Param { ref field, .. } if field == "reward" => invalid(err),
                other => ServiceError::internal(other),
            });
        }
        let releases = if completes { release_no } else { e.releases };
        let result: ServiceResult<()> = (|| {
            let snap = e.session.snapshot().map_err(ServiceError::internal)?;
            let tx = self.conn.transaction()?;
            store::update_state(&tx, name, &snap, &counters_of(&e.session, releases))?;
            store::record_reward(&tx, name, decision_id, reward, admitted.sum())?;
            store::audit(
                &tx,
                name,
                "reward",
                &json!({"decision_id": decision_id, "arm": arm, "reward": reward, "admitted": admitted.sum()}),
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
                store::set_ledger_status(&tx, id, "charged")?;
                store::audit(
                    &tx,
                    name,
                    "budget-charge",
                    &json!({"ledger_id": id, "release": release_no, "arm": arm, "measure": measure, "cost": c, "status": "charged"}),
                )?;
            }
            tx.commit()?;
            Ok(())
        })();
        if let Err(err) = result {
            // Nothing stored: put the session back to its stored state (the drawn release, if
            // any, stays charged through its open intent once the service restarts).
            self.reload(name)?;
            return Err(err);
        }
        let e = self.experiments.get_mut(name).expect("checked above");
        e.releases = releases;
        Ok(json!({"decision_id": decision_id, "status": "applied", "clipped": clipped}))
    }

    /// The ledger of an experiment: rows and totals.
    fn ledger(&self, name: &str) -> ServiceResult<Value> {
        let e = self.experiment(name)?;
        let rows = store::ledger_rows(&self.conn, name)?;
        let mut total = 0.0;
        let mut per_release: HashMap<i64, u64> = HashMap::new();
        for r in rows.iter().filter(|r| r.status != "intent") {
            total += r.cost;
            *per_release.entry(r.release).or_default() += 1;
        }
        let multiplicity = per_release.values().copied().max().unwrap_or(0);
        let effective = cost_of(&e.guarantee)
            .map(|(m, c)| json!({"measure": m, "value": c * multiplicity.max(1) as f64}));
        Ok(json!({
            "charged_total": total,
            "charges": rows.iter().filter(|r| r.status != "intent").count(),
            "releases": e.releases,
            "max_charges_per_release": multiplicity,
            "effective_budget": effective,
            "note": "each release is charged once; a release redone after a crash is charged again. \
                     The episodic kinds release once per episode on disjoint rewards (parallel composition), \
                     so the guarantee holds with the budget multiplied by max_charges_per_release.",
            "rows": rows,
        }))
    }

    /// An experiment's status (public counts, guarantee, ledger summary).
    pub fn status(&self, name: &str) -> ServiceResult<Value> {
        let e = self.experiment(name)?;
        let mut ledger = self.ledger(name)?;
        ledger.as_object_mut().map(|o| o.remove("rows"));
        let c = e.counters();
        Ok(json!({
            "experiment": name,
            "kind": e.session.kind(),
            "arms": e.arms,
            "decisions": c.issued,
            "rewarded": c.observed,
            "pending": e.session.pending(),
            "commitment": c.commit.map(|(arm, left)| json!({"arm": arm, "rounds_left": left})),
            "guarantee": e.guarantee,
            "ledger": ledger,
        }))
    }

    /// The full ledger.
    pub fn ledger_rows(&self, name: &str) -> ServiceResult<Value> {
        self.ledger(name)
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

    fn create(s: &mut Service) {
        s.create(CreateRequest {
            name: "t".into(),
            arms: 2,
            policy: json!({"kind": "adac_ucb", "rho": 0.5}),
            allow_non_private: false,
            seed: None,
        })
        .unwrap();
    }

    /// Every private finite-armed kind of the registry, created at its example parameters without
    /// `noise`: deployment-grade where the kind has a deployment path (the service's default),
    /// otherwise refused naming `policy.noise` (never silently simulation-grade).
    #[test]
    fn private_finite_kinds_default_to_deployment_noise() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Service::open(&dir.path().join("s.sqlite"), ADMIN).unwrap();
        let mut deployed = vec![];
        for (i, entry) in registry::POLICIES.iter().enumerate() {
            if entry.setting() != Setting::FiniteArmed {
                continue;
            }
            let mut t: toml::Table = toml::from_str(entry.info.example).unwrap();
            t.remove("noise");
            t.insert("kind".into(), toml::Value::String(entry.kind().into()));
            let r = s.create(CreateRequest {
                name: format!("e{i}"),
                arms: 3,
                policy: json!(toml::to_string(&t).unwrap()),
                allow_non_private: true,
                seed: Some(1),
            });
            match r {
                Ok(v) => match v["guarantee"]["noise"].as_str().unwrap() {
                    "deployment-grade" => deployed.push(entry.kind()),
                    "not-applicable" => {}
                    g => panic!("{}: served with {g} noise by default", entry.kind()),
                },
                Err(e) => {
                    let e = format!("{e:?}");
                    assert!(e.contains("policy.noise"), "{}: {e}", entry.kind());
                }
            }
        }
        assert_eq!(
            deployed,
            ["adac_ucb", "adap_ucb", "adap_klucb", "dp_se", "dp_ts"],
            "finite kinds served with deployment noise by default"
        );
    }

    fn pair(s: &mut Service, reward: f64) {
        let d = s.decide("t", None).unwrap();
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
        let d = s.decide("t", None).unwrap();
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
        let l = s.ledger_rows("t").unwrap();
        assert_eq!(l["charges"], 3, "{l}");
        assert_eq!(l["rows"][2]["status"], "lost");
        assert_eq!(s.status("t").unwrap()["pending"], 1);
        assert_eq!(s.reward("t", id, 0.5).unwrap()["status"], "applied");
        assert_eq!(s.reward("t", id, 0.5).unwrap()["status"], "duplicate");
        let l = s.ledger_rows("t").unwrap();
        assert_eq!(l["charges"], 4, "{l}");
        assert_eq!(l["charged_total"], 2.0);
        assert_eq!(l["max_charges_per_release"], 2);
        assert_eq!(l["effective_budget"]["value"], 1.0);
        drop(s);
        let chain = store::verify_chain(&db).unwrap();
        assert!(chain.entries > 10);
        let ins = store::inspect(&db, "t").unwrap();
        assert_eq!(
            (ins.ledger_charged, ins.ledger_lost, ins.releases),
            (3, 1, 3)
        );
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
            s.create(CreateRequest {
                name: "t".into(),
                arms: 3,
                policy: json!(toml::to_string(&policy).unwrap()),
                allow_non_private: false,
                seed: Some(17),
            })
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
                    match s.decide("t", None) {
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
        let e = store::verify_chain(&db).unwrap_err().to_string();
        assert!(e.starts_with("audit entry seq = 3"), "{e}");
    }
}
