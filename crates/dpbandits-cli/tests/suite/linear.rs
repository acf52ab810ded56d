//! The linear-bandit smoke experiment through the CLI (issue 3).

use crate::bin;

#[test]
fn smoke_linear_runs_and_writes_every_figure() {
    let dir = tempfile::tempdir().unwrap();
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let out = bin()
        .args([
            "run",
            "experiments/smoke/linear.toml",
            "--quiet",
            "--threads",
            "2",
            "--out",
        ])
        .arg(dir.path())
        .current_dir(root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for f in [
        "manifest.json",
        "summary.csv",
        "regret.png",
        "gap_vs_rho.csv",
        "gap_vs_rho.png",
        "price_of_privacy.png",
        "regret_curves.csv",
        "regret_curves.png",
    ] {
        assert!(dir.path().join(f).exists(), "{f} missing");
    }
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m["setting"], "linear");
    assert_eq!(m["environment"]["dim"], 3);
    assert_eq!(m["errors"].as_array().unwrap().len(), 0);
    let pols = m["policies"].as_array().unwrap();
    assert_eq!(pols.len(), 7);
    // LinUCB (added in one file + one registry line) runs beside the GOPE family.
    let lin = pols.iter().find(|p| p["kind"] == "lin_ucb").unwrap();
    assert_eq!(lin["privacy_summary"], "non-private");
    // Both phase-length readings of AdaR-GOPE-Var, told apart by their labels.
    for label in ["adar_gope_var(rho=1)", "adar_gope_var-eq4(rho=1)"] {
        assert!(pols.iter().any(|p| p["label"] == label), "{label} missing");
    }
    let adac = pols
        .iter()
        .find(|p| p["label"] == "adac_gope(rho=1)")
        .unwrap();
    assert!(
        adac["privacy_summary"]
            .as_str()
            .unwrap()
            .contains("CONDITIONAL")
    );
    let out_pert = pols
        .iter()
        .find(|p| p["kind"] == "gope_output_perturbation")
        .unwrap();
    assert_eq!(out_pert["privacy"]["boundary"]["lo"], -1.0);

    // Same seed, one thread: byte-identical outputs.
    let dir2 = tempfile::tempdir().unwrap();
    let st = bin()
        .args([
            "run",
            "experiments/smoke/linear.toml",
            "--quiet",
            "--threads",
            "1",
            "--out",
        ])
        .arg(dir2.path())
        .current_dir(root)
        .status()
        .unwrap();
    assert!(st.success());
    for f in [
        "summary.csv",
        "manifest.json",
        "gap_vs_rho.csv",
        "regret_curves.csv",
    ] {
        assert_eq!(
            std::fs::read(dir.path().join(f)).unwrap(),
            std::fs::read(dir2.path().join(f)).unwrap(),
            "{f} depends on the thread count"
        );
    }
}

#[test]
fn bad_linear_input_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bad.toml");
    std::fs::write(
        &f,
        "name = 'bad'\nmaster_seed = 1\nhorizon = 10\nruns = 1\n[env]\nkind = 'linear'\narms = [[1.0, 0.0], [1.0]]\n[[policy]]\nkind = 'gope'\n",
    )
    .unwrap();
    let out = bin().args(["run", "--quiet"]).arg(&f).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("arms[1] = [1.0]"), "{err}");
}
