//! The database file: the schema and its versions, opening (WAL, `synchronous = FULL`, mode
//! 0600), the batch's transaction, `meta`, and the clocks and hex the other parts share.

use super::sql::{Conn, PgConn, args, is_postgres_url, redacted};
use anyhow::{Context, Result, bail};
use rusqlite::Connection;
use sha2::{Digest, Sha256};
use std::path::Path;

/// The schema version written in `meta`: 4 = schema 3 with a keyed audit chain (`meta` rows
/// `audit_key` and `audit_keyed_from`; entries from `audit_keyed_from` on are HMAC-SHA256 under
/// a key kept outside the database, [`super::AuditKey`]). A build that writes unkeyed entries reads
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

pub(super) const SCHEMA: &str = r#"
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
    late_reward REAL,
    late_received TEXT,
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
CREATE TABLE IF NOT EXISTS release_keys (ledger_id INTEGER PRIMARY KEY, key BLOB NOT NULL);
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

/// The schema on PostgreSQL: the SQLite schema's tables and indexes with PostgreSQL's types
/// (`BIGINT`, `DOUBLE PRECISION`, `BYTEA`; the ledger's id an identity column) and the late
/// outcomes' columns from the start; the audit log's append-only rule is a trigger function that
/// refuses `UPDATE`, `DELETE` and `TRUNCATE`.
pub(super) const PG_SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS experiments (
    name TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    arms BIGINT NOT NULL,
    config TEXT NOT NULL,
    token_hash TEXT NOT NULL,
    guarantee TEXT NOT NULL,
    created TEXT NOT NULL,
    snapshot BYTEA NOT NULL,
    issued BIGINT NOT NULL,
    observed BIGINT NOT NULL,
    commit_arm BIGINT,
    commit_left BIGINT,
    releases BIGINT NOT NULL,
    create_request TEXT,
    create_hash TEXT
);
CREATE TABLE IF NOT EXISTS decisions (
    experiment TEXT NOT NULL,
    id BIGINT NOT NULL,
    arm BIGINT NOT NULL,
    round BIGINT NOT NULL,
    request_id TEXT,
    issued TEXT NOT NULL,
    reward DOUBLE PRECISION,
    admitted DOUBLE PRECISION,
    rewarded TEXT,
    actions TEXT,
    propensity DOUBLE PRECISION,
    issued_unix DOUBLE PRECISION,
    outcome TEXT,
    late_reward DOUBLE PRECISION,
    late_received TEXT,
    PRIMARY KEY (experiment, id)
);
CREATE UNIQUE INDEX IF NOT EXISTS decisions_request ON decisions (experiment, request_id)
    WHERE request_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS ledger (
    id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    experiment TEXT NOT NULL,
    release BIGINT NOT NULL,
    arm BIGINT NOT NULL,
    rewards BIGINT NOT NULL,
    measure TEXT NOT NULL,
    cost DOUBLE PRECISION NOT NULL,
    status TEXT NOT NULL,
    created TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS ledger_experiment ON ledger (experiment, id);
CREATE INDEX IF NOT EXISTS ledger_release ON ledger (experiment, release);
CREATE TABLE IF NOT EXISTS release_keys (ledger_id BIGINT PRIMARY KEY, key BYTEA NOT NULL);
CREATE TABLE IF NOT EXISTS audit (
    seq BIGINT PRIMARY KEY,
    ts TEXT NOT NULL,
    experiment TEXT NOT NULL,
    event TEXT NOT NULL,
    body TEXT NOT NULL,
    prev TEXT NOT NULL,
    hash TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS owner (
    id BIGINT PRIMARY KEY CHECK (id = 1),
    node TEXT NOT NULL,
    epoch BIGINT NOT NULL,
    lease_until TIMESTAMPTZ NOT NULL,
    addr TEXT
);
CREATE OR REPLACE FUNCTION dpbandits_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN RAISE EXCEPTION 'the audit log is append-only'; END $$;
CREATE OR REPLACE TRIGGER audit_no_change BEFORE UPDATE OR DELETE ON audit
    FOR EACH ROW EXECUTE FUNCTION dpbandits_audit_append_only();
CREATE OR REPLACE TRIGGER audit_no_truncate BEFORE TRUNCATE ON audit
    FOR EACH STATEMENT EXECUTE FUNCTION dpbandits_audit_append_only();
CREATE OR REPLACE FUNCTION dpbandits_fence(mine BIGINT) RETURNS void LANGUAGE plpgsql AS $$
    DECLARE e BIGINT; n TEXT;
    BEGIN
        SELECT epoch, node INTO e, n FROM owner WHERE id = 1 FOR SHARE;
        IF e IS DISTINCT FROM mine THEN
            RAISE EXCEPTION 'fenced' USING ERRCODE = 'DPB01',
                DETAIL = COALESCE(e, 0)::text || ' ' || COALESCE(n, '');
        END IF;
    END $$;
"#;

/// The indexes both stores add after the schema (and after SQLite's migrations): partial
/// indexes of a few rows each, so free to keep. The close entry of an experiment and the late
/// outcomes are read at every start, without a scan of the log or of the decisions; the pending
/// decisions by issue time are read at every decision request of an experiment with a reward
/// deadline (schema 1 and 2 tables get `issued_unix` in the migration first).
const PARTIAL_INDEXES: &str =
    "CREATE INDEX IF NOT EXISTS audit_close ON audit (experiment, seq) WHERE event = 'close';
     CREATE INDEX IF NOT EXISTS decisions_late ON decisions (experiment, id)
     WHERE late_reward IS NOT NULL;
     CREATE INDEX IF NOT EXISTS decisions_pending ON decisions (experiment, issued_unix)
     WHERE reward IS NULL";

/// The store: the service's one connection (an SQLite file or a PostgreSQL database,
/// `store::sql::Conn`) and whether a batch is open on it. Every
/// statement of the service is a method of it: reads through [`Reads`] (which a store and a
/// [`Tx`] dereference to), writes through a [`Tx`] ([`Store::begin`]). This is the seam a second
/// backend plugs into.
pub struct Store {
    pub(super) reads: Reads,
    batch: Batch,
    /// PostgreSQL: the epoch this store claimed ([`Store::claim`]); every write transaction
    /// checks it first ([`super::owner`]).
    pub(super) epoch: Option<i64>,
    /// PostgreSQL: the flag of the thread that renews the claim's lease (cleared on drop).
    pub(super) renewer: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

/// Whether a batch (group commit's one transaction, [`Store::begin_batch`]) is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Batch {
    /// No batch: a [`Tx`] is its own transaction, committed by [`Tx::commit`].
    Idle,
    /// A batch is open: every [`Tx`] is a savepoint inside it, durable at
    /// [`Store::commit_batch`].
    Open,
}

/// The read statements of the store (the service's, the verifier's, inspection's), on its
/// connection: reached through a [`Store`] or a [`Tx`], which both dereference to it.
pub struct Reads {
    pub(super) conn: Conn,
    /// The audit chain's key, once [`Store::init_audit_key`] loaded it: [`Tx::audit`] cannot
    /// append without it. It lives with the connection, never in a table.
    pub(super) key: std::cell::RefCell<Option<super::AuditKey>>,
    /// What `--db` named (a PostgreSQL URL with its password hidden), for messages.
    pub(super) name: String,
    /// The audit log's last `(seq, hash)` as this connection appended it ([`Tx::audit`]), so that
    /// an append needs no read of the head (a round trip on PostgreSQL). Forgotten whenever
    /// anything is rolled back, and on reconnection: then read again.
    pub(super) head: std::cell::RefCell<Option<(i64, String)>>,
}

/// One operation's writes: a savepoint on the store's connection (inside the open batch, or
/// its own transaction outside one). Every write statement is a method of it; reads go through
/// it too (it dereferences to [`Reads`]). Dropped without [`Tx::commit`], its writes are rolled
/// back.
pub struct Tx<'a> {
    pub(super) reads: &'a Reads,
    batch: Batch,
    done: bool,
    /// The cached audit head when it began: what a rollback puts back ([`Reads::head`]).
    head: Option<(i64, String)>,
    /// PostgreSQL inside a batch: where this `Tx`'s deferred statements begin in the batch's
    /// stream of statements (`Conn::deferred_position`). Such a `Tx` has no savepoint: a
    /// rollback drops its statements before they are sent (`Conn::undo_deferred`).
    mark: Option<usize>,
}

/// The savepoint's name ([`Tx`]): savepoints nest, each `RELEASE` or `ROLLBACK TO` names the
/// innermost one.
const SAVEPOINT: &str = "dpbandits_tx";

impl std::ops::Deref for Store {
    type Target = Reads;
    fn deref(&self) -> &Reads {
        &self.reads
    }
}

impl std::ops::Deref for Tx<'_> {
    type Target = Reads;
    fn deref(&self) -> &Reads {
        self.reads
    }
}

