//! The writer (group commit): the one thread that owns the [`Service`]; it runs the waiting
//! requests in one transaction, commits once, answers them, and publishes the head when due.
//! Requests wait in one lane per experiment, and a batch takes them round-robin with a time
//! share per lane ([`QUANTUM`]): an experiment whose operations are expensive cannot starve
//! another. An operation may leave a step to run after the batch's commit ([`Step::Then`]: a
//! reward whose release needs a durable ledger intent first): the writer runs it first in the
//! next batch, and runs nothing else of that experiment, or of the service-wide lane, in the
//! batch that staged it, so the operations of an experiment still run in their order.

use crate::log::log;
use crate::service::Service;
use serde_json::json;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// One operation for the writer: it runs on the service and returns what answers its request
/// once the batch's commit is known (`true`: committed), or its next step.
pub type Job = Box<dyn FnOnce(&mut Service) -> Step + Send>;

/// What an operation leaves for the writer.
pub enum Step {
    /// Answer the request once the batch's commit is known.
    Reply(Reply),
    /// Run this after the batch commits (first in the next batch; its lane and the
    /// service-wide lane take nothing more in this batch). Dropped, unrun, if the commit
    /// fails: its request is answered 500 by the dropped channel.
    Then(Job),
}

/// Answers a request after its batch's commit (`true`) or failure (`false`: a 500).
pub type Reply = Box<dyn FnOnce(bool) + Send>;

/// A job with its lane: the experiment it operates on (`None`: the service-wide lane: admin
/// operations, creation, health probes, the timers).
pub struct Queued {
    /// The lane (an experiment's name).
    pub lane: Option<String>,
    /// The operation.
    pub job: Job,
}

impl From<Job> for Queued {
    fn from(job: Job) -> Queued {
        Queued { lane: None, job }
    }
}

/// The writer waits (once, [`GATHER_WAIT`]) for more requests before it closes a batch of at
/// most half the last one, when the last one had at least this many: under concurrent load,
/// just after a commit answered them, most clients' next requests are on their way, and one
/// fsync then carries them (docs/perf.md). A lone client (batches of one) never waits, and
/// neither does a batch only a few requests short of the last (under a neighbour the sizes
/// vary by a few: a wait for those cost more than it gathered, docs/perf.md "Fair
/// scheduling"). The rule of a store whose commit is a round trip to a database server is
/// `gather_remote`'s.
pub const GATHER_FROM: usize = 4;

/// How long the writer waits for more requests of a batch ([`GATHER_FROM`]).
pub const GATHER_WAIT: Duration = Duration::from_micros(50);

/// On PostgreSQL, the longest the writer waits for the requests of a batch by default
/// (`gather_remote`; `--batch-wait-ms`).
pub const GATHER_REMOTE_MAX: Duration = Duration::from_millis(2);

/// While the writer gathers a batch on PostgreSQL with at least half the requests it expects,
/// this long without a new one closes it (`gather_remote`).
pub const GATHER_STALL: Duration = Duration::from_micros(250);

/// Operations in one batch at most.
pub const MAX_BATCH: usize = 512;

/// Each lane's share of a batch's time (deficit round robin): at each batch a lane with
/// waiting operations gets this much credit (at most this much in all); each of its
/// operations is charged the time it took (a release's fsync included); a lane runs while its
/// credit is positive. A lane whose operations cost more than its share waits for later
/// batches, so the cheap operations of other lanes are not held behind them.
pub const QUANTUM: Duration = Duration::from_millis(2);

/// The waiting operations, one queue per lane, and each lane's credit (seconds).
#[derive(Default)]
struct Lanes {
    lanes: Vec<(Option<String>, VecDeque<Job>, f64)>,
    next: usize,
    waiting: usize,
    /// Steps staged by the last batch, with their lanes: run first in the next one.
    staged: Vec<(usize, Job)>,
    /// Lanes that take nothing more in this batch (a step of theirs is staged).
    held: Vec<usize>,
}

