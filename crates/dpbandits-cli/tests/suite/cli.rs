//! CLI integration tests: smoke experiments, thread-count invariance, bad input.

use crate::{bin, repo, run, text};

/// Every smoke experiment runs and writes a manifest, a summary and the plots.
#[test]
fn smoke_experiments_run() {
    let mut found = 0;
    for entry in std::fs::read_dir(repo().join("experiments/smoke")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        found += 1;
        let out = tempfile::tempdir().unwrap();
        let o = run(&[
            "run",
            path.to_str().unwrap(),
            "--out",
            out.path().to_str().unwrap(),
            "--quiet",
        ]);
        assert!(o.status.success(), "{}: {}", path.display(), text(&o));
        assert!(
            out.path().join("manifest.json").is_file(),
            "{}",
            path.display()
        );
        let manifest: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out.path().join("manifest.json")).unwrap(),
        )
        .unwrap();
        assert!(manifest["master_seed"].is_u64());
        assert!(!text(&o).contains("panicked"));
    }
    assert!(found >= 1);
}

/// Same seed, 1 thread vs 2 threads: every output file is byte-identical (the journal, which
/// records jobs in the order they finish, is not an output).
#[test]
fn output_is_identical_for_any_thread_count() {
    let file = repo().join("experiments/smoke/finite.toml");
    let dirs: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    for (threads, d) in ["1", "2"].iter().zip(&dirs) {
        let o = run(&[
            "run",
            file.to_str().unwrap(),
            "--out",
            d.path().to_str().unwrap(),
            "--threads",
            threads,
            "--quiet",
        ]);
        assert!(o.status.success(), "{}", text(&o));
    }
    let mut names: Vec<_> = std::fs::read_dir(dirs[0].path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "journal.bin")
        .collect();
    names.sort();
    assert!(names.len() >= 8, "{names:?}");
    for n in names {
        let a = std::fs::read(dirs[0].path().join(&n)).unwrap();
        let b = std::fs::read(dirs[1].path().join(&n)).unwrap();
        assert!(a == b, "{n:?} differs between 1 and 2 threads");
    }
}

/// The default experiment is embedded and runs without a file (shortened here with --runs).
#[test]
fn default_experiment_runs() {
    let out = tempfile::tempdir().unwrap();
    let o = run(&[
        "run",
        "--default",
        "--runs",
        "3",
        "--horizon",
        "100000",
        "--out",
        out.path().to_str().unwrap(),
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    for f in [
        "summary.csv",
        "manifest.json",
        "regret.svg",
        "regret.png",
        "gap_vs_rho.png",
        "price_of_privacy.png",
    ] {
        assert!(out.path().join(f).is_file(), "{f} missing");
    }
    let m = std::fs::read_to_string(out.path().join("manifest.json")).unwrap();
    assert!(
        m.contains("rho-Interactive zCDP"),
        "the guarantee is in the manifest"
    );
}

/// `dpbandits list | head`: output into a pipe nobody reads ends the process by SIGPIPE, as
/// for other Unix tools, not by a panic (exit 101 and a backtrace).
#[test]
fn a_closed_pipe_ends_the_listing_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader); // closed before the process writes anything
    let o = bin()
        .arg("list")
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{err}");
    const SIGPIPE: i32 = 13; // Linux
    assert_eq!(o.status.signal(), Some(SIGPIPE), "{:?}: {err}", o.status);
}

#[test]
fn list_shows_algorithms_with_references() {
    let o = run(&["list"]);
    assert!(o.status.success());
    let t = text(&o);
    for s in [
        "adac_ucb",
        "AdaC-UCB",
        "Algorithm 4",
        "zCDP",
        "ucb1",
        "kl_ucb",
        "thompson",
        "adaptive_ucb",
        "bernoulli",
    ] {
        assert!(t.contains(s), "list lacks {s}: {t}");
    }
}

const BASE: &str = r#"
name = "bad"
master_seed = 1
horizon = 1000
runs = 2
[env]
kind = "bernoulli"
means = [0.5, 0.25]
[[policy]]
kind = "adac_ucb"
rho = 1.0
"#;

/// Run a modified copy of BASE; expect exit code 2, no panic, and every needle in the message.
fn expect_error(toml: &str, needles: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bad.toml");
    std::fs::write(&f, toml).unwrap();
    let o = bin()
        .args([
            "run",
            f.to_str().unwrap(),
            "--out",
            dir.path().join("out").to_str().unwrap(),
            "--quiet",
        ])
        .output()
        .unwrap();
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(!t.contains("panicked"), "{t}");
    for n in needles {
        assert!(t.contains(n), "message lacks {n:?}: {t}");
    }
    assert!(
        !dir.path().join("out").exists(),
        "nothing written for a bad file"
    );
}

