//! `dpbandits replay`: the Open Bandit Dataset sample's uniform-random log (fetched by
//! scripts/fetch-obd) for a private and a non-private kind, a generic CSV log, clear errors.

use super::{bin, repo, text};
use std::path::PathBuf;

/// The OBD sample's folder: `DPBANDITS_OBD` (scripts/test sets it), else scripts/fetch-obd.
/// `None` (the test is skipped, loudly) only when the fetch fails and `DPBANDITS_OFFLINE=1`.
pub(crate) fn obd_dir() -> Option<PathBuf> {
    if let Ok(d) = std::env::var("DPBANDITS_OBD") {
        return Some(PathBuf::from(d));
    }
    let out = std::process::Command::new(repo().join("scripts/fetch-obd"))
        .output()
        .expect("scripts/fetch-obd runs");
    if out.status.success() {
        return Some(PathBuf::from(
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
        ));
    }
    let why = String::from_utf8_lossy(&out.stderr);
    if std::env::var("DPBANDITS_OFFLINE").as_deref() == Ok("1") {
        eprintln!(
            "\n!!!!!!!! SKIPPED: the OBD replay test (DPBANDITS_OFFLINE=1 and scripts/fetch-obd failed: {why}) !!!!!!!!\n"
        );
        return None;
    }
    panic!("scripts/fetch-obd failed (set DPBANDITS_OFFLINE=1 to skip the OBD tests): {why}");
}

fn replay_json(args: &[&str]) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = bin()
        .arg("replay")
        .args(args)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for e in ["replay", "ips", "snips", "dr", "95% interval"] {
        assert!(stdout.contains(e), "{stdout}");
    }
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

#[test]
fn replay_on_the_obd_uniform_random_log() {
    let Some(obd) = obd_dir() else { return };
    let men = obd.join("random/men");
    let men = men.to_str().unwrap();
    for kind in [
        vec!["--kind", "ucb1"],
        vec!["--kind", "adac_ucb", "--param", "rho=1"],
    ] {
        let mut args = vec!["--log", men, "--format", "obd"];
        args.extend(&kind);
        let v = replay_json(&args);
        assert_eq!(v["actions"], 34, "{v}");
        assert_eq!(v["events"], 10000, "{v}");
        // The uniform-random logger: one propensity (1/34), so no rejection sampling.
        assert_eq!(v["rejection"], false);
        assert!((v["p_min"].as_f64().unwrap() - 1.0 / 34.0).abs() < 1e-12);
        let matched = v["matched"].as_u64().unwrap();
        // About 10,000 / 34 = 294 events match a policy's decision.
        assert!((150..500).contains(&matched), "{v}");
        let est = v["estimates"].as_array().unwrap();
        // replay, ips, snips, dr, dm, switch_dr (issue 45), all supported by this log.
        assert_eq!(est.len(), 6);
        assert_eq!(est[0]["events"].as_u64(), Some(matched));
        assert!(est.iter().all(|e| e["valid"] == true), "{v}");
        let d = &v["diagnostics"];
        assert!(
            (d["propensity_sum"].as_f64().unwrap() - 1.0).abs() < 1e-9,
            "{d}"
        );
        assert_eq!(d["unsupported_mass"], 0.0);
        assert_eq!(d["weights_off"], false);
        assert_eq!(v["spread"]["replays"], 10);
        assert_eq!(v["warnings"].as_array().map(Vec::len), Some(0), "{v}");
        for e in est {
            let (x, lo, hi) = (
                e["value"].as_f64().unwrap(),
                e["lo"].as_f64().unwrap(),
                e["hi"].as_f64().unwrap(),
            );
            // A click-through rate of the order of the log's 46 / 10,000.
            assert!((0.0..0.05).contains(&x) && lo <= x && x <= hi, "{e}");
        }
        // Same seed, same numbers.
        assert_eq!(v, replay_json(&args));
    }
    // One position only: about a third of the rows.
    let v = replay_json(&[
        "--log",
        men,
        "--format",
        "obd",
        "--kind",
        "ucb1",
        "--position",
        "1",
    ]);
    let n = v["events"].as_u64().unwrap();
    assert!((3000..3600).contains(&n), "{v}");
}

#[test]
fn replay_on_a_csv_log_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log.csv");
    let mut s = String::from("action,reward,propensity\n");
    for i in 0..600 {
        s += &format!("{},{},0.5\n", i % 2, u8::from(i % 3 == 0));
    }
    std::fs::write(&log, s).unwrap();
    let log = log.to_str().unwrap();
    let v = replay_json(&["--log", log, "--target", "0,1"]);
    assert_eq!(v["events"], 600);
    assert_eq!(v["matched"], 300);
    let bad = |args: &[&str], want: &str| {
        let out = bin().arg("replay").args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(text(&out).contains(want), "{want}: {}", text(&out));
    };
    bad(
        &["--log", log, "--format", "parquet", "--kind", "ucb1"],
        "--format: format = \"parquet\"",
    );
    bad(
        &["--log", log, "--kind", "ucb1", "--position", "2"],
        "position = 2",
    );
    bad(
        &["--log", log, "--kind", "nope"],
        "--kind nope: kind = \"nope\"",
    );
    bad(
        &["--log", log, "--kind", "dp_se", "--param", "rho=1"],
        "unknown field `rho`",
    );
    bad(
        &["--log", log, "--target", "0.5,0.6"],
        "--target: target = ",
    );
    bad(
        &["--log", "/no/such.csv", "--kind", "ucb1"],
        "--log /no/such.csv",
    );
    bad(&["--log", log], "give --kind KIND");
    std::fs::write(
        dir.path().join("p.csv"),
        "action,reward,propensity\n0,1,0\n",
    )
    .unwrap();
    let p = dir.path().join("p.csv");
    bad(
        &["--log", p.to_str().unwrap(), "--kind", "ucb1"],
        "line 2, column propensity = \"0\"",
    );
}
