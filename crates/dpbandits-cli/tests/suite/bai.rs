//! CLI: the BAI smoke experiment (thread-count invariance), `dpbandits bounds` and `dpbandits design`.

use crate::{bin, repo as root};

#[test]
fn smoke_bai_is_thread_invariant() {
    let tmp = std::env::temp_dir().join(format!("dpbandits_bai_smoke_{}", std::process::id()));
    let file = root().join("experiments/smoke/bai.toml");
    let mut outs = vec![];
    for threads in ["1", "2"] {
        let out = tmp.join(threads);
        let o = bin()
            .args([
                "run",
                file.to_str().unwrap(),
                "--quiet",
                "--threads",
                threads,
                "--out",
            ])
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        for f in [
            "summary.csv",
            "manifest.json",
            "stopping_time.svg",
            "stopping_time.png",
        ] {
            assert!(out.join(f).exists(), "{f} missing");
        }
        outs.push(std::fs::read(out.join("summary.csv")).unwrap());
    }
    assert_eq!(
        outs[0], outs[1],
        "summary.csv differs between 1 and 2 threads"
    );
    let csv = String::from_utf8(outs[0].clone()).unwrap();
    // 4 private algorithm tables x 3 eps + 1 non-private row + header.
    assert_eq!(csv.lines().count(), 1 + 4 * 3 + 1);
    assert!(csv.contains("threshold=joint") && csv.contains("h_half") && csv.contains("thesis"));
    let manifest = std::fs::read_to_string(tmp.join("1/manifest.json")).unwrap();
    assert!(
        manifest.contains("Proposal J")
            && manifest.contains("Proposal R")
            && manifest.contains("pure_dp")
    );
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn bounds_prints_characteristic_times() {
    let o = bin()
        .args([
            "bounds",
            "--means",
            "0.95,0.9,0.9,0.9,0.5",
            "--epsilon",
            "0.1",
            "--delta",
            "0.01",
        ])
        .output()
        .unwrap();
    assert!(o.status.success());
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(s.contains("T*_KL                      = 395.5"), "{s}");
    assert!(s.contains("T*_eps                     = 931."), "{s}");
    assert!(s.contains("lower bound T*_eps ln(1/delta)"), "{s}");
}

#[test]
fn bounds_bad_input() {
    for (args, want) in [
        (
            vec!["--means", "0.9,1.2", "--epsilon", "1"],
            "means[1] = 1.2",
        ),
        (
            vec!["--means", "0.9,0.9,0.5", "--epsilon", "1"],
            "unique best arm",
        ),
        (vec!["--means", "0.9,0.5", "--epsilon", "0"], "epsilon = 0"),
        (
            vec!["--means", "0.9,0.5", "--epsilon", "-2"],
            "epsilon = -2",
        ),
        (
            vec!["--means", "0.9,0.5", "--epsilon", "NaN"],
            "epsilon = NaN",
        ),
        (
            vec!["--means", "0.9,0.5", "--epsilon", "1", "--delta", "1"],
            "delta = 1",
        ),
    ] {
        let o = bin().arg("bounds").args(&args).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains(want), "{args:?}: {e}");
    }
}

/// `dpbandits design` on the trial design file (quick form: `--runs 4`): writes the tidy CSV,
/// one figure per scenario and the self-contained HTML report; the CSV is byte-identical for one
/// and two threads; a bad override names the flag.
#[test]
fn design_writes_the_csv_figures_and_report() {
    let tmp = std::env::temp_dir().join(format!("dpbandits_design_{}", std::process::id()));
    let file = root().join("experiments/trial_design.toml");
    let mut csvs = vec![];
    for threads in ["1", "2"] {
        let out = tmp.join(threads);
        let o = bin()
            .args([
                "design",
                file.to_str().unwrap(),
                "--runs",
                "4",
                "--threads",
                threads,
                "--out",
                out.to_str().unwrap(),
                "--force",
            ])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        for f in [
            "design.csv",
            "report.html",
            "fig_0.svg",
            "fig_1.png",
            "fig_2.plot.json",
        ] {
            assert!(out.join(f).exists(), "{f}");
        }
        let html = std::fs::read_to_string(out.join("report.html")).unwrap();
        assert!(html.contains("<svg") && html.contains("one clear winner"));
        assert!(!html.contains("NaN"));
        let csv = std::fs::read_to_string(out.join("design.csv")).unwrap();
        assert!(csv.starts_with("design,label,scenario,metric,value\n"));
        assert!(csv.contains("p_select_best") && !csv.contains("NaN"));
        csvs.push(csv);
    }
    assert_eq!(csvs[0], csvs[1]);
    let o = bin()
        .args(["design", file.to_str().unwrap(), "--runs", "0"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("design.runs"));
    let o = bin()
        .args(["run", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("dpbandits design"));
    let _ = std::fs::remove_dir_all(&tmp);
}
