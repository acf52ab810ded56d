//! The database file: the schema and its versions, opening (WAL, `synchronous = FULL`, mode
//! 0600), the batch's transaction, `meta`, and the clocks and hex the other parts share.

use anyhow::{Context, Result, bail};
use rusqlite::{Connection, OptionalExtension};
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

/// The store: the service's one SQLite connection and whether a batch is open on it. Every
/// statement of the service is a method of it: reads through [`Reads`] (which a store and a
/// [`Tx`] dereference to), writes through a [`Tx`] ([`Store::begin`]). This is the seam a second
/// backend plugs into.
pub struct Store {
    pub(super) reads: Reads,
    batch: Batch,
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
    pub(super) conn: Connection,
}

/// One operation's writes: a savepoint on the store's connection (inside the open batch, or
/// its own transaction outside one). Every write statement is a method of it; reads go through
/// it too (it dereferences to [`Reads`]). Dropped without [`Tx::commit`], its writes are rolled
/// back.
pub struct Tx<'a> {
    pub(super) reads: &'a Reads,
    batch: Batch,
    done: bool,
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
    /// Open (creating if needed) the database at `path` in WAL mode with full synchronous commits.
    ///
    /// # Errors
    /// The file cannot be opened or is not a dpbandits-serve database of this schema version.
    pub fn open(path: &Path) -> Result<Store> {
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
        let store = Store {
            reads: Reads { conn },
            batch: Batch::Idle,
        };
        store.check_schema(path)?;
        let conn = &store.reads.conn;
        add_late_columns(conn)?;
        // Partial indexes (a few rows each, so free to keep): the close entry of an experiment and
        // the late outcomes, read at every start, without a scan of the log or of the decisions.
        conn.execute_batch(
            "CREATE INDEX IF NOT EXISTS audit_close ON audit (experiment, seq) WHERE event = 'close';
             CREATE INDEX IF NOT EXISTS decisions_late ON decisions (experiment, id)
             WHERE late_reward IS NOT NULL",
        )?;
        // The pending decisions by issue time (the reward deadline's query runs at every decision
        // request of an experiment with a deadline: an index, not a scan of its decisions). After
        // the migration above: schema 1 and 2 tables get `issued_unix` there.
        conn.execute_batch(
            "CREATE INDEX IF NOT EXISTS decisions_pending ON decisions (experiment, issued_unix)
             WHERE reward IS NULL",
        )?;
        Ok(store)
    }

    /// Check the schema version of a store just opened; schema 1 and 2 get schema 3's columns.
    fn check_schema(&self, path: &Path) -> Result<()> {
        let conn = &self.reads.conn;
        let version: Option<String> = conn
            .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
                r.get(0)
            })
            .optional()?;
        match version.as_deref() {
            None => {
                // Keyed to schema 4 by [`Store::init_audit_key`] before the first entry is written.
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema', ?1)",
                    [SCHEMA_VERSION_UNKEYED],
                )?;
            }
            Some(SCHEMA_VERSION | SCHEMA_VERSION_UNKEYED) => {}
            Some(v @ (SCHEMA_VERSION_SESSION | SCHEMA_VERSION_POLICY_SNAPSHOTS)) => {
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
                    let present: i64 = conn.query_row(
                        &format!(
                            "SELECT COUNT(*) FROM pragma_table_info('{table}') WHERE name = ?1"
                        ),
                        [column],
                        |r| r.get(0),
                    )?;
                    if present == 0 {
                        conn.execute_batch(&format!(
                            "ALTER TABLE {table} ADD COLUMN {column} {decl}"
                        ))?;
                    }
                }
                if v == SCHEMA_VERSION_SESSION {
                    tx.set_schema_version(SCHEMA_VERSION_UNKEYED)?;
                }
                tx.commit()?;
            }
            Some(v) => bail!(
                "--db {}: schema version {v}, this build reads versions {SCHEMA_VERSION_POLICY_SNAPSHOTS}, {SCHEMA_VERSION_SESSION} and {SCHEMA_VERSION_UNKEYED} (migrated on open) and {SCHEMA_VERSION}",
                path.display()
            ),
        }
        Ok(())
    }

    /// Open an existing database read-only (verification, inspection).
    ///
    /// # Errors
    /// The file does not exist or cannot be read.
    pub fn open_read_only(path: &Path) -> Result<Store> {
        if !path.exists() {
            bail!("--db {}: no such file", path.display());
        }
        let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .with_context(|| format!("--db {}", path.display()))?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        Ok(Store {
            reads: Reads { conn },
            batch: Batch::Idle,
        })
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
    /// transaction.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn begin(&self) -> Result<Tx<'_>> {
        self.reads
            .conn
            .execute_batch(&format!("SAVEPOINT {SAVEPOINT}"))?;
        Ok(Tx {
            reads: &self.reads,
            batch: self.batch,
            done: false,
        })
    }

    /// Whether a batch is open ([`Batch::Open`]).
    pub fn in_batch(&self) -> bool {
        self.batch == Batch::Open
    }

    /// Open a batch: one write transaction (`BEGIN IMMEDIATE`) that the service's operations
    /// share, each a [`Tx`] (savepoint) inside it (group commit).
    ///
    /// # Errors
    /// SQLite errors (e.g. a transaction is already open); the store stays [`Batch::Idle`].
    pub fn begin_batch(&mut self) -> Result<()> {
        self.reads.conn.execute_batch("BEGIN IMMEDIATE")?;
        self.batch = Batch::Open;
        Ok(())
    }

    /// Commit the open batch (one fsync for all its operations).
    ///
    /// # Errors
    /// SQLite errors (the batch stays open: [`Store::rollback_batch`] it).
    pub fn commit_batch(&mut self) -> Result<()> {
        self.reads.conn.execute_batch("COMMIT")?;
        self.batch = Batch::Idle;
        Ok(())
    }

    /// Roll back what the open batch holds (nothing when SQLite already rolled it back, as it
    /// does after some failed commits); the store is [`Batch::Idle`] after it.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn rollback_batch(&mut self) -> Result<()> {
        self.batch = Batch::Idle;
        if !self.reads.conn.is_autocommit() {
            self.reads.conn.execute_batch("ROLLBACK")?;
        }
        Ok(())
    }

    /// The connection, for tests that tamper with the database or inject failures.
    #[cfg(test)]
    pub(crate) fn connection(&self) -> &Connection {
        &self.reads.conn
    }

    /// The connection, mutably (tests that install a progress handler).
    #[cfg(test)]
    pub(crate) fn connection_mut(&mut self) -> &mut Connection {
        &mut self.reads.conn
    }
}

