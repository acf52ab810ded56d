//! `dpbandits session`: the CLI's answers are the core session's, call for call (the script is
//! made by driving an in-process `Session` with the same kind, parameters and seed), refused
//! calls print `{"error": ...}` and change nothing, setup errors exit with 2.

use super::{bin, run, text};
use dpbandits::contextual::ActionSet;
use dpbandits::session::{Decision, Session, WhilePending};
use serde_json::{Value, json};
use std::io::Write;
use std::process::Stdio;

/// Feed `calls` (one JSON line each) to `dpbandits session ARGS`; its output lines.
fn session(args: &[&str], calls: &[Value]) -> Vec<Value> {
    let mut child = bin()
        .arg("session")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("binary runs");
    let mut input = String::new();
    for c in calls {
        input += &format!("{c}\n");
    }
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("runs");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON value a line"))
        .collect()
}

/// The CLI's answer to a decision of `s` (its id: the decisions issued so far).
fn answer(s: &Session, d: dpbandits::Result<Decision>) -> Value {
    match d {
        Ok(Decision::Play { arm, .. }) => json!({ "decision_id": s.issued(), "arm": arm }),
        Ok(Decision::Stop { recommendation }) => json!({ "stop": recommendation }),
        Err(e) => json!({ "error": e.to_string() }),
    }
}

#[test]
fn finite_and_contextual_sessions_answer_as_the_core_session() {
    // finite: adac_ucb, with a refused reward and an out-of-order observe on the way
    let table: toml::Table = "arms = 3\nrho = 0.5".parse().unwrap();
    let mut s = Session::from_table("adac_ucb", table, 5).unwrap();
    let (mut calls, mut want) = (vec![], vec![]);
    for t in 0..200u64 {
        let d = s.decide();
        let arm = d.as_ref().unwrap().arm().unwrap();
        calls.push(json!({ "decide": null }));
        want.push(answer(&s, d));
        if t % 50 == 7 {
            calls.push(json!({ "observe": [arm + 1, 0.5] }));
            want.push(json!({ "error": s.observe(arm + 1, 0.5).unwrap_err().to_string() }));
        }
        let r = f64::from(u8::from((t * 7 + arm as u64).is_multiple_of(3)));
        calls.push(json!({ "observe": [arm, r] }));
        s.observe(arm, r).unwrap();
        want.push(json!({ "ok": true }));
    }
    calls.push(json!({ "snapshot": null }));
    let hex: String = s
        .snapshot()
        .unwrap()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    want.push(json!({ "snapshot": hex }));
    let got = session(
        &[
            "--kind", "adac_ucb", "--param", "arms=3", "--param", "rho=0.5", "--seed", "5",
        ],
        &calls,
    );
    assert_eq!(got, want);

    // contextual: oful, with a bad action set and a decision without one
    let table: toml::Table = "dim = 2\nhorizon = 100".parse().unwrap();
    let mut s = Session::from_table("oful", table, 1).unwrap();
    let (mut calls, mut want) = (vec![], vec![]);
    for t in 0..60u64 {
        let x = (t % 7) as f64 / 8.0;
        let rows = vec![vec![x, 0.5], vec![0.25, 1.0 - x], vec![-x, x]];
        let features: Vec<f64> = rows.iter().flatten().copied().collect();
        if t % 20 == 3 {
            calls.push(json!({ "decide": [[1.0, 2.0, 3.0]] }));
            let d = s.decide_with(&ActionSet {
                d: 3,
                k: 1,
                features: &[1.0, 2.0, 3.0],
            });
            want.push(answer(&s, d));
            calls.push(json!({ "decide": null }));
            let d = s.decide();
            want.push(answer(&s, d));
        }
        calls.push(json!({ "decide": rows }));
        let d = s.decide_with(&ActionSet {
            d: 2,
            k: 3,
            features: &features,
        });
        let arm = d.as_ref().unwrap().arm().unwrap();
        want.push(answer(&s, d));
        calls.push(json!({ "observe": [arm, 0.5] }));
        s.observe(arm, 0.5).unwrap();
        want.push(json!({ "ok": true }));
    }
    assert!(want.iter().any(|w| w.get("error").is_some()));
    let got = session(
        &[
            "--kind",
            "oful",
            "--param",
            "dim=2",
            "--param",
            "horizon=100",
            "--seed",
            "1",
        ],
        &calls,
    );
    assert_eq!(got, want);
}

