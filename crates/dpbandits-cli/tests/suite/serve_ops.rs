//! `dpbandits serve` operations (issue 41, "Operations without outages"), against the real
//! binary on loopback, bounded: SIGHUP reloads the admin token and reopens the log file; a hard
//! link cannot start a second writer; a database other users can read is warned about; every
//! connection over the limit is answered 503 (none reset); the port answers while the start-up
//! check runs.

use super::bin;
use dpbandits_serve::client::{Reply, request};
use serde_json::{Value, json};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

pub(super) const ADMIN: &str = "ops-admin-token-0123456789";
pub(super) const TIMEOUT: Duration = Duration::from_secs(10);

/// A `serve` process logging to `log` (its `--log-file`), killed when dropped.
pub(super) struct Proc {
    child: Child,
    pub(super) addr: SocketAddr,
    log: PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    /// Start `serve` on `db` and wait (at most 30 s) until `/v1/health` answers 200.
    pub(super) fn start(db: &Path, token_file: &Path, log: &Path, extra: &[&str]) -> Proc {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let child = bin()
            .args(["serve", "--db"])
            .arg(db)
            .args(["--listen", &addr.to_string(), "--admin-token-file"])
            .arg(token_file)
            .arg("--log-file")
            .arg(log)
            .args(super::serve::pg_flags(db))
            .args(extra)
            .env_remove("DPBANDITS_ADMIN_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut p = Proc {
            child,
            addr,
            log: log.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = p.call("GET", "/v1/health", None)
                && r.status == 200
            {
                return p;
            }
            if let Ok(Some(st)) = p.child.try_wait() {
                panic!("serve exited ({st}): {}", read(&p.log));
            }
            assert!(Instant::now() < deadline, "not healthy within 30 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn call(&self, method: &str, path: &str, token: Option<&str>) -> std::io::Result<Reply> {
        request(self.addr, method, path, token, None, TIMEOUT)
    }

    fn signal(&self, sig: &str) {
        let st = std::process::Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// The log lines of `log` with `"event": event`.
pub(super) fn events(log: &Path, event: &str) -> Vec<Value> {
    read(log)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["event"] == json!(event))
        .collect()
}

pub(super) fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "{what}: not within 10 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// [`setup`] on a fresh database of either store: SQLite, or PostgreSQL in the tests'
/// PostgreSQL pass (`dpbandits_serve::testdb`).
pub(super) fn setup_any() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let (dir, _, token, log) = setup();
    let db = dpbandits_serve::testdb::db(dir.path(), "ops.sqlite");
    (dir, db, token, log)
}

pub(super) fn setup() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("admin-token");
    std::fs::write(&token, format!("{ADMIN}\n")).unwrap();
    let db = dir.path().join("ops.sqlite");
    let log = dir.path().join("serve.log");
    (dir, db, token, log)
}

/// SIGHUP reopens `--log-file` (a rotator renamed it: the next lines go to a new file at the
/// path) and reads `--admin-token-file` again: the new token is accepted and the old one refused
/// at once; an unusable token file is logged and the old token kept. The process lives on.
#[test]
fn sighup_reloads_the_admin_token_and_reopens_the_log() {
    let (dir, db, token, log) = setup_any();
    let p = Proc::start(&db, &token, &log, &[]);
    assert_eq!(
        p.call("GET", "/v1/experiments", Some(ADMIN))
            .unwrap()
            .status,
        200
    );
    assert!(!events(&log, "listening").is_empty(), "{}", read(&log));
    let rotated = dir.path().join("serve.log.1");
    std::fs::rename(&log, &rotated).unwrap();
    let new_admin = "ops-admin-token-rotated-987654";
    std::fs::write(&token, format!("{new_admin}\n")).unwrap();
    p.signal("-HUP");
    wait_for("the sighup line in the reopened log", || {
        !events(&log, "sighup").is_empty()
    });
    let hup = &events(&log, "sighup")[0];
    assert_eq!(hup["admin_token"]["reloaded"], json!(true), "{hup}");
    assert_eq!(
        hup["log"]["reopened"],
        json!(log.display().to_string()),
        "{hup}"
    );
    assert_eq!(
        p.call("GET", "/v1/experiments", Some(ADMIN))
            .unwrap()
            .status,
        401
    );
    assert_eq!(
        p.call("GET", "/v1/experiments", Some(new_admin))
            .unwrap()
            .status,
        200
    );
    // The old file got nothing after the rename's SIGHUP line went to the new one.
    assert!(events(&rotated, "sighup").is_empty());
    // A token too short: refused, logged, the current one kept.
    std::fs::write(&token, "short\n").unwrap();
    p.signal("-HUP");
    wait_for("the second sighup line", || {
        events(&log, "sighup").len() == 2
    });
    let hup = &events(&log, "sighup")[1];
    assert_eq!(hup["admin_token"]["reloaded"], json!(false), "{hup}");
    assert!(
        hup["admin_token"]["error"].as_str().unwrap().contains("16"),
        "{hup}"
    );
    assert_eq!(
        p.call("GET", "/v1/experiments", Some(new_admin))
            .unwrap()
            .status,
        200
    );
    drop(dir);
}

/// The lock is the database file's own (`flock`): a second `serve` on a hard link of a running
/// service's database (another path, another `.lock`) is refused, naming why; and after the
/// first stops, the link starts.
#[test]
fn a_hard_link_cannot_start_a_second_writer() {
    if dpbandits_serve::testdb::on_postgres() {
        // The PostgreSQL pass: what this tests is an SQLite file's (its lock, its mode); it
        // ran in the main pass.
        eprintln!(
            "a_hard_link_cannot_start_a_second_writer: SQLite only (a database file's property)"
        );
        return;
    }
    let (dir, db, token, log) = setup();
    let p = Proc::start(&db, &token, &log, &[]);
    let other = dir.path().join("elsewhere");
    std::fs::create_dir(&other).unwrap();
    let link = other.join("same.sqlite");
    std::fs::hard_link(&db, &link).unwrap();
    let out = bin()
        .args(["serve", "--db"])
        .arg(&link)
        .args(["--listen", "127.0.0.1:0", "--admin-token-file"])
        .arg(&token)
        .env_remove("DPBANDITS_ADMIN_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("hard link"), "{err}");
    assert_eq!(p.call("GET", "/v1/health", None).unwrap().status, 200);
}

/// A database (or its key) that other users may read is named in a warning at start, with its
/// mode and the fix.
#[test]
fn a_database_others_can_read_is_warned_about() {
    if dpbandits_serve::testdb::on_postgres() {
        // The PostgreSQL pass: what this tests is an SQLite file's (its lock, its mode); it
        // ran in the main pass.
        eprintln!(
            "a_database_others_can_read_is_warned_about: SQLite only (a database file's property)"
        );
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let (_dir, db, token, log) = setup();
    let p = Proc::start(&db, &token, &log, &[]);
    assert!(events(&log, "warning").is_empty(), "{}", read(&log));
    p.signal("-TERM");
    let mut p = p;
    let _ = p.child.wait();
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    let _p = Proc::start(&db, &token, &log, &[]);
    let w = events(&log, "warning");
    assert!(
        w.iter()
            .any(|v| v["file"] == json!(db.display().to_string())
                && v["mode"] == json!("644")
                && v["message"].as_str().unwrap().contains("chmod 600")),
        "{w:?}"
    );
}

/// Over the connection limit every refused connection gets the documented answer, 503 JSON
/// with `Retry-After: 1`, not a reset: 40 connections at once beyond a limit of 2.
#[test]
fn every_connection_over_the_limit_is_answered_503() {
    let (_dir, db, token, log) = setup_any();
    let p = Proc::start(
        &db,
        &token,
        &log,
        &["--max-connections", "2", "--header-timeout", "8"],
    );
    // Two connections answered once each, so each holds one of the 2 permits.
    let held = super::serve::hold_answered(p.addr, 2);
    let addr = p.addr;
    let answers: Vec<_> = (0..40)
        .map(|_| {
            std::thread::spawn(move || {
                request(addr, "GET", "/v1/health", None, None, TIMEOUT)
                    .map(|r| r.status)
                    .map_err(|e| e.to_string())
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    let refused = answers.iter().filter(|a| **a == Ok(503)).count();
    assert_eq!(refused, 40, "{answers:?}");
    drop(held);
}
