//! The two databases behind one set of statements: a connection ([`Conn`]) is an SQLite file
//! or a PostgreSQL database, and every statement of the store is written once, in the SQL both
//! accept, with `?N` placeholders (rewritten to PostgreSQL's `$N` when a statement is first
//! prepared on a PostgreSQL connection). Where the two differ (the schema's types, the catalog,
//! transactions outside a batch, the backup) the store asks [`Conn::is_pg`].
//!
//! Integers are `BIGINT` (`INTEGER` in SQLite) and reals `DOUBLE PRECISION` (`REAL`), so that a
//! Rust `i64` and `f64` bind and read the same on both.

use anyhow::{Context, Result, anyhow};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;

/// A value a statement binds: what both drivers can write.
pub(crate) trait Arg: rusqlite::ToSql + postgres::types::ToSql + Sync {}
impl<T: rusqlite::ToSql + postgres::types::ToSql + Sync> Arg for T {}

/// A column a row yields: what both drivers can read.
pub(crate) trait Col:
    rusqlite::types::FromSql + for<'a> postgres::types::FromSql<'a>
{
}
impl<T: rusqlite::types::FromSql + for<'a> postgres::types::FromSql<'a>> Col for T {}

/// The arguments of one statement: `args![a, b]` is `&[&a, &b]` as [`Arg`]s.
macro_rules! args {
    () => { &[] as &[&dyn $crate::store::sql::Arg] };
    ($($a:expr),+ $(,)?) => { &[$(&$a as &dyn $crate::store::sql::Arg),+] as &[&dyn $crate::store::sql::Arg] };
}
pub(crate) use args;

/// PostgreSQL round trips of this process (every statement, `BEGIN`, savepoint and commit sent
/// on any connection, each answered before the next: one round trip each; preparing a statement
/// the first time is one more). `/metrics` reports it (`dpbandits_database_round_trips_total`).
static ROUND_TRIPS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// PostgreSQL round trips of this process so far (every statement, `BEGIN`, savepoint and commit; a first preparation is one more).
pub fn round_trips() -> u64 {
    ROUND_TRIPS.load(std::sync::atomic::Ordering::Relaxed)
}

fn trip() {
    ROUND_TRIPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// One database connection.
pub(crate) enum Conn {
    /// An SQLite file.
    Lite(rusqlite::Connection),
    /// A PostgreSQL database (boxed: its statement cache makes it the larger variant).
    Pg(Box<PgConn>),
}

/// A PostgreSQL connection with its prepared statements (by their SQL text) and how deep its
/// transactions nest (PostgreSQL has no savepoint outside a transaction: the outermost `Tx`
/// outside a batch is a `BEGIN`).
pub(crate) struct PgConn {
    url: String,
    /// Statements run on every (re)connection: the session's settings.
    pub(super) setup: RefCell<String>,
    client: RefCell<postgres::Client>,
    statements: RefCell<HashMap<String, postgres::Statement>>,
    pub(super) depth: Cell<u32>,
    /// `RELEASE SAVEPOINT`s not sent yet: a committed `Tx` inside a transaction releases its
    /// savepoint with the next statement that needs it gone (the next savepoint, a rollback to
    /// one) or not at all (`COMMIT` releases every savepoint): one round trip fewer per `Tx`.
    pub(super) releases: Cell<u32>,
}

/// One row of a result, from either driver.
pub(crate) enum Row<'r> {
    /// An SQLite row.
    Lite(&'r rusqlite::Row<'r>),
    /// A PostgreSQL row.
    Pg(&'r postgres::Row),
}

impl Row<'_> {
    /// Column `i` (0-based) as `T`.
    ///
    /// # Errors
    /// The column is missing or of another type.
    pub(crate) fn get<T: Col>(&self, i: usize) -> Result<T> {
        match self {
            Row::Lite(r) => Ok(r.get(i)?),
            Row::Pg(r) => r.try_get(i).map_err(|e| anyhow!("column {i}: {e}")),
        }
    }
}

