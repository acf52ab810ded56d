//! The writer (group commit): the one thread that owns the [`Service`]; it runs the waiting
//! requests in one transaction, commits once, answers them, and publishes the head when due.

use crate::log::log;
use crate::service::Service;
use serde_json::json;
use std::time::{Duration, Instant};

/// One operation for the writer: it runs on the service and returns what answers its request
/// once the batch's commit is known (`true`: committed).
pub type Job = Box<dyn FnOnce(&mut Service) -> Reply + Send>;
/// Answers a request after its batch's commit (`true`) or failure (`false`: a 500).
pub type Reply = Box<dyn FnOnce(bool) + Send>;

/// The writer waits (once, [`GATHER_WAIT`]) for more requests before it closes a batch smaller
/// than the last one, when the last one had at least this many: under concurrent load one
/// fsync then carries more requests (docs/perf.md). A lone client (batches of one) never waits.
pub const GATHER_FROM: usize = 4;

/// How long the writer waits for more requests of a batch ([`GATHER_FROM`]).
pub const GATHER_WAIT: Duration = Duration::from_micros(50);

/// Operations in one batch at most.
pub const MAX_BATCH: usize = 512;

/// The writer (group commit): the only owner of the service, on its own thread. It takes the
/// waiting operations (at most [`MAX_BATCH`]; see [`GATHER_FROM`]), runs them one after the
/// other inside one transaction ([`Service::begin_batch`]; each operation's writes are a
/// savepoint in it), commits once (one fsync for the batch), and only then answers each. If the
/// commit fails (or an operation panics), every request of the batch is answered 500 and the
/// service reloads its state from the database. Ends when every sender is dropped.
pub fn writer(mut s: Service, mut jobs: tokio::sync::mpsc::Receiver<Job>) {
    let mut last = 0;
    publish(&mut s);
    while let Some(first) = jobs.blocking_recv() {
        let mut batch = vec![first];
        let mut waited = false;
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(j) => batch.push(j),
                // Under concurrent load (the last batch was large) and short of it: wait once
                // for the requests on their way, so that one fsync carries more of them.
                Err(_) if !waited && last >= GATHER_FROM && batch.len() < last => {
                    waited = true;
                    std::thread::sleep(GATHER_WAIT);
                }
                Err(_) => break,
            }
        }
        last = batch.len();
        s.begin_batch();
        let mut replies = Vec::with_capacity(batch.len());
        for job in batch {
            if s.batch_failed() {
                // Dropped unrun: its request is answered 500.
                continue;
            }
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&mut s))) {
                Ok(r) => replies.push(r),
                Err(_) => s.fail_batch(),
            }
        }
        let t = Instant::now();
        let ok = s.commit_batch().is_ok();
        crate::metrics::record_commit(replies.len(), t.elapsed().as_secs_f64());
        for r in replies {
            r(ok);
        }
        publish(&mut s);
    }
}

/// Publish the committed head when due (`--publish-head`); a failure is logged, not fatal.
fn publish(s: &mut Service) {
    match s.publish_if_due() {
        Ok(true) => log("head-published", json!({})),
        Ok(false) => {}
        Err(e) => log("publish-head-failed", json!({"error": format!("{e:#}")})),
    }
}

/// A job that only asks for a publication at its batch's commit: the publication timer sends
/// one every period, so an idle service publishes its last change too.
pub fn publish_tick() -> Job {
    Box::new(|_: &mut Service| Box::new(|_| ()))
}
