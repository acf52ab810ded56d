//! Reads that do not queue behind writes: [`READERS`] threads of their own, each with a
//! read-only SQLite connection (a WAL reader). An admin page of decisions (`/export`) or of the
//! audit log (`/v1/audit`) is read and formatted there, beside the writer, instead of inside a
//! batch of the writer's queue: a 10,000-row page no longer delays the decisions behind it
//! (docs/perf.md, "Fair scheduling and reads beside the writer"). The reader threads run at a
//! lower CPU priority (10 nicer than the process on Linux), so on a small machine a page being
//! formatted takes the cores the writer and the request workers leave. A WAL reader sees the last
//! commit before its statement started: committed data only, never a batch in progress.
//!
//! What still goes through the writer: everything that reads the in-memory sessions (status,
//! ledger summary, interim look, monitor, report, close) and every write.

use crate::store::{Reads, Store};
use anyhow::{Context, Result, anyhow};
use std::path::Path;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};

/// Reader threads (each holds one read-only connection, opened when first needed).
pub const READERS: usize = 2;

/// How much nicer than the process the reader threads run (Linux: a thread's own niceness;
/// elsewhere not set).
pub const READER_NICE: i32 = 10;

/// A read for a reader thread: it gets the thread's connection (or why it could not be opened).
type ReadJob = Box<dyn FnOnce(Result<&Reads, &anyhow::Error>) + Send>;

/// The reader threads of one database.
pub struct Readers {
    jobs: Mutex<Sender<ReadJob>>,
}

/// Lower the calling thread's CPU priority by [`READER_NICE`] from where it is (glibc's `nice`
/// is `getpriority` plus `setpriority` on the calling thread, which on Linux acts on that
/// thread alone; capped at 19 by the kernel). A failure leaves the priority as it was.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: nice reads no memory of ours.
    unsafe {
        libc::nice(READER_NICE);
    }
}

/// A reader thread: take reads until the pool is dropped.
fn reader(db: std::path::PathBuf, jobs: Arc<Mutex<Receiver<ReadJob>>>) {
    lower_priority();
    let mut conn: Option<Result<Store>> = None;
    loop {
        let job = {
            let rx = jobs
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match rx.recv() {
                Ok(job) => job,
                Err(_) => return,
            }
        };
        // A PostgreSQL connection the server closed (a restart) is opened again.
        if matches!(conn, None | Some(Err(_))) || matches!(&conn, Some(Ok(c)) if c.is_closed()) {
            conn = Some(Store::open_read_only(&db));
        }
        match conn.as_ref() {
            Some(Ok(c)) => job(Ok(c)),
            Some(Err(e)) => job(Err(e)),
            None => unreachable!("opened above"),
        }
    }
}

impl Readers {
    /// The reader threads for database `db` (connections are opened when first needed).
    pub fn new(db: &Path) -> Arc<Readers> {
        let (tx, rx) = std::sync::mpsc::channel::<ReadJob>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..READERS {
            let (db, rx) = (db.to_path_buf(), rx.clone());
            // A thread that cannot be spawned leaves the others; with none, reads fail below.
            let _ = std::thread::Builder::new()
                .name(format!("dpb-reader-{i}"))
                .spawn(move || reader(db, rx));
        }
        Arc::new(Readers {
            jobs: Mutex::new(tx),
        })
    }

    /// Run `f` on a reader thread's read-only connection (at most [`READERS`] at once; the
    /// others wait for a reader, not for the writer).
    ///
    /// # Errors
    /// A connection cannot be opened, the reader threads are gone, or `f` panicked.
    pub async fn read<R: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&Reads) -> R + Send + 'static,
    ) -> Result<R> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: ReadJob = Box::new(move |conn| {
            let r = match conn {
                Ok(c) => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(c)))
                    .map_err(|_| anyhow!("a read panicked")),
                Err(e) => Err(anyhow!("the read-only connection: {e:#}")),
            };
            let _ = tx.send(r);
        });
        self.jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .send(job)
            .map_err(|_| anyhow!("the reader threads are gone"))?;
        rx.await.context("a reader thread ended during a read")?
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
