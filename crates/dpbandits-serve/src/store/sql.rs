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

use super::deferred::Deferred;

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

fn trip(p: &PgConn) {
    ROUND_TRIPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    p.trips.set(p.trips.get() + 1);
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
    /// Inside a batch: statements deferred ([`Conn::defer`], [`Conn::execute_deferred`]), as
    /// SQL text with their arguments inlined, sent in one round trip ahead of the next
    /// statement that is sent (a read, the commit), their inserts merged
    /// ([`super::deferred::render`]).
    pending: RefCell<Vec<Deferred>>,
    /// Round trips on this connection ([`round_trips`] counts the process's).
    trips: Cell<u64>,
    /// Deferred statements sent since the batch began: with `pending`'s length, a position in
    /// the batch's stream of statements ([`Conn::deferred_position`]).
    sent: Cell<usize>,
    /// Whether writes are deferred now (a batch is open: [`Conn::set_deferring`]).
    deferring: Cell<bool>,
    /// A deferred statement failed: the transaction is aborted, and the statements after it
    /// in its round trip did not run. Nothing of it may commit: every later commit is refused
    /// until the transaction is rolled back ([`Conn::set_deferring`] with `false`).
    broken: Cell<bool>,
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

/// `sql` with each `?N` replaced by [`literal`] of `args[N - 1]`: a statement PostgreSQL runs
/// as text, deferred with others into one round trip ([`Conn::execute_deferred`]).
#[cfg(test)]
fn inline_placeholders(sql: &str, args: &[&dyn Arg]) -> Result<String> {
    let literals = args
        .iter()
        .map(|a| literal(*a))
        .collect::<Result<Vec<_>>>()?;
    inline_literals(sql, &literals)
}

/// `sql` with each `?N` replaced by `literals[N - 1]`.
fn inline_literals(sql: &str, literals: &[String]) -> Result<String> {
    let mut out = String::with_capacity(sql.len() + 16 * literals.len());
    let mut chars = sql.char_indices().peekable();
    while let Some((_, c)) = chars.next() {
        if c == '?' && chars.peek().is_some_and(|(_, d)| d.is_ascii_digit()) {
            let mut n = 0usize;
            while let Some((_, d)) = chars.peek().copied().filter(|(_, d)| d.is_ascii_digit()) {
                n = n * 10 + (d as usize - '0' as usize);
                chars.next();
            }
            let lit = n
                .checked_sub(1)
                .and_then(|i| literals.get(i))
                .with_context(|| format!("?{n}: no such argument in {sql}"))?;
            out.push_str(lit);
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

/// A value as a PostgreSQL literal, through its SQLite form (the five storage classes):
/// `NULL`; an integer; a real as the text of its shortest round-trip form cast to `float8`
/// (`float8in` reads it back to the same bits; `NaN` and the infinities by name); text quoted
/// with `'` doubled (`standard_conforming_strings` is on: the store sets it); bytes as a `bytea`
/// hex literal.
///
/// # Errors
/// Text that is not UTF-8, or a value SQLite's binding cannot express.
fn literal(a: &dyn Arg) -> Result<String> {
    use rusqlite::types::{ToSqlOutput, ValueRef};
    let out = rusqlite::ToSql::to_sql(a)?;
    let v = match &out {
        ToSqlOutput::Borrowed(v) => *v,
        ToSqlOutput::Owned(v) => ValueRef::from(v),
        _ => anyhow::bail!("a statement argument with no PostgreSQL literal"),
    };
    Ok(match v {
        ValueRef::Null => "NULL".to_string(),
        ValueRef::Integer(i) => format!("({i})::bigint"),
        ValueRef::Real(f) if f.is_nan() => "'NaN'::float8".to_string(),
        ValueRef::Real(f) if f.is_infinite() => {
            format!("'{}Infinity'::float8", if f < 0.0 { "-" } else { "" })
        }
        ValueRef::Real(f) => format!("'{f:?}'::float8"),
        ValueRef::Text(t) => {
            let s = std::str::from_utf8(t).context("a text argument that is not UTF-8")?;
            format!("'{}'", s.replace('\'', "''"))
        }
        ValueRef::Blob(b) => {
            let mut hex = String::with_capacity(2 * b.len() + 16);
            hex.push_str("'\\x");
            const DIGITS: &[u8; 16] = b"0123456789abcdef";
            for byte in b {
                hex.push(DIGITS[usize::from(byte >> 4)] as char);
                hex.push(DIGITS[usize::from(byte & 15)] as char);
            }
            hex.push_str("'::bytea");
            hex
        }
    })
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
            pending: RefCell::new(Vec::new()),
            trips: Cell::new(0),
            sent: Cell::new(0),
            deferring: Cell::new(false),
            broken: Cell::new(false),
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

    /// A statement failed on the server: inside a batch (no savepoints) the transaction is
    /// aborted, so the batch must not commit ([`Conn::is_broken`]). (`COMMIT` of an aborted
    /// transaction would roll it back without an error.)
    fn aborted(&self) {
        if self.deferring.get() {
            self.broken.set(true);
        }
    }

    fn statement(&self, client: &mut postgres::Client, sql: &str) -> Result<postgres::Statement> {
        if let Some(s) = self.statements.borrow().get(sql) {
            return Ok(s.clone());
        }
        trip(self);
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
        p.pending.borrow_mut().clear();
        p.broken.set(false);
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
    /// On PostgreSQL the deferred statements go first, in the same round trip.
    pub(crate) fn batch(&self, sql: &str) -> Result<()> {
        match self {
            Conn::Lite(c) => c.execute_batch(sql)?,
            Conn::Pg(p) => Self::send(p, sql)?,
        }
        Ok(())
    }

    /// Run `sql` (statements without arguments) now on SQLite; on PostgreSQL inside a batch,
    /// with the next statement sent ([`PgConn`]'s `pending`): no round trip of its own.
    ///
    /// # Errors
    /// Database errors (SQLite; PostgreSQL outside a batch).
    pub(crate) fn defer(&self, sql: &str) -> Result<()> {
        match self {
            Conn::Pg(p) if p.deferring.get() => {
                p.pending
                    .borrow_mut()
                    .push(Deferred::other(sql.to_string()));
                Ok(())
            }
            conn => conn.batch(sql),
        }
    }

    /// [`Conn::execute`] without its count: on PostgreSQL inside a batch, deferred
    /// ([`Conn::defer`]) with its arguments inlined as literals ([`literal`]); its error, if
    /// any, comes with the round trip that sends it and fails the batch.
    ///
    /// # Errors
    /// Database errors (SQLite; PostgreSQL outside a batch); an argument with no literal.
    pub(crate) fn execute_deferred(&self, sql: &str, args: &[&dyn Arg]) -> Result<()> {
        match self {
            Conn::Pg(p) if p.deferring.get() => {
                let literals = args
                    .iter()
                    .map(|a| literal(*a))
                    .collect::<Result<Vec<_>>>()?;
                let text = inline_literals(sql, &literals)?;
                p.pending
                    .borrow_mut()
                    .push(Deferred::from_template(sql, text, &literals));
                Ok(())
            }
            conn => conn.execute(sql, args).map(|_| ()),
        }
    }

    /// PostgreSQL: defer writes from now (`true`: a batch began) or stop (`false`: it ended;
    /// what is still deferred is dropped with the transaction, and the connection is whole
    /// again). SQLite: nothing.
    pub(crate) fn set_deferring(&self, on: bool) {
        if let Conn::Pg(p) = self {
            p.deferring.set(on);
            p.sent.set(0);
            if !on {
                p.pending.borrow_mut().clear();
                p.broken.set(false);
            }
        }
    }

    /// PostgreSQL while deferring: the position the next deferred statement takes in the
    /// batch's stream (statements sent so far plus those waiting). `None` otherwise.
    pub(crate) fn deferred_position(&self) -> Option<usize> {
        match self {
            Conn::Pg(p) if p.deferring.get() => Some(p.sent.get() + p.pending.borrow().len()),
            _ => None,
        }
    }

    /// PostgreSQL while deferring: drop the deferred statements from `mark` on (a
    /// [`Conn::deferred_position`]) unsent, undoing them: the rollback of an operation inside
    /// a batch, with no savepoint. When some of them were sent already (a read inside the
    /// operation), they cannot be undone alone: the connection is broken ([`Conn::is_broken`])
    /// and the batch will not commit.
    pub(crate) fn undo_deferred(&self, mark: usize) {
        if let Conn::Pg(p) = self {
            let sent = p.sent.get();
            if mark >= sent {
                p.pending.borrow_mut().truncate(mark - sent);
            } else {
                p.broken.set(true);
            }
        }
    }

    /// PostgreSQL: whether a deferred statement failed in the open transaction (nothing of it
    /// may commit).
    pub(crate) fn is_broken(&self) -> bool {
        matches!(self, Conn::Pg(p) if p.broken.get())
    }

    /// PostgreSQL: send the deferred statements now (before a statement that reads, or whose
    /// count is asked for).
    fn flush(p: &PgConn) -> Result<()> {
        Self::send(p, "")
    }

    /// PostgreSQL: the deferred statements, then `sql`, in one round trip (none when both are
    /// empty). An error inside a batch breaks it ([`PgConn`]'s `aborted`).
    fn send(p: &PgConn, sql: &str) -> Result<()> {
        let pending = p.pending.take();
        if pending.is_empty() && sql.is_empty() {
            return Ok(());
        }
        p.sent.set(p.sent.get() + pending.len());
        let mut text = super::deferred::render(&pending);
        text.push_str(sql);
        trip(p);
        p.client()?
            .batch_execute(&text)
            .inspect_err(|_| p.aborted())?;
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
                Self::flush(p)?;
                let mut client = p.client()?;
                let s = p.statement(&mut client, sql).inspect_err(|_| p.aborted())?;
                trip(p);
                Ok(client
                    .execute(&s, &pg_args(args))
                    .inspect_err(|_| p.aborted())?)
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
                Self::flush(p)?;
                let rows = {
                    let mut client = p.client()?;
                    let s = p.statement(&mut client, sql).inspect_err(|_| p.aborted())?;
                    trip(p);
                    client
                        .query(&s, &pg_args(args))
                        .inspect_err(|_| p.aborted())?
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
                Self::flush(p)?;
                let mut client = p.client()?;
                let s = p.statement(&mut client, sql).inspect_err(|_| p.aborted())?;
                trip(p);
                let mut rows = client
                    .query_raw(&s, pg_args(args))
                    .inspect_err(|_| p.aborted())?;
                while let Some(r) = rows.next().inspect_err(|_| p.aborted())? {
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

    /// The literals a deferred statement inlines: every SQLite storage class, quotes doubled,
    /// reals in their shortest round-trip form.
    #[test]
    fn deferred_statements_inline_their_arguments() {
        let text = inline_placeholders(
            "INSERT INTO t VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?10)",
            args![
                -3i64,
                0.1f64,
                "it's",
                None::<i64>,
                vec![0u8, 255, 16],
                f64::NEG_INFINITY,
                0,
                0,
                0,
                "x"
            ],
        )
        .unwrap();
        assert_eq!(
            text,
            "INSERT INTO t VALUES ((-3)::bigint, '0.1'::float8, 'it''s', NULL, '\\x00ff10'::bytea, '-Infinity'::float8, 'x')"
        );
        assert!(inline_placeholders("SELECT ?2", args![1i64]).is_err());
    }

    /// On PostgreSQL (the tests' PostgreSQL pass): values written by deferred statements read
    /// back exactly through prepared ones (the reals bit for bit, text with quotes, backslashes
    /// and non-ASCII, bytes, NULL); one round trip carries them all with the commit; and a
    /// deferred statement that fails breaks the transaction (the statements after it in its
    /// round trip did not run): the connection says so until it is rolled back.
    #[test]
    fn deferred_statements_round_trip_on_postgresql() {
        if !crate::testdb::on_postgres() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let url = crate::testdb::db(dir.path(), "x");
        let pg = PgConn::connect(url.to_str().unwrap()).unwrap();
        pg.set_session("SET standard_conforming_strings = on")
            .unwrap();
        let conn = Conn::Pg(Box::new(pg));
        conn.batch("CREATE TABLE t (i BIGINT, r DOUBLE PRECISION, s TEXT, b BYTEA)")
            .unwrap();
        let reals = [
            0.1,
            -0.0,
            1e-300,
            5e-324,
            f64::MAX,
            1.0 / 3.0,
            123456789.0123,
            f64::INFINITY,
        ];
        let texts = ["it's", "a\\b", "\\x41", "ünï ☃", "", "'; DROP TABLE t; --"];
        conn.set_deferring(true);
        conn.defer("BEGIN").unwrap();
        let trips = || match &conn {
            Conn::Pg(p) => p.trips.get(),
            Conn::Lite(_) => unreachable!(),
        };
        let before = trips();
        for (k, r) in reals.iter().enumerate() {
            let s = texts[k % texts.len()];
            conn.execute_deferred(
                "INSERT INTO t VALUES (?1, ?2, ?3, ?4)",
                args![k as i64, *r, s, vec![k as u8, 0, 39, 92]],
            )
            .unwrap();
        }
        conn.execute_deferred(
            "INSERT INTO t VALUES (?1, ?2, ?3, ?4)",
            args![99i64, None::<f64>, None::<String>, None::<Vec<u8>>],
        )
        .unwrap();
        assert_eq!(trips(), before, "deferred: nothing sent yet");
        conn.batch("COMMIT").unwrap();
        assert_eq!(trips(), before + 1, "one round trip with the commit");
        conn.set_deferring(false);
        let back = conn
            .rows("SELECT i, r, s, b FROM t ORDER BY i", args![], |r| {
                Ok((
                    r.get::<i64>(0)?,
                    r.get::<Option<f64>>(1)?,
                    r.get::<Option<String>>(2)?,
                    r.get::<Option<Vec<u8>>>(3)?,
                ))
            })
            .unwrap();
        assert_eq!(back.len(), reals.len() + 1);
        for (k, r) in reals.iter().enumerate() {
            let (i, real, text, bytes) = &back[k];
            assert_eq!(*i, k as i64);
            assert_eq!(real.unwrap().to_bits(), r.to_bits(), "{r:?}");
            assert_eq!(text.as_deref(), Some(texts[k % texts.len()]));
            assert_eq!(bytes.as_deref(), Some([k as u8, 0, 39, 92].as_slice()));
        }
        assert_eq!(back[reals.len()], (99, None, None, None));
        // A failing deferred statement (a text into BIGINT) breaks the transaction.
        conn.set_deferring(true);
        conn.defer("BEGIN").unwrap();
        conn.execute_deferred("INSERT INTO t (i) VALUES (?1)", args!["not a number"])
            .unwrap();
        conn.execute_deferred("INSERT INTO t (i) VALUES (?1)", args![100i64])
            .unwrap();
        assert!(
            conn.value::<i64>("SELECT COUNT(*) FROM t", args![])
                .is_err()
        );
        assert!(conn.is_broken());
        conn.set_deferring(false);
        conn.batch("ROLLBACK").unwrap();
        assert!(!conn.is_broken());
        assert_eq!(
            conn.value::<i64>("SELECT COUNT(*) FROM t", args![])
                .unwrap(),
            reals.len() as i64 + 1
        );
    }

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