impl Lanes {
    fn push(&mut self, q: Queued) {
        self.waiting += 1;
        match self.lanes.iter_mut().find(|l| l.0 == q.lane) {
            Some(l) => l.1.push_back(q.job),
            None => self.lanes.push((q.lane, VecDeque::from([q.job]), 0.0)),
        }
    }

    /// A new batch: every lane gets [`QUANTUM`] of credit (at most one quantum in all), until a
    /// lane with waiting operations has positive credit. A lane keeps its debt while it is
    /// empty (its next operations wait until it is paid), and is dropped once empty and out of
    /// debt.
    fn refill(&mut self) {
        self.held.clear();
        if !self.staged.is_empty() {
            // The staged steps name their lanes by place: no lane is dropped before they run.
            self.next = 0;
            return self.top_up();
        }
        self.lanes.retain(|l| !l.1.is_empty() || l.2 < 0.0);
        self.next = 0;
        self.top_up();
    }

    /// Credit for a new batch: every lane [`QUANTUM`] (at most one quantum in all), until a
    /// lane with waiting operations has positive credit.
    fn top_up(&mut self) {
        let q = QUANTUM.as_secs_f64();
        loop {
            for l in &mut self.lanes {
                l.2 = (l.2 + q).min(q);
            }
            let mut waiting = self.lanes.iter().filter(|l| !l.1.is_empty());
            if waiting.clone().next().is_none() || waiting.any(|l| l.2 > 0.0) {
                break;
            }
        }
    }

    /// The next operation, round-robin over the lanes with credit: `(lane index, job)`.
    fn take(&mut self) -> Option<(usize, Job)> {
        let n = self.lanes.len();
        for k in 0..n {
            let i = (self.next + k) % n;
            let l = &mut self.lanes[i];
            if l.2 > 0.0
                && !self.held.contains(&i)
                && let Some(job) = l.1.pop_front()
            {
                self.next = (i + 1) % n;
                self.waiting -= 1;
                return Some((i, job));
            }
        }
        None
    }

    /// Lane `i` staged `step` for after the commit: it, and the service-wide lane (whose
    /// operations may act on any experiment), take nothing more in this batch.
    fn stage(&mut self, i: usize, step: Job) {
        self.staged.push((i, step));
        self.held.push(i);
        if let Some(j) = self.lanes.iter().position(|l| l.0.is_none()) {
            self.held.push(j);
        }
    }

    /// Drop every waiting and staged operation (their requests are answered 500 as their
    /// channels drop).
    fn drop_all(&mut self) {
        self.staged.clear();
        self.held.clear();
        self.lanes.clear();
        self.waiting = 0;
        self.next = 0;
    }

    /// Charge lane `i` for an operation that took `spent`; a lane left empty keeps no credit.
    fn charge(&mut self, i: usize, spent: Duration) {
        let l = &mut self.lanes[i];
        l.2 -= spent.as_secs_f64();
        if l.1.is_empty() && l.2 > 0.0 {
            l.2 = 0.0;
        }
    }
}

/// What the last batch tells the next one's gathering.
#[derive(Clone, Copy, Default)]
struct Last {
    /// Requests it answered.
    answered: usize,
    /// How long its commit took.
    commit: Duration,
}

/// Move every waiting request of the queue into the lanes (at most [`MAX_BATCH`] waiting in
/// all, beyond which the queue holds them).
fn drain(jobs: &mut tokio::sync::mpsc::Receiver<Queued>, lanes: &mut Lanes) {
    while lanes.waiting < MAX_BATCH {
        match jobs.try_recv() {
            Ok(q) => lanes.push(q),
            Err(_) => break,
        }
    }
}

