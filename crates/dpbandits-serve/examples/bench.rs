//! Decision-service benchmark (docs/perf.md): decisions per second and p50/p99 latency of the
//! decision and reward requests, for 1, 8 and 32 concurrent clients, durability on (WAL,
//! `synchronous = FULL`: every response waits for its commit to reach the disk).
//!
//! `cargo run --release -p dpbandits-serve --example bench [-- PAIRS [DIR [KIND [CLIENTS]]]]`:
//! PAIRS decision + reward pairs per configuration (default 2000); the database goes in DIR
//! (default: a temporary folder under the system's temp dir; put it on the disk you mean to
//! measure); KIND the policy kind, `KIND` or `KIND:key=value[,key=value...]` (default `adac_ucb`;
//! without parameters a kind that takes `rho` gets `rho = 0.5`, any other kind its registry
//! example, as `dpbandits list` shows it; parameters given replace these, e.g.
//! `dp_ts:epsilon=1.0`, `adac_gope:rho=0.5,delta=0.001`); CLIENTS a comma-separated
//! list of client counts (default `1,8,32`). With `BENCH_ADDR=127.0.0.1:PORT` (and the admin
//! token in `BENCH_ADMIN`) the clients drive an external `dpbandits serve` instead (to compare two
//! builds with the same client code; DIR is then unused; every mode below works against it).
//! `BENCH_SPREAD=ADDR,ADDR` adds more nodes of the same (PostgreSQL) database: client `c` sends
//! its requests to node `c % n` (`BENCH_ADDR` first; a standby forwards to the writer's node).
//! The last column (of both tables) counts PostgreSQL round trips per decision (`/metrics`; 0
//! on SQLite).
//! Over loopback, each client keeps one HTTP/1.1 connection open (`client::Conn`, as HTTP
//! clients do); with `BENCH_KEEPALIVE=0` it opens one per request. Issue 30's figure (docs/perf.md):
//! `target/release/examples/bench 40000 /work/benchdb adac_ucb 32`.
//!
//! **Every setting.** The problem follows the kind's setting (registry): finite-armed kinds
//! `"arms": 3` (as always); linear kinds (`adac_gope`, `gope`, `adar_gope_var`,
//! `gope_output_perturbation`, `lin_ucb`) a fixed set of 5 arm vectors of dimension 3 (norm <= 1),
//! rewards a linear model plus uniform noise, clipped to [0, 1]; contextual kinds (`adac_oful`,
//! `oful`, `rs_oful`) `"dim": BENCH_DIM, "horizon": BENCH_HORIZON` and each decision request
//! carries `"actions"`: BENCH_ACTIONS vectors of dimension BENCH_DIM, of norm <= 0.99 (random in
//! the unit ball from a xorshift generator seeded per client; each client generates a pool of 16
//! action sets before timing and cycles through it), rewards `0.5 + 0.5 <theta, a>` plus uniform
//! noise, clipped to [0, 1]; best-arm identification kinds (`dp_tt`, `adap_tt`, `adap_tt_star`,
//! `dp_se_bai`, `eb_tci`) `"arms": 3, "delta": 0.05`, Bernoulli rewards of means 0.3, 0.5, 0.7.
//! When a BAI experiment stops (409 `{"stopped": true}`), its configuration ends there and the
//! report says so with the recommendation. Non-private kinds are created with
//! `"allow_non_private": true`.
//!
//! Environment variables (all optional; without them the benchmark does what it always did):
//! * `BENCH_DELAY_MS=50`: **delayed rewards.** Each client only asks for decisions (keep-alive
//!   connection) and pushes `(due time, decision_id, reward)` into a shared delay queue;
//!   `BENCH_SENDERS` separate sender threads (default 16, each with its own keep-alive connection)
//!   send every reward when it is due, `BENCH_DELAY_MS` milliseconds after its decision was
//!   answered. A 409 at a commitment boundary is answered as the server hints: after the body's
//!   `retry_after_ms` when it has one, else after 2 ms (counted: `409 answered`). The row gives
//!   decisions/s over the deciding phase and over the whole run (to the last reward's
//!   acknowledgement: the rate the rewards sustained), the decision request's p50/p99 (the
//!   answered attempt) and the p99 of the whole wait for a decision (409s included), the reward
//!   request's p50/p99, the reward lag p99 (how late a sender sent a reward after it was due),
//!   and the mean number of decisions in flight (decided, reward not yet acknowledged; time
//!   average over the run, Little's law). At the end every reward is sent and the server's
//!   status is checked: `decisions` and `rewarded` equal the decisions made, `pending` = 0.
//! * `BENCH_SENDERS=N`: sender threads in delayed mode (default 16: with 4, `adac_gope` at 32
//!   clients was held to 3,400 decisions/s by its senders, rewards 7.6 s late at p99, against
//!   7,800/s with 16). A row whose reward lag p99 is over 10 ms is followed by a note: the
//!   rewards came later than the delay (the senders, or the server, did not keep up).
//! * `BENCH_WHILE_PENDING=pipeline|wait`: sent as `"while_pending"` in the create request
//!   (default: not sent, the service's default `wait`).
//! * `BENCH_SECONDS=S`: a time limit per configuration: clients stop asking for decisions after
//!   S seconds (delayed mode: the rewards still due are then sent); the row says so.
//! * `BENCH_DIM=D` (default 32), `BENCH_ACTIONS=K` (default 20), `BENCH_HORIZON=H` (default
//!   10,000,000): the contextual problem.
//!
//! Issue 40's delayed-reward rows: `BENCH_DELAY_MS=50 BENCH_SECONDS=60
//! target/release/examples/bench 100000 /work/benchdb adac_oful 32` (and the same with
//! `dp_ts:epsilon=1.0`, `adac_gope`, `adac_ucb`, and `adac_ucb` with
//! `BENCH_WHILE_PENDING=pipeline`).

