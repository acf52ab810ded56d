//! The tests' databases on both stores (not part of the service's API): a test asks
//! [`db`] for a fresh database and gets an SQLite file in its folder, or, when the environment
//! names a PostgreSQL server ([`PG_ENV`]: a URL of a database the tests may create databases
//! from), a fresh PostgreSQL database on it. `scripts/test` runs the service's tests once
//! without it and once with it, on a throwaway cluster (`scripts/pg-cluster`).
//!
//! A PostgreSQL database has no folder to keep its audit key beside: the tests keep it in a
//! per-database file under the system's temporary folder ([`key_path`]), and open and verify
//! through [`open`] and [`verify`], which pass it.

use crate::service::Service;
use crate::store;
use anyhow::Result;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable naming the PostgreSQL server of the tests' second pass, e.g.
/// `postgres://postgres@127.0.0.1:54329/postgres`.
pub const PG_ENV: &str = "DPBANDITS_TEST_PG";

/// Whether this pass runs on PostgreSQL ([`PG_ENV`] set).
pub fn on_postgres() -> bool {
    std::env::var_os(PG_ENV).is_some_and(|v| !v.is_empty())
}

/// A fresh database for one test: `dir/file` (SQLite), or a new PostgreSQL database when
/// [`PG_ENV`] is set.
///
/// # Panics
/// The PostgreSQL server cannot be reached or refuses to create a database.
pub fn db(dir: &Path, file: &str) -> PathBuf {
    match std::env::var(PG_ENV) {
        Ok(base) if !base.is_empty() => {
            PathBuf::from(fresh_pg(&base).unwrap_or_else(|e| panic!("{PG_ENV}={base}: {e:#}")))
        }
        _ => dir.join(file),
    }
}

/// The key file of database `db`: beside an SQLite file ([`store::default_key_path`]); for a
/// PostgreSQL database, `dpbandits-test-keys/<database>.audit-key` under the temporary folder.
pub fn key_path(db: &Path) -> PathBuf {
    if !store::is_postgres_url(db) {
        return store::default_key_path(db);
    }
    let name = db
        .to_str()
        .and_then(|u| u.rsplit('/').next())
        .unwrap_or("db")
        .to_string();
    let dir = std::env::temp_dir().join("dpbandits-test-keys");
    let _ = std::fs::create_dir_all(&dir);
    dir.join(format!("{name}.audit-key"))
}

/// [`Service::open`] on a test database (with its [`key_path`]).
///
/// # Errors
/// As [`Service::open_keyed`].
pub fn open(db: &Path, admin_token: &str) -> Result<Service> {
    Service::open_keyed(db, admin_token, Some(&key_path(db)))
}

/// [`crate::verify::verify_default`] on a test database (with its [`key_path`] when it exists).
///
/// # Errors
/// What does not verify.
pub fn verify(db: &Path) -> Result<crate::verify::Report> {
    let key = key_path(db);
    let key = crate::verify::key_for(db, key.exists().then_some(key.as_path()))?;
    crate::verify::verify(db, key.as_ref(), &crate::verify::Expect::default())
}

/// Create a new database on the server `base` names; returns its URL.
fn fresh_pg(base: &str) -> Result<String> {
    static N: AtomicU64 = AtomicU64::new(0);
    let name = format!(
        "dpbt_{}_{}_{:08x}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        rand::random::<u32>()
    );
    store::create_database(base, &name)
}
