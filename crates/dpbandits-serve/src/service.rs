//! The service's state machine, independent of HTTP: experiments, decisions, rewards, the ledger.
//!
//! Every operation runs under one lock (the [`Service`] is wrapped in a `Mutex` by the server)
//! and every state change is one SQLite transaction, committed before the operation returns, so
//! before any response leaves (see `docs/service.md`).

use crate::store;
use anyhow::Context;
use dpbandits::config::Setting;
use dpbandits::finite::{Policy, PolicyConfig};
use dpbandits::privacy::{Budget, PrivacyGuarantee};
use dpbandits::registry::{self, Built};
use dpbandits::snapshot::Snapshot;
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;

/// An error with the HTTP status it maps to and a message naming the field, the value and what
/// is allowed.
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
    /// 400.
    pub fn bad(message: impl Into<String>) -> Self {
        Self::new(400, message)
    }
    /// 404.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(404, message)
    }
    /// 422.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(422, message)
    }
    /// 500 (storage failures); the message is logged, the client sees a generic text.
    pub fn internal(e: impl std::fmt::Display) -> Self {
        Self::new(500, format!("internal error: {e}"))
    }
}

impl From<rusqlite::Error> for ApiError {
    fn from(e: rusqlite::Error) -> Self {
        ApiError::internal(e)
    }
}

impl From<anyhow::Error> for ApiError {
    fn from(e: anyhow::Error) -> Self {
        ApiError::internal(format!("{e:#}"))
    }
}

/// Result of a service operation.
pub type ApiResult<T> = std::result::Result<T, ApiError>;

/// The request that creates an experiment.
#[derive(Debug, serde::Deserialize)]
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

/// One live experiment.
struct Experiment {
    policy: Box<dyn Policy>,
    kind: String,
    token_hash: String,
    guarantee: PrivacyGuarantee,
    /// Decisions issued.
    issued: u64,
    /// Rewards applied.
    observed: u64,
    /// The open commitment: arm and rounds not yet observed.
    commit: Option<(usize, u64)>,
    /// Completed commitments.
    releases: u64,
}

impl Experiment {
    fn pending(&self) -> u64 {
        self.issued - self.observed
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

fn check_name(name: &str) -> ApiResult<()> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "name = {name:?}: expected 1 to 64 characters from [A-Za-z0-9_.-]"
        )))
    }
}

/// The policy table from the request's `policy` (TOML text or a JSON object).
fn policy_table(v: &Value) -> ApiResult<toml::Table> {
    match v {
        Value::String(s) => s.parse::<toml::Table>().map_err(|e| {
            ApiError::invalid(format!("policy: not a TOML table ({})", e.message().trim()))
        }),
        Value::Object(_) => toml::Table::try_from(v).map_err(|e| {
            ApiError::invalid(format!("policy: not representable as a TOML table ({e})"))
        }),
        other => Err(ApiError::invalid(format!(
            "policy = {other}: expected a TOML table as text (\"kind = \\\"adac_ucb\\\"\\nrho = 0.5\") or a JSON object"
        ))),
    }
}

fn parse_finite(
    entry: &registry::PolicyEntry,
    t: toml::Table,
) -> dpbandits::Result<Box<dyn PolicyConfig>> {
    match entry.build(t)? {
        Built::Finite(c) => Ok(c),
        _ => Err(dpbandits::Error::Config("not a finite-armed kind".into())),
    }
}