use dpbandits::config::Setting;
use dpbandits_serve::ServeOptions;
use dpbandits_serve::client::{Conn, Reply, request};
use serde_json::{Value, json};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const ADMIN: &str = "bench-admin-token-0123456789";
const T: Duration = Duration::from_secs(30);
/// How long one decision may keep getting 409s before the benchmark gives up (bounded loops).
const WAIT_LIMIT: Duration = Duration::from_secs(120);
/// A reward lag (p99, ms) above which the delayed mode's row is followed by a note: the
/// senders did not keep up, so the rewards came later than the delay asked.
const LAG_WARN_MS: f64 = 10.0;
/// Action sets generated per client (contextual kinds), cycled through.
const POOL: usize = 16;
/// The linear kinds' arm vectors (norm <= 1) and the model's parameter.
const LINEAR_ARMS: [[f64; 3]; 5] = [
    [1.0, 0.0, 0.0],
    [0.0, 1.0, 0.0],
    [0.0, 0.0, 1.0],
    [0.6, 0.6, 0.0],
    [0.5, 0.5, 0.5],
];
const LINEAR_THETA: [f64; 3] = [0.6, 0.3, 0.1];
/// The BAI arms' Bernoulli means.
const BAI_MEANS: [f64; 3] = [0.3, 0.5, 0.7];

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// The sums and counts of the commit histograms in `/metrics`: (requests summed, commits, commit
/// seconds summed, PostgreSQL round trips).
fn commits(addr: SocketAddr, admin: &str) -> anyhow::Result<(f64, f64, f64, f64)> {
    let r = request(addr, "GET", "/metrics", Some(admin), None, T)?;
    anyhow::ensure!(r.status == 200, "metrics: {}", r.body);
    let get = |name: &str| {
        r.body
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Ok((
        get("dpbandits_commit_batch_requests_sum"),
        get("dpbandits_commit_batch_requests_count"),
        get("dpbandits_commit_seconds_sum"),
        get("dpbandits_database_round_trips_total"),
    ))
}

/// An environment variable parsed, `default` when unset.
fn env_or<V: std::str::FromStr>(name: &str, default: V) -> anyhow::Result<V>
where
    V::Err: std::fmt::Display,
{
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(v) => v
            .parse()
            .map_err(|e| anyhow::anyhow!("{name} = {v:?}: {e}")),
    }
}

