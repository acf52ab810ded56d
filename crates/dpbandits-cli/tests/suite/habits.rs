//! Issue 17, the CLI findings, one test each: counts in scientific notation (flags and TOML),
//! `--horizon` on piecewise and BAI files, unknown keys and type errors naming the field,
//! `bounds --help`, shell completions.

use crate::{run, text};

fn file(dir: &tempfile::TempDir, body: &str) -> String {
    let p = dir.path().join("x.toml");
    std::fs::write(&p, body).unwrap();
    p.to_string_lossy().into_owned()
}

const FINITE: &str = "name = \"habits\"\nmaster_seed = 3\nhorizon = 2e3\nruns = 1e0\n[env]\nkind = \"bernoulli\"\nmeans = [0.6, 0.4]\n";

/// `--horizon 1e15` is a number (it used to be "invalid digit found in string"); `1.5` and
/// `-1` are refused naming the value and the accepted forms.
#[test]
fn counts_in_flags() {
    let o = run(&[
        "run",
        "experiments/fig4a.toml",
        "--horizon",
        "1e15",
        "--out",
        "/nonexistent/x",
    ]);
    let t = text(&o);
    assert!(!t.contains("invalid digit"), "{t}");
    assert!(t.contains("1000000000000000"), "{t}");
    for bad in ["1.5", "-1", "1e-3", "ten"] {
        let o = run(&["run", "experiments/fig4a.toml", "--runs", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad}");
        let t = text(&o);
        assert!(
            t.contains(&format!("'{bad}'")) && t.contains("1e5"),
            "{bad}: {t}"
        );
    }
}

/// `1e3` and `1_000` in TOML: top-level counts and counts inside policy tables.
#[test]
fn counts_in_toml() {
    let d = tempfile::tempdir().unwrap();
    let f = file(
        &d,
        &format!(
            "{FINITE}[[policy]]\nkind = \"sw_ucb\"\nwindow = 1e3\n[[policy]]\nkind = \"sw_kl_ucb\"\nwindow = 1_000\n"
        ),
    );
    let out = d.path().join("out");
    let o = run(&[
        "run",
        &f,
        "--quiet",
        "--runs",
        "2",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let m = std::fs::read_to_string(out.join("manifest.json")).unwrap();
    assert!(
        m.contains("sw_ucb(window=1000") && m.contains("\"horizon\": 2000"),
        "{m}"
    );
}

/// A typo'd key is named as unknown, with the allowed keys; a type error inside a table names
/// the field and the value.
#[test]
fn unknown_keys_and_type_errors_name_the_field() {
    let d = tempfile::tempdir().unwrap();
    let f = file(
        &d,
        &format!("{FINITE}[[policy]]\nkind = \"adac_ucb\"\nrh0 = 0.5\n"),
    );
    let t = text(&run(&["run", &f, "--quiet"]));
    assert!(
        t.contains("unknown field `rh0`") && t.contains("`rho`"),
        "{t}"
    );
    assert!(!t.contains("(missing)"), "{t}");
    let f = file(
        &d,
        &format!("{FINITE}[[policy]]\nkind = \"sw_ucb\"\nwindow = [[1]]\n"),
    );
    let t = text(&run(&["run", &f, "--quiet"]));
    assert!(
        t.contains("window = [[1]]") && t.contains("whole number"),
        "{t}"
    );
    let f = file(
        &d,
        &format!("{FINITE}[[policy]]\nkind = \"adac_ucb\"\nrho = 0.5\nbeta = \"x\"\n"),
    );
    let t = text(&run(&["run", &f, "--quiet"]));
    assert!(t.contains("beta = \"x\": expected a number"), "{t}");
}

/// `--horizon` rescales absolute breakpoints (the README quick look on ldp_e1 is in
/// figures.rs) and refuses, with a hint, a horizon that would merge them.
#[test]
fn horizon_rescales_breakpoints_or_refuses() {
    let o = run(&[
        "run",
        "experiments/ldp_e1_rotating.toml",
        "--horizon",
        "3",
        "--runs",
        "1",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let t = text(&o);
    assert!(
        t.contains("--horizon 10000") && t.contains("breakpoint"),
        "{t}"
    );
}

/// `--horizon` on a BAI file sets the sample cap (it used to be ignored).
#[test]
fn horizon_sets_the_bai_cap() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("out");
    let o = run(&[
        "run",
        "crates/dpbandits-cli/tests/fixtures/bai.toml",
        "--horizon",
        "50",
        "--runs",
        "4",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let csv = std::fs::read_to_string(out.join("summary.csv")).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let max = header.iter().position(|h| *h == "max_tau").unwrap();
    let mut rows = 0;
    for line in csv.lines().skip(1) {
        let (mut fields, mut cur, mut quoted) = (vec![], String::new(), false);
        for c in line.chars() {
            match c {
                '"' => quoted = !quoted,
                ',' if !quoted => fields.push(std::mem::take(&mut cur)),
                _ => cur.push(c),
            }
        }
        fields.push(cur);
        let tau: f64 = fields[max].parse().unwrap();
        assert!(tau <= 50.0, "{line}");
        rows += 1;
    }
    assert!(rows >= 3);
    let m = std::fs::read_to_string(out.join("manifest.json")).unwrap();
    assert!(
        m.contains("sample cap (horizon) = 50"),
        "the quick look is recorded"
    );
    assert!(
        text(&o).contains("sample cap") || text(&o).contains("horizon = 50"),
        "{}",
        text(&o)
    );
}

/// `bounds --help` shows `--means` as required.
#[test]
fn bounds_means_is_required() {
    let t = text(&run(&["bounds", "--help"]));
    let usage = t.lines().find(|l| l.starts_with("Usage:")).unwrap();
    assert!(
        usage.contains("--means <MEANS>") && !usage.contains("[--means"),
        "{usage}"
    );
    let o = run(&["bounds", "--epsilon", "1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("--means"));
}

/// `completions bash|zsh|fish` print scripts that know the subcommands and flags.
#[test]
fn shell_completions() {
    for shell in ["bash", "zsh", "fish"] {
        let o = run(&["completions", shell]);
        assert!(o.status.success(), "{shell}");
        let s = String::from_utf8_lossy(&o.stdout);
        for word in ["dpbandits", "run", "bounds", "horizon", "completions"] {
            assert!(s.contains(word), "{shell}: {word} missing");
        }
    }
    let o = run(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("bash"), "the allowed shells are listed");
}