impl Tx<'_> {
    /// Whether this savepoint is inside a batch (committed with the batch, not by
    /// [`Tx::commit`]).
    pub fn in_batch(&self) -> bool {
        self.batch == Batch::Open
    }

    /// Release the savepoint: its writes join the batch, or (outside one) are committed.
    ///
    /// # Errors
    /// SQLite errors (the writes are rolled back when the `Tx` is dropped).
    pub fn commit(mut self) -> Result<()> {
        self.reads
            .conn
            .execute_batch(&format!("RELEASE {SAVEPOINT}"))?;
        self.done = true;
        Ok(())
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = self
                .reads
                .conn
                .execute_batch(&format!("ROLLBACK TO {SAVEPOINT}; RELEASE {SAVEPOINT}"));
        }
    }
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
/// columns of `decisions`, added to a database of any schema that lacks them (no version
/// change: an older build ignores them; `audit-log verify` checks them against `late-outcome`
/// entries).
fn add_late_columns(conn: &Connection) -> Result<()> {
    for (column, decl) in [("late_reward", "REAL"), ("late_received", "TEXT")] {
        let present: i64 = conn.query_row(
            "SELECT COUNT(*) FROM pragma_table_info('decisions') WHERE name = ?1",
            [column],
            |r| r.get(0),
        )?;
        if present == 0 {
            conn.execute_batch(&format!("ALTER TABLE decisions ADD COLUMN {column} {decl}"))?;
        }
    }
    Ok(())
}

impl Reads {
    /// The database's schema version (`meta.schema`).
    ///
    /// # Errors
    /// SQLite errors, or no version written.
    pub fn schema_version(&self) -> Result<String> {
        let conn = &self.conn;
        Ok(
            conn.query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
                r.get(0)
            })?,
        )
    }

    /// Copy the database open on `conn` into the new file `to` (`VACUUM INTO`: one transaction's
    /// snapshot, the WAL folded in; what [`crate::backup::backup`] writes and verifies).
    ///
    /// # Errors
    /// `to` is not UTF-8, exists, or SQLite cannot write it.
    pub fn vacuum_into(&self, to: &Path) -> Result<()> {
        let conn = &self.conn;
        conn.execute("VACUUM INTO ?1", [to.to_str().context("--out: not UTF-8")?])
            .with_context(|| format!("VACUUM INTO {}", to.display()))?;
        Ok(())
    }
}

impl Tx<'_> {
    /// Set `meta.key` to `value` (inserted if missing).
    ///
    /// # Errors
    /// SQLite errors.
    pub fn set_meta(&self, key: &str, value: &str) -> Result<()> {
        let tx = &self.reads.conn;
        tx.prepare_cached("INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)")?
            .execute([key, value])?;
        Ok(())
    }

    /// Write the schema version inside `tx`.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn set_schema_version(&self, version: &str) -> Result<()> {
        let tx = &self.reads.conn;
        tx.execute("UPDATE meta SET value = ?1 WHERE key = 'schema'", [version])?;
        Ok(())
    }
}