/// A cheap generator (xorshift64), seeded per client.
#[derive(Debug, Clone)]
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> XorShift {
        XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    /// Uniform in [0, 1).
    fn unif(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The problem a configuration runs: what the create request carries, what a decision request
/// carries, and how a reward is drawn.
#[derive(Debug, Clone)]
enum Problem {
    Finite,
    Linear,
    Contextual { dim: usize, actions: usize },
    Bai,
}

impl Problem {
    fn of(setting: Setting, dim: usize, actions: usize) -> Problem {
        match setting {
            Setting::FiniteArmed => Problem::Finite,
            Setting::Linear => Problem::Linear,
            Setting::Contextual => Problem::Contextual { dim, actions },
            Setting::Bai => Problem::Bai,
        }
    }
}

/// One client's workload: its decision bodies and its rewards.
struct Workload {
    problem: Problem,
    rng: XorShift,
    /// Contextual: pre-serialized decision bodies and their action vectors.
    pool: Vec<(Vec<u8>, Vec<Vec<f64>>)>,
    next: usize,
    theta: Vec<f64>,
}

impl Workload {
    fn new(problem: &Problem, client: u64) -> Workload {
        let mut rng = XorShift::new(client + 1);
        let (mut pool, mut theta) = (vec![], vec![]);
        if let Problem::Contextual { dim, actions } = *problem {
            theta = (0..dim)
                .map(|j| if j % 2 == 0 { 1.0 } else { -1.0 } / (dim as f64).sqrt())
                .collect();
            for _ in 0..POOL {
                let set: Vec<Vec<f64>> = (0..actions)
                    .map(|_| {
                        let v: Vec<f64> = (0..dim).map(|_| 2.0 * rng.unif() - 1.0).collect();
                        let n = v.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-12);
                        // Radius <= 0.99, rounded to 4 decimals: the norm stays <= 1.
                        let r = 0.99 * rng.unif();
                        v.iter().map(|x| (x / n * r * 1e4).round() / 1e4).collect()
                    })
                    .collect();
                let body = json!({ "actions": set }).to_string().into_bytes();
                pool.push((body, set));
            }
        }
        Workload {
            problem: problem.clone(),
            rng,
            pool,
            next: 0,
            theta,
        }
    }

    /// The index of the next decision's action set (contextual; 0 otherwise).
    fn next_set(&mut self) -> usize {
        if self.pool.is_empty() {
            return 0;
        }
        let i = self.next % self.pool.len();
        self.next += 1;
        i
    }

    /// The decision body of action set `set`.
    fn body(&self, set: usize) -> &[u8] {
        self.pool.get(set).map_or(b"{}", |p| &p.0)
    }

    /// The reward of the `i`-th decision `id` of this client (arm `arm`, action set `set`).
    fn reward(&mut self, id: u64, i: u64, arm: usize, set: usize) -> f64 {
        match self.problem {
            // Today's rewards, unchanged.
            Problem::Finite => ((id + i) % 10) as f64 / 10.0,
            Problem::Linear => {
                let a = LINEAR_ARMS[arm.min(LINEAR_ARMS.len() - 1)];
                let mean: f64 = a.iter().zip(LINEAR_THETA).map(|(x, t)| x * t).sum();
                (mean + 0.2 * (self.rng.unif() - 0.5)).clamp(0.0, 1.0)
            }
            Problem::Contextual { .. } => {
                let a = &self.pool[set].1[arm.min(self.pool[set].1.len() - 1)];
                let dot: f64 = a.iter().zip(&self.theta).map(|(x, t)| x * t).sum();
                (0.5 + 0.5 * dot + 0.1 * (self.rng.unif() - 0.5)).clamp(0.0, 1.0)
            }
            Problem::Bai => f64::from(u8::from(
                self.rng.unif() < BAI_MEANS[arm.min(BAI_MEANS.len() - 1)],
            )),
        }
    }
}

/// How a client answers a 409 at a commitment boundary.
#[derive(Debug, Clone, Copy)]
enum Retry {
    /// Today's benchmark: ask again after 0.5 ms.
    Fixed,
    /// The server's hint: the body's `retry_after_ms` if present, else 2 ms.
    Hint,
}

/// What one decision came to.
enum Decided {
    /// Answered: id, arm, the answered request's ms, the whole wait's ms (409s included).
    Id(u64, usize, f64, f64),
    /// The experiment stopped (BAI): the refusal's body.
    Stopped(Value),
    /// The time limit passed while waiting.
    TimeUp,
}

/// One decision: ask until answered, stopped, or past `deadline` (bounded by [`WAIT_LIMIT`]).
fn decide(
    send: &mut dyn FnMut(&str, &[u8]) -> std::io::Result<Reply>,
    path: &str,
    body: &[u8],
    retry: Retry,
    refusals: &AtomicU64,
    deadline: Option<Instant>,
) -> anyhow::Result<Decided> {
    let first = Instant::now();
    loop {
        let t = Instant::now();
        let r = send(path, body)?;
        if r.status == 409 || r.status == 410 {
            let v = r.json();
            if v["stopped"] == json!(true) || r.status == 410 {
                return Ok(Decided::Stopped(v));
            }
            anyhow::ensure!(
                v.get("pending").is_some() || r.retry_after.is_some(),
                "decision refused: {} {}",
                r.status,
                r.body
            );
            refusals.fetch_add(1, Ordering::Relaxed);
            anyhow::ensure!(
                first.elapsed() < WAIT_LIMIT,
                "decision: still refused (409) after {WAIT_LIMIT:?}: {}",
                r.body
            );
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(Decided::TimeUp);
            }
            std::thread::sleep(match retry {
                Retry::Fixed => Duration::from_micros(500),
                Retry::Hint => {
                    Duration::from_millis(v["retry_after_ms"].as_u64().map_or(2, |ms| ms.min(1000)))
                }
            });
            continue;
        }
        anyhow::ensure!(r.status == 200, "decision: {}", r.body);
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let v = r.json();
        let id = v["decision_id"].as_u64().unwrap_or(0);
        let arm = v["arm"].as_u64().unwrap_or(0) as usize;
        return Ok(Decided::Id(
            id,
            arm,
            ms,
            first.elapsed().as_secs_f64() * 1e3,
        ));
    }
}

/// A connection as the benchmark uses it: keep-alive or one per request.
fn sender(
    addr: SocketAddr,
    keepalive: bool,
    token: String,
) -> impl FnMut(&str, &[u8]) -> std::io::Result<Reply> {
    let mut conn = keepalive.then(|| Conn::new(addr, T));
    move |path: &str, body: &[u8]| match conn.as_mut() {
        Some(c) => c.request("POST", path, Some(&token), Some(body)),
        None => request(addr, "POST", path, Some(&token), Some(body), T),
    }
}

