//! The SQLite store: schema, the hash-chained audit log, the ledger, and read-only inspection.
//!
//! One database file (WAL mode, `synchronous = FULL`: a commit is on disk before it returns).
//! Tables: `meta`, `experiments` (configuration, client token hash, the core session's snapshot
//! and queryable copies of its counters), `decisions`, `ledger` (release intents and budget
//! charges) and `audit` (append-only, hash-chained; triggers refuse `UPDATE` and `DELETE`).
//! **Protected data**: the decisions table and the audit log hold raw rewards, the snapshots hold
//! raw reward sums.
//!
//! Every SQL statement of the service is here, in a named function; the state machine
//! (`service.rs`) calls them inside its transactions.

use anyhow::{Context, Result, bail};
use rusqlite::{Connection, OptionalExtension, params};
use sha2::{Digest, Sha256};
use std::path::Path;

/// The schema version written in `meta`: 4 = schema 3 with a keyed audit chain (`meta` rows
/// `audit_key` and `audit_keyed_from`; entries from `audit_keyed_from` on are HMAC-SHA256 under
/// a key kept outside the database, [`AuditKey`]). A build that writes unkeyed entries reads
/// at most schema 3, so it refuses a keyed database instead of breaking its chain.
pub const SCHEMA_VERSION: &str = "4";

/// Schema 3: schema 2 plus the decisions' action sets and propensities and idempotent creation
/// (`create_request`, `create_hash`); its audit chain is unkeyed (SHA-256). Keyed on open.
pub const SCHEMA_VERSION_UNKEYED: &str = "3";

/// Schema 2: the `snapshot` column holds a core
/// `dpbandits::session::Session` snapshot.
pub const SCHEMA_VERSION_SESSION: &str = "2";

/// The schema version of databases written before the service held a core session (the
/// `snapshot` column holds a bare policy snapshot); migrated on open (`Service::open`).
pub const SCHEMA_VERSION_POLICY_SNAPSHOTS: &str = "1";

/// The `prev` hash of the first audit entry.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS experiments (
    name TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    arms INTEGER NOT NULL,
    config TEXT NOT NULL,
    token_hash TEXT NOT NULL,
    guarantee TEXT NOT NULL,
    created TEXT NOT NULL,
    snapshot BLOB NOT NULL,
    issued INTEGER NOT NULL,
    observed INTEGER NOT NULL,
    commit_arm INTEGER,
    commit_left INTEGER,
    releases INTEGER NOT NULL,
    create_request TEXT,
    create_hash TEXT
);
CREATE TABLE IF NOT EXISTS decisions (
    experiment TEXT NOT NULL,
    id INTEGER NOT NULL,
    arm INTEGER NOT NULL,
    round INTEGER NOT NULL,
    request_id TEXT,
    issued TEXT NOT NULL,
    reward REAL,
    admitted REAL,
    rewarded TEXT,
    actions TEXT,
    propensity REAL,
    issued_unix REAL,
    outcome TEXT,
    PRIMARY KEY (experiment, id)
);
CREATE UNIQUE INDEX IF NOT EXISTS decisions_request ON decisions (experiment, request_id)
    WHERE request_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS ledger (
    id INTEGER PRIMARY KEY,
    experiment TEXT NOT NULL,
    release INTEGER NOT NULL,
    arm INTEGER NOT NULL,
    rewards INTEGER NOT NULL,
    measure TEXT NOT NULL,
    cost REAL NOT NULL,
    status TEXT NOT NULL,
    created TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS ledger_experiment ON ledger (experiment, id);
CREATE INDEX IF NOT EXISTS ledger_release ON ledger (experiment, release);
CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY,
    ts TEXT NOT NULL,
    experiment TEXT NOT NULL,
    event TEXT NOT NULL,
    body TEXT NOT NULL,
    prev TEXT NOT NULL,
    hash TEXT NOT NULL
);
CREATE TRIGGER IF NOT EXISTS audit_no_update BEFORE UPDATE ON audit
    BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS audit_no_delete BEFORE DELETE ON audit
    BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
"#;

/// Open (creating if needed) the database at `path` in WAL mode with full synchronous commits.
///
/// # Errors
/// The file cannot be opened or is not a dpbandits-serve database of this schema version.
pub fn open(path: &Path) -> Result<Connection> {
    create_private(path)?;
    let conn = Connection::open(path).with_context(|| format!("--db {}", path.display()))?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        bail!(
            "--db {}: SQLite refused WAL mode (got {mode})",
            path.display()
        );
    }
    conn.execute_batch("PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;")?;
    conn.execute_batch(SCHEMA)
        .with_context(|| format!("--db {}: not a dpbandits-serve database", path.display()))?;
    let version: Option<String> = conn
        .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
            r.get(0)
        })
        .optional()?;
    match version.as_deref() {
        None => {
            // Keyed to schema 4 by [`init_audit_key`] before the first entry is written.
            conn.execute(
                "INSERT INTO meta (key, value) VALUES ('schema', ?1)",
                [SCHEMA_VERSION_UNKEYED],
            )?;
        }
        Some(SCHEMA_VERSION | SCHEMA_VERSION_UNKEYED) => {}
        Some(v @ (SCHEMA_VERSION_SESSION | SCHEMA_VERSION_POLICY_SNAPSHOTS)) => {
            // Schema 1 and 2 lack schema 3's columns (all nullable): added in one transaction.
            // A schema-2 database is then schema 3 (keyed to 4 by [`init_audit_key`]); a
            // schema-1 one keeps version 1 until the service migrates its snapshots
            // (`Service::open`).
            let tx = conn.unchecked_transaction()?;
            for (table, column, decl) in [
                ("experiments", "create_request", "TEXT"),
                ("experiments", "create_hash", "TEXT"),
                ("decisions", "actions", "TEXT"),
                ("decisions", "propensity", "REAL"),
                ("decisions", "issued_unix", "REAL"),
                ("decisions", "outcome", "TEXT"),
            ] {
                let present: i64 = tx.query_row(
                    &format!("SELECT COUNT(*) FROM pragma_table_info('{table}') WHERE name = ?1"),
                    [column],
                    |r| r.get(0),
                )?;
                if present == 0 {
                    tx.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {decl}"))?;
                }
            }
            if v == SCHEMA_VERSION_SESSION {
                set_schema_version(&tx, SCHEMA_VERSION_UNKEYED)?;
            }
            tx.commit()?;
        }
        Some(v) => bail!(
            "--db {}: schema version {v}, this build reads versions {SCHEMA_VERSION_POLICY_SNAPSHOTS}, {SCHEMA_VERSION_SESSION} and {SCHEMA_VERSION_UNKEYED} (migrated on open) and {SCHEMA_VERSION}",
            path.display()
        ),
    }
    // The pending decisions by issue time (the reward deadline's query runs at every decision
    // request of an experiment with a deadline: an index, not a scan of its decisions). After
    // the migration above: schema 1 and 2 tables get `issued_unix` there.
    conn.execute_batch(
        "CREATE INDEX IF NOT EXISTS decisions_pending ON decisions (experiment, issued_unix)
         WHERE reward IS NULL",
    )?;
    Ok(conn)
}