/// [`drain`] the queue; under concurrent load (the last batch had `last` requests, and at most
/// half as many wait) wait once ([`GATHER_WAIT`]) for the requests on their way, and drain
/// again.
fn gather(jobs: &mut tokio::sync::mpsc::Receiver<Queued>, lanes: &mut Lanes, last: usize) {
    drain(jobs, lanes);
    if last >= GATHER_FROM && 2 * lanes.waiting <= last {
        std::thread::sleep(GATHER_WAIT);
        drain(jobs, lanes);
    }
}

/// [`drain`] the queue, then wait for the ones on their way when the
/// commit is a round trip to a database server (PostgreSQL): the clients the last commit
/// answered send their next requests now, while the others' requests, which arrived during that
/// commit, already wait. Without a wait the writer would run those alone, and the clients
/// would settle into two groups taking turns, each batch carrying half of them and paying a
/// commit of its own (0.15 round trips per decision at 32 clients, docs/perf.md). So the
/// writer waits until as many requests wait as the last batch answered plus those waiting
/// when it began, or for as long as the last commit took (at most `wait`: `--batch-wait-ms`,
/// [`GATHER_REMOTE_MAX`] by default), whichever comes first: one batch then carries every
/// client, and the writer never waits longer than the commit it saves (nor, with half of them
/// here, longer than [`GATHER_STALL`] for the next). A lone client (the last batch answered
/// one, or none) never waits. The trade (docs/perf.md): half the commits, against the overlap
/// of one group's commit with the other group's requests, which on a machine whose cores the
/// clients share with the database was worth more.
fn gather_remote(
    jobs: &mut tokio::sync::mpsc::Receiver<Queued>,
    lanes: &mut Lanes,
    last: Last,
    wait: Duration,
) {
    drain(jobs, lanes);
    let expect = (last.answered + lanes.waiting).min(MAX_BATCH);
    if last.answered < 2 {
        return;
    }
    let window = last.commit.min(wait);
    let t = Instant::now();
    // Parked between arrivals: each request unparks the writer once it is queued (the
    // timers' operations do not, and wait at most the window). Once half the expected requests
    // wait, a pause of [`GATHER_STALL`] without an arrival closes the batch: a straggler (a
    // client that went away, or is slow this time) is not worth the whole window.
    let mut arrived = (lanes.waiting, Instant::now());
    while lanes.waiting < expect {
        let Some(left) = window.checked_sub(t.elapsed()) else {
            break;
        };
        if 2 * lanes.waiting >= expect {
            match GATHER_STALL.checked_sub(arrived.1.elapsed()) {
                Some(stall) => std::thread::park_timeout(left.min(stall)),
                None => break,
            }
        } else {
            std::thread::park_timeout(left);
        }
        drain(jobs, lanes);
        if lanes.waiting > arrived.0 {
            arrived = (lanes.waiting, Instant::now());
        }
    }
}

/// Run one batch from the lanes (round-robin within each lane's credit, at most
/// [`MAX_BATCH`] operations) in one transaction, commit it and answer its requests; returns
/// how many it answered and how long its commit took. When an operation fails the batch (or
/// panics), the operations not run yet stay in their lanes for the next batch.
fn run_batch(s: &mut Service, lanes: &mut Lanes) -> Last {
    lanes.refill();
    s.begin_batch();
    if s.batch_failed() {
        // Not begun (the database is unreachable, or the state could not be reloaded from
        // it): every waiting request is answered now (500, "not committed": the channels drop)
        // instead of waiting for a database that may not come back; the clients retry.
        lanes.drop_all();
        let _ = s.commit_batch();
        return Last::default();
    }
    let mut first = std::mem::take(&mut lanes.staged).into_iter();
    let mut replies = Vec::new();
    let mut ran = 0;
    while ran < MAX_BATCH && !s.batch_failed() {
        let Some((i, job)) = first.next().or_else(|| lanes.take()) else {
            break;
        };
        ran += 1;
        let t = Instant::now();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(s))) {
            Ok(Step::Reply(r)) => replies.push(r),
            Ok(Step::Then(step)) => lanes.stage(i, step),
            Err(_) => s.fail_batch(),
        }
        lanes.charge(i, t.elapsed());
    }
    // A failed batch stops before its staged steps from the last batch have all run: they are
    // not run (their requests are answered 500 as the channel drops), as the batch's own.
    drop(first);
    let t = Instant::now();
    let ok = s.commit_batch().is_ok();
    let commit = t.elapsed();
    if !ok {
        lanes.staged.clear();
    }
    crate::metrics::record_commit(replies.len(), commit.as_secs_f64());
    let answered = replies.len();
    for r in replies {
        r(ok);
    }
    Last { answered, commit }
}