/// A reward waiting in the delay queue: (due, decision id, reward bits, decided at).
type Due = Reverse<(Instant, u64, u64, Instant)>;

/// The shared delay queue: the heap and whether the deciding clients are done.
#[derive(Default)]
struct DelayQueue {
    inner: Mutex<(BinaryHeap<Due>, bool)>,
    cv: Condvar,
}

impl DelayQueue {
    fn push(&self, due: Instant, id: u64, reward: f64, decided: Instant) {
        let mut g = self.inner.lock().expect("queue");
        g.0.push(Reverse((due, id, reward.to_bits(), decided)));
        drop(g);
        self.cv.notify_one();
    }

    fn finish(&self) {
        self.inner.lock().expect("queue").1 = true;
        self.cv.notify_all();
    }

    /// The next reward once it is due; `None` when the queue is empty and the clients are done.
    fn pop_due(&self) -> Option<(Instant, u64, f64, Instant)> {
        let mut g = self.inner.lock().expect("queue");
        loop {
            let now = Instant::now();
            let wait = match g.0.peek() {
                Some(Reverse((due, ..))) if *due <= now => {
                    let Reverse((due, id, bits, decided)) = g.0.pop().expect("peeked");
                    return Some((due, id, f64::from_bits(bits), decided));
                }
                Some(Reverse((due, ..))) => *due - now,
                None if g.1 => return None,
                None => Duration::from_millis(100),
            };
            g = self.cv.wait_timeout(g, wait).expect("queue").0;
        }
    }
}

/// One configuration's settings shared by its threads.
#[derive(Clone)]
struct Run {
    addr: SocketAddr,
    /// `BENCH_SPREAD`: more nodes of the same database; client `c` talks to node `c % n` of
    /// `addr` and these.
    spread: Vec<SocketAddr>,
    keepalive: bool,
    token: String,
    name: String,
    problem: Problem,
    deadline: Option<Instant>,
    refusals: Arc<AtomicU64>,
    halt: Arc<AtomicBool>,
    stopped: Arc<Mutex<Option<Value>>>,
}

impl Run {
    fn record_stop(&self, v: Value) {
        self.halt.store(true, Ordering::Relaxed);
        let mut s = self.stopped.lock().expect("stop");
        if s.is_none() {
            *s = Some(v);
        }
    }
    fn timed_out(&self) -> bool {
        self.halt.load(Ordering::Relaxed) || self.deadline.is_some_and(|d| Instant::now() >= d)
    }
}

/// Today's client: decision then its reward at once, `n` times. (decision ms, reward ms).
fn client_now(run: &Run, c: u64, n: u64) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let (mut dl, mut rl) = (vec![], vec![]);
    let nodes: Vec<SocketAddr> = std::iter::once(run.addr)
        .chain(run.spread.iter().copied())
        .collect();
    let mut send = sender(
        nodes[c as usize % nodes.len()],
        run.keepalive,
        run.token.clone(),
    );
    let mut work = Workload::new(&run.problem, c);
    let (dpath, rpath) = (
        format!("/v1/experiments/{}/decisions", run.name),
        format!("/v1/experiments/{}/rewards", run.name),
    );
    for i in 0..n {
        if run.timed_out() {
            break;
        }
        let set = work.next_set();
        let (id, arm) = match decide(
            &mut send,
            &dpath,
            work.body(set),
            Retry::Fixed,
            &run.refusals,
            run.deadline,
        )? {
            Decided::Id(id, arm, ms, _) => {
                dl.push(ms);
                (id, arm)
            }
            Decided::Stopped(v) => {
                run.record_stop(v);
                break;
            }
            Decided::TimeUp => break,
        };
        let reward = work.reward(id, i, arm, set);
        let t = Instant::now();
        let body = json!({"decision_id": id, "reward": reward}).to_string();
        let r = send(&rpath, body.as_bytes())?;
        anyhow::ensure!(r.status == 200, "reward: {}", r.body);
        rl.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok((dl, rl))
}

/// A delayed-mode client: decisions only, each reward pushed into the queue, `n` times.
/// (decision ms, whole wait ms).
fn client_delayed(
    run: &Run,
    c: u64,
    n: u64,
    delay: Duration,
    queue: &DelayQueue,
) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let (mut dl, mut wl) = (vec![], vec![]);
    let mut send = sender(run.addr, run.keepalive, run.token.clone());
    let mut work = Workload::new(&run.problem, c);
    let dpath = format!("/v1/experiments/{}/decisions", run.name);
    for i in 0..n {
        if run.timed_out() {
            break;
        }
        let set = work.next_set();
        match decide(
            &mut send,
            &dpath,
            work.body(set),
            Retry::Hint,
            &run.refusals,
            run.deadline,
        )? {
            Decided::Id(id, arm, ms, wait) => {
                let decided = Instant::now();
                dl.push(ms);
                wl.push(wait);
                let reward = work.reward(id, i, arm, set);
                queue.push(decided + delay, id, reward, decided);
            }
            Decided::Stopped(v) => {
                run.record_stop(v);
                break;
            }
            Decided::TimeUp => break,
        }
    }
    Ok((dl, wl))
}