#[test]
fn bad_input_gives_clear_errors() {
    expect_error(
        &BASE.replace("adac_ucb", "ucb9"),
        &["policy[0]", "kind = \"ucb9\"", "one of:", "adac_ucb"],
    );
    expect_error(
        &BASE.replace("rho = 1.0", "rho = 0.0"),
        &["policy[0] (adac_ucb)", "rho = 0", "[1e-9, 1e9]"],
    );
    expect_error(
        &BASE.replace("rho = 1.0", "rho = -1.0"),
        &["rho = -1", "[1e-9, 1e9]"],
    );
    expect_error(
        &BASE.replace("rho = 1.0", "rho = nan"),
        &["rho = NaN", "[1e-9, 1e9]"],
    );
    // Audit finding C1: rho = 1e308 used to hang (2 rho overflowed, the calibration loop walked
    // up from sigma = 0); M1: dp_ts at eps = 1e-309 panicked with an infinite Laplace scale.
    expect_error(
        &BASE.replace("rho = 1.0", "rho = 1e308"),
        &["policy[0] (adac_ucb)", "rho = 1e308", "[1e-9, 1e9], or inf"],
    );
    expect_error(
        &BASE
            .replace("adac_ucb", "dp_ts")
            .replace("rho = 1.0", "epsilon = 1e-309"),
        &["policy[0] (dp_ts)", "epsilon = 1e-309", "[1e-9, 1e9]"],
    );
    expect_error(
        &BASE.replace("rho = 1.0", "rho = [0.1, -2.0]"),
        &["rho = -2"],
    );
    expect_error(&BASE.replace("rho = 1.0", ""), &["rho = (missing)"]);
    expect_error(
        &BASE.replace("[0.5, 0.25]", "[1.5, 0.25]"),
        &["env (bernoulli)", "means[0] = 1.5", "[0, 1]"],
    );
    expect_error(
        &BASE.replace("[0.5, 0.25]", "[0.5, -0.1]"),
        &["means[1] = -0.1"],
    );
    expect_error(
        &BASE.replace("[0.5, 0.25]", "[]"),
        &["means = []", "K >= 1"],
    );
    expect_error(
        &BASE.replace("horizon = 1000", "horizon = 0"),
        &["horizon = 0", ">= 1"],
    );
    expect_error(&BASE.replace("runs = 2", "runs = 0"), &["runs = 0"]);
    expect_error(
        &BASE.replace("runs = 2", "runs = 2\nhorizn = 5"),
        &["unknown field", "horizn"],
    );
    expect_error(
        &BASE.replace("rho = 1.0", "rho = 1.0\nbta = 2"),
        &["policy[0] (adac_ucb)", "unknown field", "bta"],
    );
    expect_error(
        &BASE.replace("means = [0.5, 0.25]", "means = [0.5, 0.25]\nsigma = 1"),
        &["env (bernoulli)", "unknown field", "sigma"],
    );
    expect_error(
        &BASE.replace("kind = \"bernoulli\"", "kind = \"bernouli\""),
        &["env", "kind = \"bernouli\"", "bernoulli"],
    );
    expect_error(
        &BASE.replace("horizon = 1000", "horizon = \"long\""),
        &["horizon", "invalid type"],
    );
    expect_error(
        &BASE
            .replace("rho = 1.0", "rho = 1.0\nboundary = \"reject\"")
            .replace("bernoulli\"\nmeans", "gaussian\"\nmeans"),
        &["privacy boundary", "reject"],
    );
    expect_error("name = \n", &["bad.toml"]);
    expect_error(
        &format!(
            "{BASE}\n[[figure]]\nkind = \"price_of_privacy\"\nprivate = \"adac_ucb\"\nbaseline = \"ucb1\"\nvalues = [1.0]\n"
        ),
        &["figure[0]", "baseline = \"ucb1\""],
    );
}

#[test]
fn bad_command_line_gives_clear_errors() {
    let o = run(&["run", "no/such/file.toml"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("no/such/file.toml"), "{}", text(&o));
    let o = run(&["run"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("--default"));
    let o = run(&["run", "--default", "--threads", "0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("--threads 0"));
    let o = run(&["run", "--default", "--runs", "0"]);
    assert!(text(&o).contains("--runs 0"));
    let o = run(&["frobnicate"]);
    assert_eq!(o.status.code(), Some(2));
}

/// A newcomer finds every algorithm by its paper name in one step: `list` prints, for every
/// registry kind, its paper name and a source file that exists, and its parameters.
#[test]
fn list_reports_an_existing_source_file_for_every_kind() {
    let o = run(&["list"]);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let lines: Vec<&str> = out.lines().collect();
    let mut sources = 0;
    for l in &lines {
        let Some(path) = l.trim().strip_prefix("source:") else {
            continue;
        };
        let path = path.trim();
        assert!(
            repo().join(path).is_file(),
            "list reports {path}, which does not exist"
        );
        sources += 1;
    }
    for kind in [
        "adac_ucb",
        "adac_gope",
        "lin_ucb",
        "adac_oful",
        "dp_tt",
        "dp_se_bai",
        "bai_bernoulli",
        "linear",
        "contextual_gaussian",
    ] {
        assert!(
            lines
                .iter()
                .any(|l| l.trim_start().starts_with(&format!("{kind} "))),
            "list does not show {kind}"
        );
    }
    assert!(sources >= 30, "only {sources} source lines");
    assert!(
        out.contains("parameters: `rho > 0`"),
        "parameters of adac_ucb not shown"
    );
}
