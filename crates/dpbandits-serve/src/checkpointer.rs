//! The background checkpoint: while the service runs, a thread of low priority checks the log's
//! new entries against the tables on a read-only connection (a WAL reader: one committed
//! state) after the last checkpoint, as the start-up check does, and has the writer store the
//! new keyed checkpoint ([`crate::verify::startup_check`]), so that a restart checks a short
//! tail only (docs/service.md, "The start-up check: a keyed checkpoint plus the tail").

use crate::store::{self, AuditKey};
use crate::writer::{Job, Queued};

use serde_json::json;
use std::path::PathBuf;
use std::time::Duration;

/// How often the thread looks at the log's length.
pub const CHECKPOINT_POLL: Duration = Duration::from_secs(10);

/// A new checkpoint is made once the log has grown by this many entries, or by an eighth of
/// its length when that is more (the check reads every decision and ledger row: its cost
/// grows with the database, so it runs less often on a large one).
pub const CHECKPOINT_MIN_ENTRIES: u64 = 50_000;

/// Start the checkpoint thread for database `db` under `key`; it ends when the writer's queue
/// closes (it holds no sender of its own between checkpoints: the writer ends as before).
pub fn start(db: PathBuf, key: AuditKey, jobs: &tokio::sync::mpsc::Sender<Queued>) {
    let jobs = jobs.downgrade();
    let spawned = std::thread::Builder::new()
        .name("dpbandits-checkpoint".into())
        .spawn(move || {
            // SAFETY: nice(2) changes this thread's own priority only (Linux: per thread).
            let _ = unsafe { libc::nice(10) };
            let mut last = None;
            loop {
                std::thread::sleep(CHECKPOINT_POLL);
                if jobs.strong_count() == 0 {
                    return;
                }
                match checkpoint_if_due(&db, &key, &mut last) {
                    Ok(Some(value)) => {
                        let job: Job = Box::new(move |s: &mut crate::service::Service| {
                            let r = s.store_checkpoint(&value);
                            crate::writer::Step::Reply(Box::new(move |committed: bool| {
                                if let Err(e) = r {
                                    crate::log::log("checkpoint-failed", json!({"error": e.to_string()}));
                                } else if !committed {
                                    crate::log::log("checkpoint-failed", json!({"error": "its batch failed"}));
                                }
                            }))
                        });
                        let Some(jobs) = jobs.upgrade() else { return };
                        if jobs.blocking_send(job.into()).is_err() {
                            return;
                        }
                    }
                    Ok(None) => {}
                    Err(e) => crate::log::log(
                        "checkpoint-check-failed",
                        json!({"error": format!("{e:#}"),
                               "hint": "the database no longer verifies against its audit log; run dpbandits audit-log verify"}),
                    ),
                }
            }
        });
    if let Err(e) = spawned {
        crate::log::log("checkpoint-failed", json!({"error": e.to_string()}));
    }
}

/// When the log has grown enough since `last` (the entries of the last checkpoint; `None`: as
/// the thread started), check it and return the new checkpoint's value.
fn checkpoint_if_due(
    db: &std::path::Path,
    key: &AuditKey,
    last: &mut Option<u64>,
) -> anyhow::Result<Option<String>> {
    let conn = store::Store::open_read_only(db)?;
    let (n, _) = conn.audit_head()?;
    let since = *last.get_or_insert(n);
    if n < since + CHECKPOINT_MIN_ENTRIES.max(since / 8) {
        return Ok(None);
    }
    *last = Some(n);
    conn.begin_read()?;
    let checked = crate::verify::startup_check(&conn, Some(key));
    conn.end_read()?;
    let checked = checked?;
    crate::log::log(
        "checkpoint",
        json!({"entries": checked.report.entries, "resumed_after": checked.resumed_after,
               "checkpoint_refused": checked.checkpoint_refused}),
    );
    Ok(checked.next)
}