/// Create `path` empty with mode 0600 (owner read/write only) unless it exists: the database is
/// protected data, and SQLite creates its WAL and shared-memory files with the database file's
/// mode. An existing file keeps its mode.
///
/// # Errors
/// The file cannot be created.
pub fn create_private(path: &Path) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e).with_context(|| format!("--db {}: cannot create it", path.display())),
    }
}

/// Open an existing database read-only (verification, inspection).
///
/// # Errors
/// The file does not exist or cannot be read.
pub fn open_read_only(path: &Path) -> Result<Connection> {
    if !path.exists() {
        bail!("--db {}: no such file", path.display());
    }
    let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .with_context(|| format!("--db {}", path.display()))?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    Ok(conn)
}

/// The database's schema version (`meta.schema`).
///
/// # Errors
/// SQLite errors, or no version written.
pub fn schema_version(conn: &Connection) -> Result<String> {
    Ok(
        conn.query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
            r.get(0)
        })?,
    )
}

/// Open a batch on `conn`: one write transaction (`BEGIN IMMEDIATE`) that the service's
/// operations share, each a savepoint inside it (group commit).
///
/// # Errors
/// SQLite errors (e.g. a transaction is already open).
pub fn begin_batch(conn: &Connection) -> Result<()> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    Ok(())
}

/// Commit the open batch (one fsync for all its operations).
///
/// # Errors
/// SQLite errors (the batch stays open: [`rollback_batch`] it).
pub fn commit_batch(conn: &Connection) -> Result<()> {
    conn.execute_batch("COMMIT")?;
    Ok(())
}

/// Roll the open batch back.
///
/// # Errors
/// SQLite errors.
pub fn rollback_batch(conn: &Connection) -> Result<()> {
    conn.execute_batch("ROLLBACK")?;
    Ok(())
}

/// Set `meta.key` to `value` (inserted if missing).
///
/// # Errors
/// SQLite errors.
pub fn set_meta(tx: &Connection, key: &str, value: &str) -> Result<()> {
    tx.prepare_cached("INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)")?
        .execute([key, value])?;
    Ok(())
}

/// Write the schema version inside `tx`.
///
/// # Errors
/// SQLite errors.
pub fn set_schema_version(tx: &Connection, version: &str) -> Result<()> {
    tx.execute("UPDATE meta SET value = ?1 WHERE key = 'schema'", [version])?;
    Ok(())
}

/// One stored experiment, as [`load_experiments`] reads it.
#[derive(Debug, Clone)]
pub struct ExperimentRow {
    /// The experiment's name.
    pub name: String,
    /// Its registry kind.
    pub kind: String,
    /// Number of arms.
    pub arms: usize,
    /// SHA-256 of the client token.
    pub token_hash: String,
    /// The configuration the experiment was created with (JSON text).
    pub config: String,
    /// The stored state: a session snapshot (schema 2) or a bare policy snapshot (schema 1).
    pub snapshot: Vec<u8>,
    /// The stored counters.
    pub counters: Counters,
}

/// The service's queryable counters of one experiment: copies of the session's (decisions
/// issued, rewards observed, the open commitment) and the number of completed commitments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// Decisions issued.
    pub issued: u64,
    /// Rewards applied.
    pub observed: u64,
    /// The open commitment: its arm and its rounds not yet observed.
    pub commit: Option<(usize, u64)>,
    /// Completed commitments (releases).
    pub releases: u64,
}