impl Store {
    /// Open (creating if needed) the database `path` names: an SQLite file in WAL mode with
    /// full synchronous commits, or (a `postgres://` URL) a PostgreSQL database, whose tables
    /// are created when missing.
    ///
    /// # Errors
    /// The database cannot be opened or is not a dpbandits-serve database of this schema version.
    pub fn open(path: &Path) -> Result<Store> {
        if is_postgres_url(path) {
            return Store::open_pg(path);
        }
        create_private(path)?;
        let conn = Connection::open(path).with_context(|| format!("--db {}", path.display()))?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.set_prepared_statement_cache_capacity(64);
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
        let store = Store::on(Conn::Lite(conn), path.display().to_string());
        store.check_schema()?;
        add_late_columns(&store.reads.conn)?;
        store.reads.conn.batch(PARTIAL_INDEXES)?;
        Ok(store)
    }

    /// Open a PostgreSQL database for writing: its tables created when missing (in one
    /// transaction, under a transaction-scoped advisory lock so that two first starts do not
    /// race), `synchronous_commit` on (a commit is durable, on the standbys the server names,
    /// before it returns).
    fn open_pg(path: &Path) -> Result<Store> {
        let url = path.to_str().unwrap_or_default();
        let pg = PgConn::connect(url)?;
        pg.set_session(
            "SET synchronous_commit = on; SET client_min_messages = warning; \
             SET standard_conforming_strings = on",
        )?;
        let conn = Conn::Pg(Box::new(pg));
        conn.batch(&format!(
            "BEGIN; SELECT pg_advisory_xact_lock(4242001); {PG_SCHEMA}; {PARTIAL_INDEXES}; COMMIT"
        ))
        .with_context(|| format!("--db {}: cannot create the schema", redacted(url)))?;
        let store = Store::on(conn, redacted(url));
        store.check_schema()?;
        Ok(store)
    }