/// `?N` placeholders as PostgreSQL's `$N` (the store's statements hold no `?` elsewhere).
fn dollar_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '?' && chars.peek().is_some_and(char::is_ascii_digit) {
            out.push('$');
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether `--db` names a PostgreSQL database (`postgres://` or `postgresql://`) rather than an
/// SQLite file.
pub fn is_postgres_url(db: &std::path::Path) -> bool {
    db.to_str()
        .is_some_and(|s| s.starts_with("postgres://") || s.starts_with("postgresql://"))
}

/// What `--db` names, for messages and logs: the file's path, or a PostgreSQL URL with its
/// password hidden ([`redacted`]).
pub fn shown(db: &std::path::Path) -> String {
    match db.to_str() {
        Some(url) if is_postgres_url(db) => redacted(url),
        _ => db.display().to_string(),
    }
}

/// Whether `e` says the PostgreSQL server could not be reached or went away (refused,
/// closed, shutting down or starting up: SQLSTATE class 57), rather than refusing a statement:
/// what a node retries instead of giving up.
pub fn is_unreachable(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<postgres::Error>().is_some_and(|p| {
            p.is_closed()
                || p.as_db_error().is_none()
                || p.code().is_some_and(|c| c.code().starts_with("57"))
        })
    })
}

/// `url` with its password (if any) replaced by `***`, for messages and logs.
pub fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (auth, host) = match rest.rsplit_once('@') {
        Some((a, h)) => (a, h),
        None => return url.to_string(),
    };
    match auth.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

impl PgConn {
    /// Connect to `url` (a libpq-style URL; no TLS: a loopback or private-network database).
    ///
    /// # Errors
    /// The URL is malformed or the server cannot be reached.
    pub(crate) fn connect(url: &str) -> Result<PgConn> {
        if tokio::runtime::Handle::try_current().is_ok() {
            // The synchronous client runs its own runtime: inside another it would panic.
            anyhow::bail!(
                "--db {}: opened from inside an async runtime",
                redacted(url)
            );
        }
        Ok(PgConn {
            url: url.to_string(),
            setup: RefCell::new(String::new()),
            client: RefCell::new(Self::client_for(url)?),
            statements: RefCell::new(HashMap::new()),
            depth: Cell::new(0),
            releases: Cell::new(0),
        })
    }

    fn client_for(url: &str) -> Result<postgres::Client> {
        let mut config: postgres::Config = url
            .parse()
            .with_context(|| format!("--db {}: not a PostgreSQL URL", redacted(url)))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(std::time::Duration::from_secs(5));
        }
        config
            .connect(postgres::NoTls)
            .with_context(|| format!("--db {}: cannot connect", redacted(url)))
    }

    /// The URL it connects to.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// Run `sql` now and on every later reconnection ([`Conn::reconnect_if_closed`]).
    pub(crate) fn set_session(&self, sql: &str) -> Result<()> {
        self.client()?.batch_execute(sql)?;
        let mut setup = self.setup.borrow_mut();
        setup.push_str(sql);
        setup.push(';');
        Ok(())
    }

    fn client(&self) -> Result<std::cell::RefMut<'_, postgres::Client>> {
        self.client.try_borrow_mut().map_err(|_| {
            anyhow!("a statement ran inside another one's rows on a PostgreSQL connection")
        })
    }

    fn statement(&self, client: &mut postgres::Client, sql: &str) -> Result<postgres::Statement> {
        if let Some(s) = self.statements.borrow().get(sql) {
            return Ok(s.clone());
        }
        trip();
        let s = client
            .prepare(&dollar_placeholders(sql))
            .with_context(|| format!("preparing {sql}"))?;
        self.statements
            .borrow_mut()
            .insert(sql.to_string(), s.clone());
        Ok(s)
    }
}

