//! `dpbandits serve` on PostgreSQL with more than one node (issue 42): what needs a database
//! that several processes share. Runs in the tests' PostgreSQL pass (`DPBANDITS_TEST_PG`,
//! scripts/test); without it each test says it was skipped and passes (the SQLite pass has no
//! shared database to test).

use super::bin;
use super::serve::{free_port, verify_cmd};
use super::serve_ops::events;
use dpbandits_serve::client::request;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

const ADMIN: &str = "test-admin-token-0123456789";
const TIMEOUT: Duration = Duration::from_secs(10);

/// One `serve` process on the shared database.
struct Node {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl Node {
    fn start(dir: &Path, db: &Path, name: &str, lease: &str) -> Node {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        Node::start_at(dir, db, name, lease, addr)
    }

    fn start_at(dir: &Path, db: &Path, name: &str, lease: &str, addr: SocketAddr) -> Node {
        let token_file = dir.join("admin-token");
        std::fs::write(&token_file, format!("{ADMIN}\n")).unwrap();
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let bound = events(&log, "accepting").len();
        let child = bin()
            .args(["serve", "--db"])
            .arg(db)
            .args(["--listen", &addr.to_string(), "--admin-token-file"])
            .arg(&token_file)
            .arg("--audit-key-file")
            .arg(dpbandits_serve::testdb::key_path(db))
            .args(["--lease-seconds", lease])
            // The tests' throwaway cluster has no standby.
            .arg("--allow-async-replication")
            .env_remove("DPBANDITS_ADMIN_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(out)
            .spawn()
            .unwrap();
        let mut n = Node { child, addr, log };
        // Listening (as the writer or as a standby) before the test goes on.
        let t = Instant::now();
        while events(&n.log, "accepting").len() == bound {
            if let Ok(Some(st)) = n.child.try_wait() {
                panic!("{st}: {}", std::fs::read_to_string(&n.log).unwrap());
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "not listening within 30 s"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        n
    }

    /// Wait (at most `within`) until this node has claimed the database and listens as its
    /// writer; returns how long that took.
    fn wait_owner(&mut self, within: Duration) -> Duration {
        let t = Instant::now();
        loop {
            if !events(&self.log, "listening").is_empty() {
                return t.elapsed();
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("{st}: {}", std::fs::read_to_string(&self.log).unwrap());
            }
            assert!(
                t.elapsed() < within,
                "not the writer within {within:?}: {}",
                std::fs::read_to_string(&self.log).unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(&self, sig: &str) {
        let st = std::process::Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
    }

    fn call(&self, method: &str, path: &str, token: &str, body: Option<&Value>) -> (u16, Value) {
        let b = body.map(|b| b.to_string().into_bytes());
        let r = request(self.addr, method, path, Some(token), b.as_deref(), TIMEOUT).unwrap();
        (
            r.status,
            serde_json::from_str(&r.body).unwrap_or(Value::Null),
        )
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.signal_quiet("-CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Node {
    fn signal_quiet(&self, sig: &str) -> std::io::Result<std::process::ExitStatus> {
        std::process::Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .stderr(Stdio::null())
            .status()
    }
}

/// Whether `test` is skipped, saying so: these tests need a shared PostgreSQL database
/// (`DPBANDITS_TEST_PG`: the PostgreSQL pass of scripts/test).
fn skipped(test: &str) -> bool {
    let skip = !dpbandits_serve::testdb::on_postgres();
    if skip {
        eprintln!(
            "{test}: skipped (no DPBANDITS_TEST_PG: the PostgreSQL pass of scripts/test runs it)"
        );
    }
    skip
}

/// Create experiment `e` (AdaC-UCB at rho = 0.5, `arms` arms) through `node`; its client
/// token.
fn create_e(node: &Node, arms: usize) -> String {
    let (st, c) = node.call(
        "POST",
        "/v1/experiments",
        ADMIN,
        Some(&json!({"name": "e", "arms": arms, "policy": {"kind": "adac_ucb", "rho": 0.5}})),
    );
    assert_eq!(st, 201, "{c}");
    c["client_token"].as_str().unwrap().to_string()
}

/// A decision and its reward through `node`; returns the decision id.
fn pair(node: &Node, token: &str, reward: f64) -> u64 {
    let (st, d) = node.call(
        "POST",
        "/v1/experiments/e/decisions",
        token,
        Some(&json!({})),
    );
    let log = || std::fs::read_to_string(&node.log).unwrap_or_default();
    assert_eq!(st, 200, "{d}; the node's log:\n{}", log());
    let id = d["decision_id"].as_u64().unwrap();
    let (st, r) = node.call(
        "POST",
        "/v1/experiments/e/rewards",
        token,
        Some(&json!({"decision_id": id, "reward": reward})),
    );
    assert_eq!(st, 200, "{r}; the node's log:\n{}", log());
    id
}

/// Issue 42, Done-when 3: a writer paused (SIGSTOP) while it owns the database, a standby
/// taking it over when the lease ends, then the paused one resumed with a request of its own
/// waiting: that request and every later write on it are refused, and nothing it did after
/// losing the database is visible (the decisions and the audit log are the new owner's only;
/// the chain verifies). Bounded: about 6 s with a 2 s lease.
#[test]
fn a_paused_writer_is_fenced_after_a_takeover() {
    if skipped("a_paused_writer_is_fenced_after_a_takeover") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dpbandits_serve::testdb::db(dir.path(), "unused");
    let mut a = Node::start(dir.path(), &db, "a", "2");
    a.wait_owner(Duration::from_secs(30));
    let token = create_e(&a, 3);
    for _ in 0..5 {
        pair(&a, &token, 1.0);
    }
    let mut b = Node::start(dir.path(), &db, "b", "2");
    // B waits as a standby while A renews.
    std::thread::sleep(Duration::from_millis(2500));
    assert!(
        events(&b.log, "listening").is_empty(),
        "B took a live writer's database"
    );
    assert_eq!(events(&b.log, "standby").len(), 1);

    a.signal("-STOP");
    let paused = Instant::now();
    // A request to the paused A: the kernel accepts it, A reads it when resumed.
    let (addr, tok) = (a.addr, token.clone());
    let waiting = std::thread::spawn(move || {
        request(
            addr,
            "POST",
            "/v1/experiments/e/decisions",
            Some(&tok),
            Some(b"{}"),
            Duration::from_secs(30),
        )
    });
    let took = b.wait_owner(Duration::from_secs(20));
    eprintln!(
        "fenced-writer test: B is the writer {:.2} s after A was paused (lease 2 s)",
        paused.elapsed().as_secs_f64()
    );
    assert!(took < Duration::from_secs(10));
    let mut b_ids = Vec::new();
    for _ in 0..5 {
        b_ids.push(pair(&b, &token, 0.0));
    }
    assert_eq!(b_ids, (6..=10).collect::<Vec<u64>>());

    a.signal("-CONT");
    let r = waiting.join().unwrap().expect("A answers once resumed");
    assert_ne!(r.status, 200, "{}", r.body);
    // Refused: 503 once A's writer has stopped; 500 for a request queued before it stopped (the
    // waiting request's batch found the database taken; what was queued with it is dropped).
    for _ in 0..3 {
        let (st, v) = a.call(
            "POST",
            "/v1/experiments/e/decisions",
            &token,
            Some(&json!({})),
        );
        assert!(st == 503 || st == 500, "{st} {v}");
        let (st, v) = a.call(
            "POST",
            "/v1/experiments/e/rewards",
            &token,
            Some(&json!({"decision_id": 1, "reward": 1.0})),
        );
        assert!(st == 503 || st == 500, "{st} {v}");
    }
    let (st, v) = a.call(
        "POST",
        "/v1/experiments/e/decisions",
        &token,
        Some(&json!({})),
    );
    assert_eq!(st, 503, "A's writer has stopped: {v}");
    assert_eq!(events(&a.log, "fenced").len(), 1, "A logs its fencing once");
    // B still serves; the database holds A's five pairs and B's, nothing A did after.
    pair(&b, &token, 1.0);
    let ins = dpbandits_serve::store::inspect(&db, "e").unwrap();
    assert_eq!((ins.decisions, ins.rewarded, ins.issued), (11, 11, 11));
    let rewards: Vec<f64> = ins.rewards.iter().map(|r| r.2).collect();
    assert_eq!(
        rewards,
        [[1.0; 5].as_slice(), &[0.0; 5], &[1.0]].concat(),
        "A's rewards, then B's"
    );
    let out = verify_cmd(&db).output().unwrap();
    super::succeeded(&out);
    // A standby stops on SIGTERM while it waits (it would otherwise wait for B's lease forever).
    let mut c = Node::start(dir.path(), &db, "c", "2");
    std::thread::sleep(Duration::from_millis(300));
    c.signal("-TERM");
    let t = Instant::now();
    let st = loop {
        if let Some(st) = c.child.try_wait().unwrap() {
            break st;
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "a standby ignored SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(st.success(), "{st}");
    assert!(events(&c.log, "listening").is_empty());
    assert_eq!(events(&c.log, "stopped").len(), 1);
}

/// What the clients of the multi-node test were told.
#[derive(Default)]
struct Books {
    /// decision id -> the reward acknowledged (applied, or a duplicate of it).
    acked: std::collections::BTreeMap<u64, f64>,
    /// Answers that were not 200, by status (0: no answer).
    refused: std::collections::BTreeMap<u16, u64>,
    /// The longest time any client went without a 200.
    longest_gap: Duration,
    /// Pairs completed.
    pairs: u64,
}

/// One client: pairs (a decision with a `request_id`, then its reward) until `stop`, each
/// request sent to its node over a keep-alive connection and, after a refusal or no answer,
/// to the next node (the same `request_id` or `decision_id`: a retry finds the stored answer).
fn client(
    i: usize,
    addrs: Vec<SocketAddr>,
    token: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    books: std::sync::Arc<std::sync::Mutex<Books>>,
) {
    use std::sync::atomic::Ordering;
    let mut conns: Vec<_> = addrs
        .iter()
        .map(|a| dpbandits_serve::client::Conn::new(*a, Duration::from_secs(5)))
        .collect();
    let mut at = i % addrs.len();
    let mut last_ok = Instant::now();
    let mut k = 0u64;
    // Send until a 200 (rotating nodes; bounded: 60 s per request).
    let mut send =
        |path: &str, body: Value, conns: &mut Vec<dpbandits_serve::client::Conn>| -> Value {
            let t = Instant::now();
            loop {
                let r = conns[at].request(
                    "POST",
                    path,
                    Some(&token),
                    Some(body.to_string().as_bytes()),
                );
                match r {
                    Ok(r) if r.status == 200 => {
                        let mut b = books.lock().unwrap();
                        b.longest_gap = b.longest_gap.max(last_ok.elapsed());
                        last_ok = Instant::now();
                        return serde_json::from_str(&r.body).unwrap();
                    }
                    Ok(r) => {
                        // 503: a node without a writer (a standby whose writer is gone, a
                        // fenced or starting node); 500: a batch that failed with its
                        // connection; 409: the commitment is fully issued and its rewards wait
                        // (another client's reward is on its way through a failover).
                        assert!(
                            matches!(r.status, 409 | 500 | 503),
                            "{} {}",
                            r.status,
                            r.body
                        );
                        *books.lock().unwrap().refused.entry(r.status).or_default() += 1;
                    }
                    Err(_) => *books.lock().unwrap().refused.entry(0).or_default() += 1,
                }
                assert!(
                    t.elapsed() < Duration::from_secs(60),
                    "no node answered {path} within 60 s"
                );
                at = (at + 1) % conns.len();
                std::thread::sleep(Duration::from_millis(20));
            }
        };
    while !stop.load(Ordering::Relaxed) {
        k += 1;
        let d = send(
            "/v1/experiments/e/decisions",
            json!({"request_id": format!("c{i}-{k}")}),
            &mut conns,
        );
        let id = d["decision_id"].as_u64().unwrap();
        let reward = ((id * 7 + i as u64) % 10) as f64 / 10.0;
        let r = send(
            "/v1/experiments/e/rewards",
            json!({"decision_id": id, "reward": reward}),
            &mut conns,
        );
        assert!(
            r["status"] == "applied" || r["status"] == "duplicate",
            "{r}"
        );
        assert!(r.get("differs").is_none(), "{r}");
        let mut b = books.lock().unwrap();
        assert!(
            b.acked.insert(id, reward).is_none(),
            "decision {id} given to two pairs"
        );
        b.pairs += 1;
    }
}

/// Issue 42, Done-when 2: three `serve` nodes on one PostgreSQL database, 16 keep-alive
/// clients spread over them (a standby forwards to the writer's node), each node SIGKILLed and
/// restarted twice at fixed-seed moments under load, and PostgreSQL itself restarted once
/// (`DPBANDITS_TEST_PG_DIR`, `DPBANDITS_PG_CLUSTER`: the PostgreSQL pass of scripts/test, which
/// runs this test alone, after the others, whose connections the restart would cut; without them
/// the database restart is skipped and says so). Afterwards: every acknowledged reward is
/// stored once with its value and nothing else is (no reward lost or applied twice), the
/// counters agree, every release is drawn once and charged once (a release whose node died
/// after its intent is redone by the next writer with the intent's stored key: no `lost` row,
/// no open intent, no key left), the budget is the sum of the charges, and the chain verifies. Reports the longest time any client went without an answer. Bounded: about 25 s.
#[test]
fn three_nodes_survive_sigkills_and_a_database_restart() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    if skipped("three_nodes_survive_sigkills_and_a_database_restart") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dpbandits_serve::testdb::db(dir.path(), "unused");
    let lease = "1";
    let mut nodes: Vec<Node> = (0..3)
        .map(|i| Node::start(dir.path(), &db, &format!("n{i}"), lease))
        .collect();
    // Whoever claims first is the writer; the others forward.
    let t = Instant::now();
    while nodes.iter().all(|n| events(&n.log, "listening").is_empty()) {
        assert!(t.elapsed() < Duration::from_secs(30), "no writer");
        std::thread::sleep(Duration::from_millis(20));
    }
    let token = create_e(&nodes[1], 4);
    let addrs: Vec<SocketAddr> = nodes.iter().map(|n| n.addr).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let books = Arc::new(std::sync::Mutex::new(Books::default()));
    let clients: Vec<_> = (0..16)
        .map(|i| {
            let (a, tk, s, b) = (addrs.clone(), token.clone(), stop.clone(), books.clone());
            std::thread::spawn(move || client(i, a, tk, s, b))
        })
        .collect();
    let pg_restart = std::env::var("DPBANDITS_TEST_PG_DIR")
        .ok()
        .zip(std::env::var("DPBANDITS_PG_CLUSTER").ok());
    let mut seed = 42u64;
    let mut kills = 0;
    for round in 0..6 {
        seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let wait = 800 + dpbandits::rng::splitmix64(seed) % 1200;
        std::thread::sleep(Duration::from_millis(wait));
        let k = round % 3;
        let _ = nodes[k].child.kill();
        let _ = nodes[k].child.wait();
        kills += 1;
        // Restarted on the same port: the clients' connections find it again.
        let addr = nodes[k].addr;
        nodes[k] = Node::start_at(dir.path(), &db, &format!("n{k}"), lease, addr);
        if round == 3 {
            match &pg_restart {
                Some((pgdir, script)) => {
                    let st = std::process::Command::new(script)
                        .args(["restart", pgdir])
                        .status()
                        .unwrap();
                    assert!(st.success(), "restarting PostgreSQL");
                    eprintln!("multi-node test: PostgreSQL restarted under load");
                }
                None => eprintln!(
                    "multi-node test: the PostgreSQL restart is SKIPPED (no DPBANDITS_TEST_PG_DIR)"
                ),
            }
        }
    }
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().expect("a client failed");
    }
    let books = books.lock().unwrap();
    // Every node serves at the end: the writer answers, the standbys forward.
    for n in &nodes {
        let r = request(
            n.addr,
            "GET",
            "/v1/experiments/e",
            Some(&token),
            None,
            TIMEOUT,
        );
        let log = || std::fs::read_to_string(&n.log).unwrap_or_default();
        let r = r.unwrap_or_else(|e| panic!("{}: {e}; its log:\n{}", n.addr, log()));
        assert_eq!(r.status, 200, "{}; its log:\n{}", r.body, log());
    }
    let ins = dpbandits_serve::store::inspect(&db, "e").unwrap();
    let stored: std::collections::BTreeMap<u64, f64> =
        ins.rewards.iter().map(|r| (r.0, r.2)).collect();
    assert_eq!(
        stored, books.acked,
        "the stored rewards are the acknowledged ones"
    );
    assert_eq!(ins.observed, ins.rewarded);
    assert_eq!(ins.issued, ins.decisions);
    assert_eq!(
        (ins.ledger_open, ins.ledger_lost, ins.ledger_charged),
        (0, 0, ins.releases),
        "every release drawn once and charged once"
    );
    assert!((ins.ledger_total - 0.5 * ins.releases as f64).abs() < 1e-9);
    let out = verify_cmd(&db).output().unwrap();
    super::succeeded(&out);
    // The writer moved: the first claim and at least two takeovers (the writer's node is among
    // the killed ones at least twice: each node is killed twice).
    let claims: usize = nodes.iter().map(|n| events(&n.log, "claimed").len()).sum();
    assert!(claims >= 3, "{claims} claims");
    eprintln!(
        "multi-node test: 3 nodes, 16 clients, {kills} SIGKILLs, {claims} claims: {} pairs, {} decisions, {} releases ({} redone with their stored key), refused {:?}, longest gap {:.2} s",
        books.pairs,
        ins.decisions,
        ins.releases,
        nodes
            .iter()
            .map(|n| events(&n.log, "release-redo").len())
            .sum::<usize>(),
        books.refused,
        books.longest_gap.as_secs_f64()
    );
    assert!(books.pairs > 100, "too little load: {}", books.pairs);
}

/// A PostgreSQL server whose commits no standby confirms (`synchronous_standby_names` empty, as
/// the tests' throwaway cluster) is refused without `--allow-async-replication`, naming the
/// setting and the risk: after a failover, committed ledger charges could be gone.
#[test]
fn an_asynchronously_replicated_database_is_refused() {
    if skipped("an_asynchronously_replicated_database_is_refused") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dpbandits_serve::testdb::db(dir.path(), "unused");
    let token_file = dir.path().join("admin-token");
    std::fs::write(&token_file, format!("{ADMIN}\n")).unwrap();
    let out = bin()
        .args(["serve", "--db"])
        .arg(&db)
        .args(["--listen", "127.0.0.1:0", "--admin-token-file"])
        .arg(&token_file)
        .arg("--audit-key-file")
        .arg(dpbandits_serve::testdb::key_path(&db))
        .env_remove("DPBANDITS_ADMIN_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("synchronous_standby_names is empty")
            && err.contains("--allow-async-replication"),
        "{err}"
    );
}

/// Issue 42's backup on PostgreSQL, the procedure of docs/service.md ("Backup on PostgreSQL"):
/// `pg_dump --format=custom` of a running writer's database **under load** (4 clients pairing
/// throughout), `pg_restore` into a new database, and `audit-log verify` of the restored copy
/// with the key: it verifies (one snapshot: its tables agree with its log), and its head, at
/// its entry count, is in the live database's later log (`--expect-head`, `--expect-entries`
/// on the source): the copy is a prefix of what the service went on to write. Bounded: a few
/// seconds.
#[test]
fn a_pg_dump_under_load_restores_and_verifies() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    if skipped("a_pg_dump_under_load_restores_and_verifies") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dpbandits_serve::testdb::db(dir.path(), "unused");
    let mut a = Node::start(dir.path(), &db, "a", "5");
    a.wait_owner(Duration::from_secs(30));
    let token = create_e(&a, 3);
    let stop = Arc::new(AtomicBool::new(false));
    let pairs = Arc::new(AtomicU64::new(0));
    let addr = a.addr;
    let clients: Vec<_> = (0..4)
        .map(|k| {
            let (stop, pairs, token) = (stop.clone(), pairs.clone(), token.clone());
            std::thread::spawn(move || {
                let mut c = dpbandits_serve::client::Conn::new(addr, TIMEOUT);
                while !stop.load(Ordering::Relaxed) {
                    let d = c
                        .request(
                            "POST",
                            "/v1/experiments/e/decisions",
                            Some(&token),
                            Some(b"{}"),
                        )
                        .unwrap();
                    if d.status == 409 {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    }
                    assert_eq!(d.status, 200, "{}", d.body);
                    let id = d.json()["decision_id"].as_u64().unwrap();
                    let body = json!({"decision_id": id, "reward": (id + k) % 2}).to_string();
                    let r = c
                        .request(
                            "POST",
                            "/v1/experiments/e/rewards",
                            Some(&token),
                            Some(body.as_bytes()),
                        )
                        .unwrap();
                    assert_eq!(r.status, 200, "{}", r.body);
                    pairs.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    while pairs.load(Ordering::Relaxed) < 200 {
        std::thread::sleep(Duration::from_millis(10));
    }
    let dump = dir.path().join("backup.dump");
    let url = db.to_str().unwrap();
    let out = std::process::Command::new("pg_dump")
        .args(["--format=custom", "--file"])
        .arg(&dump)
        .arg(url)
        .output()
        .expect("pg_dump (Debian's postgresql-client, which scripts/pg-cluster installs)");
    super::succeeded(&out);
    let during = pairs.load(Ordering::Relaxed);
    // More load after the dump, so that the live log runs past the copy.
    while pairs.load(Ordering::Relaxed) < during + 100 {
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let restored = dpbandits_serve::testdb::db(dir.path(), "unused");
    let out = std::process::Command::new("pg_restore")
        .args(["--no-owner", "--exit-on-error", "--dbname"])
        .arg(restored.to_str().unwrap())
        .arg(&dump)
        .output()
        .unwrap();
    super::succeeded(&out);
    // The key file goes with the backup, apart from it.
    std::fs::copy(
        dpbandits_serve::testdb::key_path(&db),
        dpbandits_serve::testdb::key_path(&restored),
    )
    .unwrap();
    let out = verify_cmd(&restored).arg("--json").output().unwrap();
    assert!(
        out.status.success(),
        "the restored copy: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let copy: Value = serde_json::from_slice(&out.stdout).unwrap();
    let (entries, head) = (
        copy["entries"].as_u64().unwrap(),
        copy["head"].as_str().unwrap().to_string(),
    );
    let live = verify_cmd(&db)
        .args(["--json", "--expect-head", &head, "--expect-entries"])
        .arg(entries.to_string())
        .output()
        .unwrap();
    assert!(
        live.status.success(),
        "the live log does not contain the copy's head: {}",
        String::from_utf8_lossy(&live.stderr)
    );
    let live: Value = serde_json::from_slice(&live.stdout).unwrap();
    assert!(
        live["entries"].as_u64().unwrap() > entries,
        "the live log went on past the copy: {live} {copy}"
    );
    a.signal("-TERM");
    let _ = a.child.wait();
}

/// The writer's `dpbandits_connections_accepted_total` (`/metrics`).
fn accepted(node: &Node) -> u64 {
    let r = request(node.addr, "GET", "/metrics", Some(ADMIN), None, TIMEOUT).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
        .lines()
        .find_map(|l| {
            l.strip_prefix("dpbandits_connections_accepted_total ")?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no dpbandits_connections_accepted_total in {}", r.body))
}

/// A standby forwards over pooled keep-alive connections: 60 requests sent one after another
/// to the standby (each on a new client connection) reach the writer over at most a few
/// connections, not 60 (the pool keeps a connection once its answer is read), and every answer
/// is the writer's. Then the writer's node is stopped and started again at the same address:
/// the pooled connections it closed are replaced (a request the closed connection gave back
/// unsent is sent again), and the standby's next answers are 200 again.
#[test]
fn a_standby_forwards_over_pooled_connections() {
    if skipped("a_standby_forwards_over_pooled_connections") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dpbandits_serve::testdb::db(dir.path(), "unused");
    let mut a = Node::start(dir.path(), &db, "a", "2");
    a.wait_owner(Duration::from_secs(30));
    let b = Node::start(dir.path(), &db, "b", "2");
    let t = Instant::now();
    while events(&b.log, "standby").is_empty() {
        assert!(t.elapsed() < Duration::from_secs(20), "B is no standby");
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = accepted(&a);
    for _ in 0..60 {
        let (st, v) = b.call("GET", "/v1/experiments", ADMIN, None);
        assert_eq!(st, 200, "{v}");
    }
    // The 60 forwarded requests, and this metrics request of our own.
    let opened = accepted(&a) - before;
    assert!(
        opened <= 4,
        "{opened} connections accepted by the writer for 60 forwarded requests"
    );
    // The writer's node restarts at the same address (a clean stop releases the lease, and it
    // claims again before the standby, whose lease check waits).
    let addr = a.addr;
    a.signal("-TERM");
    let _ = a.child.wait();
    let a2 = Node::start_at(dir.path(), &db, "a2", "2", addr);
    let t = Instant::now();
    let mut answered = 0;
    while answered < 10 {
        let (st, v) = b.call("GET", "/v1/experiments", ADMIN, None);
        if st == 200 {
            answered += 1;
        } else {
            assert!(st == 503, "{st} {v}");
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "the standby still answers {st} {v}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    drop((a2, b));
}
