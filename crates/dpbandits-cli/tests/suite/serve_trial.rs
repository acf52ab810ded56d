//! A trial on `serve` (issue 43's service parts), against the real binary on loopback,
//! bounded: late outcomes are kept; deadlines fire on a timer; bulk abandon and `close` with
//! `abandon_overdue`; the interim look; the monitor page in headless Chromium.

use super::figures::run_bounded;
use super::serve_ops::{ADMIN, Proc, TIMEOUT, events, setup_any, wait_for};
use dpbandits_serve::client::{Reply, request};
use serde_json::{Value, json};
use std::path::Path;

fn call(p: &Proc, method: &str, path: &str, token: &str, body: Option<Value>) -> Reply {
    let b = body.map(|b| b.to_string().into_bytes());
    request(p.addr, method, path, Some(token), b.as_deref(), TIMEOUT).unwrap()
}

fn create(p: &Proc, body: Value) -> String {
    let r = call(p, "POST", "/v1/experiments", ADMIN, Some(body));
    assert_eq!(r.status, 201, "{}", r.body);
    r.json()["client_token"].as_str().unwrap().to_string()
}

fn decide(p: &Proc, name: &str, tok: &str, body: Value) -> Value {
    let r = call(
        p,
        "POST",
        &format!("/v1/experiments/{name}/decisions"),
        tok,
        Some(body),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
}

fn reward(p: &Proc, name: &str, tok: &str, id: u64, x: f64) -> Value {
    let r = call(
        p,
        "POST",
        &format!("/v1/experiments/{name}/rewards"),
        tok,
        Some(json!({"decision_id": id, "reward": x})),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
}

fn verify(db: &Path) -> std::process::Output {
    super::serve::verify_cmd(db).output().unwrap()
}

/// Run `sql` on the test database as an attacker with write access would (SQLite directly;
/// PostgreSQL through `psql`, which Debian's server package brings).
fn tamper(db: &Path, sql: &str) {
    if dpbandits_serve::store::is_postgres_url(db) {
        let out = std::process::Command::new("psql")
            .arg(db)
            .args(["-q", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .output()
            .unwrap();
        super::succeeded(&out);
    } else {
        let conn = rusqlite::Connection::open(db).unwrap();
        conn.execute(sql, []).unwrap();
    }
}

/// Issue 43, Done-when 4: a true outcome reported after its decision was abandoned is stored
/// with the decision (`late_reward`), logged (`late-outcome`) and exported, marked late, and
/// the policy's inputs are unchanged (its observed count and pending count do not move); a
/// second late report is not stored; the log verifies, and an edited late outcome does not.
/// With `reward_deadline` set and no decision request after enrolment, the timer abandons the
/// pending decisions on time and `close` succeeds.
#[test]
fn late_outcomes_are_kept_and_deadlines_fire_on_a_timer() {
    let (_dir, db, token, log) = setup_any();
    let p = Proc::start(&db, &token, &log, &[]);
    let tok = create(
        &p,
        json!({"name": "t", "arms": 3, "dropout_reward": 0.0, "reward_deadline": 0.4,
               "while_pending": "pipeline", "policy": {"kind": "adap_ucb", "epsilon": 1.0}}),
    );
    let mut ids = Vec::new();
    for i in 0..12 {
        let d = decide(&p, "t", &tok, json!({"request_id": format!("r{i}")}));
        ids.push(d["decision_id"].as_u64().unwrap());
    }
    for &id in &ids[..6] {
        assert_eq!(reward(&p, "t", &tok, id, 1.0)["status"], "applied");
    }
    // No more decision requests: the timer abandons the other 6 within the deadline plus ticks.
    wait_for("the timer's abandonments", || {
        let st = call(&p, "GET", "/v1/experiments/t", &tok, None).json();
        st["pending"] == json!(0)
    });
    assert!(!events(&log, "deadline-timer").is_empty());
    let before = call(&p, "GET", "/v1/experiments/t", &tok, None).json();
    // A late true outcome of an abandoned decision.
    let late = reward(&p, "t", &tok, ids[7], 0.75);
    assert_eq!(late["status"], "late", "{late}");
    let again = reward(&p, "t", &tok, ids[7], 0.5);
    assert_eq!(again["status"], "duplicate", "{again}");
    let after = call(&p, "GET", "/v1/experiments/t", &tok, None).json();
    for k in ["decisions", "rewarded", "pending"] {
        assert_eq!(before[k], after[k], "{k}: the policy's inputs moved");
    }
    let export = call(&p, "GET", "/v1/experiments/t/export", ADMIN, None);
    let rows: Vec<Value> = export
        .body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let row = rows
        .iter()
        .find(|r| r["decision_id"] == json!(ids[7]))
        .unwrap();
    assert_eq!(
        (row["outcome"].clone(), row["late_reward"].clone()),
        (json!("abandoned"), json!(0.75)),
        "{row}"
    );
    assert!(row["late_received"].is_string(), "{row}");
    assert_eq!(
        rows.iter().filter(|r| !r["late_reward"].is_null()).count(),
        1
    );
    let audit = call(&p, "GET", "/v1/audit?experiment=t", ADMIN, None).json();
    let lates: Vec<_> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "late-outcome")
        .collect();
    assert_eq!(lates.len(), 1, "{audit}");
    // Close succeeds (nothing pending) and counts the late outcome per arm.
    let r = call(
        &p,
        "POST",
        "/v1/experiments/t/close",
        ADMIN,
        Some(json!({})),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    drop(p);
    let out = verify(&db);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // An edited late outcome is named by verify.
    tamper(
        &db,
        "UPDATE decisions SET late_reward = 0.25 WHERE late_reward IS NOT NULL",
    );
    let out = verify(&db);
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && text.contains("late outcome"),
        "{text}"
    );
}

/// Bulk abandon (`older_than`), `close` with `abandon_overdue`, and their refusals naming the
/// field.
#[test]
fn bulk_abandon_and_close_abandoning_the_overdue() {
    let (_dir, db, token, log) = setup_any();
    let p = Proc::start(&db, &token, &log, &[]);
    let tok = create(
        &p,
        json!({"name": "b", "arms": 2, "dropout_reward": 0.0,
               "while_pending": "pipeline", "policy": {"kind": "adap_ucb", "epsilon": 1.0}}),
    );
    for _ in 0..5 {
        decide(&p, "b", &tok, json!({}));
    }
    let r = call(
        &p,
        "POST",
        "/v1/experiments/b/abandon",
        &tok,
        Some(json!({"older_than": -1})),
    );
    assert_eq!(r.status, 422);
    assert!(r.body.contains("older_than"), "{}", r.body);
    let r = call(
        &p,
        "POST",
        "/v1/experiments/b/abandon",
        &tok,
        Some(json!({"older_than": 3600})),
    );
    assert_eq!(r.json()["abandoned"], 0, "{}", r.body);
    let r = call(
        &p,
        "POST",
        "/v1/experiments/b/abandon",
        &tok,
        Some(json!({"older_than": 0})),
    );
    assert_eq!(r.json()["abandoned"], 5, "{}", r.body);
    // abandon_overdue needs a deadline.
    let r = call(
        &p,
        "POST",
        "/v1/experiments/b/close",
        ADMIN,
        Some(json!({"abandon_overdue": true})),
    );
    assert_eq!(r.status, 422);
    assert!(r.body.contains("reward_deadline"), "{}", r.body);
    let tok2 = create(
        &p,
        json!({"name": "c", "arms": 2, "dropout_reward": 0.0, "reward_deadline": 3600,
               "while_pending": "pipeline", "policy": {"kind": "adap_ucb", "epsilon": 1.0}}),
    );
    decide(&p, "c", &tok2, json!({}));
    let r = call(
        &p,
        "POST",
        "/v1/experiments/c/close",
        ADMIN,
        Some(json!({})),
    );
    assert_eq!(r.status, 422, "{}", r.body);
    assert!(r.body.contains("pending"), "{}", r.body);
}

/// Issue 43, Done-when 6: the monitor page of a running finite, BAI and contextual experiment
/// renders in headless Chromium with every panel populated (a script in the page counts the
/// panels whose drawing laid out or whose table has rows); a screenshot of each is taken. The
/// interim look answers with anytime intervals.
#[test]
fn the_monitor_page_renders_every_panel_in_chromium() {
    let chromium = std::env::var("DPBANDITS_CHROMIUM").unwrap_or("/usr/bin/chromium".into());
    assert!(
        Path::new(&chromium).is_file(),
        "headless Chromium not found at {chromium}: run scripts/ensure-browser or set DPBANDITS_CHROMIUM"
    );
    let (dir, db, token, log) = setup_any();
    let p = Proc::start(&db, &token, &log, &[]);
    let mut state = 7u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % 1000) as f64 / 1000.0
    };
    for (name, body) in [
        (
            "fin",
            json!({"arms": 3, "policy": {"kind": "adap_ucb", "epsilon": 4.0}}),
        ),
        (
            "bai",
            json!({"arms": 3, "delta": 0.1, "policy": "kind = \"dp_tt\"\nepsilon = 10.0\nnoise = \"simulation\""}),
        ),
        (
            "ctx",
            json!({"dim": 2, "horizon": 2000, "policy": {"kind": "adac_oful", "rho": 4.0}}),
        ),
    ] {
        let mut b = body;
        b["name"] = json!(name);
        let tok = create(&p, b);
        for _ in 0..300 {
            let body = if name == "ctx" {
                json!({"actions": [[1.0, 0.0], [0.0, 1.0], [0.6, 0.6]]})
            } else {
                json!({})
            };
            let r = call(
                &p,
                "POST",
                &format!("/v1/experiments/{name}/decisions"),
                &tok,
                Some(body),
            );
            if r.status == 409 {
                break; // BAI stopped
            }
            assert_eq!(r.status, 200, "{}", r.body);
            let d = r.json();
            let arm = d["arm"].as_u64().unwrap() as f64;
            let x = if next() < 0.3 + 0.2 * arm { 1.0 } else { 0.0 };
            reward(&p, name, &tok, d["decision_id"].as_u64().unwrap(), x);
        }
        let interim = call(
            &p,
            "GET",
            &format!("/v1/experiments/{name}/interim?level=0.9"),
            ADMIN,
            None,
        );
        assert_eq!(interim.status, 200, "{}", interim.body);
        let v = interim.json();
        assert_eq!(v["report"]["validity"], json!("anytime"), "{v}");
        let m = call(
            &p,
            "GET",
            &format!("/v1/experiments/{name}/monitor?format=json"),
            ADMIN,
            None,
        )
        .json();
        assert!(m["interim"]["estimates"].is_array(), "{name}: {m}");
        let html = call(
            &p,
            "GET",
            &format!("/v1/experiments/{name}/monitor"),
            ADMIN,
            None,
        );
        assert_eq!(html.status, 200);
        let file = dir.path().join(format!("{name}.html"));
        std::fs::write(&file, &html.body).unwrap();
        let profile = tempfile::tempdir().unwrap();
        let flags = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ];
        let user = format!("--user-data-dir={}", profile.path().join("p").display());
        let url = format!("file://{}", file.display());
        let dom = run_bounded(
            std::process::Command::new(&chromium)
                .args(flags)
                .arg(&user)
                .args(["--dump-dom", &url]),
        );
        let attr = |a: &str| -> Option<usize> {
            let k = dom.find(&format!("{a}=\""))? + a.len() + 2;
            dom[k..].split('"').next()?.parse().ok()
        };
        assert_eq!(attr("data-panels-total"), Some(6), "{name}");
        assert_eq!(
            attr("data-panels-filled"),
            Some(6),
            "{name}: a panel is empty"
        );
        let shot = profile.path().join("shot.png");
        run_bounded(
            std::process::Command::new(&chromium)
                .args(flags)
                .arg(&user)
                .arg(format!("--screenshot={}", shot.display()))
                .args(["--window-size=1200,1400", &url]),
        );
        let png = std::fs::read(&shot).unwrap_or_default();
        assert!(
            png.starts_with(b"\x89PNG") && png.len() > 20_000,
            "{name}: screenshot {} bytes",
            png.len()
        );
        if let Ok(out) = std::env::var("DPBANDITS_MONITOR_SHOTS") {
            std::fs::copy(&shot, Path::new(&out).join(format!("monitor-{name}.png"))).unwrap();
        }
    }
}