    fn on(conn: Conn, name: String) -> Store {
        Store {
            reads: Reads {
                conn,
                key: std::cell::RefCell::new(None),
                name,
                head: std::cell::RefCell::new(None),
            },
            batch: Batch::Idle,
            epoch: None,
            renewer: None,
        }
    }

    /// Check the schema version of a store just opened; schema 1 and 2 (SQLite) get schema 3's
    /// columns.
    fn check_schema(&self) -> Result<()> {
        let conn = &self.reads.conn;
        let version: Option<String> = conn.row(
            "SELECT value FROM meta WHERE key = 'schema'",
            args![],
            |r| r.get(0),
        )?;
        match version.as_deref() {
            None => {
                // Keyed to schema 4 by [`Store::init_audit_key`] before the first entry is written.
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema', ?1) ON CONFLICT (key) DO NOTHING",
                    args![SCHEMA_VERSION_UNKEYED],
                )?;
            }
            Some(SCHEMA_VERSION | SCHEMA_VERSION_UNKEYED) => {}
            Some(v @ (SCHEMA_VERSION_SESSION | SCHEMA_VERSION_POLICY_SNAPSHOTS))
                if !conn.is_pg() =>
            {
                // Schema 1 and 2 lack schema 3's columns (all nullable): added in one transaction.
                // A schema-2 database is then schema 3 (keyed to 4 by [`Store::init_audit_key`]); a
                // schema-1 one keeps version 1 until the service migrates its snapshots
                // (`Service::open`).
                let tx = self.begin()?;
                for (table, column, decl) in [
                    ("experiments", "create_request", "TEXT"),
                    ("experiments", "create_hash", "TEXT"),
                    ("decisions", "actions", "TEXT"),
                    ("decisions", "propensity", "REAL"),
                    ("decisions", "issued_unix", "REAL"),
                    ("decisions", "outcome", "TEXT"),
                ] {
                    if !conn.has_column(table, column)? {
                        conn.batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {decl}"))?;
                    }
                }
                if v == SCHEMA_VERSION_SESSION {
                    tx.set_schema_version(SCHEMA_VERSION_UNKEYED)?;
                }
                tx.commit()?;
            }
            Some(v) => bail!(
                "--db {}: schema version {v}, this build reads versions {SCHEMA_VERSION_POLICY_SNAPSHOTS}, {SCHEMA_VERSION_SESSION} and {SCHEMA_VERSION_UNKEYED} (migrated on open) and {SCHEMA_VERSION}",
                self.reads.name
            ),
        }
        Ok(())
    }

    /// Open an existing database read-only (verification, inspection, the reader threads): an
    /// SQLite file opened read-only, or a PostgreSQL session whose transactions are read-only.
    ///
    /// # Errors
    /// The file does not exist or cannot be read; the server cannot be reached.
    pub fn open_read_only(path: &Path) -> Result<Store> {
        if is_postgres_url(path) {
            let url = path.to_str().unwrap_or_default();
            let pg = PgConn::connect(url)?;
            pg.set_session("SET default_transaction_read_only = on")?;
            return Ok(Store::on(Conn::Pg(Box::new(pg)), redacted(url)));
        }
        if !path.exists() {
            bail!("--db {}: no such file", path.display());
        }
        let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .with_context(|| format!("--db {}", path.display()))?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.set_prepared_statement_cache_capacity(64);
        Ok(Store::on(Conn::Lite(conn), path.display().to_string()))
    }
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

