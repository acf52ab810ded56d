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

use crate::store::{self, Counters, Store};
use anyhow::{Context, bail};
use dpbandits::config::Setting;
use dpbandits::contextual::ActionSet;
use dpbandits::privacy::{Budget, PrivacyGuarantee};
use dpbandits::registry;
use dpbandits::session::{Decision, Next, Problem, Session};
use dpbandits::snapshot::Snapshot;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, RwLock};

mod checkpoint;
mod create;
mod decide;
mod open;
mod read;
mod reward;
mod trial;

pub use create::{CreateRequest, check_name, check_request_id, policy_table};
pub use open::Claim;
pub use read::{audit_page, export_rows};
pub use reward::{AfterCommit, Staged};

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
    tx: &store::Tx<'_>,
    e: &Experiment,
    stale: &mut HashSet<String>,
    name: &str,
    releases: u64,
) -> ServiceResult<()> {
    if tx.in_batch() {
        if !stale.contains(name) {
            stale.insert(name.to_string());
        }
    } else {
        let snap = e.session.snapshot().map_err(ServiceError::internal)?;
        tx.update_state(name, &snap, &counters_of(&e.session, releases))?;
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

/// The service: its store and the live experiments.
pub struct Service {
    store: Store,
    experiments: HashMap<String, Experiment>,
    /// The token hashes, shared with the HTTP layer (authentication before a body is read).
    tokens: Arc<RwLock<Tokens>>,
    /// The open batch failed (see [`Service::begin_batch`]).
    batch_failed: bool,
    /// PostgreSQL: another node claimed the database after this one ([`store::Fenced`]); this
    /// service writes nothing more and its writer stops.
    fenced: Option<String>,
    /// The in-memory state may be ahead of the database: a batch failed and the reload after
    /// it failed too (the database was unreachable). The next batch reloads first.
    unsynced: bool,
    /// The experiments whose stored state (snapshot and counters) is behind their session: an
    /// operation of the open batch changed them; each is written once for the batch, before its
    /// commit ([`Service::write_stale_snapshots`]).
    stale: HashSet<String>,
    /// Publishes the audit log's head out of band, when configured (`--publish-head`).
    publisher: Option<crate::publish::Publisher>,
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
    /// Replace the admin token (SIGHUP's reload): the old one is refused from now on.
    pub fn set_admin(&mut self, admin_token: &str) {
        self.admin = store::sha256_hex(admin_token.as_bytes());
    }

    /// Check a bearer token: the admin token, or (with `experiment`) that experiment's client
    /// token. Every failure is the same refusal and touches nothing.
    ///
    /// # Errors
    /// [`ServiceError::Unauthorized`].
    pub fn check(&self, token: Option<&str>, experiment: Option<&str>) -> ServiceResult<Caller> {
        let unauthorized = || ServiceError::Unauthorized { admin: false };
        let token = token.ok_or_else(unauthorized)?;
        let h = store::sha256_hex(token.as_bytes());
        if store::same_hex(&h, &self.admin) {
            return Ok(Caller::Admin);
        }
        if let Some(c) = experiment.and_then(|n| self.clients.get(n))
            && store::same_hex(&h, c)
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

impl Service {
    /// Open a batch: one transaction that the operations until [`Service::commit_batch`] share
    /// (each operation's writes are a savepoint inside it). Group commit: the server runs many
    /// requests in one batch and answers them after its one commit.
    ///
    /// A batch that cannot begin fails before any of its operations runs: the database cannot
    /// be reached (after a short pause, so that a database that is down is not asked in a busy
    /// loop). A node that another claimed the database from learns it at the batch's commit
    /// ([`Service::fenced`]).
    pub fn begin_batch(&mut self) {
        if self.unsynced {
            match self.reload_all() {
                Ok(()) => self.unsynced = false,
                Err(e) => {
                    crate::log::log("reload-failed", json!({"error": format!("{e:#}")}));
                    self.batch_failed = true;
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    return;
                }
            }
        }
        let r = self.store.begin_batch();
        self.batch_failed = r.is_err();
        // (A fenced node learns it at the batch's commit: `commit_store_batch`.)
        if let Err(e) = r {
            crate::log::log("batch-not-begun", json!({"error": format!("{e:#}")}));
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    /// Whether a commit is a round trip to a database server (PostgreSQL), not a write to a local
    /// file: the writer gathers its batches for longer ([`crate::writer`]).
    pub fn store_is_remote(&self) -> bool {
        self.store.is_postgres()
    }

    /// Why this service writes nothing more: another node claimed its PostgreSQL database
    /// ([`store::Fenced`]). `None` while it owns it (always on SQLite).
    pub fn fenced(&self) -> Option<&str> {
        self.fenced.as_deref()
    }

    /// Whether the open batch failed (its remaining operations are not run; all are answered 500).
    pub fn batch_failed(&self) -> bool {
        self.batch_failed
    }

    /// Mark the open batch failed (an operation panicked).
    pub fn fail_batch(&mut self) {
        self.batch_failed = true;
    }

    /// Publish the audit log's head out of band with `publisher` (`serve --publish-head`).
    pub fn set_publisher(&mut self, publisher: crate::publish::Publisher) {
        self.publisher = Some(publisher);
    }

    /// Publish the head after the next commit (a close, or the publication period's timer).
    pub fn request_publish(&mut self) {
        if let Some(p) = self.publisher.as_mut() {
            p.request();
        }
    }

    /// After a commit: publish the committed head when a publication is due
    /// ([`crate::publish::Publisher`]). Outside a batch only (what it publishes is durable).
    ///
    /// # Errors
    /// The head cannot be read or published (it stays due).
    pub fn publish_if_due(&mut self) -> anyhow::Result<bool> {
        let Some(p) = self.publisher.as_mut() else {
            return Ok(false);
        };
        if !p.is_due() || self.store.in_batch() {
            return Ok(false);
        }
        let (entries, head) = self.store.audit_head()?;
        let keying = self.store.audit_keying()?;
        p.publish_if_due(entries, &head, keying.as_ref().map(|k| k.0.as_str()))
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
        } else if !self.store.in_batch() {
            Ok(())
        } else {
            self.write_stale_snapshots()
                .and_then(|()| self.commit_store_batch())
        };
        self.batch_failed = false;
        if let Err(e) = r {
            let _ = self.store.rollback_batch();
            crate::log::log(
                "batch-failed",
                json!({"error": e.to_string(), "action": "state reloaded from the database"}),
            );
            if let Err(re) = self.reload_all() {
                crate::log::log("reload-failed", json!({"error": format!("{re:#}")}));
                self.unsynced = true;
            }
            return Err(e);
        }
        Ok(())
    }

    /// The store's commit of the open batch; a commit refused by the fence (PostgreSQL: another
    /// node claimed the database, [`store::Fenced`]) also marks this service fenced, logged
    /// once.
    fn commit_store_batch(&mut self) -> ServiceResult<()> {
        let r = self.store.commit_batch();
        if let Err(e) = &r
            && let Some(f) = e.downcast_ref::<store::Fenced>()
            && self.fenced.is_none()
        {
            crate::log::log("fenced", json!({"error": f.to_string()}));
            self.fenced = Some(f.to_string());
        }
        r.map_err(ServiceError::from)
    }

    /// Inside a batch, commit what it holds so far (with the snapshots it has not written yet)
    /// and open a new transaction (a release intent must be durable before its release is
    /// drawn). Outside a batch nothing is open: no-op.
    fn flush_batch(&mut self) -> ServiceResult<()> {
        if !self.store.in_batch() {
            return Ok(());
        }
        let r = self.write_stale_snapshots().and_then(|()| {
            self.commit_store_batch()?;
            self.store.begin_batch().map_err(ServiceError::from)
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
                let tx = self.store.begin()?;
                tx.update_state(&name, &snap, &e.counters())?;
                tx.commit()?;
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
        // The HTTP layer limits the probes' writes (`api::HealthCache`).
        let tx = self.store.begin()?;
        tx.set_meta("health", &store::now())?;
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
}

/// One log line per abandoned decision (never the reward).
fn api_log_abandon(name: &str, decision_id: u64, why: &str) {
    crate::log::log(
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
        let mut s = crate::testdb::open(&crate::testdb::db(dir.path(), "s.sqlite"), ADMIN).unwrap();
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

    /// A crash between a release intent **without a release key** (written before keys
    /// existed; simulated: the intent row is committed, the reward is not) and its state change
    /// leaves a charged `lost` row after the restart; the redo is charged again, and the
    /// effective budget doubles.
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
        s.store
            .connection()
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

    /// Issue 42, "a release is drawn once": a release whose intent (with its key) is durable
    /// but whose state change is lost (its batch fails after the draw; then, for a second
    /// release, the process dies between the intent's commit and the draw) is redone with the
    /// stored key: the redo's state is byte-identical to the lost attempt's (the same
    /// deployment-grade noise, drawn once), it is charged once (no `lost` row), and the key is
    /// deleted once the release is stored. Without the key the redo's noise differs (the
    /// control: deployment noise from a fresh OS key; equal by chance with probability ~ 0).
    #[test]
    fn a_redone_release_draws_the_same_noise_and_is_charged_once() {
        let dir = shm_dir();
        let db = crate::testdb::db(dir.path(), "s.sqlite");
        let mut s = crate::testdb::open(&db, ADMIN).unwrap();
        s.create(req(
            json!({"name": "p", "arms": 3, "policy": {"kind": "dp_ts", "epsilon": 1.0}}),
        ))
        .unwrap();
        assert_eq!(
            s.status("p").unwrap()["guarantee"]["noise"],
            "deployment-grade"
        );
        let keys = |s: &Service| s.store.release_keys_count();
        // The first attempt: the intent commits with its batch, the step draws and stores, and
        // then that batch fails (its commit is lost).
        let d = s.decide("p", None, None).unwrap();
        let id = d["decision_id"].as_u64().unwrap();
        s.begin_batch();
        let Staged::AfterCommit(step) = s.reward_staged("p", id, 1.0).unwrap() else {
            panic!("a per-step private reward stages its release");
        };
        s.commit_batch().unwrap();
        assert_eq!(keys(&s), 1, "the key is durable with its intent");
        s.begin_batch();
        assert_eq!(step(&mut s).unwrap()["status"], "applied");
        let lost_attempt = s.experiments["p"].session.snapshot().unwrap();
        s.fail_batch();
        assert!(s.commit_batch().is_err());
        assert_eq!(s.status("p").unwrap()["pending"], 1);
        // The redo (a plain reward): the open intent and its key, the same state.
        assert_eq!(s.reward("p", id, 1.0).unwrap()["status"], "applied");
        assert_eq!(s.experiments["p"].session.snapshot().unwrap(), lost_attempt);
        assert_eq!(keys(&s), 0, "the key is deleted once its release is stored");
        // A second release: the process dies after the intent's commit, before the draw.
        // (DP-TS releases a batch per arm: pairs until a reward completes one.)
        let (id, before, _never_run) = loop {
            let d = s.decide("p", None, None).unwrap();
            let id = d["decision_id"].as_u64().unwrap();
            let before = s.experiments["p"].session.snapshot().unwrap();
            s.begin_batch();
            let staged = s.reward_staged("p", id, 0.0).unwrap();
            s.commit_batch().unwrap();
            match staged {
                Staged::AfterCommit(step) => break (id, before, step),
                Staged::Done(v) => assert_eq!(v["status"], "applied"),
            }
            assert!(id < 50, "no release in 50 rewards");
        };
        // The control: the same release without the key draws other noise.
        let mut control = dpbandits::session::Session::restore(&before).unwrap();
        control.observe_decision(id - 1, 0.0).unwrap();
        drop(s);
        let mut s = crate::testdb::open(&db, ADMIN).unwrap();
        let l = s.ledger_rows("p", 0, 10_000).unwrap();
        assert_eq!(
            l["charges"], 1,
            "the open intent is not charged as lost: {l}"
        );
        assert_eq!(s.reward("p", id, 0.0).unwrap()["status"], "applied");
        let redone = s.experiments["p"].session.snapshot().unwrap();
        assert_ne!(redone, control.snapshot().unwrap());
        let l = s.ledger_rows("p", 0, 10_000).unwrap();
        assert_eq!(
            (l["charges"].clone(), l["max_charges_per_release"].clone()),
            (json!(2), json!(1)),
            "{l}"
        );
        assert_eq!(keys(&s), 0);
        drop(s);
        // A start resumes its check after the checkpoint written with the intent open.
        drop(crate::testdb::open(&db, ADMIN).unwrap());
        crate::testdb::verify(&db).unwrap();
        let ins = store::inspect(&db, "p").unwrap();
        assert_eq!(
            (
                ins.ledger_charged,
                ins.ledger_lost,
                ins.ledger_open,
                ins.releases
            ),
            (2, 0, 0, 2)
        );
    }

    /// A staged reward (the writer's path): the release's intent is written into the batch
    /// with no commit of its own; the draw and the rest run only after the batch's commit,
    /// and not at all when the batch fails (nothing is drawn, nothing is charged). Its
    /// answer, ledger and chain are those of a plain reward.
    #[test]
    fn a_staged_reward_draws_after_its_batch_commits() {
        let dir = shm_dir();
        let db = crate::testdb::db(dir.path(), "s.sqlite");
        let mut s = crate::testdb::open(&db, ADMIN).unwrap();
        let mut r =
            req(json!({"name": "p", "arms": 3, "policy": {"kind": "dp_ts", "epsilon": 1.0}}));
        r.seed = Some(3);
        s.create(r).unwrap();
        let charges = |s: &Service| s.ledger_rows("p", 0, 10_000).unwrap()["charges"].clone();
        // A failed batch: the staged step is dropped unrun; no ledger row survives.
        let d = s.decide("p", None, None).unwrap();
        let id = d["decision_id"].as_u64().unwrap();
        s.begin_batch();
        let Staged::AfterCommit(_dropped) = s.reward_staged("p", id, 1.0).unwrap() else {
            panic!("a per-step private reward stages its release");
        };
        s.fail_batch();
        assert!(s.commit_batch().is_err());
        assert_eq!(charges(&s), 0);
        assert_eq!(s.status("p").unwrap()["pending"], 1);
        // A committed batch: the intent is durable before the step draws.
        s.begin_batch();
        let Staged::AfterCommit(step) = s.reward_staged("p", id, 1.0).unwrap() else {
            panic!("staged");
        };
        s.commit_batch().unwrap();
        let open = store::inspect(&db, "p").unwrap();
        assert_eq!((open.ledger_charged, open.releases), (0, 0));
        s.begin_batch();
        assert_eq!(step(&mut s).unwrap()["status"], "applied");
        s.commit_batch().unwrap();
        assert_eq!(charges(&s), 1);
        // A repeated report is answered at once; outside a batch a staged reward is a plain one.
        s.begin_batch();
        let Staged::Done(v) = s.reward_staged("p", id, 0.0).unwrap() else {
            panic!("a duplicate is not staged");
        };
        s.commit_batch().unwrap();
        assert_eq!(
            (v["status"].clone(), v["differs"].clone()),
            (json!("duplicate"), json!(true))
        );
        let d = s.decide("p", None, None).unwrap();
        let Staged::Done(v) = s
            .reward_staged("p", d["decision_id"].as_u64().unwrap(), 0.0)
            .unwrap()
        else {
            panic!("outside a batch nothing is staged");
        };
        assert_eq!(v["status"], "applied");
        // (DP-TS releases a batch per arm: this reward may or may not complete one.)
        let n = charges(&s).as_u64().unwrap();
        assert!(n >= 1, "{n}");
        drop(s);
        crate::testdb::verify(&db).unwrap();
        let ins = store::inspect(&db, "p").unwrap();
        assert_eq!(
            (ins.ledger_charged, ins.ledger_lost, ins.releases),
            (n, 0, n)
        );
    }

    /// A service on a fresh database (in memory-backed storage; PostgreSQL in the tests'
    /// PostgreSQL pass unless `sqlite`) with experiment `t` and `n` decision + reward pairs
    /// committed in one batch.
    fn with_committed_pairs(
        n: usize,
        sqlite: bool,
    ) -> (tempfile::TempDir, std::path::PathBuf, Service) {
        let dir = shm_dir();
        let db = if sqlite {
            dir.path().join("s.sqlite")
        } else {
            crate::testdb::db(dir.path(), "s.sqlite")
        };
        let mut s = crate::testdb::open(&db, ADMIN).unwrap();
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
        let (_dir, db, mut s) = with_committed_pairs(5, false);
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
        let s = crate::testdb::open(&db, ADMIN).unwrap();
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
        // SQLite: the failure is injected with a temporary trigger of SQLite's dialect.
        let (_dir, db, mut s) = with_committed_pairs(3, true);
        let stored = s.status("t").unwrap();
        s.store
            .connection()
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
        s.store
            .connection()
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
        s.store
            .connection()
            .execute_batch("DROP TRIGGER temp.inject")
            .unwrap();
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
        let conn = rusqlite::Connection::open(&db).unwrap();
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
        s.store
            .connection_mut()
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
            s.store.ledger_totals("t").unwrap().charges as usize
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
            let db = crate::testdb::db(dir.path(), "s.sqlite");
            let mut s = crate::testdb::open(&db, ADMIN).unwrap();
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
                    s = crate::testdb::open(&db, ADMIN).unwrap();
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
            .execute_batch(include_str!("../../tests/fixtures/schema1.sql"))
            .unwrap();
        let history: Value =
            serde_json::from_str(include_str!("../../tests/fixtures/schema1.json")).unwrap();
        let admin = "fixture-admin-token-0123456789";
        let mut s = Service::open(&db, admin).unwrap();
        assert_eq!(s.store.schema_version().unwrap(), store::SCHEMA_VERSION);
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
        // The first start pinned each experiment once (parameters, earlier decisions).
        assert!(chain.unpinned.is_empty(), "{chain:?}");
        let pins: i64 = rusqlite::Connection::open(&db)
            .unwrap()
            .query_row(
                "SELECT COUNT(*) FROM audit WHERE body LIKE '%\"action\":\"pin\"%'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(pins, 3);
        // Opening again does not migrate or pin again.
        drop(Service::open(&db, admin).unwrap());
        assert_eq!(
            crate::verify::verify_default(&db).unwrap().entries,
            chain.entries
        );
        // After the pin, an earlier build's decision rows cannot be changed unnoticed.
        for (what, sql, says) in [
            (
                "an old decision's issue time",
                "UPDATE decisions SET issued_unix = 1.0 WHERE experiment = 'episodic' AND id = 1",
                "the pin entry",
            ),
            (
                "an old decision's request id",
                "UPDATE decisions SET request_id = 'x' WHERE experiment = 'perstep' AND id = 2",
                "the pin entry",
            ),
            (
                "an old experiment's dropout reward (config)",
                "UPDATE experiments SET config = json_set(config, '$.dropout_reward', 0.0) WHERE name = 'deployed'",
                "config dropout_reward",
            ),
        ] {
            let copy = dir.path().join("tampered.sqlite");
            let _ = std::fs::remove_file(&copy);
            let _ = std::fs::remove_file(store::default_key_path(&copy));
            crate::backup::backup(
                &db,
                &copy,
                crate::verify::key_for(&db, None).unwrap().as_ref(),
            )
            .unwrap();
            std::fs::copy(store::default_key_path(&db), store::default_key_path(&copy)).unwrap();
            rusqlite::Connection::open(&copy)
                .unwrap()
                .execute_batch(sql)
                .unwrap();
            let e = crate::verify::verify_default(&copy)
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{what}: verify says {e}");
            let e = format!("{:#}", Service::open(&copy, admin).map(|_| ()).unwrap_err());
            assert!(
                e.contains("refusing to start") && e.contains(says),
                "{what}: {e}"
            );
        }
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
        let db = crate::testdb::db(dir.path(), "s.sqlite");
        let mut s = crate::testdb::open(&db, ADMIN).unwrap();
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
                s = crate::testdb::open(&db, ADMIN).unwrap();
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
                s = crate::testdb::open(&db, ADMIN).unwrap();
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
        assert!(crate::testdb::verify(&db).unwrap().entries > 800);
    }

    /// A best-arm identification experiment decides as the core session until its stopping rule
    /// fires; the stop is recorded once (one `stop` audit entry, the status), and every later
    /// decision request is refused as stopped with the same recommendation, also after a restart.
    #[test]
    fn a_bai_experiment_stops_once_and_says_so() {
        let dir = shm_dir();
        let db = crate::testdb::db(dir.path(), "s.sqlite");
        let mut s = crate::testdb::open(&db, ADMIN).unwrap();
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
        let mut s = crate::testdb::open(&db, ADMIN).unwrap();
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
        let db = crate::testdb::db(dir.path(), "s.sqlite");
        let mut s = crate::testdb::open(&db, ADMIN).unwrap();
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
        let s = crate::testdb::open(&db, ADMIN).unwrap();
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
        let db = crate::testdb::db(dir.path(), "s.sqlite");
        let table = "rho = 1\nnoise = \"simulation\"";
        let mut core = core_session("adac_ucb", table, &Problem::Finite { arms: 3 }, 4);
        {
            let mut s = crate::testdb::open(&db, ADMIN).unwrap();
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
            assert_eq!(r["recommended"]["most_pulled"], json!(most));
            // The recommendation follows the evidence: the largest estimate.
            let best = (0..3)
                .max_by(|&a, &b| {
                    est[a]["estimate"]
                        .as_f64()
                        .unwrap()
                        .total_cmp(&est[b]["estimate"].as_f64().unwrap())
                        .then(b.cmp(&a))
                })
                .unwrap();
            assert_eq!(r["recommended_arm"], json!(best));
            assert_eq!(r["recommended"]["rules_differ"], json!(best != most));
            assert_eq!(r["outcomes"]["observed"], json!(pulls));
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
        let s = crate::testdb::open(&db, ADMIN).unwrap();
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
        let db = crate::testdb::db(dir.path(), "s.sqlite");
        let mut s = crate::testdb::open(&db, ADMIN).unwrap();
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
                        // A late true outcome is stored (issue 43), not applied; a second
                        // one is a duplicate.
                        let late = s.reward("t", id, 1.0).unwrap();
                        assert_eq!(
                            (&late["status"], &late["stored"]),
                            (&json!("late"), &json!(true))
                        );
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
        assert!(crate::testdb::verify(&db).is_ok());
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
            s.store
                .connection()
                .execute("UPDATE audit SET body = '{}' WHERE seq = 2", [])
                .unwrap_err()
                .to_string()
                .contains("append-only")
        );
        assert!(
            s.store
                .connection()
                .execute("DELETE FROM audit WHERE seq = 2", [])
                .is_err()
        );
        s.store
            .connection()
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
        let db = crate::testdb::db(dir.path(), "s.sqlite");
        let table = "rho = 1\nnoise = \"simulation\"";
        let mut core = core_session("adac_ucb", table, &Problem::Finite { arms: 3 }, 4);
        core.set_while_pending(dpbandits::session::WhilePending::Pipeline)
            .unwrap();
        let mut s = crate::testdb::open(&db, ADMIN).unwrap();
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
                s = crate::testdb::open(&db, ADMIN).unwrap();
            }
            let r = coin(id, arm, [0.2, 0.5, 0.7][arm]);
            s.reward("p", id, r).unwrap();
            core.observe_decision(id - 1, r).unwrap();
        }
        assert_eq!(s.status("p").unwrap()["pending"], json!(0));
        drop(s);
        let mut s = crate::testdb::open(&db, ADMIN).unwrap();
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