/// Parse a policy table with the service's noise rule: deployment-grade noise unless the table
/// says `noise = "simulation"`; kinds without a deployment path need that explicitly.
fn parse_policy(mut t: toml::Table, allow_non_private: bool) -> ApiResult<Box<dyn PolicyConfig>> {
    let kind = match t.remove("kind") {
        Some(toml::Value::String(k)) => k,
        Some(v) => {
            return Err(ApiError::invalid(format!(
                "policy.kind = {v}: expected a string"
            )));
        }
        None => {
            return Err(ApiError::invalid(
                "policy.kind = (missing): expected a registry kind (`dpbandits list`)",
            ));
        }
    };
    let entry =
        registry::policy(&kind).map_err(|e| ApiError::invalid(format!("policy.kind: {e}")))?;
    if entry.setting() != Setting::FiniteArmed {
        return Err(ApiError::invalid(format!(
            "policy.kind = {kind:?}: a {} kind; the service runs finite-armed kinds only",
            entry.setting()
        )));
    }
    // A trial's rewards are data: one outside the boundary is refused (422 naming `reward`), not
    // clipped, unless the table asks for `boundary = "clip"` (kinds without a `boundary` key keep
    // their own: the non-private kinds reject at the numeric boundary anyway).
    let parse = |t: toml::Table| {
        if t.contains_key("boundary") {
            return parse_finite(entry, t);
        }
        let mut strict = t.clone();
        strict.insert("boundary".into(), toml::Value::String("reject".into()));
        match parse_finite(entry, strict) {
            Err(e) if e.to_string().contains("unknown field `boundary`") => parse_finite(entry, t),
            r => r,
        }
    };
    let bad = |e: dpbandits::Error| ApiError::invalid(format!("policy: {e}"));
    let no_noise_key = |e: &dpbandits::Error| e.to_string().contains("unknown field `noise`");
    let explicit = t.get("noise").cloned();
    let cfg = match explicit.as_ref().and_then(|v| v.as_str()) {
        Some("simulation") => match parse(t.clone()) {
            Err(e) if no_noise_key(&e) => {
                t.remove("noise");
                parse(t).map_err(bad)?
            }
            r => r.map_err(bad)?,
        },
        Some(_) => parse(t).map_err(bad)?,
        None if explicit.is_some() => parse(t).map_err(bad)?,
        None => {
            let mut dep = t.clone();
            dep.insert("noise".into(), toml::Value::String("deployment".into()));
            match parse(dep) {
                Ok(c) => c,
                Err(e) => {
                    // No deployment path (no `noise` key), or a non-private member of a family.
                    let plain = parse(t).map_err(bad)?;
                    if plain.guarantee().is_private() {
                        if no_noise_key(&e) {
                            return Err(ApiError::invalid(format!(
                                "policy.noise = (missing): kind {kind:?} has no deployment-grade noise path; \
                                 set noise = \"simulation\" explicitly to serve it with simulation-grade noise \
                                 (seeded floating-point noise, not fit for deployment)"
                            )));
                        }
                        return Err(bad(e));
                    }
                    plain
                }
            }
        }
    };
    if !cfg.guarantee().is_private() && !allow_non_private {
        return Err(ApiError::invalid(format!(
            "policy.kind = {kind:?}: not private (no guarantee); set allow_non_private = true to serve it"
        )));
    }
    Ok(cfg)
}

/// The log line of one operation (no reward values).
pub type LogFields = Value;