impl Store {
    /// Begin one operation's writes ([`Tx`]): a savepoint, inside the open batch or its own
    /// transaction (on PostgreSQL, which has no savepoint outside a transaction, the outermost
    /// one outside a batch is a `BEGIN`).
    ///
    /// # Errors
    /// Database errors.
    pub fn begin(&self) -> Result<Tx<'_>> {
        match &self.reads.conn {
            Conn::Pg(p) if self.batch == Batch::Idle && p.depth.get() == 0 => {
                if self.reads.conn.reconnect_if_closed()? {
                    self.reads.head.replace(None);
                }
                self.reads.conn.batch("BEGIN")?;
                if let Err(e) = self.fence() {
                    let _ = self.reads.conn.batch("ROLLBACK");
                    return Err(e);
                }
            }
            // Inside a batch: no savepoint, only where its statements begin.
            Conn::Pg(_) if self.reads.conn.deferred_position().is_some() => {}
            Conn::Pg(p) => {
                let released = deferred_releases(p);
                self.reads
                    .conn
                    .batch(&format!("{released}SAVEPOINT {SAVEPOINT}"))?;
            }
            conn => conn.batch(&format!("SAVEPOINT {SAVEPOINT}"))?,
        }
        if let Conn::Pg(p) = &self.reads.conn {
            p.depth.set(p.depth.get() + 1);
        }
        Ok(Tx {
            reads: &self.reads,
            batch: self.batch,
            done: false,
            head: self.reads.head.borrow().clone(),
            mark: self.reads.conn.deferred_position(),
        })
    }

    /// PostgreSQL, outside a transaction: replace a connection the server closed (returns
    /// whether it did).
    ///
    /// # Errors
    /// The server cannot be reached.
    pub fn reconnect_if_closed(&self) -> Result<bool> {
        self.reads.head.replace(None);
        self.reads.conn.reconnect_if_closed()
    }

    /// Whether a batch is open ([`Batch::Open`]).
    pub fn in_batch(&self) -> bool {
        self.batch == Batch::Open
    }

    /// Open a batch: one write transaction (SQLite's `BEGIN IMMEDIATE`) that the service's
    /// operations share, each a [`Tx`] (savepoint) inside it (group commit).
    ///
    /// # Errors
    /// Database errors (e.g. a transaction is already open); the store stays [`Batch::Idle`].
    ///
    /// On PostgreSQL the batch's writes are deferred (`Conn::defer`): its `BEGIN`, the fence
    /// (`dpbandits_fence(epoch)`: the owner row locked `FOR SHARE` and its epoch checked before
    /// any write runs, so no takeover commits in between) and its writes go to the server with
    /// its first read, or with its commit ([`Store::commit_batch`]): a batch that reads nothing
    /// is one round trip. Its operations ([`Tx`]) have no savepoints: a rollback drops the
    /// operation's statements unsent.
    pub fn begin_batch(&mut self) -> Result<()> {
        let conn = &self.reads.conn;
        conn.reconnect_if_closed()?;
        if conn.is_pg() {
            conn.set_deferring(true);
            conn.defer("BEGIN")?;
            if let Some(e) = self.epoch {
                // First in the batch's first round trip: no write of a fenced node runs.
                conn.defer(&format!("SELECT dpbandits_fence({e})"))?;
            }
        } else {
            conn.batch("BEGIN IMMEDIATE")?;
        }
        self.batch = Batch::Open;
        Ok(())
    }

    /// PostgreSQL, inside a transaction just begun: refuse unless this store's claim is the
    /// database's ([`super::owner`]). A store that claimed nothing (SQLite; a PostgreSQL store
    /// opened for a test or a tool) is not fenced.
    fn fence(&self) -> Result<()> {
        match self.epoch {
            Some(epoch) if self.reads.conn.is_pg() => super::fence::fence(&self.reads.conn, epoch),
            _ => Ok(()),
        }
    }

    /// Commit the open batch (one fsync for all its operations).
    ///
    /// # Errors
    /// Database errors (the batch stays open: [`Store::rollback_batch`] it).
    ///
    /// PostgreSQL: the deferred statements (the fence first, [`Store::begin_batch`]) and
    /// `COMMIT`, in one round trip; refused when a deferred statement failed earlier in the
    /// batch (the statements after it did not run); a [`Fenced`](super::Fenced) error when
    /// another node claimed the database.
    pub fn commit_batch(&mut self) -> Result<()> {
        let conn = &self.reads.conn;
        if let Conn::Pg(p) = conn {
            if conn.is_broken() {
                anyhow::bail!(
                    "a statement of the batch failed on the database: nothing of the batch commits"
                );
            }
            // `COMMIT` releases every savepoint.
            p.releases.set(0);
            if let Err(e) = conn.batch("COMMIT") {
                return Err(
                    match self.epoch.and_then(|mine| super::fence::fenced(&e, mine)) {
                        Some(f) => f.into(),
                        None => e,
                    },
                );
            }
            conn.set_deferring(false);
        } else {
            conn.batch("COMMIT")?;
        }
        self.batch = Batch::Idle;
        Ok(())
    }

    /// Roll back what the open batch holds (nothing when the database already rolled it back,
    /// as SQLite does after some failed commits); the store is [`Batch::Idle`] after it.
    ///
    /// # Errors
    /// Database errors.
    pub fn rollback_batch(&mut self) -> Result<()> {
        self.batch = Batch::Idle;
        self.reads.head.replace(None);
        if let Conn::Pg(p) = &self.reads.conn {
            p.releases.set(0);
        }
        // What is still deferred is dropped: the rollback undoes what was sent.
        self.reads.conn.set_deferring(false);
        match &self.reads.conn {
            Conn::Lite(c) if c.is_autocommit() => {}
            // PostgreSQL answers a `ROLLBACK` outside a transaction with a warning only.
            conn => conn.batch("ROLLBACK")?,
        }
        Ok(())
    }

    /// Rows of `release_keys` (either store), for tests.
    #[cfg(test)]
    pub(crate) fn release_keys_count(&self) -> i64 {
        self.reads
            .conn
            .value("SELECT COUNT(*) FROM release_keys", super::sql::args![])
            .unwrap()
    }

    /// The SQLite connection, for tests that tamper with the database or inject failures.
    #[cfg(test)]
    pub(crate) fn connection(&self) -> &Connection {
        self.reads.conn.lite().expect("an SQLite store")
    }

    /// The SQLite connection, mutably (tests that install a progress handler).
    #[cfg(test)]
    pub(crate) fn connection_mut(&mut self) -> &mut Connection {
        match &mut self.reads.conn {
            Conn::Lite(c) => c,
            Conn::Pg(_) => panic!("an SQLite store"),
        }
    }
}

