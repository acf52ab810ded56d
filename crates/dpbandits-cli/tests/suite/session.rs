//! `dpbandits session`: the CLI's answers are the core session's, call for call (the script is
//! made by driving an in-process `Session` with the same kind, parameters and seed), refused
//! calls print `{"error": ...}` and change nothing, setup errors exit with 2.

use super::{bin, run, text};
use dpbandits::contextual::ActionSet;
use dpbandits::session::{Decision, Session};
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

fn answer(d: dpbandits::Result<Decision>) -> Value {
    match d {
        Ok(Decision::Play { arm, .. }) => json!({ "arm": arm }),
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
        want.push(answer(d));
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
            want.push(answer(s.decide_with(&ActionSet {
                d: 3,
                k: 1,
                features: &[1.0, 2.0, 3.0],
            })));
            calls.push(json!({ "decide": null }));
            want.push(answer(s.decide()));
        }
        calls.push(json!({ "decide": rows }));
        let d = s.decide_with(&ActionSet {
            d: 2,
            k: 3,
            features: &features,
        });
        let arm = d.as_ref().unwrap().arm().unwrap();
        want.push(answer(d));
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
