//! `dpbandits serve` against the real binary, on loopback only, bounded and self-stopping: what
//! needs a process of its own (crash safety under SIGKILL with concurrent clients, SIGTERM with
//! a half-sent request, one service per database, the command's flags, timeouts and limits,
//! `backup` under load). The service's HTTP behaviour on a service in the test's process is in
//! `crates/dpbandits-serve/tests/http.rs`.

use super::bin;
use dpbandits_serve::client::{Reply, request};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const ADMIN: &str = "test-admin-token-0123456789";
const TIMEOUT: Duration = Duration::from_secs(10);

/// A temporary folder on tmpfs where there is one: the SIGKILL test is about process crashes,
/// which lose nothing SQLite has written (a commit is in the OS before it returns); fsync cost
/// (2 ms per commit on this project's disks) would only make the test slow. The benchmark
/// (`examples/bench.rs`) measures on the real disk.
fn tempdir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(d) = tempfile::Builder::new().prefix("dpb-serve").tempdir_in(shm)
    {
        return d;
    }
    tempfile::tempdir().unwrap()
}

pub(super) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Server {
    child: Child,
    addr: SocketAddr,
    db: PathBuf,
    token_file: PathBuf,
    log: PathBuf,
}

impl Server {
    fn start(dir: &Path, port: u16) -> Server {
        Server::start_with(dir, port, &[])
    }

    /// Start with extra `serve` flags (timeouts, limits), on an SQLite file.
    fn start_with(dir: &Path, port: u16, extra: &[&str]) -> Server {
        Server::start_on(dir.join("service.sqlite"), dir, port, extra)
    }

    /// Start on a fresh database of either store: SQLite, or PostgreSQL in the tests'
    /// PostgreSQL pass (`dpbandits_serve::testdb`).
    fn start_any(dir: &Path, port: u16, extra: &[&str]) -> Server {
        Server::start_on(
            dpbandits_serve::testdb::db(dir, "service.sqlite"),
            dir,
            port,
            extra,
        )
    }

    fn start_on(db: PathBuf, dir: &Path, port: u16, extra: &[&str]) -> Server {
        let token_file = dir.join("admin-token");
        std::fs::write(&token_file, format!("{ADMIN}\n")).unwrap();
        let log = dir.join("server.log");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let mut s = Server {
            child: spawn_with(&db, addr, &token_file, &log, extra),
            addr,
            db,
            token_file,
            log,
        };
        s.wait_healthy();
        s
    }

