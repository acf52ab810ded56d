//! Reads that do not queue behind writes: a small pool of read-only SQLite connections (WAL
//! readers) used on the runtime's blocking threads. An admin page of decisions (`/export`) or
//! of the audit log (`/v1/audit`) reads there, beside the writer, instead of inside a batch of
//! the writer's queue: a 10,000-row page no longer delays the decisions behind it (docs/perf.md,
//! "Reads beside the writer"). A WAL reader sees the last commit before its statement started:
//! committed data only, never a batch in progress.
//!
//! What still goes through the writer: everything that reads the in-memory sessions (status,
//! ledger summary, interim look, monitor, report, close) and every write.

use crate::store::{Reads, Store};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Read connections at most (each read holds one on a blocking thread).
pub const READERS: usize = 2;

/// The pool of read-only connections of one database.
pub struct Readers {
    db: PathBuf,
    idle: Mutex<Vec<Store>>,
    permits: tokio::sync::Semaphore,
}

impl Readers {
    /// A pool for database `db` (connections are opened when first needed).
    pub fn new(db: &Path) -> Arc<Readers> {
        Arc::new(Readers {
            db: db.to_path_buf(),
            idle: Mutex::new(Vec::new()),
            permits: tokio::sync::Semaphore::new(READERS),
        })
    }

    /// Run `f` on a read-only connection on a blocking thread (at most [`READERS`] at once; the
    /// others wait for a connection, not for the writer).
    ///
    /// # Errors
    /// A connection cannot be opened, or `f` panicked.
    pub async fn read<R: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&Reads) -> R + Send + 'static,
    ) -> Result<R> {
        let _permit = self
            .permits
            .acquire()
            .await
            .context("the read pool closed")?;
        let me = self.clone();
        tokio::task::spawn_blocking(move || {
            let taken = me
                .idle
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .pop();
            let conn = match taken {
                Some(c) => c,
                None => Store::open_read_only(&me.db)?,
            };
            let r = f(&conn);
            me.idle
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(conn);
            Ok(r)
        })
        .await
        .context("a read panicked")?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::{CreateRequest, Service, export_rows};

    /// A read on the pool sees the committed rows only and does not wait for a batch in
    /// progress (the writer's open transaction holds no lock a WAL reader needs).
    #[test]
    fn a_read_sees_committed_rows_and_does_not_wait_for_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("r.sqlite");
        let mut s = Service::open(&db, "readers-admin-token-0123456789").unwrap();
        let req: CreateRequest = serde_json::from_value(serde_json::json!({
            "name": "e", "arms": 3, "policy": {"kind": "adac_ucb", "rho": 0.5}}))
        .unwrap();
        s.create(req).unwrap();
        let pair = |s: &mut Service| {
            let id = s.decide("e", None, None).unwrap()["decision_id"]
                .as_u64()
                .unwrap();
            s.reward("e", id, 1.0).unwrap();
        };
        for _ in 0..3 {
            pair(&mut s);
        }
        // A batch in progress: a decision written, not committed (a reward could complete a
        // commitment, whose release intent commits the batch so far).
        s.begin_batch();
        s.decide("e", None, None).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let readers = Readers::new(&db);
        let page = || {
            let t = std::time::Instant::now();
            let rows = rt
                .block_on(readers.read(|c| export_rows(c, "e", 0, 100)))
                .unwrap()
                .unwrap()
                .0;
            (rows.len(), t.elapsed())
        };
        let (n, took) = page();
        assert_eq!(n, 3, "the batch in progress is not seen");
        assert!(took < std::time::Duration::from_secs(1), "{took:?}");
        s.commit_batch().unwrap();
        assert_eq!(page().0, 4, "committed: seen");
        let missing = rt
            .block_on(readers.read(|c| export_rows(c, "nope", 0, 100)))
            .unwrap();
        assert!(missing.is_err());
    }
}