/// The writer (group commit): the only owner of the service, on its own thread. It takes the
/// waiting operations into their lanes (`gather`), runs a batch of them one after the other
/// inside one transaction ([`Service::begin_batch`]; each operation's writes are a savepoint in
/// it), commits once (one fsync for the batch), and only then answers each. If the commit
/// fails (or an operation panics), every request of the batch is answered 500 and the service
/// reloads its state from the database. Ends when every sender is dropped and no operation
/// waits.
pub fn writer(mut s: Service, mut jobs: tokio::sync::mpsc::Receiver<Queued>, batch_wait: Duration) {
    let mut lanes = Lanes::default();
    let mut last = Last::default();
    let remote = s.store_is_remote();
    publish(&mut s);
    loop {
        if lanes.waiting == 0 && lanes.staged.is_empty() {
            match jobs.blocking_recv() {
                Some(q) => lanes.push(q),
                None => break,
            }
        }
        if remote {
            gather_remote(&mut jobs, &mut lanes, last, batch_wait);
        } else {
            gather(&mut jobs, &mut lanes, last.answered);
        }
        last = run_batch(&mut s, &mut lanes);
        if let Some(why) = s.fenced() {
            // Another node writes the database now: this one stops writing. Requests still
            // queued are answered 503 ("the writer has stopped") by the HTTP layer.
            log("writer-stopped", json!({"error": why}));
            return;
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
    Box::new(|_: &mut Service| Step::Reply(Box::new(|_| ())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> Job {
        Box::new(|_: &mut Service| Step::Reply(Box::new(|_| ())))
    }

    /// A staged step holds its lane and the service-wide lane for the rest of the batch; the
    /// next batch runs it first, and its lane keeps its place until then.
    #[test]
    fn a_staged_step_holds_its_lane_until_the_next_batch() {
        let mut lanes = Lanes::default();
        for lane in [Some("a"), None, Some("b"), Some("a"), None, Some("b")] {
            lanes.push(Queued {
                lane: lane.map(str::to_string),
                job: job(),
            });
        }
        lanes.refill();
        let (a, _) = lanes.take().unwrap();
        assert_eq!(lanes.lanes[a].0.as_deref(), Some("a"));
        lanes.stage(a, job());
        lanes.charge(a, Duration::from_micros(10));
        // Only lane b runs for the rest of this batch.
        let mut rest = vec![];
        while let Some((i, _)) = lanes.take() {
            lanes.charge(i, Duration::from_micros(10));
            rest.push(lanes.lanes[i].0.clone());
        }
        assert_eq!(rest, vec![Some("b".to_string()), Some("b".to_string())]);
        // The next batch: the staged step first (by its lane's place), then a and None again.
        lanes.refill();
        let staged = std::mem::take(&mut lanes.staged);
        assert_eq!(staged.len(), 1);
        assert_eq!(lanes.lanes[staged[0].0].0.as_deref(), Some("a"));
        let mut next = vec![];
        while let Some((i, _)) = lanes.take() {
            lanes.charge(i, Duration::from_micros(10));
            next.push(lanes.lanes[i].0.clone());
        }
        next.sort();
        assert_eq!(next, vec![None, None, Some("a".to_string())]);
    }

    /// The gathering on PostgreSQL ends as soon as the expected requests wait (those on their
    /// way included), at a stall once half of them do, and at once for a lone client: never by
    /// its window here (5 s; the bound 4 s leaves a noisy machine room: what is checked is
    /// which rule ended it, not a speed).
    #[test]
    fn a_remote_batch_gathers_what_is_on_its_way_and_no_straggler() {
        let long = Duration::from_secs(5);
        let last = |answered| Last {
            answered,
            commit: long,
        };
        // Bursts of requests, each after a pause, the writer unparked after each burst.
        let send = |bursts: Vec<(u64, usize)>| {
            let (tx, rx) = tokio::sync::mpsc::channel::<Queued>(16);
            let writer = std::thread::current();
            let t = std::thread::spawn(move || {
                for (pause_ms, n) in bursts {
                    std::thread::sleep(Duration::from_millis(pause_ms));
                    for _ in 0..n {
                        tx.blocking_send(job().into()).unwrap();
                    }
                    writer.unpark();
                }
                // The sender stays open (a straggler that never comes) until the writer is done.
                std::thread::sleep(Duration::from_secs(6));
            });
            (rx, t)
        };
        // The writer begins 50 ms after the sender (a burst with pause 0 already waits, one
        // with pause 70 arrives 20 ms into the wait): how many it gathered (never ended by the
        // window).
        let gathered = |bursts: Vec<(u64, usize)>, answered: usize| {
            let (mut rx, _t) = send(bursts);
            std::thread::sleep(Duration::from_millis(50));
            let mut lanes = Lanes::default();
            let t = Instant::now();
            gather_remote(&mut rx, &mut lanes, last(answered), long);
            let took = t.elapsed();
            assert!(took < Duration::from_secs(4), "{took:?}");
            lanes.waiting
        };
        // 4 answered last time, all 4 on their way (1 after 20 ms, 3 after 20 ms more): below
        // half, no stall ends the wait; all 4 gathered.
        assert_eq!(gathered(vec![(70, 1), (20, 3)], 4), 4);
        // 2 wait already (expected: those 2 and the 4 answered), 1 of the 4 comes back, the
        // others never: half are here, closed after the stall.
        assert_eq!(gathered(vec![(0, 2), (100, 1)], 4), 3);
        // A lone client: no wait at all.
        assert_eq!(gathered(vec![(0, 1)], 1), 1);
    }

    /// Lanes are served round-robin, and a lane that spent more than its share waits for a
    /// later batch while the others go on.
    #[test]
    fn an_expensive_lane_waits_its_turn() {
        let mut lanes = Lanes::default();
        for _ in 0..3 {
            lanes.push(Queued {
                lane: Some("slow".into()),
                job: job(),
            });
            lanes.push(Queued {
                lane: Some("fast".into()),
                job: job(),
            });
        }
        lanes.refill();
        let (a, _) = lanes.take().unwrap();
        lanes.charge(a, QUANTUM * 3);
        let (b, _) = lanes.take().unwrap();
        assert_ne!(a, b, "round-robin");
        lanes.charge(b, Duration::from_micros(10));
        // The slow lane is out of credit for this batch: only the fast one runs.
        let (c, _) = lanes.take().unwrap();
        assert_eq!(c, b);
        lanes.charge(c, Duration::from_micros(10));
        let (d, _) = lanes.take().unwrap();
        assert_eq!(d, b);
        lanes.charge(d, Duration::from_micros(10));
        assert!(
            lanes.take().is_none(),
            "the slow lane waits for a later batch"
        );
        // Later batches: the slow lane's debt is paid off, then it runs again.
        let mut batches = 0;
        loop {
            lanes.refill();
            batches += 1;
            if let Some((i, _)) = lanes.take() {
                assert_eq!(i, a);
                break;
            }
        }
        assert!(batches >= 1 && lanes.waiting == 1, "{batches}");
    }
}