    fn wait_healthy(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = request(self.addr, "GET", "/v1/health", None, None, TIMEOUT)
                && r.status == 200
            {
                return;
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!(
                    "server exited ({st}): {}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            assert!(Instant::now() < deadline, "server not healthy within 30 s");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILL, then start again on the same port and database.
    fn kill_and_restart(&mut self) {
        self.child.kill().unwrap(); // SIGKILL on Unix
        self.child.wait().unwrap();
        self.child = spawn(&self.db, self.addr, &self.token_file, &self.log);
        self.wait_healthy();
    }

    /// SIGTERM and wait (bounded) for a clean exit.
    fn terminate(mut self) {
        let pid = self.child.id().to_string();
        let st = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(st.success());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                assert!(st.success(), "exit after SIGTERM: {st}");
                return;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("server did not stop within 20 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn call(&self, method: &str, path: &str, token: Option<&str>, body: Option<&Value>) -> Reply {
        let b = body.map(|b| b.to_string().into_bytes());
        request(self.addr, method, path, token, b.as_deref(), TIMEOUT).unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(db: &Path, addr: SocketAddr, token_file: &Path, log: &Path) -> Child {
    spawn_with(db, addr, token_file, log, &[])
}

fn spawn_with(db: &Path, addr: SocketAddr, token_file: &Path, log: &Path, extra: &[&str]) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    bin()
        .args(["serve", "--db"])
        .arg(db)
        .args(["--listen", &addr.to_string(), "--admin-token-file"])
        .arg(token_file)
        .args(pg_flags(db))
        .args(extra)
        .env_remove("DPBANDITS_ADMIN_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// The flags a PostgreSQL database needs (its key file, which has no folder to be beside; a
/// short lease, so that a restart after SIGKILL waits about a second for the killed node's
/// lease): none for an SQLite file.
pub(super) fn pg_flags(db: &Path) -> Vec<std::ffi::OsString> {
    if !dpbandits_serve::store::is_postgres_url(db) {
        return Vec::new();
    }
    vec![
        "--audit-key-file".into(),
        dpbandits_serve::testdb::key_path(db).into(),
        "--lease-seconds".into(),
        "1".into(),
        // The tests' throwaway cluster has no standby.
        "--allow-async-replication".into(),
    ]
}

/// `dpbandits audit-log verify` of `db` (with the key file a PostgreSQL database needs).
pub(super) fn verify_cmd(db: &Path) -> std::process::Command {
    let mut c = bin();
    c.args(["audit-log", "verify", "--db"]).arg(db);
    if dpbandits_serve::store::is_postgres_url(db) {
        c.arg("--audit-key-file")
            .arg(dpbandits_serve::testdb::key_path(db));
    }
    c
}

/// Create experiment `name` and return its client token.
fn create(s: &Server, name: &str, policy: &str, arms: usize) -> String {
    let r = s.call(
        "POST",
        "/v1/experiments",
        Some(ADMIN),
        Some(&json!({"name": name, "arms": arms, "policy": policy})),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    r.json()["client_token"].as_str().unwrap().to_string()
}

/// A reward for decision `id`: deterministic, mostly in [0, 1], every 37th above it (clipped).
fn reward_of(id: u64) -> f64 {
    if id.is_multiple_of(37) {
        1.75
    } else {
        (id.wrapping_mul(2_654_435_761) % 1000) as f64 / 999.0
    }
}

/// decision_id -> (arm, the reward acknowledged to the client).
type Book = HashMap<u64, (u64, Option<f64>)>;

/// The next value of the test's own fixed-seed SplitMix64 stream (`dpbandits::rng::splitmix64`
/// mixes the state before its step).
fn splitmix(state: &mut u64) -> u64 {
    let z = dpbandits::rng::splitmix64(*state);
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z
}

/// Done-when 1: 10,000 decisions and rewards from 8 concurrent clients; the server is killed
/// with SIGKILL at 12 random points of the load (fixed seed) and restarted. Afterwards: no
/// reward lost or applied twice (the database, the service's counters and the policy's own
/// state agree with what the clients were told), every answered decision is rewarded, the ledger
/// equals the sum of its charges, the audit chain verifies, and decisions continue.
#[test]
fn sigkill_under_load_loses_nothing() {
    const DECISIONS: u64 = 10_000;
    const CLIENTS: u64 = 8;
    const KILLS: usize = 12;
    let dir = tempdir();
    let server = Server::start_any(dir.path(), free_port(), &[]);
    // boundary = "clip" explicitly: every 37th reward is above 1 and acknowledged as clipped.
    let token = create(
        &server,
        "trial",
        "kind = \"adac_ucb\"\nrho = 0.5\nboundary = \"clip\"",
        3,
    );
    let addr = server.addr;
    let server = Arc::new(Mutex::new(server));

    let answered = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let book: Arc<Mutex<Book>> = Arc::default();
    let deadline = Instant::now() + Duration::from_secs(240);

    let post = move |path: &str, body: &Value, token: &str| -> Reply {
        let b = body.to_string();
        loop {
            match request(addr, "POST", path, Some(token), Some(b.as_bytes()), TIMEOUT) {
                Ok(r) if r.status == 409 => {
                    assert_eq!(r.retry_after.as_deref(), Some("1"), "{}", r.body);
                    std::thread::sleep(Duration::from_millis(1));
                }
                // Restarting: the port answers 503 while the start-up check runs.
                Ok(r) if r.status == 503 && r.body.contains("\"verifying\"") => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Ok(r) => return r,
                // The server is down (killed): retry the same request.
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
            assert!(Instant::now() < deadline, "load did not finish in 240 s");
        }
    };

    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (answered, book, token) = (answered.clone(), book.clone(), token.clone());
            std::thread::spawn(move || {
                let mut seq = 0u64;
                while answered.load(Ordering::SeqCst) < DECISIONS {
                    seq += 1;
                    let rid = format!("client{c}-{seq}");
                    let r = post(
                        "/v1/experiments/trial/decisions",
                        &json!({"request_id": rid}),
                        &token,
                    );
                    assert_eq!(r.status, 200, "{}", r.body);
                    let v = r.json();
                    let (id, arm) = (
                        v["decision_id"].as_u64().unwrap(),
                        v["arm"].as_u64().unwrap(),
                    );
                    assert!(arm < 3);
                    let prev = book.lock().unwrap().insert(id, (arm, None));
                    assert!(prev.is_none(), "decision {id} given to two requests");
                    answered.fetch_add(1, Ordering::SeqCst);
                    let r = post(
                        "/v1/experiments/trial/rewards",
                        &json!({"decision_id": id, "reward": reward_of(id)}),
                        &token,
                    );
                    assert_eq!(r.status, 200, "{}", r.body);
                    let outcome = r.json()["status"].as_str().unwrap().to_string();
                    assert!(outcome == "applied" || outcome == "duplicate", "{}", r.body);
                    book.lock().unwrap().get_mut(&id).unwrap().1 = Some(reward_of(id));
                }
            })
        })
        .collect();

    // The killer: SIGKILL when the load passes each of KILLS random points (fixed seed), after a
    // random 0-3 ms, so kills land in every phase of a request.
    let killer = {
        let (server, answered, stop) = (server.clone(), answered.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut rng = 0x5eed_2026u64;
            let mut points: Vec<u64> = (0..KILLS)
                .map(|_| 300 + splitmix(&mut rng) % (DECISIONS - 800))
                .collect();
            points.sort_unstable();
            let mut kills = 0;
            for p in points {
                while answered.load(Ordering::SeqCst) < p && !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_micros(200));
                }
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                std::thread::sleep(Duration::from_micros(splitmix(&mut rng) % 3000));
                server.lock().unwrap().kill_and_restart();
                kills += 1;
            }
            kills
        })
    };
    for c in clients {
        c.join().unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    let kills = killer.join().unwrap();
    assert!(kills >= 10, "only {kills} kills");

    let server = Arc::try_unwrap(server).ok().unwrap().into_inner().unwrap();
    let st = server
        .call("GET", "/v1/experiments/trial", Some(&token), None)
        .json();
    let book = book.lock().unwrap().clone();
    let n = book.len() as u64;
    assert!(n >= DECISIONS);
    assert_eq!(st["pending"], 0, "{st}");
    assert_eq!(st["decisions"].as_u64(), Some(n), "{st}");
    assert_eq!(st["rewarded"].as_u64(), Some(n), "{st}");
    // Decisions continue after the last restart.
    let r = server.call(
        "POST",
        "/v1/experiments/trial/decisions",
        Some(&token),
        Some(&json!({})),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let last = r.json()["decision_id"].as_u64().unwrap();
    assert_eq!(last, n + 1);
    let db = server.db.clone();
    server.terminate();

    let ins = dpbandits_serve::store::inspect(&db, "trial").unwrap();
    assert_eq!(ins.decisions, n + 1);
    assert_eq!(ins.issued, n + 1);
    // Every answered decision is rewarded once, with the reward its client was acknowledged for.
    assert_eq!(ins.rewarded, n);
    assert_eq!(ins.observed, n);
    for &(id, arm, reward) in &ins.rewards {
        let (a, r) = book[&id];
        assert_eq!(a, arm as u64, "decision {id}");
        assert_eq!(r.map(f64::to_bits), Some(reward.to_bits()), "decision {id}");
    }
    // The policy's own state counts every reward exactly once.
    let state = &ins.policy_state;
    let pulls: u64 = state["pulls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .sum();
    let in_episode = state["episode"]["sum"]["n"].as_u64().unwrap_or(0);
    assert_eq!(pulls + in_episode, n, "{state}");
    // The ledger: one charge per release, plus one per release lost to a crash; its total is
    // the sum of the charges.
    assert_eq!(ins.ledger_open, 0);
    assert_eq!(ins.ledger_charged, ins.releases);
    assert_eq!(state["releases"].as_u64(), Some(ins.releases));
    let charges = ins.ledger_charged + ins.ledger_lost;
    assert!((ins.ledger_total - 0.5 * charges as f64).abs() < 1e-9);
    let out = verify_cmd(&db).output().unwrap();
    super::succeeded(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("audit log verified"));
    // Logs never carry reward values: the log has no "reward": key.
    let log = std::fs::read_to_string(dir.path().join("server.log")).unwrap();
    assert!(!log.contains("\"reward\":"), "a reward value in the log");
    eprintln!(
        "sigkill test: {n} decisions, {kills} kills, {} releases, {} lost release(s) charged again",
        ins.releases, ins.ledger_lost
    );
}

/// Issue 29, Done-when 1: a linear, a contextual and a best-arm identification experiment
/// served at once over HTTP to 6 concurrent clients while the server is SIGKILLed at 5 random
/// points (fixed seed) and restarted. Contextual decisions carry their action sets and repeat by
/// `request_id` across a kill; the BAI experiment runs until its stopping rule fires and then
/// answers "stopped" with its recommendation. Afterwards, per experiment: every answered decision
/// rewarded once with the reward its client was acknowledged for, nothing pending, the ledger's
/// charges equal to its releases plus the lost ones, the audit chain verifies, and the export
/// holds each contextual decision's action set.
#[test]
fn every_setting_survives_sigkill_under_load() {
    const KILLS: usize = 5;
    let dir = tempdir();
    let server = Server::start_any(dir.path(), free_port(), &[]);
    let mut tokens = HashMap::new();
    for (name, body) in [
        (
            "lin",
            json!({"arms": [[1.0, 0.0], [0.0, 1.0], [0.7, 0.7]],
                       "policy": "kind = \"adac_gope\"\nrho = 1.0\ndelta = 0.001\nnoise = \"simulation\""}),
        ),
        (
            "ctx",
            json!({"dim": 3, "horizon": 5000,
                       "policy": "kind = \"adac_oful\"\nrho = 1.0"}),
        ),
        (
            "bai",
            json!({"arms": 3, "delta": 0.1,
                       "policy": "kind = \"dp_tt\"\nepsilon = 10.0\nnoise = \"simulation\""}),
        ),
        // Pipelined (issue 40): decisions served while up to 8 rewards per client are pending,
        // the rewards sent out of order.
        (
            "ctx_p",
            json!({"dim": 3, "horizon": 5000, "while_pending": "pipeline",
                       "policy": "kind = \"adac_oful\"\nrho = 1.0"}),
        ),
        (
            "bai_p",
            json!({"arms": 3, "delta": 0.1, "while_pending": "pipeline",
                       "policy": "kind = \"dp_tt\"\nepsilon = 10.0\nnoise = \"simulation\""}),
        ),
    ] {
        let mut b = body;
        b["name"] = json!(name);
        let r = server.call("POST", "/v1/experiments", Some(ADMIN), Some(&b));
        assert_eq!(r.status, 201, "{}", r.body);
        tokens.insert(name, r.json()["client_token"].as_str().unwrap().to_string());
    }
    let addr = server.addr;
    let server = Arc::new(Mutex::new(server));
    let answered = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let books: Arc<Mutex<HashMap<&'static str, Book>>> = Arc::default();
    let deadline = Instant::now() + Duration::from_secs(240);
    // POST until a non-409 answer (409 at a commitment boundary: retry after 1 ms; a stopped
    // experiment's 409 is an answer).
    let post = move |path: &str, body: &Value, token: &str| -> Reply {
        let b = body.to_string();
        loop {
            match request(addr, "POST", path, Some(token), Some(b.as_bytes()), TIMEOUT) {
                Ok(r) if r.status == 409 && !r.body.contains("\"stopped\"") => {
                    assert_eq!(r.retry_after.as_deref(), Some("1"), "{}", r.body);
                    std::thread::sleep(Duration::from_millis(1));
                }
                // Restarting: the port answers 503 while the start-up check runs.
                Ok(r) if r.status == 503 && r.body.contains("\"verifying\"") => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Ok(r) => return r,
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
            assert!(Instant::now() < deadline, "load did not finish in 240 s");
        }
    };
    let plan: [(&'static str, u64, u64); 5] = [
        ("lin", 2, 400),
        ("ctx", 2, 300),
        ("bai", 2, 20_000),
        ("ctx_p", 2, 300),
        ("bai_p", 2, 20_000),
    ];
    let clients: Vec<_> = plan
        .iter()
        .flat_map(|&(name, n, quota)| (0..n).map(move |c| (name, c, quota)))
        .map(|(name, c, quota)| {
            let (answered, books, token) = (answered.clone(), books.clone(), tokens[name].clone());
            std::thread::spawn(move || {
                let mut seq = 0u64;
                let mut rng = 0xc11e_0000 + seq + c * 7919;
                let pipelined = name.ends_with("_p");
                // Pipelined: (decision id, reward) decided but not yet reported.
                let mut backlog: Vec<(u64, f64)> = vec![];
                let send = |id: u64, reward: f64| {
                    let r = post(
                        &format!("/v1/experiments/{name}/rewards"),
                        &json!({"decision_id": id, "reward": reward}),
                        &token,
                    );
                    assert_eq!(r.status, 200, "{name}: {}", r.body);
                    books
                        .lock()
                        .unwrap()
                        .get_mut(name)
                        .unwrap()
                        .get_mut(&id)
                        .unwrap()
                        .1 = Some(reward);
                };
                loop {
                    if books
                        .lock()
                        .unwrap()
                        .get(name)
                        .map_or(0, |b| b.len() as u64)
                        >= quota
                    {
                        break;
                    }
                    seq += 1;
                    let mut body = json!({"request_id": format!("{name}-{c}-{seq}")});
                    if name.starts_with("ctx") {
                        let set: Vec<Vec<f64>> = (0..4)
                            .map(|_| {
                                (0..3)
                                    .map(|_| (splitmix(&mut rng) % 1000) as f64 / 1000.0)
                                    .collect()
                            })
                            .collect();
                        body["actions"] = json!(set);
                    }
                    let r = post(&format!("/v1/experiments/{name}/decisions"), &body, &token);
                    if r.status == 409 {
                        let v = r.json();
                        assert!(name.starts_with("bai"), "{}", r.body);
                        assert_eq!(v["stopped"], true, "{}", r.body);
                        break;
                    }
                    assert_eq!(r.status, 200, "{name}: {}", r.body);
                    let v = r.json();
                    let (id, arm) = (
                        v["decision_id"].as_u64().unwrap(),
                        v["arm"].as_u64().unwrap(),
                    );
                    let prev = books
                        .lock()
                        .unwrap()
                        .entry(name)
                        .or_default()
                        .insert(id, (arm, None));
                    assert!(
                        prev.is_none(),
                        "{name}: decision {id} given to two requests"
                    );
                    answered.fetch_add(1, Ordering::SeqCst);
                    let reward = if name.starts_with("bai") {
                        f64::from(u8::from(reward_of(id) < [0.9, 0.2, 0.1][arm as usize]))
                    } else {
                        reward_of(id).min(1.0)
                    };
                    if pipelined {
                        backlog.push((id, reward));
                        if backlog.len() > 8 {
                            let i = (splitmix(&mut rng) % backlog.len() as u64) as usize;
                            let (id, reward) = backlog.swap_remove(i);
                            send(id, reward);
                        }
                    } else {
                        send(id, reward);
                    }
                }
                // The rewards still held, newest first (a stopped BAI run takes them too).
                while let Some((id, reward)) = backlog.pop() {
                    send(id, reward);
                }
            })
        })
        .collect();
    let killer = {
        let (server, answered, stop) = (server.clone(), answered.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut rng = 0x5eed_2029u64;
            let mut points: Vec<u64> = (0..KILLS).map(|_| 100 + splitmix(&mut rng) % 500).collect();
            points.sort_unstable();
            let mut kills = 0;
            for p in points {
                while answered.load(Ordering::SeqCst) < p && !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_micros(200));
                }
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                std::thread::sleep(Duration::from_micros(splitmix(&mut rng) % 3000));
                server.lock().unwrap().kill_and_restart();
                kills += 1;
            }
            kills
        })
    };
    for c in clients {
        c.join().unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    let kills = killer.join().unwrap();
    assert!(kills >= 3, "only {kills} kills");
    let server = Arc::try_unwrap(server).ok().unwrap().into_inner().unwrap();
    let books = books.lock().unwrap().clone();
    let mut statuses = HashMap::new();
    for name in ["lin", "ctx", "bai", "ctx_p", "bai_p"] {
        let st = server
            .call(
                "GET",
                &format!("/v1/experiments/{name}"),
                Some(&tokens[name]),
                None,
            )
            .json();
        let n = books[name].len() as u64;
        assert_eq!(st["pending"], 0, "{name}: {st}");
        assert_eq!(st["decisions"].as_u64(), Some(n), "{name}: {st}");
        assert_eq!(st["rewarded"].as_u64(), Some(n), "{name}: {st}");
        statuses.insert(name, st);
    }
    for name in ["bai", "bai_p"] {
        assert_eq!(
            statuses[name]["stopped"]["recommendation"], 0,
            "{}",
            statuses[name]
        );
    }
    let r = server.call(
        "GET",
        "/v1/experiments/ctx/export?format=jsonl",
        Some(ADMIN),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let lines: Vec<Value> = r
        .body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), books["ctx"].len());
    assert!(
        lines
            .iter()
            .all(|l| l["actions"].as_array().map(Vec::len) == Some(4) && l["propensity"] == 1.0)
    );
    let listed = server
        .call("GET", "/v1/experiments", Some(ADMIN), None)
        .json();
    assert_eq!(
        listed["experiments"].as_array().unwrap().len(),
        5,
        "{listed}"
    );
    let db = server.db.clone();
    server.terminate();
    for name in ["lin", "ctx", "bai", "ctx_p", "bai_p"] {
        let ins = dpbandits_serve::store::inspect(&db, name).unwrap();
        let book = &books[name];
        assert_eq!(ins.rewarded, book.len() as u64, "{name}");
        for &(id, arm, reward) in &ins.rewards {
            let (a, r) = book[&id];
            assert_eq!(a, arm as u64, "{name}: decision {id}");
            assert_eq!(
                r.map(f64::to_bits),
                Some(reward.to_bits()),
                "{name}: decision {id}"
            );
        }
        assert_eq!(ins.ledger_open, 0, "{name}");
        assert_eq!(ins.ledger_charged, ins.releases, "{name}");
    }
    let out = verify_cmd(&db).output().unwrap();
    super::succeeded(&out);
    eprintln!(
        "every-setting sigkill test: {} lin, {} ctx, {} bai, {} ctx_p, {} bai_p decisions, {kills} kills",
        books["lin"].len(),
        books["ctx"].len(),
        books["bai"].len(),
        books["ctx_p"].len(),
        books["bai_p"].len()
    );
}

/// A second `serve` on the same database is refused (the running one keeps serving); a
/// non-loopback address needs `--allow-remote`; a missing admin token and a `--batch-wait-ms`
/// out of range are clear errors.
#[test]
fn one_service_per_database_and_loopback_by_default() {
    let dir = tempdir();
    let s = Server::start(dir.path(), free_port());
    let out = bin()
        .args(["serve", "--db"])
        .arg(&s.db)
        .args(["--listen", "127.0.0.1:0", "--admin-token-file"])
        .arg(&s.token_file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("another dpbandits serve"), "{err}");
    let out = bin()
        .args(["serve", "--db"])
        .arg(dir.path().join("other.sqlite"))
        .args(["--listen", "0.0.0.0:0", "--admin-token-file"])
        .arg(&s.token_file)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("--listen 0.0.0.0:0"));
    let out = bin()
        .args(["serve", "--db"])
        .arg(dir.path().join("other.sqlite"))
        .env_remove("DPBANDITS_ADMIN_TOKEN")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("DPBANDITS_ADMIN_TOKEN"));
    for bad in ["-1", "NaN", "1001"] {
        let out = bin()
            .args(["serve", "--db"])
            .arg(dir.path().join("other.sqlite"))
            .arg(format!("--batch-wait-ms={bad}"))
            .arg("--admin-token-file")
            .arg(&s.token_file)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success()
                && err.contains(&format!("--batch-wait-ms {bad}"))
                && err.contains("[0, 1000]"),
            "{err}"
        );
    }
    assert_eq!(s.call("GET", "/v1/health", None, None).status, 200);
    s.terminate();
}

/// Issue 30: `dpbandits backup` under load writes a consistent, verified copy (mode 0600), and
/// a head published from it pins the live log: `audit-log verify --expect-head H
/// --expect-entries N` passes on the grown live log and on the copy, and fails naming the
/// truncation on a copy whose log lost its tail. Loopback, 2 loader threads, about 3 s.
#[test]
fn backup_under_load_is_consistent_and_pins_the_log() {
    let dir = tempdir();
    let s = Server::start(dir.path(), free_port());
    let token = create(&s, "load", "kind = \"adac_ucb\"\nrho = 1.0", 3);
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let loaders: Vec<_> = (0..2)
        .map(|_| {
            let (stop, done, token, addr) = (stop.clone(), done.clone(), token.clone(), s.addr);
            std::thread::spawn(move || {
                let end = Instant::now() + Duration::from_secs(20);
                while !stop.load(Ordering::Relaxed) && Instant::now() < end {
                    let r = request(
                        addr,
                        "POST",
                        "/v1/experiments/load/decisions",
                        Some(&token),
                        Some(b"{}"),
                        TIMEOUT,
                    )
                    .unwrap();
                    if r.status != 200 {
                        std::thread::sleep(Duration::from_millis(2));
                        continue;
                    }
                    let id = r.json()["decision_id"].as_u64().unwrap();
                    let body = json!({"decision_id": id, "reward": reward_of(id).clamp(0.0, 1.0)})
                        .to_string();
                    let r = request(
                        addr,
                        "POST",
                        "/v1/experiments/load/rewards",
                        Some(&token),
                        Some(body.as_bytes()),
                        TIMEOUT,
                    )
                    .unwrap();
                    assert_eq!(r.status, 200, "{}", r.body);
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(15);
    while done.load(Ordering::Relaxed) < 50 {
        assert!(
            Instant::now() < deadline && loaders.iter().all(|l| !l.is_finished()),
            "the loaders stopped after {} pairs",
            done.load(Ordering::Relaxed)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let key = dpbandits_serve::store::default_key_path(&s.db);
    let mut pins = Vec::new();
    for i in 0..2 {
        let copy = dir.path().join(format!("backup-{i}.sqlite"));
        let out = bin()
            .args(["backup", "--db"])
            .arg(&s.db)
            .arg("--out")
            .arg(&copy)
            .output()
            .unwrap();
        super::succeeded(&out);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&copy).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let out = bin()
            .args(["audit-log", "verify", "--json", "--db"])
            .arg(&copy)
            .arg("--audit-key-file")
            .arg(&key)
            .output()
            .unwrap();
        super::succeeded(&out);
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(r["decisions"].as_u64().unwrap() >= 50, "{r}");
        pins.push((
            copy,
            r["entries"].as_u64().unwrap(),
            r["head"].as_str().unwrap().to_string(),
        ));
        std::thread::sleep(Duration::from_millis(300));
    }
    // A second backup to an existing file is refused (never overwrites).
    let out = bin()
        .args(["backup", "--db"])
        .arg(&s.db)
        .arg("--out")
        .arg(&pins[0].0)
        .output()
        .unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("exists"));
    stop.store(true, Ordering::Relaxed);
    for l in loaders {
        l.join().unwrap();
    }
    let db = s.db.clone();
    s.terminate();
    let verify = |db: &Path, entries: u64, head: &str| {
        bin()
            .args(["audit-log", "verify", "--db"])
            .arg(db)
            .arg("--audit-key-file")
            .arg(&key)
            .args([
                "--expect-head",
                head,
                "--expect-entries",
                &entries.to_string(),
            ])
            .output()
            .unwrap()
    };
    assert!(pins[1].1 > pins[0].1);
    for (_, entries, head) in &pins {
        let out = verify(&db, *entries, head);
        super::succeeded(&out);
    }
    // The first copy's log lacks the entries the second pin covers: refused, naming it.
    let out = verify(&pins[0].0, pins[1].1, &pins[1].2);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("deleted from its end"), "{err}");
}

/// `n` keep-alive connections to `addr` that have each been answered once: accepted, so each
/// holds one of the server's connection permits (a bare connect only waits in the kernel's
/// queue until the server accepts it, which on a loaded machine may come after a probe).
/// Retried while a start-up probe's closed connection still holds its permit (answered 503),
/// for at most 10 s.
pub(super) fn hold_answered(addr: SocketAddr, n: usize) -> Vec<dpbandits_serve::client::Conn> {
    (0..n)
        .map(|_| {
            let t = Instant::now();
            loop {
                let mut c = dpbandits_serve::client::Conn::new(addr, TIMEOUT);
                let r = c.request("GET", "/v1/health", None, None).unwrap();
                if r.status == 200 {
                    break c;
                }
                assert!(
                    t.elapsed() < Duration::from_secs(10),
                    "{} {}",
                    r.status,
                    r.body
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        })
        .collect()
}

/// [`dpbandits_serve::client::raw_exchange`], which must connect.
fn raw(addr: SocketAddr, bytes: &[u8], wait: Duration) -> (String, bool, Duration) {
    dpbandits_serve::client::raw_exchange(addr, bytes, wait).unwrap()
}

/// [`dpbandits_serve::client::error_answer`], which must find a JSON error.
fn json_answer(text: &str) -> (u16, Value) {
    dpbandits_serve::client::error_answer(text).unwrap_or_else(|e| panic!("{e}"))
}

/// Issue 30: SIGTERM while a client holds a half-sent request header. The process must exit
/// within the shutdown deadline (1 s here, plus 4 s of slack for a loaded machine; before the
/// deadline existed it waited for the client) and a new `serve` must start on the same
/// database (the lock is released).
#[test]
fn sigterm_with_a_half_sent_request_exits_within_the_deadline() {
    use std::io::Write;
    let dir = tempdir();
    let port = free_port();
    let s = Server::start_any(dir.path(), port, &["--shutdown-deadline", "1"]);
    let mut c = std::net::TcpStream::connect(s.addr).unwrap();
    c.write_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    let (db, addr, token_file, log) = (s.db.clone(), s.addr, s.token_file.clone(), s.log.clone());
    s.terminate();
    let took = t.elapsed();
    assert!(took < Duration::from_secs(5), "exit took {took:?}");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("\"event\":\"shutdown-deadline\""), "{text}");
    let mut again = Server {
        child: spawn(&db, addr, &token_file, &log),
        addr,
        db,
        token_file,
        log,
    };
    again.wait_healthy();
    drop(c);
    again.terminate();
}

/// Issue 30: timeouts, the connection limit, authentication before the body, JSON errors,
/// names `.` and `..`, the `request_id` limit in characters, file modes 0600, one lock file
/// per database. Bounded: about 8 s.
#[test]
fn timeouts_limits_and_refusals_hold() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempdir();
    let s = Server::start_with(
        dir.path(),
        free_port(),
        &[
            "--header-timeout",
            "5",
            "--body-timeout",
            "1",
            "--max-connections",
            "3",
        ],
    );
    // The connection limit: 3 connections are held (each answered once, so accepted); the
    // 4th is answered 503 (JSON) and the refusal is logged.
    let held = hold_answered(s.addr, 3);
    let (text, closed, _) = raw(
        s.addr,
        b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        TIMEOUT,
    );
    let (status, v) = json_answer(&text);
    assert_eq!(status, 503, "{text}");
    assert!(
        closed && v["error"].as_str().unwrap().contains("at most 3"),
        "{v}"
    );
    assert!(
        text.to_ascii_lowercase().contains("retry-after: 1"),
        "{text}"
    );
    let log = std::fs::read_to_string(&s.log).unwrap();
    assert!(log.contains("\"event\":\"connection-limit\""), "{log}");
    drop(held);
    std::thread::sleep(Duration::from_millis(200));
    let h = s.call("GET", "/v1/health", None, None);
    assert_eq!(
        (h.status, h.json()["database"].clone()),
        (200, json!("writable")),
        "{}",
        h.body
    );

    // A half-sent header is closed at the header timeout (5 s).
    let (text, closed, took) = raw(
        s.addr,
        b"GET /v1/health HTTP/1.1\r\nHost: x\r\n",
        Duration::from_secs(12),
    );
    assert!(closed, "still open after {took:?}: {text}");
    assert!(took >= Duration::from_millis(4500), "{took:?}");

    // An unauthenticated upload that stalls is refused at once (401), without its body.
    let (text, closed, took) = raw(
        s.addr,
        b"POST /v1/experiments HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{\"name\":",
        TIMEOUT,
    );
    assert_eq!(json_answer(&text).0, 401, "{text}");
    assert!(closed && took < Duration::from_secs(3), "{took:?}");
    // An authenticated one that stalls gets 408 at the body timeout (1 s).
    let req = format!(
        "POST /v1/experiments HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ADMIN}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"name\":"
    );
    let (text, closed, took) = raw(s.addr, req.as_bytes(), TIMEOUT);
    let (status, v) = json_answer(&text);
    assert_eq!(status, 408, "{text}");
    assert!(v["error"].as_str().unwrap().starts_with("body:"), "{v}");
    assert!(closed && took >= Duration::from_millis(900), "{took:?}");
    // A declared body over the limit: 413 (JSON) before reading it.
    let req = format!(
        "POST /v1/experiments HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ADMIN}\r\nContent-Type: application/json\r\nContent-Length: 3000000\r\n\r\n{{"
    );
    let (text, _, _) = raw(s.addr, req.as_bytes(), TIMEOUT);
    assert_eq!(json_answer(&text).0, 413, "{text}");
    // The router's own refusals are JSON too: 405 (with Allow), a path that does not decode
    // (400), an unknown path (404).
    for (req, want) in [
        (
            "DELETE /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            405,
        ),
        (
            "GET /v1/experiments/%FF HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            400,
        ),
        (
            "GET /v2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            404,
        ),
    ] {
        let (text, _, _) = raw(s.addr, req.as_bytes(), TIMEOUT);
        assert_eq!(json_answer(&text).0, want, "{req}: {text}");
    }

    // Names `.` and `..` are refused naming `name`.
    for name in [".", ".."] {
        let r = s.call(
            "POST",
            "/v1/experiments",
            Some(ADMIN),
            Some(&json!({"name": name, "arms": 2, "policy": "kind = \"adac_ucb\"\nrho = 1.0"})),
        );
        assert_eq!(r.status, 422, "{}", r.body);
        assert!(
            r.json()["error"].as_str().unwrap().starts_with("name = "),
            "{}",
            r.body
        );
    }
    // request_id: at most 128 characters (not bytes): 128 two-byte characters pass, 129 fail.
    let token = create(&s, "ids", "kind = \"adac_ucb\"\nrho = 1.0", 2);
    let path = "/v1/experiments/ids/decisions";
    let ok = "é".repeat(128);
    let r = s.call("POST", path, Some(&token), Some(&json!({"request_id": ok})));
    assert_eq!(r.status, 200, "{}", r.body);
    let r = s.call(
        "POST",
        path,
        Some(&token),
        Some(&json!({"request_id": "é".repeat(129)})),
    );
    assert_eq!(r.status, 422, "{}", r.body);
    assert!(r.body.contains("128 characters"), "{}", r.body);
    // A second report with a different value is answered "duplicate" with the hint.
    let id = r_id(&s.call("POST", path, Some(&token), Some(&json!({"request_id": ok}))));
    let rw = "/v1/experiments/ids/rewards";
    let r = s.call(
        "POST",
        rw,
        Some(&token),
        Some(&json!({"decision_id": id, "reward": 0.25})),
    );
    assert_eq!(r.json()["status"], "applied", "{}", r.body);
    let r = s.call(
        "POST",
        rw,
        Some(&token),
        Some(&json!({"decision_id": id, "reward": 0.75})),
    );
    assert_eq!(
        (r.json()["status"].clone(), r.json()["differs"].clone()),
        (json!("duplicate"), json!(true)),
        "{}",
        r.body
    );

    // File modes: the database, its WAL and shared-memory files and the lock file are 0600;
    // the lock file is the database's whole name plus `.lock`.
    for f in [
        "service.sqlite",
        "service.sqlite-wal",
        "service.sqlite-shm",
        "service.sqlite.lock",
    ] {
        let mode = std::fs::metadata(dir.path().join(f))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600, "{f}: {mode:o}");
    }
    // One lock file per database: trial.v1 and trial.v2 are served at once.
    let (p1, p2) = (free_port(), free_port());
    let mut v1 = Server {
        child: spawn(
            &dir.path().join("trial.v1"),
            format!("127.0.0.1:{p1}").parse().unwrap(),
            &s.token_file,
            &s.log,
        ),
        addr: format!("127.0.0.1:{p1}").parse().unwrap(),
        db: dir.path().join("trial.v1"),
        token_file: s.token_file.clone(),
        log: s.log.clone(),
    };
    let mut v2 = Server {
        child: spawn(
            &dir.path().join("trial.v2"),
            format!("127.0.0.1:{p2}").parse().unwrap(),
            &s.token_file,
            &s.log,
        ),
        addr: format!("127.0.0.1:{p2}").parse().unwrap(),
        db: dir.path().join("trial.v2"),
        token_file: s.token_file.clone(),
        log: s.log.clone(),
    };
    v1.wait_healthy();
    v2.wait_healthy();
    v1.terminate();
    v2.terminate();
    s.terminate();
}

fn r_id(r: &Reply) -> u64 {
    r.json()["decision_id"]
        .as_u64()
        .unwrap_or_else(|| panic!("{}", r.body))
}