impl Drop for Store {
    /// A PostgreSQL writer releases its lease ([`Store::release`]): the next node claims at once.
    fn drop(&mut self) {
        if self.batch == Batch::Open {
            let _ = self.rollback_batch();
        }
        let _ = self.release();
    }
}

impl Tx<'_> {
    /// Whether this savepoint is inside a batch (committed with the batch, not by
    /// [`Tx::commit`]).
    pub fn in_batch(&self) -> bool {
        self.batch == Batch::Open
    }

    /// The statement that ends this `Tx`: `commit` (or roll it back).
    /// (`None`: nothing to send now: on PostgreSQL a savepoint's release waits for the next
    /// statement that needs it gone, [`super::sql::PgConn`]'s `releases`.)
    fn end(&self, commit: bool) -> Option<String> {
        let rollback = format!("ROLLBACK TO SAVEPOINT {SAVEPOINT}; RELEASE SAVEPOINT {SAVEPOINT}");
        if let (Conn::Pg(p), Some(mark)) = (&self.reads.conn, self.mark) {
            // Inside a batch on PostgreSQL: committed, its statements stay in the batch's
            // stream; rolled back, they are dropped unsent (or, when a read already sent some,
            // the batch cannot commit: `Conn::undo_deferred`).
            p.depth.set(p.depth.get().saturating_sub(1));
            if !commit {
                self.reads.conn.undo_deferred(mark);
            }
            return None;
        }
        let Conn::Pg(p) = &self.reads.conn else {
            return Some(if commit {
                format!("RELEASE SAVEPOINT {SAVEPOINT}")
            } else {
                rollback
            });
        };
        p.depth.set(p.depth.get().saturating_sub(1));
        if self.batch == Batch::Idle && p.depth.get() == 0 {
            // The outermost: its `COMMIT` or `ROLLBACK` ends every savepoint.
            p.releases.set(0);
            return Some(if commit { "COMMIT" } else { "ROLLBACK" }.to_string());
        }
        if commit {
            p.releases.set(p.releases.get() + 1);
            return None;
        }
        // The releases of the committed savepoints above this one first: the rollback is to
        // this `Tx`'s own savepoint.
        Some(format!("{}{rollback}", deferred_releases(p)))
    }

    /// Release the savepoint: its writes join the batch, or (outside one) are committed.
    ///
    /// # Errors
    /// Database errors (the writes are rolled back when the `Tx` is dropped).
    pub fn commit(mut self) -> Result<()> {
        let Some(sql) = self.end(true) else {
            self.done = true;
            return Ok(());
        };
        match self.reads.conn.batch(&sql) {
            Ok(()) => {
                self.done = true;
                Ok(())
            }
            Err(e) => {
                // Not committed: the drop below rolls back at the same depth.
                if let Conn::Pg(p) = &self.reads.conn {
                    p.depth.set(p.depth.get() + 1);
                }
                Err(e)
            }
        }
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        if !self.done {
            // Rolled back: the log's head is what it was when this began.
            self.reads.head.replace(self.head.take());
            if let Some(sql) = self.end(false) {
                // Inside a batch on PostgreSQL, with the next statement sent.
                let _ = self.reads.conn.defer(&sql);
            }
        }
    }
}