impl Service {
    /// Open the database, restore every experiment and settle release intents left open by a
    /// crash (each becomes a `lost` ledger row: charged).
    ///
    /// # Errors
    /// The database cannot be opened, or a stored snapshot does not restore.
    pub fn open(db: &Path, admin_token: &str) -> anyhow::Result<Self> {
        let mut conn = store::open(db)?;
        let tx = conn.transaction()?;
        let open: Vec<(i64, String, i64, i64, f64)> = {
            let mut stmt = tx.prepare(
                "SELECT id, experiment, release, arm, cost FROM ledger WHERE status = 'intent' ORDER BY id",
            )?;
            stmt.query_map([], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })?
            .collect::<rusqlite::Result<_>>()?
        };
        for (id, exp, release, arm, cost) in open {
            tx.execute("UPDATE ledger SET status = 'lost' WHERE id = ?1", [id])?;
            store::audit(
                &tx,
                &exp,
                "budget-charge",
                &json!({"ledger_id": id, "release": release, "arm": arm, "cost": cost,
                        "status": "lost", "why": "a release intent without its state change (crash): charged, a redo is charged again"}),
            )?;
        }
        tx.commit()?;
        let mut experiments = HashMap::new();
        {
            let mut stmt = conn.prepare(
                "SELECT name, snapshot, token_hash, issued, observed, commit_arm, commit_left, releases FROM experiments",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, Vec<u8>>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, i64>(4)?,
                    r.get::<_, Option<i64>>(5)?,
                    r.get::<_, Option<i64>>(6)?,
                    r.get::<_, i64>(7)?,
                ))
            })?;
            for row in rows {
                let (name, snap, token_hash, issued, observed, carm, cleft, releases) = row?;
                let snap = Snapshot::decode(&snap)?;
                let policy = registry::restore_finite(&snap).with_context(|| {
                    format!("experiment {name:?}: its snapshot does not restore")
                })?;
                let guarantee = policy.guarantee();
                let kind = snap.kind().to_string();
                let commit = match (carm, cleft) {
                    (Some(a), Some(l)) => Some((a as usize, l as u64)),
                    _ => None,
                };
                experiments.insert(
                    name,
                    Experiment {
                        policy,
                        kind,
                        token_hash,
                        guarantee,
                        issued: issued as u64,
                        observed: observed as u64,
                        commit,
                        releases: releases as u64,
                    },
                );
            }
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
    /// token. Every failure is the same 401 and touches nothing.
    pub fn authenticate(&self, token: Option<&str>, experiment: Option<&str>) -> ApiResult<Caller> {
        let unauthorized = || ApiError::new(401, "authorization: a valid bearer token is required");
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

    fn experiment(&self, name: &str) -> ApiResult<&Experiment> {
        self.experiments.get(name).ok_or_else(|| {
            ApiError::not_found(format!("experiment = {name:?}: no such experiment"))
        })
    }

    /// Create an experiment; returns the response body (with the client token, shown once).
    pub fn create(&mut self, req: CreateRequest) -> ApiResult<Value> {
        check_name(&req.name)?;
        dpbandits::error::check::arms("arms", req.arms)
            .map_err(|e| ApiError::invalid(e.to_string()))?;
        if self.experiments.contains_key(&req.name) {
            return Err(ApiError::new(
                409,
                format!("name = {:?}: an experiment of that name exists", req.name),
            ));
        }
        let table = policy_table(&req.policy)?;
        let cfg = parse_policy(table.clone(), req.allow_non_private)?;
        let seed = match req.seed {
            Some(s) => s,
            None => {
                let mut b = [0u8; 8];
                fill_os(&mut b)?;
                u64::from_le_bytes(b)
            }
        };
        let policy = cfg
            .build(req.arms, seed)
            .map_err(|e| ApiError::invalid(format!("policy: {e}")))?;
        let snap = policy
            .snapshot()
            .and_then(|s| s.to_cbor())
            .map_err(|e| ApiError::invalid(format!("policy: cannot be stored: {e}")))?;
        let guarantee = policy.guarantee();
        if guarantee.is_private() && cost_of(&guarantee).is_none() {
            return Err(ApiError::invalid(format!(
                "policy.kind = {:?}: its budget kind cannot be charged by the ledger",
                cfg.kind()
            )));
        }
        let mut tok = [0u8; 32];
        fill_os(&mut tok)?;
        let token: String = tok.iter().map(|b| format!("{b:02x}")).collect();
        let token_hash = store::sha256_hex(token.as_bytes());
        let g = serde_json::to_value(&guarantee).map_err(ApiError::internal)?;
        let config = json!({"policy": toml::Value::Table(table).to_string(), "label": cfg.label(), "arms": req.arms,
                            "allow_non_private": req.allow_non_private, "seed": req.seed.map(|_| "given")});
        let tx = self.conn.transaction()?;
        tx.execute(
            "INSERT INTO experiments (name, kind, arms, config, token_hash, guarantee, created, snapshot, issued, observed, commit_arm, commit_left, releases)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 0, 0, NULL, NULL, 0)",
            params![req.name, cfg.kind(), req.arms as i64, config.to_string(), token_hash, g.to_string(), store::now(), snap],
        )?;
        store::audit(
            &tx,
            &req.name,
            "config",
            &json!({"action": "create", "kind": cfg.kind(), "label": cfg.label(), "arms": req.arms, "guarantee": g}),
        )?;
        tx.commit()?;
        self.experiments.insert(
            req.name.clone(),
            Experiment {
                policy,
                kind: cfg.kind().to_string(),
                token_hash,
                guarantee,
                issued: 0,
                observed: 0,
                commit: None,
                releases: 0,
            },
        );
        Ok(
            json!({"experiment": req.name, "kind": cfg.kind(), "label": cfg.label(), "arms": req.arms,
                  "client_token": token, "guarantee": g}),
        )
    }

    /// Issue a decision. A repeated `request_id` returns the decision it already got.
    pub fn decide(&mut self, name: &str, request_id: Option<String>) -> ApiResult<Value> {
        self.experiment(name)?;
        if let Some(rid) = &request_id {
            if rid.is_empty() || rid.len() > 128 {
                return Err(ApiError::invalid(format!(
                    "request_id = {rid:?}: expected 1 to 128 characters"
                )));
            }
            let found: Option<(i64, i64)> = self
                .conn
                .query_row(
                    "SELECT id, arm FROM decisions WHERE experiment = ?1 AND request_id = ?2",
                    params![name, rid],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            if let Some((id, arm)) = found {
                return Ok(json!({"decision_id": id, "arm": arm, "repeat": true}));
            }
        }
        let conn = &mut self.conn;
        let e = self.experiments.get_mut(name).expect("checked above");
        let pending = e.pending();
        let (arm, opened) = match e.commit {
            Some((arm, left)) if left > pending => (arm, None),
            Some((_, left)) => {
                let mut err = ApiError::new(
                    409,
                    format!(
                        "pending = {pending}: the policy's commitment ({left} round(s) left) is fully issued; \
                         report the pending rewards, then ask again"
                    ),
                );
                err.extra = Some(json!({"pending": pending}));
                err.retry_after = Some(1);
                return Err(err);
            }
            None => {
                debug_assert_eq!(pending, 0);
                let pull = e.policy.choose(e.observed);
                (pull.arm, Some(pull.steps))
            }
        };
        let snapshot = match opened {
            Some(_) => Some(
                e.policy
                    .snapshot()
                    .and_then(|s| s.to_cbor())
                    .map_err(ApiError::internal)?,
            ),
            None => None,
        };
        let id = e.issued + 1;
        let commit = match opened {
            Some(steps) => (arm, steps),
            None => e.commit.expect("open"),
        };
        let tx = conn.transaction()?;
        if let Some(s) = &snapshot {
            tx.execute(
                "UPDATE experiments SET snapshot = ?2, issued = ?3, commit_arm = ?4, commit_left = ?5 WHERE name = ?1",
                params![name, s, id as i64, commit.0 as i64, commit.1 as i64],
            )?;
            store::audit(
                &tx,
                name,
                "commitment",
                &json!({"arm": arm, "rounds": commit.1, "at_round": e.observed}),
            )?;
        } else {
            tx.execute(
                "UPDATE experiments SET issued = ?2 WHERE name = ?1",
                params![name, id as i64],
            )?;
        }
        tx.execute(
            "INSERT INTO decisions (experiment, id, arm, round, request_id, issued) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![name, id as i64, arm as i64, e.issued as i64, request_id, store::now()],
        )?;
        store::audit(
            &tx,
            name,
            "decision",
            &json!({"decision_id": id, "arm": arm}),
        )?;
        if let Err(err) = tx.commit() {
            // The policy chose in memory but nothing was stored: restore the stored state.
            if opened.is_some() {
                self.reload(name)?;
            }
            return Err(err.into());
        }
        let e = self.experiments.get_mut(name).expect("checked above");
        e.issued = id;
        e.commit = Some(commit);
        Ok(json!({"decision_id": id, "arm": arm}))
    }

    /// Reload one experiment's policy from the database (after a failed commit).
    fn reload(&mut self, name: &str) -> ApiResult<()> {
        let snap: Vec<u8> = self.conn.query_row(
            "SELECT snapshot FROM experiments WHERE name = ?1",
            [name],
            |r| r.get(0),
        )?;
        let snap = Snapshot::decode(&snap).map_err(ApiError::internal)?;
        let p = registry::restore_finite(&snap).map_err(ApiError::internal)?;
        if let Some(e) = self.experiments.get_mut(name) {
            e.policy = p;
        }
        Ok(())
    }

    /// Report the reward of a decision (idempotent per `decision_id`).
    pub fn reward(&mut self, name: &str, decision_id: u64, reward: f64) -> ApiResult<Value> {
        self.experiment(name)?;
        let row: Option<(i64, Option<f64>)> = self
            .conn
            .query_row(
                "SELECT arm, reward FROM decisions WHERE experiment = ?1 AND id = ?2",
                params![name, decision_id as i64],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        let Some((arm, previous)) = row else {
            return Err(ApiError::not_found(format!(
                "decision_id = {decision_id}: no such decision in experiment {name:?}"
            )));
        };
        let arm = arm as usize;
        if previous.is_some() {
            return Ok(json!({"decision_id": decision_id, "status": "duplicate"}));
        }
        let e = self.experiments.get_mut(name).expect("checked above");
        // The policy's own boundary admits the reward first (clip, or refuse in reject mode);
        // a refused reward changes nothing and the decision stays pending.
        let admitted = e
            .policy
            .boundary()
            .single(reward)
            .map_err(|err| ApiError::invalid(format!("reward: {err}")))?;
        let clipped = admitted.sum() != reward;
        let (carm, left) = e
            .commit
            .ok_or_else(|| ApiError::internal("a pending decision without a commitment"))?;
        debug_assert_eq!(carm, arm);
        let completes = left == 1;
        let cost = cost_of(&e.guarantee);
        let release_no = e.releases + 1;
        let conn = &mut self.conn;
        // A release is about to be drawn: its intent is committed first, so a crash between the
        // draw and the state change leaves a charged (`lost`) row, and a redo is charged again.
        let intent = match (completes, cost) {
            (true, Some((measure, c))) => {
                let tx = conn.transaction()?;
                tx.execute(
                    "INSERT INTO ledger (experiment, release, arm, rewards, measure, cost, status, created)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'intent', ?7)",
                    params![name, release_no as i64, arm as i64, 0i64, measure, c, store::now()],
                )?;
                let id = tx.last_insert_rowid();
                tx.commit()?;
                Some((id, measure, c))
            }
            _ => None,
        };
        if let Err(err) = e.policy.observe(arm, reward) {
            return Err(ApiError::invalid(format!("reward: {err}")));
        }
        let snap = e
            .policy
            .snapshot()
            .and_then(|s| s.to_cbor())
            .map_err(ApiError::internal)?;
        let observed = e.observed + 1;
        let commit = if completes {
            None
        } else {
            Some((arm, left - 1))
        };
        let releases = if completes { release_no } else { e.releases };
        let result: ApiResult<()> = (|| {
            let tx = conn.transaction()?;
            tx.execute(
                "UPDATE experiments SET snapshot = ?2, observed = ?3, commit_arm = ?4, commit_left = ?5, releases = ?6 WHERE name = ?1",
                params![name, snap, observed as i64, commit.map(|c| c.0 as i64), commit.map(|c| c.1 as i64), releases as i64],
            )?;
            tx.execute(
                "UPDATE decisions SET reward = ?3, admitted = ?4, rewarded = ?5 WHERE experiment = ?1 AND id = ?2",
                params![name, decision_id as i64, reward, admitted.sum(), store::now()],
            )?;
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
                tx.execute("UPDATE ledger SET status = 'charged' WHERE id = ?1", [id])?;
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
            // Nothing stored: put the policy back to its stored state (the drawn release, if
            // any, stays charged through its open intent once the service restarts).
            self.reload(name)?;
            return Err(err);
        }
        let e = self.experiments.get_mut(name).expect("checked above");
        e.observed = observed;
        e.commit = commit;
        e.releases = releases;
        Ok(json!({"decision_id": decision_id, "status": "applied", "clipped": clipped}))
    }

    /// The ledger of an experiment: rows and totals.
    fn ledger(&self, name: &str) -> ApiResult<Value> {
        let e = self.experiment(name)?;
        let mut stmt = self.conn.prepare(
            "SELECT id, release, arm, measure, cost, status, created FROM ledger WHERE experiment = ?1 ORDER BY id",
        )?;
        let rows: Vec<Value> = stmt
            .query_map([name], |r| {
                Ok(json!({"id": r.get::<_, i64>(0)?, "release": r.get::<_, i64>(1)?, "arm": r.get::<_, i64>(2)?,
                          "measure": r.get::<_, String>(3)?, "cost": r.get::<_, f64>(4)?, "status": r.get::<_, String>(5)?,
                          "created": r.get::<_, String>(6)?}))
            })?
            .collect::<rusqlite::Result<_>>()?;
        let mut total = 0.0;
        let mut per_release: HashMap<i64, u64> = HashMap::new();
        for r in &rows {
            if r["status"] != "intent" {
                total += r["cost"].as_f64().unwrap_or(0.0);
                *per_release
                    .entry(r["release"].as_i64().unwrap_or(0))
                    .or_default() += 1;
            }
        }
        let multiplicity = per_release.values().copied().max().unwrap_or(0);
        let effective = cost_of(&e.guarantee)
            .map(|(m, c)| json!({"measure": m, "value": c * multiplicity.max(1) as f64}));
        Ok(json!({
            "charged_total": total,
            "charges": rows.iter().filter(|r| r["status"] != "intent").count(),
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
    pub fn status(&self, name: &str) -> ApiResult<Value> {
        let e = self.experiment(name)?;
        let mut ledger = self.ledger(name)?;
        ledger.as_object_mut().map(|o| o.remove("rows"));
        Ok(json!({
            "experiment": name,
            "kind": e.kind,
            "arms": e.policy.num_arms(),
            "decisions": e.issued,
            "rewarded": e.observed,
            "pending": e.pending(),
            "commitment": e.commit.map(|(arm, left)| json!({"arm": arm, "rounds_left": left})),
            "guarantee": e.guarantee,
            "ledger": ledger,
        }))
    }

    /// The full ledger.
    pub fn ledger_rows(&self, name: &str) -> ApiResult<Value> {
        self.ledger(name)
    }

    /// The audit log (admin only): entries after `after`, at most `limit`.
    pub fn audit_export(
        &self,
        experiment: Option<&str>,
        after: i64,
        limit: i64,
    ) -> ApiResult<Value> {
        let mut stmt = self.conn.prepare(
            "SELECT seq, ts, experiment, event, body, prev, hash FROM audit
             WHERE seq > ?1 AND (?2 IS NULL OR experiment = ?2) ORDER BY seq LIMIT ?3",
        )?;
        let rows: Vec<Value> = stmt
            .query_map(params![after, experiment, limit], |r| {
                let body: String = r.get(4)?;
                Ok(json!({"seq": r.get::<_, i64>(0)?, "ts": r.get::<_, String>(1)?, "experiment": r.get::<_, String>(2)?,
                          "event": r.get::<_, String>(3)?, "body": body, "prev": r.get::<_, String>(5)?,
                          "hash": r.get::<_, String>(6)?}))
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(json!({"entries": rows}))
    }
}

/// Fill `buf` from the operating system's entropy source.
fn fill_os(buf: &mut [u8]) -> ApiResult<()> {
    use rand::TryRng;
    rand::rngs::SysRng.try_fill_bytes(buf).map_err(|e| {
        ApiError::internal(format!("the operating system's entropy source failed: {e}"))
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