fn pg_args<'a>(args: &'a [&'a dyn Arg]) -> Vec<&'a (dyn postgres::types::ToSql + Sync)> {
    args.iter()
        .map(|a| *a as &(dyn postgres::types::ToSql + Sync))
        .collect()
}

fn lite_args<'a>(args: &'a [&'a dyn Arg]) -> Vec<&'a dyn rusqlite::ToSql> {
    args.iter().map(|a| *a as &dyn rusqlite::ToSql).collect()
}

impl Conn {
    /// Whether this is a PostgreSQL connection.
    pub(crate) fn is_pg(&self) -> bool {
        matches!(self, Conn::Pg(_))
    }

    /// The SQLite connection (tests that tamper with the file, SQLite-only operations).
    ///
    /// # Errors
    /// This is a PostgreSQL connection.
    pub(crate) fn lite(&self) -> Result<&rusqlite::Connection> {
        match self {
            Conn::Lite(c) => Ok(c),
            Conn::Pg(_) => Err(anyhow!("an SQLite-only operation on a PostgreSQL database")),
        }
    }

    /// Whether the connection is gone (PostgreSQL: the server closed it, restarted, or ended
    /// the session). SQLite connections never are.
    pub(crate) fn is_closed(&self) -> bool {
        match self {
            Conn::Lite(_) => false,
            Conn::Pg(p) => p.client.try_borrow().is_ok_and(|c| c.is_closed()),
        }
    }

    /// PostgreSQL, outside any transaction: a closed connection is replaced by a new one (its
    /// session settings run again, its prepared statements forgotten). Returns whether it was.
    ///
    /// # Errors
    /// The server cannot be reached.
    pub(crate) fn reconnect_if_closed(&self) -> Result<bool> {
        let Conn::Pg(p) = self else {
            return Ok(false);
        };
        if !self.is_closed() {
            return Ok(false);
        }
        let mut client = PgConn::client_for(&p.url)?;
        let setup = p.setup.borrow().clone();
        if !setup.is_empty() {
            client.batch_execute(&setup)?;
        }
        *p.client()? = client;
        p.statements.borrow_mut().clear();
        p.depth.set(0);
        p.releases.set(0);
        crate::log::log(
            "database-reconnected",
            serde_json::json!({"db": redacted(&p.url)}),
        );
        Ok(true)
    }

    /// Run statements without arguments (`;`-separated).
    ///
    /// # Errors
    /// Database errors.
    pub(crate) fn batch(&self, sql: &str) -> Result<()> {
        match self {
            Conn::Lite(c) => c.execute_batch(sql)?,
            Conn::Pg(p) => {
                trip();
                p.client()?.batch_execute(sql)?;
            }
        }
        Ok(())
    }

    /// Run one statement; returns the rows it changed.
    ///
    /// # Errors
    /// Database errors.
    pub(crate) fn execute(&self, sql: &str, args: &[&dyn Arg]) -> Result<u64> {
        match self {
            Conn::Lite(c) => Ok(c.prepare_cached(sql)?.execute(&*lite_args(args))? as u64),
            Conn::Pg(p) => {
                let mut client = p.client()?;
                let s = p.statement(&mut client, sql)?;
                trip();
                Ok(client.execute(&s, &pg_args(args))?)
            }
        }
    }

    /// The first row of a query, through `f` (`None`: no row).
    ///
    /// # Errors
    /// Database errors, or `f`'s.
    pub(crate) fn row<T>(
        &self,
        sql: &str,
        args: &[&dyn Arg],
        f: impl FnOnce(&Row<'_>) -> Result<T>,
    ) -> Result<Option<T>> {
        match self {
            Conn::Lite(c) => {
                let mut stmt = c.prepare_cached(sql)?;
                let mut rows = stmt.query(&*lite_args(args))?;
                match rows.next()? {
                    Some(r) => Ok(Some(f(&Row::Lite(r))?)),
                    None => Ok(None),
                }
            }
            Conn::Pg(p) => {
                let rows = {
                    let mut client = p.client()?;
                    let s = p.statement(&mut client, sql)?;
                    trip();
                    client.query(&s, &pg_args(args))?
                };
                rows.first().map(|r| f(&Row::Pg(r))).transpose()
            }
        }
    }

    /// The first row's first column (`T` is an `Option` where the value may be `NULL`).
    ///
    /// # Errors
    /// Database errors, or no row.
    pub(crate) fn value<T: Col>(&self, sql: &str, args: &[&dyn Arg]) -> Result<T> {
        self.row(sql, args, |r| r.get(0))?
            .with_context(|| format!("no row: {sql}"))
    }

    /// Every row of a query, in order, through `f`. SQLite steps through the rows; PostgreSQL
    /// streams them (no statement may run on the connection inside `f`: it is refused).
    ///
    /// # Errors
    /// Database errors, or `f`'s.
    pub(crate) fn each(
        &self,
        sql: &str,
        args: &[&dyn Arg],
        mut f: impl FnMut(&Row<'_>) -> Result<()>,
    ) -> Result<()> {
        match self {
            Conn::Lite(c) => {
                let mut stmt = c.prepare_cached(sql)?;
                let mut rows = stmt.query(&*lite_args(args))?;
                while let Some(r) = rows.next()? {
                    f(&Row::Lite(r))?;
                }
            }
            Conn::Pg(p) => {
                use postgres::fallible_iterator::FallibleIterator;
                let mut client = p.client()?;
                let s = p.statement(&mut client, sql)?;
                trip();
                let mut rows = client.query_raw(&s, pg_args(args))?;
                while let Some(r) = rows.next()? {
                    f(&Row::Pg(&r))?;
                }
            }
        }
        Ok(())
    }

    /// Every row of a query, in order, mapped by `f` into a vector.
    ///
    /// # Errors
    /// Database errors, or `f`'s.
    pub(crate) fn rows<T>(
        &self,
        sql: &str,
        args: &[&dyn Arg],
        mut f: impl FnMut(&Row<'_>) -> Result<T>,
    ) -> Result<Vec<T>> {
        let mut out = Vec::new();
        self.each(sql, args, |r| {
            out.push(f(r)?);
            Ok(())
        })?;
        Ok(out)
    }

    /// Whether `table` has `column` (the catalog differs).
    ///
    /// # Errors
    /// Database errors.
    pub(crate) fn has_column(&self, table: &str, column: &str) -> Result<bool> {
        let n: i64 = if self.is_pg() {
            self.value(
                "SELECT COUNT(*) FROM information_schema.columns
                 WHERE table_schema = current_schema() AND table_name = ?1 AND column_name = ?2",
                args![table, column],
            )?
        } else {
            self.value(
                &format!("SELECT COUNT(*) FROM pragma_table_info('{table}') WHERE name = ?1"),
                args![column],
            )?
        };
        Ok(n > 0)
    }

    /// Whether `table` exists.
    ///
    /// # Errors
    /// Database errors (e.g. not an SQLite database).
    pub(crate) fn has_table(&self, table: &str) -> Result<bool> {
        let sql = if self.is_pg() {
            "SELECT COUNT(*) FROM information_schema.tables
             WHERE table_schema = current_schema() AND table_name = ?1"
        } else {
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?1"
        };
        Ok(self.value::<i64>(sql, args![table])? > 0)
    }
}

/// Create the database `name` on the PostgreSQL server `base` names (a URL of an existing
/// database, e.g. `.../postgres`); returns the new database's URL. For the tests' databases
/// (`crate::testdb`).
///
/// # Errors
/// `name` is not a plain identifier, the URL names no database, or the server refuses.
pub fn create_database(base: &str, name: &str) -> Result<String> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        anyhow::bail!("database name {name:?}: expected lower-case letters, digits and _");
    }
    let (head, _) = base
        .rsplit_once('/')
        .context("the URL names no database (…/postgres)")?;
    let mut client = PgConn::client_for(base)?;
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .with_context(|| format!("creating database {name}"))?;
    Ok(format!("{head}/{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_and_urls() {
        assert_eq!(
            dollar_placeholders("SELECT a FROM t WHERE b = ?1 AND c = ?12"),
            "SELECT a FROM t WHERE b = $1 AND c = $12"
        );
        assert!(is_postgres_url(std::path::Path::new(
            "postgres://u@127.0.0.1/db"
        )));
        assert!(is_postgres_url(std::path::Path::new("postgresql://u@h/db")));
        assert!(!is_postgres_url(std::path::Path::new("/tmp/postgres://x")));
        assert_eq!(
            redacted("postgres://u:secret@h:5/db"),
            "postgres://u:***@h:5/db"
        );
        assert_eq!(redacted("postgres://u@h/db"), "postgres://u@h/db");
    }
}
