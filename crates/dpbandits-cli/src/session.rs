//! `dpbandits session`: one online session ([`dpbandits::session::Session`]) driven by JSON lines
//! on stdin, one JSON line out per call. Argument parsing and printing only: the session
//! validates, decides and observes (the same object the Python `Policy` holds, so the two can be
//! compared call for call).

use anyhow::{Context, Result};
use dpbandits::contextual::ActionSet;
use dpbandits::session::{Decision, Session, WhilePending};
use serde_json::{Value, json};
use std::io::{BufRead, Write};
use std::process::ExitCode;

/// What `dpbandits session --help` says after the options.
const CALLS: &str = "\
Calls, one JSON object a line on stdin; one JSON line out per call:
  {\"decide\": null}                   -> {\"decision_id\": 1, \"arm\": 2}, or {\"stop\": 1} once a BAI run stopped
  {\"decide\": [[0.1, 0.2], ...]}      -> {\"decision_id\": 1, \"arm\": 0}: contextual, the round's k x d action set
  {\"observe\": [2, 0.5]}              -> {\"ok\": true}: the reward of a decided round of arm 2
  {\"observe_decision\": [1, 0.5]}     -> {\"ok\": true}: the reward of decision 1, in any order
  {\"snapshot\": null}                 -> {\"snapshot\": \"<hex>\"}: the session's snapshot bytes
Decision ids are 1-based, in decision order (the decision service's decision_id). A refused call
prints {\"error\": \"message\"} (naming the field) and changes nothing. With --while-pending
pipeline, decisions go on while earlier ones wait for their rewards.

Example: dpbandits session --kind adac_ucb --param arms=3 --param rho=0.5 --seed 1";

#[derive(clap::Args, Debug)]
#[command(after_help = CALLS)]
pub(crate) struct SessionArgs {
    /// The registry kind (`dpbandits list`).
    #[arg(long)]
    kind: String,
    /// `key=value` (repeatable; values as TOML): the kind's parameters and the problem's keys,
    /// finite `arms=K`; linear `arms=[[1.0, 0.0], [0.0, 1.0]]`; contextual `dim=d`,
    /// `horizon=T`; BAI `arms=K`, `delta=0.05`.
    #[arg(long = "param", allow_hyphen_values = true)]
    params: Vec<String>,
    /// Seed of the policy's generators (the Python `Policy`'s `seed`).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// What the session does when every round of its open commitment is decided and rewards are
    /// pending: `wait` for a reward, or `pipeline` (serve decisions while rewards are pending;
    /// every kind).
    #[arg(long, default_value = "wait", value_parser = ["wait", "pipeline"])]
    while_pending: String,
}

pub(crate) fn session(a: SessionArgs) -> Result<ExitCode> {
    let table = dpbandits::audit::parse_params(a.params.iter().map(String::as_str))?;
    let mut s = Session::from_table(&a.kind, table, a.seed)?;
    s.set_while_pending(WhilePending::parse(&a.while_pending)?)?;
    let mut out = std::io::stdout().lock();
    for line in std::io::stdin().lock().lines() {
        let line = line.context("reading stdin")?;
        if line.trim().is_empty() {
            continue;
        }
        let reply = call(&mut s, &line).unwrap_or_else(|e| json!({ "error": e }));
        writeln!(out, "{reply}").context("writing stdout")?;
        out.flush().context("writing stdout")?;
    }
    Ok(ExitCode::SUCCESS)
}

const SHAPE: &str = "one of {\"decide\": null}, {\"decide\": [[...], ...]}, {\"observe\": [arm, reward]}, {\"observe_decision\": [decision_id, reward]}, {\"snapshot\": null}";

/// One call; `Err` is the message of `{"error": ...}`.
fn call(s: &mut Session, line: &str) -> std::result::Result<Value, String> {
    let v: Value =
        serde_json::from_str(line).map_err(|e| format!("not JSON ({e}): expected {SHAPE}"))?;
    let call = match v.as_object() {
        Some(o) if o.len() == 1 => o.iter().next().expect("one entry"),
        _ => return Err(format!("{line}: expected {SHAPE}")),
    };
    match call {
        (verb, Value::Null) if verb == "decide" => {
            let id = s.issued() + 1;
            decision(id, s.decide())
        }
        (verb, Value::Array(rows)) if verb == "decide" => {
            let (k, d, features) = actions(rows)?;
            let id = s.issued() + 1;
            decision(
                id,
                s.decide_with(&ActionSet {
                    d,
                    k,
                    features: &features,
                }),
            )
        }
        (verb, Value::Array(xs)) if verb == "observe_decision" && xs.len() == 2 => {
            let id = xs[0]
                .as_u64()
                .filter(|&i| i >= 1)
                .ok_or_else(|| format!("decision_id = {}: expected an integer >= 1", xs[0]))?;
            let reward = xs[1]
                .as_f64()
                .ok_or_else(|| format!("reward = {}: expected a number", xs[1]))?;
            if s.pending_arm(id - 1).is_none() {
                return Err(not_pending(s, id));
            }
            s.observe_decision(id - 1, reward)
                .map_err(|e| e.to_string())?;
            Ok(json!({ "ok": true }))
        }
        (verb, Value::Array(xs)) if verb == "observe" && xs.len() == 2 => {
            let arm = xs[0]
                .as_u64()
                .and_then(|a| usize::try_from(a).ok())
                .ok_or_else(|| format!("arm = {}: expected an integer >= 0", xs[0]))?;
            let reward = xs[1]
                .as_f64()
                .ok_or_else(|| format!("reward = {}: expected a number", xs[1]))?;
            s.observe(arm, reward).map_err(|e| e.to_string())?;
            Ok(json!({ "ok": true }))
        }
        (verb, Value::Null) if verb == "snapshot" => {
            let bytes = s.snapshot().map_err(|e| e.to_string())?;
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            Ok(json!({ "snapshot": hex }))
        }
        (verb, arg) => Err(format!("{verb} = {arg}: expected {SHAPE}")),
    }
}

/// Why decision `id` (1-based) cannot take a reward: already observed, or never issued.
fn not_pending(s: &Session, id: u64) -> String {
    let why = if id <= s.issued() {
        format!("decision {id} was already observed (each decision's reward is taken once)")
    } else {
        format!("decision {id} was not issued ({} so far)", s.issued())
    };
    format!("decision_id = {id}: expected the id of a decision waiting for its reward: {why}")
}

/// A decision's answer; `id` is its decision id (1-based) when it is a decision to play.
fn decision(id: u64, d: dpbandits::Result<Decision>) -> std::result::Result<Value, String> {
    match d.map_err(|e| e.to_string())? {
        Decision::Play { arm, .. } => Ok(json!({ "decision_id": id, "arm": arm })),
        Decision::Stop { recommendation } => Ok(json!({ "stop": recommendation })),
    }
}

/// A JSON array of `k` rows of `d` numbers as `(k, d, row-major features)`; the session checks
/// the shape against the policy, the entries and the norms.
fn actions(rows: &[Value]) -> std::result::Result<(usize, usize, Vec<f64>), String> {
    let width = rows.first().and_then(Value::as_array).map_or(0, Vec::len);
    let mut features = Vec::with_capacity(rows.len() * width);
    for (i, row) in rows.iter().enumerate() {
        let cells = row.as_array().filter(|r| r.len() == width).ok_or_else(|| {
            format!("actions[{i}] = {row}: expected a row of {width} numbers, like actions[0]")
        })?;
        for (j, x) in cells.iter().enumerate() {
            features.push(
                x.as_f64()
                    .ok_or_else(|| format!("actions[{i}][{j}] = {x}: expected a number"))?,
            );
        }
    }
    Ok((rows.len(), width, features))
}