#[test]
fn a_pipelined_session_takes_rewards_by_decision_id_in_any_order() {
    // dp_ts (one round a commitment): 30 decisions with no reward in, then their rewards in
    // reverse order by id; the core session driven alike gives the same answers.
    let table: toml::Table = "arms = 3\nepsilon = 1.0".parse().unwrap();
    let mut s = Session::from_table("dp_ts", table, 4).unwrap();
    s.set_while_pending(WhilePending::Pipeline).unwrap();
    let (mut calls, mut want) = (vec![], vec![]);
    for _ in 0..30 {
        calls.push(json!({ "decide": null }));
        let d = s.decide();
        want.push(answer(&s, d));
    }
    for id in (1..=30u64).rev() {
        let r = f64::from(u8::from(id % 3 == 0));
        calls.push(json!({ "observe_decision": [id, r] }));
        s.observe_decision(id - 1, r).unwrap();
        want.push(json!({ "ok": true }));
    }
    calls.push(json!({ "decide": null }));
    let d = s.decide();
    want.push(answer(&s, d));
    let got = session(
        &[
            "--kind",
            "dp_ts",
            "--param",
            "arms=3",
            "--param",
            "epsilon=1.0",
            "--seed",
            "4",
            "--while-pending",
            "pipeline",
        ],
        &calls,
    );
    assert_eq!(got, want);
    assert_eq!(got[0]["decision_id"], json!(1));
    assert_eq!(got[29]["decision_id"], json!(30));

    // Refused: a decision observed twice, one never issued, id 0, a NaN reward; each names its
    // field and changes nothing (the next decision is still id 3).
    let got = session(
        &[
            "--kind",
            "dp_ts",
            "--param",
            "arms=3",
            "--param",
            "epsilon=1.0",
            "--while-pending",
            "pipeline",
        ],
        &[
            json!({ "decide": null }),
            json!({ "decide": null }),
            json!({ "observe_decision": [2, 1.0] }),
            json!({ "observe_decision": [2, 1.0] }),
            json!({ "observe_decision": [9, 1.0] }),
            json!({ "observe_decision": [0, 1.0] }),
            json!({ "observe_decision": [1, "x"] }),
            json!({ "decide": null }),
        ],
    );
    let err = |i: usize| got[i]["error"].as_str().unwrap_or_default().to_string();
    assert_eq!(got[2], json!({ "ok": true }));
    assert!(
        err(3).starts_with("decision_id = 2: ") && err(3).contains("already observed"),
        "{}",
        err(3)
    );
    assert!(
        err(4).starts_with("decision_id = 9: ") && err(4).contains("not issued"),
        "{}",
        err(4)
    );
    assert!(err(5).starts_with("decision_id = 0: "), "{}", err(5));
    assert!(err(6).starts_with("reward = "), "{}", err(6));
    assert_eq!(got[7]["decision_id"], json!(3));

    // Wait mode (the default) refuses a second decision of a per-step kind; a bad mode exits 2
    // naming the flag.
    let got = session(
        &[
            "--kind",
            "dp_ts",
            "--param",
            "arms=3",
            "--param",
            "epsilon=1.0",
        ],
        &[json!({ "decide": null }), json!({ "decide": null })],
    );
    assert!(got[1]["error"].is_string(), "{got:?}");
    let o = run(&[
        "session",
        "--kind",
        "dp_ts",
        "--param",
        "arms=3",
        "--while-pending",
        "later",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("--while-pending"), "{}", text(&o));
}

#[test]
fn malformed_calls_and_setup_errors() {
    let got = session(
        &["--kind", "ucb1", "--param", "arms=2"],
        &[
            json!("decide"),
            json!({ "observe": [0] }),
            json!({ "decide": 1 }),
        ],
    );
    assert_eq!(got.len(), 3);
    assert!(got.iter().all(|g| g["error"].is_string()), "{got:?}");
    let o = run(&["session", "--kind", "ucb1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("arms = (missing)"), "{}", text(&o));
    let o = run(&["session", "--kind", "no_such_kind", "--param", "arms=2"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("kind = \"no_such_kind\""), "{}", text(&o));
}
