//! One writer per PostgreSQL database, fenced: the `owner` row (docs/service.md, "PostgreSQL").
//!
//! An SQLite database has one writer by its file locks (`serve`'s `DB.lock` and `flock`). A
//! PostgreSQL database is reached by many machines, so the writer is named in the database: the
//! row `owner(id = 1, node, epoch, lease_until)`. A node **claims** it with one statement,
//! evaluated on the database's clock (never a node's), that succeeds only when the lease has
//! ended; each claim adds one to the epoch. The owner **renews** the lease (`serve` every third
//! of it, from its own connection). Every write transaction of the owner **fences** itself first:
//! it reads the row `FOR SHARE` and rolls back unless the epoch is its own. The row lock orders
//! that check before the commit: a node that lost the database (paused past its lease, cut off)
//! commits nothing after the next owner's claim, and a claim waits for a batch in flight to end.
//! A paused node holding that row lock inside a batch is cut off by
//! `idle_in_transaction_session_timeout` ([`IDLE_IN_BATCH`] or three leases, the longer), so a
//! takeover waits at most that long. (Not one lease: the writer computes inside its batches, a
//! slow operation on a loaded machine can take a second between two statements, and a session
//! ended under it fails its batch.)

use super::db::{Reads, Store};
pub use super::fence::Fenced;
use super::sql::{Conn, args};
use anyhow::{Context, Result, bail};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The default lease of a PostgreSQL database's writer (`serve --lease-seconds`).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(10);

/// The least time a writer's session may sit inside a batch between two statements before the
/// server ends it (`idle_in_transaction_session_timeout`; three leases when that is longer).
pub const IDLE_IN_BATCH: Duration = Duration::from_secs(10);

/// Who holds a PostgreSQL database: its node, its epoch and the seconds its lease has left
/// (negative: ended).
#[derive(Debug, Clone, PartialEq)]
pub struct Holder {
    /// The node's name (`host:pid:random`).
    pub node: String,
    /// Its epoch (one more at each claim).
    pub epoch: i64,
    /// Seconds until the lease ends, on the database's clock.
    pub left: f64,
    /// The address its HTTP server listens on (standbys forward requests there).
    pub addr: Option<String>,
}