/// Every stored experiment.
///
/// # Errors
/// SQLite errors.
pub fn load_experiments(conn: &Connection) -> Result<Vec<ExperimentRow>> {
    let mut stmt = conn.prepare(
        "SELECT name, kind, arms, token_hash, snapshot, issued, observed, commit_arm, commit_left, releases, config
         FROM experiments ORDER BY name",
    )?;
    let rows = stmt
        .query_map([], |r| {
            let commit = match (r.get::<_, Option<i64>>(7)?, r.get::<_, Option<i64>>(8)?) {
                (Some(a), Some(l)) => Some((a as usize, l as u64)),
                _ => None,
            };
            Ok(ExperimentRow {
                name: r.get(0)?,
                kind: r.get(1)?,
                arms: r.get::<_, i64>(2)? as usize,
                token_hash: r.get(3)?,
                config: r.get(10)?,
                snapshot: r.get(4)?,
                counters: Counters {
                    issued: r.get::<_, i64>(5)? as u64,
                    observed: r.get::<_, i64>(6)? as u64,
                    commit,
                    releases: r.get::<_, i64>(9)? as u64,
                },
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// The stored snapshot of experiment `name`.
///
/// # Errors
/// SQLite errors, or no such experiment.
pub fn load_snapshot(conn: &Connection, name: &str) -> Result<Vec<u8>> {
    Ok(conn.query_row(
        "SELECT snapshot FROM experiments WHERE name = ?1",
        [name],
        |r| r.get(0),
    )?)
}

/// A new experiment's row.
#[derive(Debug, Clone)]
pub struct NewExperiment<'a> {
    /// The name.
    pub name: &'a str,
    /// The registry kind.
    pub kind: &'a str,
    /// Number of arms.
    pub arms: usize,
    /// The configuration (JSON text).
    pub config: &'a str,
    /// SHA-256 of the client token.
    pub token_hash: &'a str,
    /// The guarantee (JSON text).
    pub guarantee: &'a str,
    /// The session snapshot.
    pub snapshot: &'a [u8],
    /// The create call's `request_id` and the SHA-256 of its body (idempotent creation).
    pub create_request: Option<(&'a str, &'a str)>,
}

/// Insert a new experiment (counters at zero) inside `tx`.
///
/// # Errors
/// SQLite errors (an existing name among them).
pub fn insert_experiment(tx: &Connection, e: &NewExperiment<'_>) -> Result<()> {
    tx.execute(
        "INSERT INTO experiments (name, kind, arms, config, token_hash, guarantee, created, snapshot, issued, observed, commit_arm, commit_left, releases, create_request, create_hash)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 0, 0, NULL, NULL, 0, ?9, ?10)",
        params![
            e.name,
            e.kind,
            e.arms as i64,
            e.config,
            e.token_hash,
            e.guarantee,
            now(),
            e.snapshot,
            e.create_request.map(|x| x.0),
            e.create_request.map(|x| x.1)
        ],
    )?;
    Ok(())
}

/// The experiment a create `request_id` made: `(name, body hash)`.
///
/// # Errors
/// SQLite errors.
pub fn find_create_request(
    conn: &Connection,
    request_id: &str,
) -> Result<Option<(String, String)>> {
    Ok(conn
        .query_row(
            "SELECT name, create_hash FROM experiments WHERE create_request = ?1",
            [request_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?)
}

/// Replace an experiment's client-token hash inside `tx`.
///
/// # Errors
/// SQLite errors.
pub fn set_token_hash(tx: &Connection, name: &str, token_hash: &str) -> Result<()> {
    tx.execute(
        "UPDATE experiments SET token_hash = ?2 WHERE name = ?1",
        params![name, token_hash],
    )?;
    Ok(())
}

/// Write an experiment's state inside `tx`: the session snapshot and the counters.
///
/// # Errors
/// SQLite errors.
pub fn update_state(tx: &Connection, name: &str, snapshot: &[u8], c: &Counters) -> Result<()> {
    tx.prepare_cached("UPDATE experiments SET snapshot = ?2, issued = ?3, observed = ?4, commit_arm = ?5, commit_left = ?6, releases = ?7
         WHERE name = ?1")?
        .execute(
        params![
            name,
            snapshot,
            c.issued as i64,
            c.observed as i64,
            c.commit.map(|x| x.0 as i64),
            c.commit.map(|x| x.1 as i64),
            c.releases as i64
        ],
    )?;
    Ok(())
}

/// The decision a `request_id` already got: `(decision_id, arm)`.
///
/// # Errors
/// SQLite errors.
pub fn find_request(
    conn: &Connection,
    name: &str,
    request_id: &str,
) -> Result<Option<(u64, usize)>> {
    Ok(conn
        .prepare_cached("SELECT id, arm FROM decisions WHERE experiment = ?1 AND request_id = ?2")?
        .query_row(params![name, request_id], |r| {
            Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as usize))
        })
        .optional()?)
}

/// A new decision row.
#[derive(Debug, Clone, Copy)]
pub struct NewDecision<'a> {
    /// Decision id (1-based).
    pub id: u64,
    /// The chosen arm (contextual: the index of the chosen action).
    pub arm: usize,
    /// 0-based round.
    pub round: u64,
    /// The client's `request_id`.
    pub request_id: Option<&'a str>,
    /// Contextual: the round's action set (JSON text, `k x d`).
    pub actions: Option<&'a str>,
    /// The policy's probability of the chosen action, where the kind defines one.
    pub propensity: Option<f64>,
    /// When issued, in seconds since the Unix epoch ([`unix_now`]; the reward deadline counts
    /// from it). The same value goes into the decision's audit entry.
    pub issued_unix: f64,
}

/// Insert a decision row inside `tx`.
///
/// # Errors
/// SQLite errors.
pub fn insert_decision(tx: &Connection, name: &str, d: &NewDecision<'_>) -> Result<()> {
    tx.prepare_cached("INSERT INTO decisions (experiment, id, arm, round, request_id, issued, actions, propensity, issued_unix)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)")?
        .execute(
        params![
            name,
            d.id as i64,
            d.arm as i64,
            d.round as i64,
            d.request_id,
            now(),
            d.actions,
            d.propensity,
            d.issued_unix
        ],
    )?;
    Ok(())
}

/// One decision as exported (protected data: it holds the reward).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DecisionRow {
    /// Decision id.
    pub decision_id: u64,
    /// 0-based round.
    pub round: u64,
    /// The chosen arm (contextual: the index of the chosen action).
    pub arm: u64,
    /// The client's `request_id`.
    pub request_id: Option<String>,
    /// When issued.
    pub issued: String,
    /// The reward as reported.
    pub reward: Option<f64>,
    /// The reward as the boundary admitted it (clipped).
    pub admitted: Option<f64>,
    /// When rewarded.
    pub rewarded: Option<String>,
    /// Contextual: the action set (JSON).
    pub actions: Option<serde_json::Value>,
    /// The policy's probability of the chosen action.
    pub propensity: Option<f64>,
    /// `reward`, `abandoned` (the dropout reward was recorded), or none while pending.
    pub outcome: Option<String>,
}

/// An experiment's decisions with `decision_id > after`, at most `limit`, in order.
///
/// # Errors
/// SQLite errors, or a stored action set that is not JSON.
pub fn decision_rows(
    conn: &Connection,
    name: &str,
    after: u64,
    limit: u64,
) -> Result<Vec<DecisionRow>> {
    let mut stmt = conn.prepare(
        "SELECT id, round, arm, request_id, issued, reward, admitted, rewarded, actions, propensity, outcome
         FROM decisions WHERE experiment = ?1 AND id > ?2 ORDER BY id LIMIT ?3",
    )?;
    let rows = stmt
        .query_map(params![name, after as i64, limit as i64], |r| {
            Ok((
                DecisionRow {
                    decision_id: r.get::<_, i64>(0)? as u64,
                    round: r.get::<_, i64>(1)? as u64,
                    arm: r.get::<_, i64>(2)? as u64,
                    request_id: r.get(3)?,
                    issued: r.get(4)?,
                    reward: r.get(5)?,
                    admitted: r.get(6)?,
                    rewarded: r.get(7)?,
                    actions: None,
                    propensity: r.get(9)?,
                    outcome: r.get(10)?,
                },
                r.get::<_, Option<String>>(8)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    rows.into_iter()
        .map(|(mut d, a)| {
            d.actions = a.map(|a| serde_json::from_str(&a)).transpose()?;
            Ok(d)
        })
        .collect()
}

/// A stored decision: its arm, its reward if reported, its outcome.
pub type StoredDecision = (usize, Option<f64>, Option<String>);

/// A decision's arm, its reward if reported and its outcome (`reward`, `abandoned`; `None`
/// before schema 3): `None` for no such decision.
///
/// # Errors
/// SQLite errors.
pub fn decision(conn: &Connection, name: &str, id: u64) -> Result<Option<StoredDecision>> {
    Ok(conn
        .prepare_cached(
            "SELECT arm, reward, outcome FROM decisions WHERE experiment = ?1 AND id = ?2",
        )?
        .query_row(params![name, id as i64], |r| {
            Ok((r.get::<_, i64>(0)? as usize, r.get(1)?, r.get(2)?))
        })
        .optional()?)
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The pending decisions of `name` issued at or before `cutoff` (Unix seconds), oldest first
/// (decisions stored before schema 3 have no issue time and never expire).
///
/// # Errors
/// SQLite errors.
pub fn expired_decisions(conn: &Connection, name: &str, cutoff: f64) -> Result<Vec<u64>> {
    let mut stmt = conn.prepare(
        "SELECT id FROM decisions WHERE experiment = ?1 AND reward IS NULL
         AND issued_unix IS NOT NULL AND issued_unix <= ?2 ORDER BY id",
    )?;
    let rows = stmt
        .query_map(params![name, cutoff], |r| Ok(r.get::<_, i64>(0)? as u64))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// Every pending decision of `name` (no reward recorded), oldest first.
///
/// # Errors
/// SQLite errors.
pub fn pending_decisions(conn: &Connection, name: &str) -> Result<Vec<u64>> {
    let mut stmt = conn
        .prepare("SELECT id FROM decisions WHERE experiment = ?1 AND reward IS NULL ORDER BY id")?;
    let rows = stmt
        .query_map(params![name], |r| Ok(r.get::<_, i64>(0)? as u64))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// Record a decision's reward (as reported, and as admitted by the boundary) and its outcome
/// (`reward`, or `abandoned`: the dropout reward) inside `tx`.
///
/// # Errors
/// SQLite errors.
pub fn record_reward(
    tx: &Connection,
    name: &str,
    id: u64,
    reward: f64,
    admitted: f64,
    outcome: &str,
) -> Result<()> {
    tx.prepare_cached("UPDATE decisions SET reward = ?3, admitted = ?4, rewarded = ?5, outcome = ?6 WHERE experiment = ?1 AND id = ?2")?
        .execute(
        params![name, id as i64, reward, admitted, now(), outcome],
    )?;
    Ok(())
}

/// An open release intent (a ledger row of status `intent`).
#[derive(Debug, Clone, PartialEq)]
pub struct Intent {
    /// Ledger row id.
    pub id: i64,
    /// The experiment.
    pub experiment: String,
    /// The release number.
    pub release: i64,
    /// The arm.
    pub arm: i64,
    /// Its cost.
    pub cost: f64,
}

/// Write a release intent in its own savepoint (the caller makes it durable before the release
/// is drawn: `Service` commits the batch's transaction); returns its ledger row id.
///
/// # Errors
/// SQLite errors.
pub fn insert_intent(
    conn: &mut Connection,
    name: &str,
    release: u64,
    arm: usize,
    rewards: u64,
    measure: &str,
    cost: f64,
) -> Result<i64> {
    let tx = conn.savepoint()?;
    tx.execute(
        "INSERT INTO ledger (experiment, release, arm, rewards, measure, cost, status, created)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'intent', ?7)",
        params![
            name,
            release as i64,
            arm as i64,
            rewards as i64,
            measure,
            cost,
            now()
        ],
    )?;
    let id = tx.last_insert_rowid();
    tx.commit()?;
    Ok(id)
}

/// Every open release intent, oldest first.
///
/// # Errors
/// SQLite errors.
pub fn open_intents(tx: &Connection) -> Result<Vec<Intent>> {
    let mut stmt = tx.prepare(
        "SELECT id, experiment, release, arm, cost FROM ledger WHERE status = 'intent' ORDER BY id",
    )?;
    let rows = stmt
        .query_map([], |r| {
            Ok(Intent {
                id: r.get(0)?,
                experiment: r.get(1)?,
                release: r.get(2)?,
                arm: r.get(3)?,
                cost: r.get(4)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// Set a ledger row's status (`charged`, `lost`) inside `tx`.
///
/// # Errors
/// SQLite errors.
pub fn set_ledger_status(tx: &Connection, id: i64, status: &str) -> Result<()> {
    tx.execute(
        "UPDATE ledger SET status = ?2 WHERE id = ?1",
        params![id, status],
    )?;
    Ok(())
}

/// One ledger row.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LedgerRow {
    /// Row id.
    pub id: i64,
    /// Release number.
    pub release: i64,
    /// Arm.
    pub arm: i64,
    /// Rewards the release covers (a public count: the commitment's length).
    pub rewards: i64,
    /// `rho` or `epsilon`.
    pub measure: String,
    /// Cost.
    pub cost: f64,
    /// `intent`, `charged` or `lost`.
    pub status: String,
    /// When written.
    pub created: String,
}

/// An experiment's ledger rows with `id > after`, at most `limit`, in order.
///
/// # Errors
/// SQLite errors.
pub fn ledger_rows(
    conn: &Connection,
    name: &str,
    after: i64,
    limit: u64,
) -> Result<Vec<LedgerRow>> {
    let mut stmt = conn.prepare(
        "SELECT id, release, arm, rewards, measure, cost, status, created FROM ledger
         WHERE experiment = ?1 AND id > ?2 ORDER BY id LIMIT ?3",
    )?;
    let rows = stmt
        .query_map(params![name, after, limit as i64], |r| {
            Ok(LedgerRow {
                id: r.get(0)?,
                release: r.get(1)?,
                arm: r.get(2)?,
                rewards: r.get(3)?,
                measure: r.get(4)?,
                cost: r.get(5)?,
                status: r.get(6)?,
                created: r.get(7)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// The charged and lost rows of one release of experiment `name` (through the index
/// `ledger_release`).
///
/// # Errors
/// SQLite errors.
pub fn ledger_release_charges(conn: &Connection, name: &str, release: u64) -> Result<u64> {
    let n: i64 = conn.query_row(
        "SELECT COUNT(*) FROM ledger WHERE experiment = ?1 AND release = ?2 AND status != 'intent'",
        params![name, release as i64],
        |r| r.get(0),
    )?;
    Ok(n as u64)
}

/// An experiment's ledger totals over its charged and lost rows (open intents excluded).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LedgerTotals {
    /// Charged and lost rows.
    pub charges: u64,
    /// The sum of their costs.
    pub total: f64,
    /// The largest number of rows of one release number (a release redone after a crash has 2).
    pub max_per_release: u64,
}

/// The ledger totals of experiment `name` (SQL aggregates; no row is loaded).
///
/// # Errors
/// SQLite errors.
pub fn ledger_totals(conn: &Connection, name: &str) -> Result<LedgerTotals> {
    let (charges, total): (i64, f64) = conn.query_row(
        "SELECT COUNT(*), COALESCE(SUM(cost), 0) FROM ledger WHERE experiment = ?1 AND status != 'intent'",
        [name],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let max: i64 = conn.query_row(
        "SELECT COALESCE(MAX(c), 0) FROM (SELECT COUNT(*) AS c FROM ledger
         WHERE experiment = ?1 AND status != 'intent' GROUP BY release)",
        [name],
        |r| r.get(0),
    )?;
    Ok(LedgerTotals {
        charges: charges as u64,
        total,
        max_per_release: max as u64,
    })
}

/// One audit entry.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AuditEntry {
    /// Sequence number.
    pub seq: i64,
    /// Timestamp.
    pub ts: String,
    /// Experiment.
    pub experiment: String,
    /// Event.
    pub event: String,
    /// Body (compact JSON text).
    pub body: String,
    /// Previous hash.
    pub prev: String,
    /// This entry's hash.
    pub hash: String,
}

/// Audit entries after `after` (of `experiment`, or all), at most `limit`.
///
/// # Errors
/// SQLite errors.
pub fn audit_entries(
    conn: &Connection,
    experiment: Option<&str>,
    after: i64,
    limit: i64,
) -> Result<Vec<AuditEntry>> {
    let mut stmt = conn.prepare(
        "SELECT seq, ts, experiment, event, body, prev, hash FROM audit
         WHERE seq > ?1 AND (?2 IS NULL OR experiment = ?2) ORDER BY seq LIMIT ?3",
    )?;
    let rows = stmt
        .query_map(params![after, experiment, limit], |r| {
            Ok(AuditEntry {
                seq: r.get(0)?,
                ts: r.get(1)?,
                experiment: r.get(2)?,
                event: r.get(3)?,
                body: r.get(4)?,
                prev: r.get(5)?,
                hash: r.get(6)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// The key of the audit chain: 32 random bytes kept **outside** the database (a file, by default
/// `<db>.audit-key`, mode 0600). Entries are chained with HMAC-SHA256 under it, so someone who can
/// write the database file but cannot read the key can neither re-chain edited entries nor append
/// forged ones without `dpbandits audit-log verify` (given the key) noticing.
#[derive(Clone)]
pub struct AuditKey {
    key: [u8; 32],
}

impl std::fmt::Debug for AuditKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AuditKey({})", self.fingerprint())
    }
}

impl AuditKey {
    /// A fresh key from the operating system's entropy source.
    ///
    /// # Errors
    /// The entropy source fails.
    pub fn generate() -> Result<AuditKey> {
        use rand::TryRng;
        let mut key = [0u8; 32];
        rand::rngs::SysRng
            .try_fill_bytes(&mut key)
            .map_err(|e| anyhow::anyhow!("the operating system's entropy source failed: {e}"))?;
        Ok(AuditKey { key })
    }

    /// A key from its 64 hexadecimal digits.
    ///
    /// # Errors
    /// Not exactly 64 hexadecimal digits.
    pub fn from_hex(hex: &str) -> Result<AuditKey> {
        let hex = hex.trim();
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            bail!(
                "expected 64 hexadecimal digits (32 bytes), got {} characters",
                hex.len()
            );
        }
        let mut key = [0u8; 32];
        for (i, k) in key.iter_mut().enumerate() {
            *k = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)?;
        }
        Ok(AuditKey { key })
    }

    /// The key's 64 hexadecimal digits (what the key file holds).
    pub fn to_hex(&self) -> String {
        hex(&self.key)
    }

    /// Read the key file `path` (its first line: 64 hexadecimal digits).
    ///
    /// # Errors
    /// The file cannot be read or does not hold a key.
    pub fn load(path: &Path) -> Result<AuditKey> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("--audit-key-file {}", path.display()))?;
        AuditKey::from_hex(text.lines().next().unwrap_or(""))
            .with_context(|| format!("--audit-key-file {}", path.display()))
    }

    /// Read the key file `path`, or create it (mode 0600, written to a temporary name and
    /// renamed) with a fresh key when it does not exist; `true` when created.
    ///
    /// # Errors
    /// The file exists but does not hold a key, or cannot be created.
    pub fn load_or_create(path: &Path) -> Result<(AuditKey, bool)> {
        if path.exists() {
            return Ok((AuditKey::load(path)?, false));
        }
        let key = AuditKey::generate()?;
        let tmp = path.with_extension("audit-key.tmp");
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(format!("{}\n", key.to_hex()).as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)?;
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::File::open(dir)?.sync_all()?;
            }
            Ok(())
        };
        write()
            .with_context(|| format!("--audit-key-file {}: cannot create it", path.display()))?;
        Ok((key, true))
    }

    /// The key's public fingerprint (stored in `meta.audit_key`, printed by `verify`): the first
    /// 16 hexadecimal digits of SHA-256 over a domain tag and the key. It identifies the key
    /// without revealing it.
    pub fn fingerprint(&self) -> String {
        let mut m = b"dpbandits audit key\n".to_vec();
        m.extend_from_slice(&self.key);
        sha256_hex(&m)[..16].to_string()
    }

    /// The keyed hash of one audit entry: HMAC-SHA256 under the key over the message of
    /// [`entry_hash`].
    pub fn entry_hash(
        &self,
        prev: &str,
        seq: i64,
        ts: &str,
        experiment: &str,
        event: &str,
        body: &str,
    ) -> String {
        use hmac::{Hmac, Mac};
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(entry_message(prev, seq, ts, experiment, event, body).as_bytes());
        hex(&mac.finalize().into_bytes())
    }
}

/// The default key file of database `db`: `<db>.audit-key` beside it.
pub fn default_key_path(db: &Path) -> std::path::PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push(".audit-key");
    p.into()
}

/// How the audit chain of a database is keyed (`meta`): the key's fingerprint and the first
/// keyed entry (`1` for a database created keyed; after the last unkeyed entry for one keyed on
/// open). `None`: not keyed (schema 3 and older, never opened by a keyed build).
pub fn audit_keying(conn: &Connection) -> Result<Option<(String, i64)>> {
    let get = |k: &str| -> Result<Option<String>> {
        Ok(conn
            .query_row("SELECT value FROM meta WHERE key = ?1", [k], |r| r.get(0))
            .optional()?)
    };
    match (get("audit_key")?, get("audit_keyed_from")?) {
        (Some(f), Some(from)) => Ok(Some((
            f,
            from.parse()
                .with_context(|| format!("meta audit_keyed_from = {from:?}: not an integer"))?,
        ))),
        (None, None) => Ok(None),
        (f, from) => {
            bail!("meta: audit_key = {f:?} and audit_keyed_from = {from:?}: one without the other")
        }
    }
}

/// The name of the SQL function, registered on the service's connection by [`init_audit_key`],
/// that [`audit`] calls to hash an entry: the key lives with the connection, never in a table.
const AUDIT_HASH_FN: &str = "dpbandits_audit_hash";
/// The query that computes an entry's hash with [`AUDIT_HASH_FN`] (spelled out: it is prepared
/// once per append).
const AUDIT_HASH_SQL: &str = "SELECT dpbandits_audit_hash(?1, ?2, ?3, ?4, ?5, ?6)";

/// Key the audit chain of the open database `conn` with `key`: register the hash function
/// [`audit`] uses, and on the first keyed open record the key's fingerprint and the first keyed
/// sequence number in `meta` (schema 3 becomes 4); a database that already holds unkeyed
/// entries gets a keyed `config` entry `audit-key` naming where keying starts.
///
/// # Errors
/// The database is keyed with another key (its fingerprint differs), or SQLite errors.
pub fn init_audit_key(conn: &Connection, key: &AuditKey, db: &Path) -> Result<()> {
    let k = key.clone();
    conn.create_scalar_function(
        AUDIT_HASH_FN,
        6,
        rusqlite::functions::FunctionFlags::SQLITE_UTF8
            | rusqlite::functions::FunctionFlags::SQLITE_DETERMINISTIC,
        move |ctx| {
            Ok(k.entry_hash(
                &ctx.get::<String>(0)?,
                ctx.get::<i64>(1)?,
                &ctx.get::<String>(2)?,
                &ctx.get::<String>(3)?,
                &ctx.get::<String>(4)?,
                &ctx.get::<String>(5)?,
            ))
        },
    )?;
    match audit_keying(conn)? {
        Some((f, _)) if f == key.fingerprint() => Ok(()),
        Some((f, _)) => bail!(
            "--db {}: its audit chain is keyed with the key of fingerprint {f}; the audit key given has fingerprint {} (use the database's key file)",
            db.display(),
            key.fingerprint()
        ),
        None => {
            let tx = conn.unchecked_transaction()?;
            let last: i64 =
                tx.query_row("SELECT COALESCE(MAX(seq), 0) FROM audit", [], |r| r.get(0))?;
            tx.execute(
                "INSERT INTO meta (key, value) VALUES ('audit_key', ?1), ('audit_keyed_from', ?2)",
                params![key.fingerprint(), (last + 1).to_string()],
            )?;
            if last > 0 {
                audit(
                    &tx,
                    "",
                    "config",
                    &serde_json::json!({"action": "audit-key", "fingerprint": key.fingerprint(),
                        "keyed_from": last + 1, "unkeyed_entries": last}),
                )?;
            }
            if schema_version(&tx)? == SCHEMA_VERSION_UNKEYED {
                set_schema_version(&tx, SCHEMA_VERSION)?;
            }
            tx.commit()?;
            Ok(())
        }
    }
}

/// Lowercase hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lower-case hexadecimal of `bytes` (on the request path: no formatting machinery).
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(2 * bytes.len());
    for &b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    out
}

/// The message an audit entry's hash covers: the previous hash and the entry's fields, each
/// followed by a newline (fields never contain one unescaped: the body is compact JSON).
fn entry_message(
    prev: &str,
    seq: i64,
    ts: &str,
    experiment: &str,
    event: &str,
    body: &str,
) -> String {
    format!("{prev}\n{seq}\n{ts}\n{experiment}\n{event}\n{body}\n")
}

/// The unkeyed hash of one audit entry (entries before `audit_keyed_from`, i.e. written by
/// schema 3 and older): SHA-256 over the entry's message (`entry_message`). Keyed entries use
/// [`AuditKey::entry_hash`].
pub fn entry_hash(
    prev: &str,
    seq: i64,
    ts: &str,
    experiment: &str,
    event: &str,
    body: &str,
) -> String {
    sha256_hex(entry_message(prev, seq, ts, experiment, event, body).as_bytes())
}

/// The current time, RFC 3339 UTC with microseconds.
pub fn now() -> String {
    rfc3339(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default(),
    )
}

/// `d` after the Unix epoch, RFC 3339 UTC with microseconds: `YYYY-MM-DDTHH:MM:SS.ffffffZ`
/// (written digit by digit: it is on every request's path).
fn rfc3339(d: std::time::Duration) -> String {
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    if year > 9999 {
        // Beyond four digits (not before the year 10000): the formatter writes them all.
        return format!(
            "{year}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
            rem / 3600,
            rem / 60 % 60,
            rem % 60,
            d.subsec_micros()
        );
    }
    let mut out = String::with_capacity(27);
    let mut push = |v: i64, width: u32, after: char| {
        for k in (0..width).rev() {
            out.push(char::from(b'0' + (v / 10i64.pow(k) % 10) as u8));
        }
        out.push(after);
    };
    push(year, 4, '-');
    push(month, 2, '-');
    push(day, 2, 'T');
    push(rem / 3600, 2, ':');
    push(rem / 60 % 60, 2, ':');
    push(rem % 60, 2, '.');
    push(i64::from(d.subsec_micros()), 6, 'Z');
    out
}

/// Append one entry to the audit chain inside `tx`; returns its `(seq, hash)`.
///
/// # Errors
/// SQLite errors.
pub fn audit(
    tx: &Connection,
    experiment: &str,
    event: &str,
    body: &serde_json::Value,
) -> Result<(i64, String)> {
    let last: Option<(i64, String)> = tx
        .prepare_cached("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1")?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let (seq, prev) = match last {
        Some((s, h)) => (s + 1, h),
        None => (1, GENESIS.to_string()),
    };
    let ts = now();
    let body = body.to_string();
    // Keyed: the connection's hash function holds the key ([`init_audit_key`]); a connection
    // without it cannot append.
    let hash: String = tx
        .prepare_cached(AUDIT_HASH_SQL)?
        .query_row(params![prev, seq, ts, experiment, event, body], |r| {
            r.get(0)
        })
        .context("appending to the audit log: the audit key is not loaded on this connection")?;
    tx.prepare_cached("INSERT INTO audit (seq, ts, experiment, event, body, prev, hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)")?
        .execute(
        params![seq, ts, experiment, event, body, prev, hash],
    )?;
    Ok((seq, hash))
}

/// The number of audit entries and the head (the last entry's hash; [`GENESIS`] for an empty
/// log): what `--publish-head` publishes and `--expect-head` checks.
///
/// # Errors
/// SQLite errors.
pub fn audit_head(conn: &Connection) -> Result<(u64, String)> {
    let last: Option<(i64, String)> = conn
        .prepare_cached("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1")?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    Ok(last.map_or((0, GENESIS.to_string()), |(s, h)| (s as u64, h)))
}

/// The digest that a `pin` audit entry records for the decisions of an experiment created
/// before its decision entries carried `request_id`, `propensity` and `issued_unix`: SHA-256
/// over one line per decision with `id <= upto`, in id order (`id`, `request_id`, the bits of
/// `propensity` and of `issued_unix`, `-` for none). Returns the number of rows and the digest.
///
/// # Errors
/// SQLite errors.
pub fn decisions_digest(conn: &Connection, experiment: &str, upto: u64) -> Result<(u64, String)> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, request_id, propensity, issued_unix FROM decisions WHERE experiment = ?1 AND id <= ?2 ORDER BY id",
    )?;
    let mut rows = stmt.query(params![experiment, upto as i64])?;
    let mut h = Sha256::new();
    let mut n = 0u64;
    let bits = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{:016x}", v.to_bits()));
    while let Some(r) = rows.next()? {
        let (id, rid, p, at): (i64, Option<String>, Option<f64>, Option<f64>) =
            (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
        let rid = rid.map_or("-".to_string(), |r| format!("{r:?}"));
        h.update(format!("{id}\t{rid}\t{}\t{}\n", bits(p), bits(at)).as_bytes());
        n += 1;
    }
    Ok((n, hex(&h.finalize())))
}

// ---- The verifier's reads (`crate::verify`): the log in order, rows by primary key, counts.

/// Whether the database has an `audit` table (a dpbandits-serve database).
///
/// # Errors
/// SQLite errors (e.g. not an SQLite database).
pub fn has_audit_table(conn: &Connection) -> Result<bool> {
    let n: i64 = conn.query_row(
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'audit'",
        [],
        |r| r.get(0),
    )?;
    Ok(n > 0)
}

/// The number of audit entries.
///
/// # Errors
/// SQLite errors.
pub fn audit_count(conn: &Connection) -> Result<i64> {
    Ok(conn.query_row("SELECT COUNT(*) FROM audit", [], |r| r.get(0))?)
}

/// One audit entry as stored.
#[derive(Debug, Clone)]
pub struct AuditRow {
    /// Sequence number.
    pub seq: i64,
    /// Time written.
    pub ts: String,
    /// The experiment (`""`: database-wide).
    pub experiment: String,
    /// The event name.
    pub event: String,
    /// The body (compact JSON text).
    pub body: String,
    /// The previous entry's hash.
    pub prev: String,
    /// This entry's hash.
    pub hash: String,
}

/// Call `f` with every audit entry in order (one pass, bounded memory).
///
/// # Errors
/// SQLite errors, or `f`'s.
pub fn for_each_audit_entry(
    conn: &Connection,
    mut f: impl FnMut(AuditRow) -> Result<()>,
) -> Result<()> {
    let mut stmt = conn
        .prepare("SELECT seq, ts, experiment, event, body, prev, hash FROM audit ORDER BY seq")?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        f(AuditRow {
            seq: r.get(0)?,
            ts: r.get(1)?,
            experiment: r.get(2)?,
            event: r.get(3)?,
            body: r.get(4)?,
            prev: r.get(5)?,
            hash: r.get(6)?,
        })?;
    }
    Ok(())
}

/// A decision row as the verifier reads it.
#[derive(Debug, Clone)]
pub struct CheckedDecision {
    /// The chosen arm.
    pub arm: i64,
    /// The action set (JSON text).
    pub actions: Option<String>,
    /// The reward as reported.
    pub reward: Option<f64>,
    /// The reward as admitted.
    pub admitted: Option<f64>,
    /// `reward` or `abandoned`.
    pub outcome: Option<String>,
    /// The client's request id.
    pub request_id: Option<String>,
    /// The propensity.
    pub propensity: Option<f64>,
    /// When issued (seconds since the epoch).
    pub issued_unix: Option<f64>,
}

/// A settled ledger row as the verifier reads it.
#[derive(Debug, Clone)]
pub struct CheckedCharge {
    /// The experiment.
    pub experiment: String,
    /// The release number.
    pub release: i64,
    /// The arm.
    pub arm: i64,
    /// The budget's measure.
    pub measure: String,
    /// The cost.
    pub cost: f64,
    /// `intent`, `charged` or `lost`.
    pub status: String,
}

/// The verifier's row lookups by primary key (statements prepared once).
pub struct RowReader<'c> {
    decision: rusqlite::Statement<'c>,
    ledger: rusqlite::Statement<'c>,
}

impl<'c> RowReader<'c> {
    /// Prepare the lookups on `conn`.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn new(conn: &'c Connection) -> Result<Self> {
        Ok(RowReader {
            decision: conn.prepare(
                "SELECT arm, actions, reward, admitted, outcome, request_id, propensity, issued_unix FROM decisions WHERE experiment = ?1 AND id = ?2",
            )?,
            ledger: conn.prepare(
                "SELECT experiment, release, arm, measure, cost, status FROM ledger WHERE id = ?1",
            )?,
        })
    }

    /// Decision `id` of `experiment`.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn decision(&mut self, experiment: &str, id: u64) -> Result<Option<CheckedDecision>> {
        Ok(self
            .decision
            .query_row(params![experiment, id as i64], |r| {
                Ok(CheckedDecision {
                    arm: r.get(0)?,
                    actions: r.get(1)?,
                    reward: r.get(2)?,
                    admitted: r.get(3)?,
                    outcome: r.get(4)?,
                    request_id: r.get(5)?,
                    propensity: r.get(6)?,
                    issued_unix: r.get(7)?,
                })
            })
            .optional()?)
    }

    /// Ledger row `id`.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn ledger(&mut self, id: i64) -> Result<Option<CheckedCharge>> {
        Ok(self
            .ledger
            .query_row([id], |r| {
                Ok(CheckedCharge {
                    experiment: r.get(0)?,
                    release: r.get(1)?,
                    arm: r.get(2)?,
                    measure: r.get(3)?,
                    cost: r.get(4)?,
                    status: r.get(5)?,
                })
            })
            .optional()?)
    }
}

/// Row counts per experiment of the tables the log explains.
#[derive(Debug, Default)]
pub struct TableCounts {
    /// Decision rows.
    pub decisions: std::collections::BTreeMap<String, u64>,
    /// Decision rows with a reward.
    pub rewarded: std::collections::BTreeMap<String, u64>,
    /// Settled ledger rows (`charged`, `lost`).
    pub charges: std::collections::BTreeMap<String, u64>,
    /// Ledger rows of status `intent`.
    pub intents: std::collections::BTreeMap<String, u64>,
}

/// [`TableCounts`] of the database.
///
/// # Errors
/// SQLite errors.
pub fn table_counts(conn: &Connection) -> Result<TableCounts> {
    let counts = |sql: &str| -> Result<std::collections::BTreeMap<String, u64>> {
        let mut stmt = conn.prepare(sql)?;
        let rows = stmt
            .query_map([], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64))
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    };
    Ok(TableCounts {
        decisions: counts("SELECT experiment, COUNT(*) FROM decisions GROUP BY experiment")?,
        rewarded: counts(
            "SELECT experiment, COUNT(*) FROM decisions WHERE reward IS NOT NULL GROUP BY experiment",
        )?,
        charges: counts(
            "SELECT experiment, COUNT(*) FROM ledger WHERE status != 'intent' GROUP BY experiment",
        )?,
        intents: counts(
            "SELECT experiment, COUNT(*) FROM ledger WHERE status = 'intent' GROUP BY experiment",
        )?,
    })
}

/// The report of a closed experiment: the body of its audit log's `close` entry with that
/// entry's `audit_seq` and `audit_hash` (`None`: not closed).
///
/// # Errors
/// A database error, or a `close` entry whose body is not JSON.
pub fn close_entry(conn: &Connection, experiment: &str) -> Result<Option<serde_json::Value>> {
    let row: Option<(i64, String, String)> = conn
        .query_row(
            "SELECT seq, body, hash FROM audit WHERE experiment = ?1 AND event = 'close' ORDER BY seq LIMIT 1",
            [experiment],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?;
    let Some((seq, body, hash)) = row else {
        return Ok(None);
    };
    let mut v: serde_json::Value = serde_json::from_str(&body)
        .with_context(|| format!("experiment {experiment:?}: audit entry {seq} (close)"))?;
    v["audit_seq"] = serde_json::json!(seq);
    v["audit_hash"] = serde_json::json!(hash);
    Ok(Some(v))
}

/// Completed decisions (with a recorded reward, abandoned ones included) per arm `0..arms`.
///
/// # Errors
/// A database error.
pub fn completed_by_arm(conn: &Connection, experiment: &str, arms: usize) -> Result<Vec<u64>> {
    let mut out = vec![0u64; arms];
    let mut stmt = conn.prepare(
        "SELECT arm, COUNT(*) FROM decisions WHERE experiment = ?1 AND reward IS NOT NULL GROUP BY arm",
    )?;
    let rows = stmt.query_map([experiment], |r| {
        Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
    })?;
    for row in rows {
        let (arm, n) = row?;
        if let Some(slot) = usize::try_from(arm).ok().and_then(|a| out.get_mut(a)) {
            *slot = n as u64;
        }
    }
    Ok(out)
}

/// Copy the database open on `conn` into the new file `to` (`VACUUM INTO`: one transaction's
/// snapshot, the WAL folded in; what [`crate::backup::backup`] writes and verifies).
///
/// # Errors
/// `to` is not UTF-8, exists, or SQLite cannot write it.
pub fn vacuum_into(conn: &Connection, to: &Path) -> Result<()> {
    conn.execute("VACUUM INTO ?1", [to.to_str().context("--out: not UTF-8")?])
        .with_context(|| format!("VACUUM INTO {}", to.display()))?;
    Ok(())
}

/// A read-only view of one experiment, for tests and operators (reads protected data: rewards).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Inspection {
    /// Decisions issued (rows).
    pub decisions: u64,
    /// Rewarded decisions.
    pub rewarded: u64,
    /// `(decision_id, arm, reward as reported)` of every rewarded decision.
    pub rewards: Vec<(u64, usize, f64)>,
    /// The experiment row's counters: issued, observed, releases.
    pub issued: u64,
    /// Rewards applied to the policy according to the service's counter.
    pub observed: u64,
    /// Completed commitments (episodes) whose release was charged.
    pub releases: u64,
    /// Ledger rows by status: `charged`, `lost` (an intent that never completed: charged),
    /// `intent` (open; only while the service runs).
    pub ledger_charged: u64,
    /// See `ledger_charged`.
    pub ledger_lost: u64,
    /// See `ledger_charged`.
    pub ledger_open: u64,
    /// Sum of the costs of charged and lost ledger rows.
    pub ledger_total: f64,
    /// The state of the policy in the stored session snapshot, as JSON.
    pub policy_state: serde_json::Value,
}

/// Inspect experiment `name` in the database at `path` (read-only).
///
/// # Errors
/// No such database or experiment.
pub fn inspect(path: &Path, name: &str) -> Result<Inspection> {
    let conn = open_read_only(path)?;
    let (snapshot, issued, observed, releases): (Vec<u8>, i64, i64, i64) = conn
        .query_row(
            "SELECT snapshot, issued, observed, releases FROM experiments WHERE name = ?1",
            [name],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .optional()?
        .with_context(|| format!("experiment = {name:?}: not in --db {}", path.display()))?;
    // A session snapshot (schema 2), or a bare policy snapshot (a schema-1 database not yet
    // opened by this build).
    let snap = if dpbandits::session::Session::is_session_snapshot(&snapshot) {
        dpbandits::session::Session::restore(&snapshot)?
            .policy()
            .snapshot()?
    } else {
        dpbandits::snapshot::Snapshot::decode(&snapshot)?
    };
    let decisions: i64 = conn.query_row(
        "SELECT COUNT(*) FROM decisions WHERE experiment = ?1",
        [name],
        |r| r.get(0),
    )?;
    let mut stmt = conn.prepare(
        "SELECT id, arm, reward FROM decisions WHERE experiment = ?1 AND reward IS NOT NULL ORDER BY id",
    )?;
    let rewards = stmt
        .query_map([name], |r| {
            Ok((
                r.get::<_, i64>(0)? as u64,
                r.get::<_, i64>(1)? as usize,
                r.get(2)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let count = |status: &str| -> Result<u64> {
        Ok(conn.query_row(
            "SELECT COUNT(*) FROM ledger WHERE experiment = ?1 AND status = ?2",
            [name, status],
            |r| r.get::<_, i64>(0),
        )? as u64)
    };
    let ledger_total: f64 = conn.query_row(
        "SELECT COALESCE(SUM(cost), 0) FROM ledger WHERE experiment = ?1 AND status IN ('charged', 'lost')",
        [name],
        |r| r.get(0),
    )?;
    Ok(Inspection {
        decisions: decisions as u64,
        rewarded: rewards.len() as u64,
        rewards,
        issued: issued as u64,
        observed: observed as u64,
        releases: releases as u64,
        ledger_charged: count("charged")?,
        ledger_lost: count("lost")?,
        ledger_open: count("intent")?,
        ledger_total,
        policy_state: serde_json::to_value(snap.state_value())?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timestamps_and_hex_are_written_as_the_formatter_would() {
        assert_eq!(rfc3339(Duration::ZERO), "1970-01-01T00:00:00.000000Z");
        // 2000-02-29 (a leap day of a century leap year), 23:59:59.999999.
        assert_eq!(
            rfc3339(Duration::new(951_868_799, 999_999_000)),
            "2000-02-29T23:59:59.999999Z"
        );
        assert_eq!(
            rfc3339(Duration::new(4_102_444_800, 1_000)),
            "2100-01-01T00:00:00.000001Z"
        );
        assert_eq!(
            rfc3339(Duration::new(253_402_300_800, 0)),
            "10000-01-01T00:00:00.000000Z"
        );
        // Every field against the formatting machinery, over 200 years in odd steps.
        let mut t = 0u64;
        while t < 6_400_000_000 {
            let d = Duration::new(t, (t % 1_000_000) as u32 * 1000);
            let s = rfc3339(d);
            let parts: Vec<u32> = s[..26]
                .split(['-', 'T', ':', '.'])
                .map(|p| p.parse().unwrap())
                .collect();
            let again = format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
                parts[0], parts[1], parts[2], parts[3], parts[4], parts[5], parts[6]
            );
            assert_eq!(s, again);
            assert_eq!(
                u64::from(parts[3]) * 3600 + u64::from(parts[4]) * 60 + u64::from(parts[5]),
                t % 86_400
            );
            t += 86_400 * 37 + 3_599;
        }
        let bytes: Vec<u8> = (0..=255).collect();
        let reference: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex(&bytes), reference);
        assert!(AUDIT_HASH_SQL.starts_with(&format!("SELECT {AUDIT_HASH_FN}(")));
    }
}
