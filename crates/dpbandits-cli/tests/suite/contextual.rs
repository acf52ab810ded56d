//! The contextual smoke experiment through the CLI, thread-count invariance, and a bad feature file.

use crate::bin;
use std::path::Path;

fn smoke() -> String {
    format!(
        "{}/../../experiments/smoke/contextual.toml",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn run(out: &Path, threads: &str) {
    let o = bin()
        .args(["run", &smoke(), "--quiet", "--threads", threads, "--out"])
        .arg(out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn smoke_contextual_runs_and_is_thread_invariant() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("t1"), dir.path().join("t2"));
    run(&a, "1");
    run(&b, "2");
    for f in [
        "summary.csv",
        "manifest.json",
        "gap_vs_rho.csv",
        "price_of_privacy.csv",
    ] {
        let x = std::fs::read(a.join(f)).unwrap();
        assert_eq!(x, std::fs::read(b.join(f)).unwrap(), "{f} differs");
    }
    for f in ["regret.png", "gap_vs_rho.png", "price_of_privacy.png"] {
        assert!(a.join(f).exists(), "{f}");
    }
    // rho = inf reproduces the RS-OFUL baseline exactly: gap 0.
    let gap = std::fs::read_to_string(a.join("gap_vs_rho.csv")).unwrap();
    let inf_rows: Vec<&str> = gap
        .lines()
        .filter(|l| l.split(',').nth(1) == Some("inf"))
        .collect();
    assert!(!inf_rows.is_empty());
    for l in inf_rows {
        assert_eq!(l.split(',').nth(4), Some("0"), "{l}");
    }
    let manifest = std::fs::read_to_string(a.join("manifest.json")).unwrap();
    assert!(manifest.contains("\"setting\": \"contextual\""));
    assert!(manifest.contains("theta_star"));
    assert!(manifest.contains("CONDITIONAL rho-Interactive zCDP"));
}

#[test]
fn bad_feature_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let feats = dir.path().join("feats.csv");
    std::fs::write(&feats, "0,0.1,0.2\n0,0.3,NaN\n").unwrap();
    let exp = dir.path().join("e.toml");
    std::fs::write(
        &exp,
        format!(
            "name = 'x'\nmaster_seed = 1\nhorizon = 10\nruns = 1\n[env]\nkind = 'contextual_file'\npath = '{}'\n[[policy]]\nkind = 'oful'\n",
            feats.display()
        ),
    )
    .unwrap();
    let o = bin().args(["run", "--quiet"]).arg(&exp).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("feats.csv") && err.contains("line 2, feature 1") && err.contains("NaN"),
        "{err}"
    );
    let o = bin().arg("list").output().unwrap();
    let list = String::from_utf8_lossy(&o.stdout);
    assert!(
        list.contains("adac_oful") && list.contains("contextual_file"),
        "{list}"
    );
}
