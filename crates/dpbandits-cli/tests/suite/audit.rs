//! `dpbandits audit`: table on stdout, JSON file, exit codes, clear errors.

use super::bin;

#[test]
fn audit_prints_a_table_and_writes_json() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("audit.json");
    let out = bin()
        .args(["audit", "adap_ucb", "--param", "epsilon=1", "--runs", "400"])
        .args(["--threads", "1", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("eps_lower_bound") && stdout.contains("verdict: pass"),
        "{stdout}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["kind"], "adap_ucb");
    assert_eq!(v["claimed"], 1.0);
    assert_eq!(v["runs"], 400);
    assert_eq!(v["verdict"], "pass");
    let lb = v["eps_lower_bound"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&lb), "{lb}");
    for f in [
        "params",
        "delta",
        "confidence",
        "seconds",
        "event",
        "results",
    ] {
        assert!(v.get(f).is_some(), "{f}");
    }
    // same seed, other thread count: same bounds
    let json2 = dir.path().join("audit2.json");
    let out = bin()
        .args(["audit", "adap_ucb", "--param", "epsilon=1", "--runs", "400"])
        .args(["--threads", "2", "--json"])
        .arg(&json2)
        .output()
        .unwrap();
    assert!(out.status.success());
    let v2: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json2).unwrap()).unwrap();
    assert_eq!(v["results"], v2["results"]);
}

#[test]
fn under_noised_policy_fails_with_exit_code_1() {
    let out = bin()
        .args([
            "audit",
            "adap_ucb",
            "--param",
            "epsilon=1",
            "--runs",
            "2000",
        ])
        .args(["--noise-multiplier", "0.1", "--scenario", "first"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("verdict: FAIL"), "{stdout}");
}

/// The tuned design: chosen by pilot runs, reported in `designs`, the same for any thread
/// count; noise x0.1 on DP-SE is caught there (bound 0 on the default designs).
#[test]
fn tuned_design_is_reported_and_catches_an_under_noised_dp_se() {
    let dir = tempfile::tempdir().unwrap();
    let mut designs = vec![];
    for threads in ["1", "2"] {
        let json = dir.path().join(format!("tuned{threads}.json"));
        let out = bin()
            .args([
                "audit",
                "dp_se",
                "--param",
                "epsilon=1",
                "--param",
                "beta=0.001",
            ])
            .args(["--horizon", "4096", "--scenario", "tuned", "--runs", "400"])
            .args(["--noise-multiplier", "0.1", "--threads", threads, "--json"])
            .arg(&json)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{stdout}");
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(v["verdict"], "fail");
        let d = &v["designs"][0];
        assert_eq!(d["scenario"], "tuned");
        let level = d["background"][0].as_f64().unwrap();
        assert!(level > 0.5 && level < 1.0, "{d}");
        designs.push((d.clone(), v["results"].clone()));
    }
    assert_eq!(designs[0], designs[1]);
}

#[test]
fn audit_errors_name_the_field() {
    for (args, want) in [
        (vec!["audit", "ucb1"], "private kind"),
        (vec!["audit", "nope"], "kind = \"nope\""),
        (vec!["audit", "adap_ucb"], "epsilon"),
        (
            vec!["audit", "adap_ucb", "--param", "epsilon=1", "--runs", "3"],
            "runs = 3",
        ),
        (
            vec![
                "audit",
                "adap_ucb",
                "--param",
                "epsilon=1",
                "--scenario",
                "x",
            ],
            "scenario",
        ),
        (vec!["audit", "adap_ucb", "--param", "epsilon"], "param"),
        (
            vec![
                "audit",
                "adap_ucb",
                "--param",
                "epsilon=1",
                "--param",
                "noise=simulation",
                "--noise",
                "deployment",
            ],
            "contradicts",
        ),
        (
            vec![
                "audit",
                // Deployment refuses what would void its guarantee (no clipping).
                "adac_oful",
                "--param",
                "rho=1",
                "--param",
                "mode=reproduction",
                "--noise",
                "deployment",
            ],
            "mode",
        ),
    ] {
        let out = bin().args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// `--mode white-box` (and `--white-box`): the ratio to the claim, exit 0 when tight, 1 on a
/// leak (noise x0.1), 3 when over-noised (noise x2); the black-box default is unchanged.
#[test]
fn white_box_mode_reports_the_ratio() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("white.json");
    let run = |extra: &[&str], json: Option<&std::path::Path>| {
        let mut c = bin();
        c.args([
            "audit",
            "adap_ucb",
            "--param",
            "epsilon=1",
            "--samples",
            "2000",
        ])
        .args(["--threads", "1"])
        .args(extra);
        if let Some(j) = json {
            c.arg("--json").arg(j);
        }
        c.output().unwrap()
    };
    let out = run(&["--mode", "white-box"], Some(&json));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("white-box") && stdout.contains("tight"),
        "{stdout}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["mode"], "white-box");
    assert_eq!(v["currency"], "epsilon");
    assert_eq!(v["samples"], 2000);
    let ratio = v["ratio"].as_f64().unwrap();
    assert!((0.85..=1.15).contains(&ratio), "{ratio}");
    assert_eq!(
        run(&["--white-box", "--noise-multiplier", "0.1"], None)
            .status
            .code(),
        Some(1)
    );
    assert_eq!(
        run(&["--white-box", "--noise-multiplier", "2"], None)
            .status
            .code(),
        Some(3)
    );
    let out = run(&["--mode", "grey-box"], None);
    assert_eq!(out.status.code(), Some(2));
}

/// `--noise deployment`: the audit runs on exact OS-keyed noise and says it is not reproducible
/// (text and JSON). The correct policy passes (false failure <= 1e-3, confidence 0.999; the
/// outcome is random: OS entropy).
#[test]
fn deployment_noise_is_audited_and_not_reproducible() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("a.json");
    let out = bin()
        .args([
            "audit",
            "adap_ucb",
            "--param",
            "epsilon=1",
            "--noise",
            "deployment",
        ])
        .args(["--runs", "400", "--confidence", "0.999", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("not reproducible"), "{text}");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(r["noise"], "deployment-grade");
    assert_eq!(r["reproducible"], false);
}