/// The `RELEASE SAVEPOINT`s deferred on `p` (its `releases`), as statements to send before the
/// next one; none are deferred afterwards.
fn deferred_releases(p: &super::sql::PgConn) -> String {
    format!("RELEASE SAVEPOINT {SAVEPOINT}; ").repeat(p.releases.replace(0) as usize)
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Lowercase hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Constant-time comparison of two hex digests (a token's hash, a MAC): the time does not
/// depend on where they differ; digests of different lengths differ.
pub fn same_hex(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
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
pub(super) fn rfc3339(d: std::time::Duration) -> String {
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

/// Late outcomes (a true outcome reported after its decision was abandoned): two nullable
/// columns of `decisions`, added to an SQLite database of any schema that lacks them (no version
/// change: an older build ignores them; `audit-log verify` checks them against `late-outcome`
/// entries). PostgreSQL databases have them from the start.
fn add_late_columns(conn: &Conn) -> Result<()> {
    for (column, decl) in [("late_reward", "REAL"), ("late_received", "TEXT")] {
        if !conn.has_column("decisions", column)? {
            conn.batch(&format!("ALTER TABLE decisions ADD COLUMN {column} {decl}"))?;
        }
    }
    Ok(())
}

impl Reads {
    /// The database's schema version (`meta.schema`).
    ///
    /// # Errors
    /// Database errors, or no version written.
    pub fn schema_version(&self) -> Result<String> {
        self.conn
            .value("SELECT value FROM meta WHERE key = 'schema'", args![])
    }

    /// Whether the connection is gone (PostgreSQL only; `Conn::is_closed`).
    pub fn is_closed(&self) -> bool {
        self.conn.is_closed()
    }

    /// Whether this is a PostgreSQL database.
    pub fn is_postgres(&self) -> bool {
        self.conn.is_pg()
    }

    /// Copy the SQLite database open on `conn` into the new file `to` (`VACUUM INTO`: one
    /// transaction's snapshot, the WAL folded in; what [`crate::backup::backup`] writes and
    /// verifies).
    ///
    /// # Errors
    /// A PostgreSQL database (its backup is `pg_dump`: docs/service.md), `to` is not UTF-8 or
    /// exists, or SQLite cannot write it.
    pub fn vacuum_into(&self, to: &Path) -> Result<()> {
        let conn = self.conn.lite().context(
            "backup of a PostgreSQL database: use pg_dump (docs/service.md, \"PostgreSQL and several nodes\")",
        )?;
        conn.execute("VACUUM INTO ?1", [to.to_str().context("--out: not UTF-8")?])
            .with_context(|| format!("VACUUM INTO {}", to.display()))?;
        Ok(())
    }
}

impl Tx<'_> {
    /// Set `meta.key` to `value` (inserted if missing).
    ///
    /// # Errors
    /// Database errors.
    pub fn set_meta(&self, key: &str, value: &str) -> Result<()> {
        self.reads.conn.execute(
            "INSERT INTO meta (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            args![key, value],
        )?;
        Ok(())
    }

    /// Write the schema version inside `tx`.
    ///
    /// # Errors
    /// Database errors.
    pub fn set_schema_version(&self, version: &str) -> Result<()> {
        self.reads.conn.execute(
            "UPDATE meta SET value = ?1 WHERE key = 'schema'",
            args![version],
        )?;
        Ok(())
    }
}
