//! `dpbandits serve` against the real binary, on loopback only, bounded and self-stopping:
//! crash safety under SIGKILL with 8 concurrent clients, authentication, field-naming 4xx
//! errors, and a request-body fuzz test.

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

fn free_port() -> u16 {
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

    /// Start with extra `serve` flags (timeouts, limits).
    fn start_with(dir: &Path, port: u16, extra: &[&str]) -> Server {
        let token_file = dir.join("admin-token");
        std::fs::write(&token_file, format!("{ADMIN}\n")).unwrap();
        let db = dir.join("service.sqlite");
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
        .args(extra)
        .env_remove("DPBANDITS_ADMIN_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
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

/// SplitMix64 (the test's own fixed-seed stream).
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
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
    let server = Server::start(dir.path(), free_port());
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
    let out = bin()
        .args(["audit-log", "verify", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
    let server = Server::start(dir.path(), free_port());
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
    let out = bin()
        .args(["audit-log", "verify", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "every-setting sigkill test: {} lin, {} ctx, {} bai, {} ctx_p, {} bai_p decisions, {kills} kills",
        books["lin"].len(),
        books["ctx"].len(),
        books["bai"].len(),
        books["ctx_p"].len(),
        books["bai_p"].len()
    );
}

/// The audit log's length and the experiment's status: what a refused request must not change.
fn footprint(s: &Server, token: &str) -> (usize, Value) {
    let audit = s
        .call("GET", "/v1/audit?limit=10000", Some(ADMIN), None)
        .json();
    let st = s.call("GET", "/v1/experiments/t", Some(token), None).json();
    (audit["entries"].as_array().unwrap().len(), st)
}

/// Done-when 2: missing or wrong tokens get 401 and touch nothing; malformed JSON, unknown
/// experiments, bad parameters and out-of-range rewards get 4xx naming the field.
#[test]
fn refusals_are_401_or_4xx_naming_the_field() {
    let dir = tempdir();
    let s = Server::start(dir.path(), free_port());
    // No `boundary` key: the service's default is "reject".
    let tok = create(&s, "t", "kind = \"adac_ucb\"\nrho = 0.5", 2);
    let other = create(&s, "u", "kind = \"adap_ucb\"\nepsilon = 1.0", 2);
    let d = s.call(
        "POST",
        "/v1/experiments/t/decisions",
        Some(&tok),
        Some(&json!({})),
    );
    assert_eq!(d.status, 200, "{}", d.body);
    let before = footprint(&s, &tok);
    let dec = "/v1/experiments/t/decisions";
    let rew = "/v1/experiments/t/rewards";
    let body = json!({"decision_id": 1, "reward": 0.5});
    for (method, path, token) in [
        ("POST", dec, None),
        ("POST", dec, Some("wrong-token")),
        ("POST", dec, Some(other.as_str())), // another experiment's client token
        ("POST", rew, None),
        ("POST", rew, Some("Bearer")),
        ("POST", rew, Some(other.as_str())),
        ("GET", "/v1/experiments/t", Some("x")),
        ("GET", "/v1/experiments/t/ledger", None),
        ("GET", "/v1/audit", Some(tok.as_str())), // a client token is not the admin token
        ("POST", "/v1/experiments", Some(tok.as_str())),
    ] {
        let r = s.call(method, path, token, Some(&body));
        assert_eq!(r.status, 401, "{method} {path} {token:?}: {}", r.body);
        assert!(
            r.json()["error"]
                .as_str()
                .unwrap()
                .contains("authorization")
        );
    }
    assert_eq!(footprint(&s, &tok), before, "a 401 changed something");

    let raw = |path: &str, token: &str, body: &[u8]| {
        request(s.addr, "POST", path, Some(token), Some(body), TIMEOUT).unwrap()
    };
    let cases: Vec<(&str, &str, Vec<u8>, u16, &str)> = vec![
        (rew, &tok, b"{\"decision_id\": 1, ".to_vec(), 400, "body"),
        (rew, &tok, b"[1, 2]".to_vec(), 400, "body"),
        (rew, &tok, b"{\"decision_id\": 1}".to_vec(), 422, "reward"),
        (rew, &tok, b"{\"reward\": 0.5}".to_vec(), 422, "decision_id"),
        (
            rew,
            &tok,
            b"{\"decision_id\": -1, \"reward\": 0.5}".to_vec(),
            422,
            "decision_id",
        ),
        (
            rew,
            &tok,
            b"{\"decision_id\": 99, \"reward\": 0.5}".to_vec(),
            404,
            "decision_id",
        ),
        (
            rew,
            &tok,
            b"{\"decision_id\": 1, \"reward\": \"high\"}".to_vec(),
            422,
            "reward",
        ),
        (
            rew,
            &tok,
            b"{\"decision_id\": 1, \"reward\": 1e999}".to_vec(),
            400,
            "body",
        ),
        // The default boundary = "reject": an out-of-range reward is refused naming it; nothing
        // changes.
        (
            rew,
            &tok,
            b"{\"decision_id\": 1, \"reward\": 1.5}".to_vec(),
            422,
            "reward",
        ),
        (
            rew,
            &tok,
            b"{\"decision_id\": 1, \"reward\": 0.5, \"x\": 1}".to_vec(),
            422,
            "x",
        ),
        (
            dec,
            &tok,
            b"{\"request_id\": 7}".to_vec(),
            422,
            "request_id",
        ),
        (
            "/v1/experiments/nope/decisions",
            ADMIN,
            b"{}".to_vec(),
            404,
            "experiment",
        ),
        (
            "/v1/experiments",
            ADMIN,
            b"{\"name\": \"a b\", \"arms\": 2, \"policy\": \"kind = 'adac_ucb'\\nrho = 1.0\"}"
                .to_vec(),
            422,
            "name",
        ),
        (
            "/v1/experiments",
            ADMIN,
            b"{\"name\": \"ab\", \"arms\": 0, \"policy\": \"kind = 'adac_ucb'\\nrho = 1.0\"}"
                .to_vec(),
            422,
            "arms",
        ),
        (
            "/v1/experiments",
            ADMIN,
            b"{\"name\": \"ab\", \"arms\": 2}".to_vec(),
            422,
            "policy",
        ),
        (
            "/v1/experiments",
            ADMIN,
            b"{\"name\": \"ab\", \"arms\": 2, \"policy\": \"kind = 'adac_ucb'\\nrho = -1\"}"
                .to_vec(),
            422,
            "rho",
        ),
        (
            "/v1/experiments",
            ADMIN,
            b"{\"name\": \"ab\", \"arms\": 2, \"policy\": \"kind = 'adac_ucb'\"}".to_vec(),
            422,
            "rho",
        ),
        (
            "/v1/experiments",
            ADMIN,
            b"{\"name\": \"ab\", \"arms\": 2, \"policy\": \"kind = 'nope'\"}".to_vec(),
            422,
            "kind",
        ),
        (
            "/v1/experiments",
            ADMIN,
            b"{\"name\": \"ab\", \"arms\": 2, \"policy\": \"kind = 'ucb1'\"}".to_vec(),
            422,
            "allow_non_private",
        ),
        (
            "/v1/experiments",
            ADMIN,
            // Deployment noise (the service's default) refuses an unclipped AdaC-OFUL.
            b"{\"name\": \"ab\", \"dim\": 3, \"horizon\": 100, \"policy\": \"kind = 'adac_oful'\\nrho = 1.0\\nmode = 'reproduction'\"}"
                .to_vec(),
            422,
            "mode = \"reproduction\"",
        ),
        (
            "/v1/experiments",
            ADMIN,
            b"{\"name\": \"ab\", \"arms\": 2, \"policy\": \"kind = 'dp_tt'\\nepsilon = 1.0\"}"
                .to_vec(),
            422,
            "delta = (missing)",
        ),
        (
            "/v1/experiments",
            ADMIN,
            b"{\"name\": \"ab\", \"arms\": 2, \"dim\": 3, \"policy\": \"kind = 'adac_ucb'\\nrho = 1.0\"}"
                .to_vec(),
            422,
            "dim = 3: not a key of a finite-armed experiment",
        ),
        (
            "/v1/experiments/t/decisions",
            ADMIN,
            b"{\"actions\": [[1.0, 2.0]]}".to_vec(),
            422,
            "actions",
        ),
        (
            "/v1/experiments",
            ADMIN,
            b"{\"name\": \"t\", \"arms\": 2, \"policy\": \"kind = 'adac_ucb'\\nrho = 1.0\"}"
                .to_vec(),
            409,
            "name",
        ),
    ];
    for (path, token, body, status, field) in cases {
        let r = raw(path, token, &body);
        let shown = String::from_utf8_lossy(&body);
        assert_eq!(r.status, status, "{path} {shown}: {}", r.body);
        let msg = r.json()["error"].as_str().unwrap_or_default().to_string();
        assert!(
            msg.contains(field),
            "{path} {shown}: {msg:?} does not name {field:?}"
        );
    }
    // A refused reward left decision 1 pending; a valid one is applied, once.
    let st = s.call("GET", "/v1/experiments/t", Some(&tok), None).json();
    assert_eq!(st["pending"], 1, "{st}");
    for want in ["applied", "duplicate"] {
        let r = s.call(
            "POST",
            rew,
            Some(&tok),
            Some(&json!({"decision_id": 1, "reward": 0.5})),
        );
        assert_eq!(r.json()["status"], want, "{}", r.body);
    }
    // Explicit simulation-grade noise and allow_non_private are accepted and labelled.
    let r = raw("/v1/experiments", ADMIN, b"{\"name\": \"sim\", \"arms\": 2, \"policy\": {\"kind\": \"dp_ts\", \"epsilon\": 1.0, \"noise\": \"simulation\"}}");
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.json()["guarantee"]["noise"], "simulation-grade");
    let r = raw("/v1/experiments", ADMIN, b"{\"name\": \"np\", \"arms\": 2, \"allow_non_private\": true, \"policy\": {\"kind\": \"ucb1\"}}");
    assert_eq!(r.status, 201, "{}", r.body);
    // The deployment default.
    let st = s.call("GET", "/v1/experiments/t", Some(&tok), None).json();
    assert_eq!(st["guarantee"]["noise"], "deployment-grade");
    s.terminate();
}

/// Done-when 2, fuzzed: 1,500 request bodies (fixed seed) mutated from valid ones (byte flips,
/// truncations, inserted bytes, swapped value types, extreme numbers) sent to every POST route.
/// Every answer is a 2xx or a 4xx with a JSON `error`; the server never answers 5xx, never
/// drops a connection, and stays healthy.
#[test]
fn fuzzed_bodies_never_panic() {
    let dir = tempdir();
    let s = Server::start(dir.path(), free_port());
    let tok = create(&s, "f", "kind = \"adac_ucb\"\nrho = 0.5", 4);
    let seeds: Vec<(&str, &str, Vec<u8>)> = vec![
        (
            "/v1/experiments/f/decisions",
            tok.as_str(),
            br#"{"request_id": "abc"}"#.to_vec(),
        ),
        (
            "/v1/experiments/f/rewards",
            tok.as_str(),
            br#"{"decision_id": 1, "reward": 0.25}"#.to_vec(),
        ),
        (
            "/v1/experiments",
            ADMIN,
            br#"{"name": "g", "arms": 3, "policy": {"kind": "adac_ucb", "rho": 0.5, "beta": 1.0}}"#
                .to_vec(),
        ),
        (
            "/v1/experiments",
            ADMIN,
            br#"{"name": "h", "arms": 2, "policy": "kind = \"adap_ucb\"\nepsilon = 0.5"}"#.to_vec(),
        ),
    ];
    let junk: [&[u8]; 12] = [
        b"null",
        b"-1",
        b"1e309",
        b"18446744073709551616",
        b"\"\\ud800\"",
        b"[]",
        b"{}",
        b"true",
        b"\xff\xfe",
        b"0.0000000001",
        b"\"kind = [\"",
        b"[[[[[[[[[[[[[[[[[[[[[[[[[[",
    ];
    let mut rng = 0xf00d_2026u64;
    let mut statuses: HashMap<u16, u64> = HashMap::new();
    for i in 0..1500 {
        let (path, token, base) = &seeds[i % seeds.len()];
        let mut b = base.clone();
        for _ in 0..=(splitmix(&mut rng) % 3) {
            let r = splitmix(&mut rng);
            let pos = (r >> 8) as usize % (b.len() + 1);
            match r % 5 {
                0 if !b.is_empty() => {
                    let p = pos.min(b.len() - 1);
                    b[p] ^= 1 << ((r >> 40) % 8);
                }
                1 => b.truncate(pos),
                2 => b.insert(pos, (r >> 32) as u8),
                3 => {
                    let j = junk[(r >> 16) as usize % junk.len()];
                    b.splice(pos..pos, j.iter().copied());
                }
                _ => {
                    // Replace a JSON value after a colon with junk (a type swap).
                    if let Some(c) = b.iter().skip(pos).position(|&x| x == b':') {
                        let start = pos + c + 1;
                        let end = b[start..]
                            .iter()
                            .position(|&x| x == b',' || x == b'}')
                            .map_or(b.len(), |e| start + e);
                        let j = junk[(r >> 16) as usize % junk.len()];
                        b.splice(start..end, j.iter().copied());
                    }
                }
            }
        }
        let r = request(s.addr, "POST", path, Some(token), Some(&b), TIMEOUT).unwrap_or_else(|e| {
            panic!(
                "{path} {:?}: connection failed: {e}",
                String::from_utf8_lossy(&b)
            )
        });
        *statuses.entry(r.status).or_default() += 1;
        assert!(
            (200..500).contains(&r.status),
            "{path} {:?}: {} {}",
            String::from_utf8_lossy(&b),
            r.status,
            r.body
        );
        if r.status >= 400 && r.status != 409 {
            assert!(r.json()["error"].is_string(), "{}: {}", r.status, r.body);
        }
        // Keep the experiment moving so reward bodies sometimes hit pending decisions.
        if i.is_multiple_of(50) {
            let d = s.call(
                "POST",
                "/v1/experiments/f/decisions",
                Some(&tok),
                Some(&json!({})),
            );
            if d.status == 200 {
                let id = d.json()["decision_id"].clone();
                s.call(
                    "POST",
                    "/v1/experiments/f/rewards",
                    Some(&tok),
                    Some(&json!({"decision_id": id, "reward": 0.5})),
                );
            }
        }
    }
    let h = s.call("GET", "/v1/health", None, None);
    assert_eq!(h.status, 200);
    assert!(statuses.keys().any(|&c| c >= 400), "{statuses:?}");
    let db = s.db.clone();
    s.terminate();
    dpbandits_serve::verify::verify_default(&db).unwrap();
}

/// A second `serve` on the same database is refused (the running one keeps serving); a
/// non-loopback address needs `--allow-remote`; a missing admin token is a clear error.
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
    assert_eq!(s.call("GET", "/v1/health", None, None).status, 200);
    s.terminate();
}

/// Issue 29, Done-when 2: a simulated trial through the real service (loopback, bounded: 90
/// patients, about 10 s) with delayed and missing outcomes. Each outcome arrives after a delay
/// drawn in [0, 150] ms, or never (about 15% of patients: a fixed-seed stream); the experiment
/// records a missing outcome as `dropout_reward = 0` after `reward_deadline = 0.4` s. Checked:
/// enrolment is never refused for longer than the deadline (plus the site's 20 ms retry and
/// 0.6 s of scheduling slack for a loaded machine), every abandoned decision is in the export
/// (outcome `abandoned`, reward 0), in the audit log (one `abandon` entry each) and in the
/// ledger (the charged releases cover every decision of the completed commitments), the
/// guarantee the service reports is the core session's for the same table, and the ledger's
/// effective budget is the stated rho.
#[test]
fn a_simulated_trial_with_delayed_and_missing_outcomes() {
    const PATIENTS: u64 = 90;
    const DEADLINE: f64 = 0.4;
    let dir = tempdir();
    let server = Server::start(dir.path(), free_port());
    let table = "kind = \"adac_ucb\"\nrho = 0.5\nnoise = \"deployment\"\nboundary = \"reject\"";
    let r = server.call(
        "POST",
        "/v1/experiments",
        Some(ADMIN),
        Some(&json!({"name": "trial", "arms": 3, "policy": table,
                     "dropout_reward": 0.0, "reward_deadline": DEADLINE})),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let created = r.json();
    let token = created["client_token"].as_str().unwrap().to_string();
    let mut rng = 20_261_127u64;
    // (due time, decision_id, reward) of outcomes still to arrive.
    let mut due: Vec<(Instant, u64, f64)> = vec![];
    let mut missing = std::collections::BTreeSet::new();
    let mut enrolled = 0u64;
    let mut refused_since: Option<Instant> = None;
    let mut worst_wait = 0.0f64;
    let started = Instant::now();
    let means = [0.3, 0.5, 0.7];
    while enrolled < PATIENTS {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the trial did not finish in 60 s"
        );
        // Outcomes that are due arrive.
        let now = Instant::now();
        due.sort_by_key(|d| d.0);
        while let Some(&(at, id, reward)) = due.first() {
            if at > now {
                break;
            }
            due.remove(0);
            let r = server.call(
                "POST",
                "/v1/experiments/trial/rewards",
                Some(&token),
                Some(&json!({"decision_id": id, "reward": reward})),
            );
            assert_eq!(r.status, 200, "{}", r.body);
            // A late outcome (after its deadline) is acknowledged as not applied.
            if r.json()["status"] != "applied" {
                missing.insert(id);
            }
        }
        let r = server.call(
            "POST",
            "/v1/experiments/trial/decisions",
            Some(&token),
            Some(&json!({})),
        );
        match r.status {
            200 => {
                if let Some(since) = refused_since.take() {
                    worst_wait = worst_wait.max(since.elapsed().as_secs_f64());
                }
                let d = r.json();
                let (id, arm) = (
                    d["decision_id"].as_u64().unwrap(),
                    d["arm"].as_u64().unwrap(),
                );
                enrolled += 1;
                let u = (splitmix(&mut rng) >> 11) as f64 / (1u64 << 53) as f64;
                if u < 0.15 {
                    missing.insert(id);
                } else {
                    let delay = Duration::from_millis(splitmix(&mut rng) % 151);
                    let v = (splitmix(&mut rng) >> 11) as f64 / (1u64 << 53) as f64;
                    let reward = if v < means[arm as usize] { 1.0 } else { 0.0 };
                    due.push((Instant::now() + delay, id, reward));
                }
            }
            409 => {
                refused_since.get_or_insert_with(Instant::now);
                std::thread::sleep(Duration::from_millis(20));
            }
            s => panic!("decision: {s} {}", r.body),
        }
    }
    // Let every outcome arrive, then pass the last deadlines: the next decision request
    // abandons what is still missing (it may be refused at a boundary: that is fine).
    std::thread::sleep(Duration::from_millis(200));
    for (_, id, reward) in due.drain(..) {
        let r = server.call(
            "POST",
            "/v1/experiments/trial/rewards",
            Some(&token),
            Some(&json!({"decision_id": id, "reward": reward})),
        );
        if r.json()["status"] != "applied" {
            missing.insert(id);
        }
    }
    std::thread::sleep(Duration::from_secs_f64(DEADLINE + 0.1));
    let r = server.call(
        "POST",
        "/v1/experiments/trial/decisions",
        Some(&token),
        Some(&json!({})),
    );
    let extra = (r.status == 200).then(|| r.json()["decision_id"].as_u64().unwrap());
    if let Some(id) = extra {
        let r = server.call(
            "POST",
            "/v1/experiments/trial/rewards",
            Some(&token),
            Some(&json!({"decision_id": id, "reward": 1.0})),
        );
        assert_eq!(r.status, 200, "{}", r.body);
    }
    eprintln!(
        "simulated trial: {enrolled} patients, {} missing outcomes, worst enrolment wait {worst_wait:.3} s, {:.1} s",
        missing.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        worst_wait <= DEADLINE + 0.02 + 0.6,
        "enrolment waited {worst_wait:.3} s (deadline {DEADLINE} s)"
    );
    assert!(missing.len() >= 5, "the trial should have missing outcomes");

    // The export: every decision has its outcome; the abandoned ones are exactly the missing.
    let r = server.call(
        "GET",
        "/v1/experiments/trial/export?format=jsonl&limit=10000",
        Some(ADMIN),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let rows: Vec<Value> = r
        .body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len() as u64, enrolled + u64::from(extra.is_some()));
    let abandoned: std::collections::BTreeSet<u64> = rows
        .iter()
        .filter(|d| d["outcome"] == "abandoned")
        .map(|d| d["decision_id"].as_u64().unwrap())
        .collect();
    assert_eq!(abandoned, missing);
    assert!(
        rows.iter().all(|d| d["reward"].is_number()),
        "a decision without its outcome"
    );
    for d in rows.iter().filter(|d| d["outcome"] == "abandoned") {
        assert_eq!(d["reward"], json!(0.0));
    }
    // The audit log: one `abandon` entry per abandoned decision.
    let r = server.call(
        "GET",
        "/v1/audit?experiment=trial&limit=10000",
        Some(ADMIN),
        None,
    );
    let entries = r.json()["entries"].as_array().unwrap().clone();
    let logged: Vec<u64> = entries
        .iter()
        .filter(|e| e["event"] == "abandon")
        .map(|e| {
            let body: Value = match &e["body"] {
                Value::String(s) => serde_json::from_str(s).unwrap(),
                b => b.clone(),
            };
            body["decision_id"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(logged.len(), abandoned.len());
    assert_eq!(
        logged
            .iter()
            .copied()
            .collect::<std::collections::BTreeSet<_>>(),
        abandoned
    );
    // The ledger: its releases cover every decision of the completed commitments (the open
    // commitment's rounds are the rest).
    let status = server
        .call("GET", "/v1/experiments/trial", Some(&token), None)
        .json();
    assert_eq!(status["pending"], json!(0));
    let open_rounds = status["commitment"]["rounds_left"]
        .as_u64()
        .map_or(0, |left| {
            let last = entries
                .iter()
                .rev()
                .find(|e| e["event"] == "commitment")
                .unwrap();
            let body: Value = match &last["body"] {
                Value::String(s) => serde_json::from_str(s).unwrap(),
                b => b.clone(),
            };
            body["rounds"].as_u64().unwrap() - left
        });
    let ledger = server
        .call(
            "GET",
            "/v1/experiments/trial/ledger?limit=10000",
            Some(&token),
            None,
        )
        .json();
    let covered: i64 = ledger["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["status"] == "charged")
        .map(|r| r["rewards"].as_i64().unwrap())
        .sum();
    assert_eq!(covered as u64 + open_rounds, rows.len() as u64);
    assert_eq!(ledger["effective_budget"]["value"], json!(0.5));
    // The guarantee: the core session's for the same table (the documented claim of adac_ucb).
    let mut t: toml::Table = toml::from_str(table).unwrap();
    let kind = t.remove("kind").unwrap();
    let core = dpbandits::session::Session::new(
        kind.as_str().unwrap(),
        t,
        &dpbandits::session::Problem::Finite { arms: 3 },
        0,
    )
    .unwrap();
    let expected = serde_json::to_value(core.guarantee().unwrap()).unwrap();
    assert_eq!(status["guarantee"], expected);
    assert_eq!(created["guarantee"], expected);
    assert_eq!(expected["noise"], json!("deployment-grade"));
    server.terminate();
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
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
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
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
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
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The first copy's log lacks the entries the second pin covers: refused, naming it.
    let out = verify(&pins[0].0, pins[1].1, &pins[1].2);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("deleted from its end"), "{err}");
}

/// Send raw bytes on a new connection and read until the server closes it or `wait` passes:
/// (what was read, whether the server closed the connection, the time that took).
fn raw(addr: SocketAddr, bytes: &[u8], wait: Duration) -> (String, bool, Duration) {
    use std::io::{Read, Write};
    let t = Instant::now();
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    c.write_all(bytes).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let closed = loop {
        match c.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break true, // reset: closed
        }
        if t.elapsed() > wait {
            break false;
        }
    };
    (
        String::from_utf8_lossy(&out).into_owned(),
        closed,
        t.elapsed(),
    )
}

/// The status and the JSON body of a raw HTTP/1.1 answer (`Content-Length` bodies), checking
/// that the content type is JSON.
fn json_answer(text: &str) -> (u16, Value) {
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no answer: {text:?}"));
    let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "not JSON: {text}"
    );
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert!(v["error"].is_string(), "{text}");
    (status, v)
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
    let s = Server::start_with(dir.path(), port, &["--shutdown-deadline", "1"]);
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
    // The connection limit: 3 idle connections are held; the 4th is answered 503 (JSON) and
    // the refusal is logged.
    let held: Vec<_> = (0..3)
        .map(|_| std::net::TcpStream::connect(s.addr).unwrap())
        .collect();
    // The server accepts the held connections asynchronously: on a loaded machine the probe
    // may come first (and be served, closing at once): retry until the limit answers, bounded
    // well inside the header timeout (5 s here: on a loaded machine the held connections must
    // not time out before the probe).
    let deadline = Instant::now() + Duration::from_secs(4);
    let (text, closed) = loop {
        std::thread::sleep(Duration::from_millis(100));
        let (text, closed, _) = raw(
            s.addr,
            b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            TIMEOUT,
        );
        if text.starts_with("HTTP/1.1 503") || Instant::now() > deadline {
            break (text, closed);
        }
    };
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

/// Issue 30: the OpenAPI 3.1 document (`crates/dpbandits-serve/api/openapi.json`, served at
/// `/v1/openapi.json`) against the real router. (1) Its paths are exactly the router's
/// (`.route(...)` in api.rs) plus the document's own route; (2) on every documented path each of
/// GET, POST, PUT, DELETE, PATCH answers 405 exactly when the document does not list it; (3) a
/// scripted session provokes every documented status of every operation (but those listed in
/// `x-untested`, with where they are tested) and every status it observes is documented for
/// that operation. Loopback, bounded (about 150 requests).
#[test]
fn openapi_matches_the_router() {
    use std::collections::{BTreeMap, BTreeSet};
    let doc: Value =
        serde_json::from_str(include_str!("../../../dpbandits-serve/api/openapi.json")).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let api_rs = include_str!("../../../dpbandits-serve/src/api/mod.rs");
    let mut router_paths: BTreeSet<String> = api_rs
        .split(".route(")
        .skip(1)
        .filter_map(|r| {
            r.trim_start()
                .strip_prefix('"')?
                .split('"')
                .next()
                .map(String::from)
        })
        .collect();
    let paths = doc["paths"].as_object().unwrap();
    let doc_paths: BTreeSet<String> = paths.keys().cloned().collect();
    router_paths.insert("/v1/openapi.json".into());
    assert_eq!(
        doc_paths, router_paths,
        "documented paths vs the router's routes"
    );
    // operationId -> (method, path template, documented statuses)
    let mut ops: BTreeMap<String, (String, String, BTreeSet<u16>)> = BTreeMap::new();
    for (path, item) in paths {
        for (method, op) in item.as_object().unwrap() {
            let codes = op["responses"]
                .as_object()
                .unwrap()
                .keys()
                .map(|c| c.parse().unwrap())
                .collect();
            let id = op["operationId"].as_str().unwrap().to_string();
            ops.insert(id, (method.to_uppercase(), path.clone(), codes));
        }
    }
    let untested: BTreeSet<u16> = doc["x-untested"]
        .as_object()
        .unwrap()
        .keys()
        .map(|c| c.parse().unwrap())
        .collect();

    let dir = tempdir();
    let s = Server::start(dir.path(), free_port());
    // The document is served as is.
    let served = s.call("GET", "/v1/openapi.json", None, None);
    assert_eq!(served.status, 200);
    assert_eq!(served.json(), doc);

    // (2) Methods: 405 exactly where the document lists no operation.
    for (path, item) in paths {
        let concrete = path.replace("{name}", "nope").replace("{id}", "1");
        for m in ["GET", "POST", "PUT", "DELETE", "PATCH"] {
            let r = request(s.addr, m, &concrete, Some(ADMIN), Some(b"{}"), TIMEOUT).unwrap();
            let documented = item.get(m.to_lowercase()).is_some();
            assert_eq!(r.status == 405, !documented, "{m} {path}: {}", r.status);
            if r.status == 405 {
                assert!(
                    r.json()["error"].as_str().unwrap().contains("allowed"),
                    "{}",
                    r.body
                );
            }
        }
    }

    // (3) A scripted session; every answer is recorded under its operation.
    let seen: Mutex<BTreeMap<String, BTreeSet<u16>>> = Mutex::new(BTreeMap::new());
    let call = |op: &str,
                name: &str,
                id: &str,
                query: &str,
                token: Option<&str>,
                body: Option<&[u8]>|
     -> Reply {
        let (method, template, _) = &ops[op];
        let path = format!(
            "{}{query}",
            template.replace("{name}", name).replace("{id}", id)
        );
        let r = request(s.addr, method, &path, token, body, TIMEOUT).unwrap();
        seen.lock()
            .unwrap()
            .entry(op.into())
            .or_default()
            .insert(r.status);
        r
    };
    let oversize = |op: &str, name: &str, token: &str| {
        let (method, template, _) = &ops[op];
        let path = template.replace("{name}", name).replace("{id}", "1");
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: 3000000\r\n\r\n"
        );
        let (text, _, _) = raw(s.addr, head.as_bytes(), Duration::from_secs(5));
        let (status, _) = json_answer(&text);
        seen.lock()
            .unwrap()
            .entry(op.into())
            .or_default()
            .insert(status);
    };
    let a = Some(ADMIN);
    let j = |v: Value| v.to_string().into_bytes();
    call("health", "", "", "", None, None);
    call("openapi", "", "", "", None, None);
    call("metrics", "", "", "", a, None);
    call("metrics", "", "", "", None, None);
    // create
    let body = j(
        json!({"name": "ep", "arms": 3, "policy": {"kind": "adac_ucb", "rho": 0.5},
                        "dropout_reward": 0.0, "request_id": "c-ep"}),
    );
    let r = call("create", "", "", "", a, Some(&body));
    assert_eq!(r.status, 201, "{}", r.body);
    let tok = r.json()["client_token"].as_str().unwrap().to_string();
    let r = call("create", "", "", "", a, Some(&body));
    assert_eq!(r.status, 200, "{}", r.body);
    let tok = r.json()["client_token"].as_str().map_or(tok, String::from);
    let step = j(json!({"name": "st", "arms": 2, "policy": {"kind": "dp_ts", "epsilon": 1.0}}));
    let r = call("create", "", "", "", a, Some(&step));
    let stok = r.json()["client_token"].as_str().unwrap().to_string();
    call("create", "", "", "", a, Some(&step)); // 409: exists
    call("create", "", "", "", a, Some(b"[1]")); // 400
    call("create", "", "", "", None, Some(&step)); // 401
    call(
        "create",
        "",
        "",
        "",
        a,
        Some(&j(json!({"name": "x", "bogus": 1}))),
    ); // 422
    oversize("create", "", ADMIN); // 413
    // list
    call("list", "", "", "", a, None);
    call("list", "", "", "", Some(&tok), None);
    // decisions and rewards
    let c = Some(tok.as_str());
    let r = call("decide", "ep", "", "", c, Some(b"{}"));
    let id = r.json()["decision_id"].as_u64().unwrap();
    call("decide", "ep", "", "", c, Some(b"x")); // 400
    call("decide", "ep", "", "", Some(&stok), Some(b"{}")); // 401: another experiment's token
    call("decide", "nope", "", "", a, Some(b"{}")); // 404
    call("decide", "ep", "", "", c, Some(&j(json!({"bogus": 1})))); // 422
    oversize("decide", "ep", &tok);
    let sc = Some(stok.as_str());
    let r = call("decide", "st", "", "", sc, Some(b"{}"));
    let sid = r.json()["decision_id"].as_u64().unwrap();
    call("decide", "st", "", "", sc, Some(b"{}")); // 409: pending
    call(
        "reward",
        "ep",
        "",
        "",
        c,
        Some(&j(json!({"decision_id": id, "reward": 1.0}))),
    );
    call("reward", "ep", "", "", c, Some(b"{")); // 400
    call("reward", "ep", "", "", None, Some(b"{}")); // 401
    call(
        "reward",
        "ep",
        "",
        "",
        c,
        Some(&j(json!({"decision_id": 999, "reward": 1.0}))),
    ); // 404
    call(
        "reward",
        "ep",
        "",
        "",
        c,
        Some(&j(json!({"decision_id": id}))),
    ); // 422
    oversize("reward", "ep", &tok);
    // abandon
    let r = call("decide", "ep", "", "", c, Some(b"{}"));
    let id2 = r.json()["decision_id"].as_u64().unwrap().to_string();
    call("abandon", "ep", &id2, "", c, Some(b"{}")); // 200
    call("abandon", "ep", &id2, "", c, Some(b"x")); // 400
    call("abandon", "ep", "abc", "", c, Some(b"{}")); // 422: the id does not parse
    call("abandon", "ep", &id2, "", None, Some(b"{}")); // 401
    call("abandon", "ep", "999", "", c, Some(b"{}")); // 404
    call("abandon", "st", &sid.to_string(), "", sc, Some(b"{}")); // 422: no dropout_reward
    oversize("abandon", "ep", &tok);
    // status, ledger, export, audit
    call("status", "ep", "", "", c, None);
    call("status", "ep", "", "", None, None);
    call("status", "nope", "", "", a, None);
    call("ledger", "ep", "", "?limit=5", c, None);
    call("ledger", "ep", "", "", None, None);
    call("ledger", "nope", "", "", a, None);
    call("ledger", "ep", "", "?limit=0", c, None);
    call("export", "ep", "", "?format=csv", a, None);
    call("export", "ep", "", "", c, None); // 401: admin only
    call("export", "nope", "", "", a, None);
    call("export", "ep", "", "?format=xml", a, None);
    call("audit", "", "", "?limit=3", a, None);
    call("audit", "", "", "?after=abc", a, None); // 400
    call("audit", "", "", "", c, None);
    call("audit", "", "", "?limit=0", a, None); // 422
    // token rotation
    call("rotate_token", "st", "", "", a, Some(b"x")); // 400
    call("rotate_token", "st", "", "", sc, Some(b"{}")); // 401
    call("rotate_token", "nope", "", "", a, Some(b"{}")); // 404
    call("rotate_token", "st", "", "", a, Some(&j(json!({"a": 1})))); // 422
    oversize("rotate_token", "st", ADMIN);
    let r = call("rotate_token", "st", "", "", a, Some(b"{}"));
    assert_eq!(r.status, 200, "{}", r.body);
    // bulk abandon, the interim look, the monitor
    call(
        "abandonPending",
        "ep",
        "",
        "",
        c,
        Some(&j(json!({"older_than": 3600}))),
    );
    call("abandonPending", "ep", "", "", c, Some(b"[")); // 400
    call("abandonPending", "ep", "", "", None, Some(b"{}")); // 401
    call(
        "abandonPending",
        "nope",
        "",
        "",
        a,
        Some(&j(json!({"older_than": 0}))),
    ); // 404
    call(
        "abandonPending",
        "ep",
        "",
        "",
        c,
        Some(&j(json!({"older_than": -1}))),
    ); // 422
    oversize("abandonPending", "ep", &tok);
    for op in ["interim", "monitor"] {
        call(op, "ep", "", "", a, None);
        call(op, "ep", "", "", c, None); // 401: admin only
        call(op, "nope", "", "", a, None); // 404
        call(op, "ep", "", "?bogus=1", a, None); // 422
    }
    call("monitor", "ep", "", "?format=json", a, None);
    // close and report
    call("report", "ep", "", "", c, None); // 404 before closing
    let r = call("decide", "ep", "", "", c, Some(b"{}"));
    let pend = r.json()["decision_id"].as_u64().unwrap();
    call("close", "ep", "", "", a, Some(b"{}")); // 422: pending
    call(
        "reward",
        "ep",
        "",
        "",
        c,
        Some(&j(json!({"decision_id": pend, "reward": 0.5}))),
    );
    call("close", "ep", "", "", a, Some(b"[")); // 400
    call("close", "ep", "", "", c, Some(b"{}")); // 401
    call("close", "nope", "", "", a, Some(b"{}")); // 404
    oversize("close", "ep", ADMIN);
    let r = call("close", "ep", "", "", a, Some(&j(json!({"level": 0.9}))));
    assert_eq!(r.status, 200, "{}", r.body);
    call("report", "ep", "", "?format=html", c, None);
    call("report", "ep", "", "", None, None);
    call("report", "nope", "", "", a, None);
    call("report", "ep", "", "?format=pdf", c, None);
    call("decide", "ep", "", "", c, Some(b"{}")); // 409: closed
    call(
        "reward",
        "ep",
        "",
        "",
        c,
        Some(&j(json!({"decision_id": pend, "reward": 0.5}))),
    ); // 409
    call("abandon", "ep", &pend.to_string(), "", c, Some(b"{}")); // 409
    call(
        "abandonPending",
        "ep",
        "",
        "",
        c,
        Some(&j(json!({"older_than": 0}))),
    ); // 409: closed
    s.terminate();

    let seen = seen.into_inner().unwrap();
    for (op, (method, path, documented)) in &ops {
        let got = seen.get(op).cloned().unwrap_or_default();
        let undocumented: Vec<_> = got.difference(documented).collect();
        assert!(
            undocumented.is_empty(),
            "{method} {path} ({op}) answered {undocumented:?}, not in the document"
        );
        let missing: Vec<_> = documented
            .iter()
            .filter(|c| !got.contains(c) && !untested.contains(c))
            .collect();
        assert!(
            missing.is_empty(),
            "{method} {path} ({op}): documented {missing:?} never provoked"
        );
    }
}

/// A decision at a commitment boundary waits (at most `api::BOUNDARY_WAIT`, 100 ms) for a
/// reward that frees it instead of answering 409 at once: with the reward sent 10 ms after the
/// waiting request, it is answered 200 with the next decision; with no reward it is answered 409
/// after the wait, with the boundary's body. (False-failure risk: the first part fails only if
/// the reward takes more than 90 ms from the client to its commit on a loaded machine.)
#[test]
fn a_decision_at_the_boundary_waits_for_the_freeing_reward() {
    let dir = tempdir();
    let s = Server::start(dir.path(), free_port());
    let token = create(&s, "steps", "kind = \"dp_ts\"\nepsilon = 1.0", 2);
    let path = "/v1/experiments/steps/decisions";
    let decide = |s: &Server| s.call("POST", path, Some(&token), Some(&json!({})));
    let d1 = decide(&s);
    assert_eq!(d1.status, 200, "{}", d1.body);
    let id1 = r_id(&d1);
    // Nothing frees the boundary: 409 after the wait.
    let t = Instant::now();
    let r = decide(&s);
    let waited = t.elapsed();
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.json()["pending"], 1, "{}", r.body);
    assert!(
        waited >= Duration::from_millis(90) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    // The reward comes while a decision waits: that decision is served.
    let (addr, tok) = (s.addr, token.clone());
    let waiting = std::thread::spawn(move || {
        let t = Instant::now();
        let r = request(
            addr,
            "POST",
            "/v1/experiments/steps/decisions",
            Some(&tok),
            Some(b"{}"),
            TIMEOUT,
        )
        .unwrap();
        (r, t.elapsed())
    });
    std::thread::sleep(Duration::from_millis(10));
    let rw = s.call(
        "POST",
        "/v1/experiments/steps/rewards",
        Some(&token),
        Some(&json!({"decision_id": id1, "reward": 1.0})),
    );
    assert_eq!(rw.status, 200, "{}", rw.body);
    let (r, took) = waiting.join().unwrap();
    assert_eq!(r.status, 200, "after {took:?}: {}", r.body);
    assert_eq!(r_id(&r), id1 + 1);
}