/// A fresh node name: the host, the process id and 32 random bits (a restarted process is a new
/// node: it waits for the lease its predecessor held).
pub fn node_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "host".to_string());
    format!(
        "{host}:{}:{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

impl Reads {
    /// The holder of this PostgreSQL database (`None`: never claimed).
    ///
    /// # Errors
    /// Database errors.
    pub fn holder(&self) -> Result<Option<Holder>> {
        self.conn.row(
            "SELECT node, epoch, EXTRACT(EPOCH FROM lease_until - now())::DOUBLE PRECISION, addr FROM owner WHERE id = 1",
            args![],
            |r| {
                Ok(Holder {
                    node: r.get(0)?,
                    epoch: r.get(1)?,
                    left: r.get(2)?,
                    addr: r.get(3)?,
                })
            },
        )
    }
}

impl Reads {
    /// The server's `synchronous_standby_names`: empty when no standby confirms a commit before
    /// it is acknowledged (asynchronous replication, or none).
    ///
    /// # Errors
    /// Database errors.
    pub fn synchronous_standbys(&self) -> Result<String> {
        self.conn.value(
            "SELECT current_setting('synchronous_standby_names')",
            args![],
        )
    }
}

impl Store {
    /// Claim this PostgreSQL database for `node` (whose HTTP server listens on `addr`, if it
    /// has one) with a lease of `lease`: succeeds only when it has no holder or the holder's
    /// lease has ended. Returns the new epoch, or the holder that keeps it.
    ///
    /// # Errors
    /// Database errors, or an SQLite store.
    pub fn claim(
        &mut self,
        node: &str,
        addr: Option<&str>,
        lease: Duration,
    ) -> Result<Result<i64, Holder>> {
        if !self.reads.conn.is_pg() {
            bail!("claim: an SQLite database has one writer by its file locks");
        }
        let secs = lease.as_secs_f64();
        let got: Option<i64> = self.reads.conn.row(
            "INSERT INTO owner (id, node, epoch, lease_until, addr) VALUES (1, ?1, 1, now() + make_interval(secs => ?2), ?3)
             ON CONFLICT (id) DO UPDATE SET node = excluded.node, epoch = owner.epoch + 1,
                 lease_until = excluded.lease_until, addr = excluded.addr
             WHERE owner.lease_until < now() RETURNING epoch",
            args![node, secs, addr],
            |r| r.get(0),
        )?;
        match got {
            Some(epoch) => {
                self.epoch = Some(epoch);
                if let Conn::Pg(p) = &self.reads.conn {
                    self.renewer = Some(start_renewer(p.url().to_string(), epoch, lease));
                }
                // A paused writer inside a batch holds the owner row's lock: the server ends its
                // session after [`IDLE_IN_BATCH`] or three leases, so that a takeover does not
                // wait for it forever.
                let ms = (3 * lease)
                    .max(IDLE_IN_BATCH)
                    .as_millis()
                    .min(i32::MAX as u128);
                if let Conn::Pg(p) = &self.reads.conn {
                    p.set_session(&format!("SET idle_in_transaction_session_timeout = {ms}"))?;
                }
                Ok(Ok(epoch))
            }
            None => Ok(Err(self.holder()?.context("the owner row vanished")?)),
        }
    }

    /// Release the lease (a clean stop): the next node claims at once instead of after the
    /// lease. Only this store's epoch is released.
    ///
    /// # Errors
    /// Database errors.
    pub fn release(&mut self) -> Result<()> {
        if let Some(r) = self.renewer.take() {
            r.store(false, Ordering::Relaxed);
        }
        if let Some(epoch) = self.epoch.take() {
            self.reads.conn.execute(
                "UPDATE owner SET lease_until = now() - INTERVAL '1 second' WHERE id = 1 AND epoch = ?1",
                args![epoch],
            )?;
        }
        Ok(())
    }

    /// The epoch this store claimed (`None`: SQLite, or not claimed).
    pub fn epoch(&self) -> Option<i64> {
        self.epoch
    }
}

/// Renew the lease of `epoch` on `conn`: `Ok(false)` when the database has another epoch (this
/// node was fenced).
///
/// # Errors
/// Database errors (the caller retries on a new connection).
fn renew(conn: &Conn, epoch: i64, lease: Duration) -> Result<bool> {
    let n = conn.execute(
        "UPDATE owner SET lease_until = now() + make_interval(secs => ?2) WHERE id = 1 AND epoch = ?1",
        args![epoch, lease.as_secs_f64()],
    )?;
    Ok(n == 1)
}

/// The renewer of a claim: a thread with its own connection that renews the lease every third
/// of it, from the claim on (a long start-up check must not lose the database), until the
/// returned flag is cleared (the store is dropped) or the database has another epoch.
fn start_renewer(url: String, epoch: i64, lease: Duration) -> Arc<AtomicBool> {
    let alive = Arc::new(AtomicBool::new(true));
    let flag = alive.clone();
    let every = lease / 3;
    let spawned = std::thread::Builder::new()
        .name("dpbandits-lease".into())
        .spawn(move || {
            let mut conn: Option<Conn> = None;
            let mut last = std::time::Instant::now();
            while flag.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50).min(every));
                if last.elapsed() < every {
                    continue;
                }
                last = std::time::Instant::now();
                if conn.as_ref().is_none_or(Conn::is_closed) {
                    conn = super::sql::PgConn::connect(&url)
                        .ok()
                        .map(|p| Conn::Pg(Box::new(p)));
                }
                let Some(c) = conn.as_ref() else {
                    crate::log::log(
                        "lease-renewal-failed",
                        serde_json::json!({"epoch": epoch, "error": "cannot connect"}),
                    );
                    continue;
                };
                match renew(c, epoch, lease) {
                    Ok(true) => {}
                    Ok(false) => {
                        crate::log::log("lease-lost", serde_json::json!({"epoch": epoch}));
                        return;
                    }
                    Err(e) => {
                        crate::log::log(
                            "lease-renewal-failed",
                            serde_json::json!({"epoch": epoch, "error": format!("{e:#}")}),
                        );
                        conn = None;
                    }
                }
            }
        });
    if spawned.is_err() {
        crate::log::log(
            "lease-renewal-failed",
            serde_json::json!({"epoch": epoch, "error": "no thread"}),
        );
    }
    alive
}
