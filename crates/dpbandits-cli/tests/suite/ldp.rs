//! Issue 6: the LDP / non-stationary smoke experiment through the CLI.

use crate::bin;
use std::path::Path;

fn run(out: &Path, threads: &str) {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments/smoke/ldp.toml");
    let o = bin()
        .args([
            "run",
            file.to_str().unwrap(),
            "--quiet",
            "--threads",
            threads,
            "--out",
        ])
        .arg(out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn smoke_ldp_runs_and_is_reproducible() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    run(&a, "1");
    run(&b, "2");
    for f in [
        "summary.csv",
        "manifest.json",
        "regret_vs_t.csv",
        "regret_vs_eps.csv",
    ] {
        let x = std::fs::read(a.join(f)).unwrap();
        assert_eq!(
            x,
            std::fs::read(b.join(f)).unwrap(),
            "{f} differs by thread count"
        );
    }
    for f in ["regret_vs_t.png", "regret_vs_eps.png", "regret.png"] {
        assert!(std::fs::metadata(a.join(f)).unwrap().len() > 1000, "{f}");
    }
    let manifest = std::fs::read_to_string(a.join("manifest.json")).unwrap();
    assert!(manifest.contains("epsilon-local DP"));
    assert!(manifest.contains("\"model\": \"local\""));
    assert!(
        manifest.contains("\"breakpoints\": [\n        2001\n      ]"),
        "instance missing"
    );
    let eps = std::fs::read_to_string(a.join("regret_vs_eps.csv")).unwrap();
    // 3 private families x 2 eps values, plus the header
    assert_eq!(eps.lines().count(), 7, "{eps}");
    let summary = std::fs::read_to_string(a.join("summary.csv")).unwrap();
    for label in [
        "sw_klucb_cf(epsilon=1,window=200)",
        "kl_ucb_cf(epsilon=4)",
        "ldp(inner=kl_ucb,epsilon=1)",
        "sw_ucb(window=400)",
        "d_ucb(gamma=0.99)",
    ] {
        assert!(summary.contains(label), "{label}");
    }
}

#[test]
fn list_shows_the_new_algorithms_and_environments() {
    let o = bin().arg("list").output().unwrap();
    let s = String::from_utf8_lossy(&o.stdout);
    for k in [
        "kl_ucb_cf",
        "sw_klucb_cf",
        "ldp",
        "sw_ucb",
        "sw_kl_ucb",
        "d_ucb",
        "piecewise_bernoulli",
        "corrupt_bernoulli",
    ] {
        assert!(s.contains(k), "{k} missing from `dpbandits list`");
    }
}