/// What a sender measured: reward ms, lag ms (sent after due), seconds in flight summed, the
/// last acknowledgement, rewards refused because the experiment stopped.
#[derive(Default)]
struct Sent {
    rl: Vec<f64>,
    lag: Vec<f64>,
    in_flight: f64,
    last: Option<Instant>,
    refused_stopped: u64,
}

/// A reward sender: sends each queued reward when due, until the queue is done.
fn reward_sender(run: &Run, queue: &DelayQueue) -> anyhow::Result<Sent> {
    let mut s = Sent::default();
    let mut send = sender(run.addr, run.keepalive, run.token.clone());
    let rpath = format!("/v1/experiments/{}/rewards", run.name);
    while let Some((due, id, reward, decided)) = queue.pop_due() {
        let t = Instant::now();
        s.lag
            .push(t.saturating_duration_since(due).as_secs_f64() * 1e3);
        let body = json!({"decision_id": id, "reward": reward}).to_string();
        let r = send(&rpath, body.as_bytes())?;
        if r.status == 409 && r.json()["stopped"] == json!(true) {
            s.refused_stopped += 1;
            continue;
        }
        anyhow::ensure!(r.status == 200, "reward: {}", r.body);
        let done = Instant::now();
        s.rl.push((done - t).as_secs_f64() * 1e3);
        s.in_flight += (done - decided).as_secs_f64();
        s.last = Some(s.last.map_or(done, |l| l.max(done)));
    }
    Ok(s)
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let pairs: u64 = args.next().map_or(Ok(2000), |a| a.parse())?;
    let base = args.next().map_or_else(std::env::temp_dir, Into::into);
    let dir = tempfile::Builder::new()
        .prefix("dpb-bench")
        .tempdir_in(base)?;
    let db = dir.path().join("bench.sqlite");
    let kind = args.next().unwrap_or_else(|| "adac_ucb".into());
    let counts: Vec<u64> = args
        .next()
        .unwrap_or_else(|| "1,8,32".into())
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let external: Option<SocketAddr> = std::env::var("BENCH_ADDR")
        .ok()
        .map(|a| a.parse())
        .transpose()?;
    let admin = std::env::var("BENCH_ADMIN").unwrap_or_else(|_| ADMIN.into());
    let spread: Vec<SocketAddr> = std::env::var("BENCH_SPREAD")
        .ok()
        .filter(|s| !s.is_empty())
        .map(|s| s.split(',').map(str::parse).collect::<Result<_, _>>())
        .transpose()?
        .unwrap_or_default();
    let run_id = std::process::id();
    let keepalive = match std::env::var("BENCH_KEEPALIVE").as_deref() {
        Err(_) | Ok("1") => true,
        Ok("0") => false,
        Ok(v) => anyhow::bail!("BENCH_KEEPALIVE = {v:?}: expected 1 (the default) or 0"),
    };
    let delay: Option<Duration> = std::env::var("BENCH_DELAY_MS")
        .ok()
        .map(|v| {
            v.parse::<u64>()
                .map(Duration::from_millis)
                .map_err(|e| anyhow::anyhow!("BENCH_DELAY_MS = {v:?}: {e}"))
        })
        .transpose()?;
    let senders: u64 = env_or("BENCH_SENDERS", 16)?;
    anyhow::ensure!(senders >= 1, "BENCH_SENDERS = 0: expected at least 1");
    let while_pending = match std::env::var("BENCH_WHILE_PENDING").as_deref() {
        Err(_) => None,
        Ok(w @ ("wait" | "pipeline")) => Some(w.to_string()),
        Ok(v) => anyhow::bail!("BENCH_WHILE_PENDING = {v:?}: expected wait or pipeline"),
    };
    let seconds: Option<f64> = std::env::var("BENCH_SECONDS")
        .ok()
        .map(|v| match v.parse::<f64>() {
            Ok(s) if s > 0.0 && s.is_finite() => Ok(s),
            _ => Err(anyhow::anyhow!(
                "BENCH_SECONDS = {v:?}: expected a positive number"
            )),
        })
        .transpose()?;
    let dim: usize = env_or("BENCH_DIM", 32)?;
    let actions: usize = env_or("BENCH_ACTIONS", 20)?;
    let horizon: u64 = env_or("BENCH_HORIZON", 10_000_000)?;
    // KIND or KIND:key=value[,key=value...] (default: rho = 0.5 for a kind that takes rho, else
    // the registry's example), e.g. `dp_ts:epsilon=1.0`.
    let entry_of = |k: &str| dpbandits::registry::policy(k).map_err(|e| anyhow::anyhow!("{e}"));
    let (kind, param) = match kind.split_once(':') {
        Some((k, p)) => (
            k.to_string(),
            p.split(',')
                .map(|kv| kv.replacen('=', " = ", 1))
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        None => {
            let entry = entry_of(&kind)?;
            let param = if entry.takes("rho") {
                "rho = 0.5".to_string()
            } else {
                entry.info.example.to_string()
            };
            (kind, param)
        }
    };
    let entry = entry_of(&kind)?;
    let problem = Problem::of(entry.setting(), dim, actions);
    let policy = format!("kind = \"{kind}\"\n{param}");
    let mut create = match problem {
        Problem::Finite => json!({"arms": 3}),
        Problem::Linear => json!({ "arms": LINEAR_ARMS }),
        Problem::Contextual { dim, .. } => json!({"dim": dim, "horizon": horizon}),
        Problem::Bai => json!({"arms": 3, "delta": 0.05}),
    };
    create["policy"] = json!(policy);
    if entry.info.privacy == "none" {
        create["allow_non_private"] = json!(true);
    }
    if let Some(w) = &while_pending {
        create["while_pending"] = json!(w);
    }
    let opts = ServeOptions {
        db: db.clone(),
        listen: "127.0.0.1:0".parse()?,
        admin_token: ADMIN.into(),
        admin_token_file: None,
        log_file: None,
        audit_key_file: None,
        limits: dpbandits_serve::Limits::default(),
        publish: None,
        lease: dpbandits_serve::store::DEFAULT_LEASE,
        allow_async_replication: true,
    };
    let server = match external {
        Some(_) => None,
        None => Some(dpbandits_serve::serve_in_thread(opts, 2, T)?),
    };
    let addr: SocketAddr = match (external, &server) {
        (Some(a), _) => a,
        (None, Some(s)) => s.addr,
        (None, None) => unreachable!("a service is started without BENCH_ADDR"),
    };
    println!(
        "database: {} (durability on: WAL, synchronous = FULL)",
        db.display()
    );
    match problem {
        Problem::Finite => {}
        Problem::Linear => println!("problem: linear, {} arms of dimension 3", LINEAR_ARMS.len()),
        Problem::Contextual { dim, actions } => println!(
            "problem: contextual, dim = {dim}, {actions} actions per decision, horizon = {horizon}"
        ),
        Problem::Bai => println!("problem: best-arm identification, 3 arms, delta = 0.05"),
    }
    if let Some(w) = &while_pending {
        println!("while_pending: {w}");
    }
    if let Some(s) = seconds {
        println!("time limit: {s} s per configuration");
    }
    match delay {
        None => {
            println!(
                "| kind | clients | decisions | decisions/s | decision p50 ms | decision p99 ms | reward p50 ms | reward p99 ms | 409 retries | requests per commit | ms per commit | database round trips per decision |"
            );
            println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
        }
        Some(d) => {
            println!(
                "delayed rewards: each sent {} ms after its decision by {senders} sender(s); 409 answered after the hint (retry_after_ms, else 2 ms)",
                d.as_millis()
            );
            println!(
                "| kind | while_pending | clients | decisions | decisions/s | decisions/s to the last reward | decision p50 ms | decision p99 ms | decision wait p99 ms | reward p50 ms | reward p99 ms | reward lag p99 ms | 409 answered | mean in flight | requests per commit | ms per commit | end | server: decisions / rewarded / pending | database round trips per decision |"
            );
            println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        }
    }
    for clients in counts {
        let name = format!("bench{run_id}-{kind}-{clients}");
        let mut body = create.clone();
        body["name"] = json!(name);
        let r = request(
            addr,
            "POST",
            "/v1/experiments",
            Some(&admin),
            Some(body.to_string().as_bytes()),
            T,
        )?;
        anyhow::ensure!(r.status == 201, "create: {}", r.body);
        let token = r.json()["client_token"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let before = commits(addr, &admin)?;
        let start = Instant::now();
        let run = Run {
            addr,
            spread: spread.clone(),
            keepalive,
            token,
            name,
            problem: problem.clone(),
            deadline: seconds.map(|s| start + Duration::from_secs_f64(s)),
            refusals: Arc::new(AtomicU64::new(0)),
            halt: Arc::new(AtomicBool::new(false)),
            stopped: Arc::new(Mutex::new(None)),
        };
        let share = move |c: u64| pairs / clients + u64::from(c < pairs % clients);
        let end = |run: &Run, dl: &[f64]| match &*run.stopped.lock().expect("stop") {
            Some(v) => format!(
                "stopped after {} decisions, recommendation {}",
                dl.len(),
                v["recommendation"]
            ),
            None if (dl.len() as u64) < pairs => {
                format!("time limit ({} s)", seconds.unwrap_or_default())
            }
            None => "all".into(),
        };
        let Some(delay) = delay else {
            let handles: Vec<_> = (0..clients)
                .map(|c| {
                    let run = run.clone();
                    std::thread::spawn(move || client_now(&run, c, share(c)))
                })
                .collect();
            let (mut dl, mut rl) = (vec![], vec![]);
            for h in handles {
                let (d, r) = h.join().map_err(|_| anyhow::anyhow!("client panicked"))??;
                dl.extend(d);
                rl.extend(r);
            }
            let secs = start.elapsed().as_secs_f64();
            let after = commits(addr, &admin)?;
            let n_commits = (after.1 - before.1).max(1.0);
            println!(
                "| {kind} | {clients} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {:.1} | {:.2} | {:.3} |",
                dl.len(),
                dl.len() as f64 / secs,
                pct(&mut dl, 0.5),
                pct(&mut dl, 0.99),
                pct(&mut rl, 0.5),
                pct(&mut rl, 0.99),
                run.refusals.load(Ordering::Relaxed),
                (after.0 - before.0) / n_commits,
                (after.2 - before.2) / n_commits * 1e3,
                (after.3 - before.3) / (dl.len().max(1) as f64),
            );
            let e = end(&run, &dl);
            if e != "all" {
                println!("({kind}, {clients} clients: {e})");
            }
            continue;
        };
        let queue = Arc::new(DelayQueue::default());
        let sender_handles: Vec<_> = (0..senders)
            .map(|_| {
                let (run, queue) = (run.clone(), queue.clone());
                std::thread::spawn(move || {
                    let r = reward_sender(&run, &queue);
                    if r.is_err() {
                        // The clients stop too: nobody would send their rewards.
                        run.halt.store(true, Ordering::Relaxed);
                    }
                    r
                })
            })
            .collect();
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                let (run, queue) = (run.clone(), queue.clone());
                std::thread::spawn(move || client_delayed(&run, c, share(c), delay, &queue))
            })
            .collect();
        let (mut dl, mut wl) = (vec![], vec![]);
        let mut failed = None;
        for h in handles {
            match h.join().map_err(|_| anyhow::anyhow!("client panicked"))? {
                Ok((d, w)) => {
                    dl.extend(d);
                    wl.extend(w);
                }
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        let deciding = start.elapsed().as_secs_f64();
        let ended = end(&run, &dl);
        queue.finish();
        let mut sent = Sent::default();
        for h in sender_handles {
            let s = h.join().map_err(|_| anyhow::anyhow!("sender panicked"))??;
            sent.rl.extend(s.rl);
            sent.lag.extend(s.lag);
            sent.in_flight += s.in_flight;
            sent.last = sent.last.max(s.last);
            sent.refused_stopped += s.refused_stopped;
        }
        if let Some(e) = failed {
            return Err(e);
        }
        let total = sent.last.map_or(deciding, |l| (l - start).as_secs_f64());
        let after = commits(addr, &admin)?;
        let n_commits = (after.1 - before.1).max(1.0);
        let status = request(
            addr,
            "GET",
            &format!("/v1/experiments/{}", run.name),
            Some(&run.token),
            None,
            T,
        )?;
        anyhow::ensure!(status.status == 200, "status: {}", status.body);
        let st = status.json();
        let (issued, rewarded, pending) = (
            st["decisions"].as_u64().unwrap_or(u64::MAX),
            st["rewarded"].as_u64().unwrap_or(u64::MAX),
            st["pending"].as_u64().unwrap_or(u64::MAX),
        );
        let made = dl.len() as u64;
        anyhow::ensure!(
            issued == made
                && rewarded + sent.refused_stopped == made
                && pending == sent.refused_stopped,
            "{}: the server counts decisions = {issued}, rewarded = {rewarded}, pending = {pending}; \
             the benchmark made {made} decisions and sent {} rewards ({} refused as stopped)",
            run.name,
            sent.rl.len(),
            sent.refused_stopped
        );
        let refused = if sent.refused_stopped > 0 {
            format!(" ({} rewards refused: stopped)", sent.refused_stopped)
        } else {
            String::new()
        };
        let lag = pct(&mut sent.lag, 0.99);
        println!(
            "| {kind} | {} | {clients} | {made} | {:.0} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {:.1} | {:.1} | {:.2} | {ended}{refused} | {issued} / {rewarded} / {pending} | {:.3} |",
            while_pending.as_deref().unwrap_or("wait (default)"),
            made as f64 / deciding,
            made as f64 / total.max(1e-9),
            pct(&mut dl, 0.5),
            pct(&mut dl, 0.99),
            pct(&mut wl, 0.99),
            pct(&mut sent.rl, 0.5),
            pct(&mut sent.rl, 0.99),
            lag,
            run.refusals.load(Ordering::Relaxed),
            sent.in_flight / total.max(1e-9),
            (after.0 - before.0) / n_commits,
            (after.2 - before.2) / n_commits * 1e3,
            (after.3 - before.3) / (made.max(1) as f64),
        );
        if lag > LAG_WARN_MS {
            println!(
                "({kind}, {clients} clients: rewards were sent up to {lag:.0} ms after they were due \
                 (p99): the {senders} sender(s) or the server did not keep up, so the delay was \
                 longer than {} ms; try more BENCH_SENDERS)",
                delay.as_millis()
            );
        }
    }
    if let Some(server) = server {
        server.stop()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(status: u16, body: Value) -> Reply {
        Reply {
            status,
            retry_after: (status == 409 && body.get("pending").is_some()).then(|| "1".into()),
            body: body.to_string(),
        }
    }

    /// The contextual action sets stay in the unit ball (after rounding) and parse as k x d
    /// arrays; every setting's rewards are in [0, 1]; the finite rewards are today's.
    #[test]
    fn actions_are_in_the_unit_ball_and_rewards_in_0_1() {
        for dim in [1, 2, 3, 32, 100] {
            let problem = Problem::Contextual { dim, actions: 20 };
            for c in 0..4 {
                let mut w = Workload::new(&problem, c);
                for i in 0..2 * POOL as u64 {
                    let set = w.next_set();
                    let v: Value = serde_json::from_slice(w.body(set)).unwrap();
                    let actions = v["actions"].as_array().unwrap();
                    assert_eq!(actions.len(), 20);
                    for a in actions {
                        let a: Vec<f64> = serde_json::from_value(a.clone()).unwrap();
                        assert_eq!(a.len(), dim);
                        let n = a.iter().map(|x| x * x).sum::<f64>().sqrt();
                        assert!(n <= 1.0, "dim {dim}: norm {n}");
                    }
                    for arm in 0..20 {
                        let r = w.reward(i, i, arm, set);
                        assert!((0.0..=1.0).contains(&r), "{r}");
                    }
                }
            }
        }
        for problem in [Problem::Linear, Problem::Bai, Problem::Finite] {
            let mut w = Workload::new(&problem, 3);
            let set = w.next_set();
            assert_eq!(w.body(set), b"{}");
            for i in 0..200 {
                let r = w.reward(i + 5, i, (i % 5) as usize, 0);
                assert!((0.0..=1.0).contains(&r), "{r}");
                if let Problem::Finite = problem {
                    assert_eq!(r, ((i + 5 + i) % 10) as f64 / 10.0);
                }
            }
        }
        assert!(
            LINEAR_ARMS
                .iter()
                .all(|a| a.iter().map(|x| x * x).sum::<f64>() <= 1.0)
        );
    }

    /// Rewards leave the delay queue in due order, none before it is due; the queue ends when
    /// it is empty and finished.
    #[test]
    fn the_delay_queue_sends_in_due_order_and_ends() {
        let q = DelayQueue::default();
        let now = Instant::now();
        for (ms, id) in [(30, 3), (10, 1), (20, 2)] {
            q.push(now + Duration::from_millis(ms), id, id as f64 / 10.0, now);
        }
        q.finish();
        for id in 1..=3 {
            let (due, got, reward, _) = q.pop_due().unwrap();
            assert_eq!((got, reward), (id, id as f64 / 10.0));
            assert!(Instant::now() >= due);
        }
        assert!(q.pop_due().is_none());
    }

    /// A 409 at a boundary is asked again (counted; the body's `retry_after_ms` honoured), a
    /// stop ends the configuration, any other 409 is an error.
    #[test]
    fn decide_retries_boundaries_and_ends_at_a_stop() {
        let refusals = AtomicU64::new(0);
        let mut answers = vec![
            reply(200, json!({"decision_id": 7, "arm": 2})),
            reply(409, json!({"pending": 3, "retry_after_ms": 30})),
            reply(409, json!({"pending": 3})),
        ];
        let mut send = |_: &str, _: &[u8]| Ok(answers.pop().unwrap());
        let t = Instant::now();
        match decide(&mut send, "/d", b"{}", Retry::Hint, &refusals, None).unwrap() {
            Decided::Id(id, arm, _, wait) => {
                assert_eq!((id, arm), (7, 2));
                assert!(wait >= 32.0, "{wait}");
            }
            _ => panic!("not decided"),
        }
        assert!(t.elapsed() >= Duration::from_millis(32));
        assert_eq!(refusals.load(Ordering::Relaxed), 2);
        let mut stop = |_: &str, _: &[u8]| {
            Ok(reply(
                409,
                json!({"error": "stopped", "stopped": true, "recommendation": 1}),
            ))
        };
        match decide(&mut stop, "/d", b"{}", Retry::Hint, &refusals, None).unwrap() {
            Decided::Stopped(v) => assert_eq!(v["recommendation"], 1),
            _ => panic!("not stopped"),
        }
        let mut closed = |_: &str, _: &[u8]| Ok(reply(409, json!({"closed": true})));
        assert!(decide(&mut closed, "/d", b"{}", Retry::Hint, &refusals, None).is_err());
        let past = Some(Instant::now());
        let mut pending = |_: &str, _: &[u8]| Ok(reply(409, json!({"pending": 1})));
        assert!(matches!(
            decide(&mut pending, "/d", b"{}", Retry::Fixed, &refusals, past).unwrap(),
            Decided::TimeUp
        ));
    }

    #[test]
    fn percentiles_of_nothing_are_nan() {
        assert!(pct(&mut [], 0.99).is_nan());
        assert_eq!(pct(&mut [3.0, 1.0, 2.0], 0.5), 2.0);
    }
}
