//! Durable runs: SIGKILL at random moments + `--resume`, SIGTERM, shards + `merge` for every
//! setting, the folder lock, stale and unwritable folders, resource limits. The experiments are
//! the small files in `tests/fixtures/` (a fraction of a second each in the test profile).
//!
//! The SIGTERM and lock tests set `DPBANDITS_TEST_SLOW_JOBS_MS` (a test hook of the CLI: every
//! job sleeps that long after it finishes), so the run they signal or collide with is surely
//! still running; the results do not depend on it. The SIGKILL test uses real timing.

use crate::bin;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/{name}.toml"))
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("binary runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Every output file of a folder (not the journal, whose records are in finishing order, nor
/// the lock file).
fn outputs(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "journal.bin" && n != "run.lock")
        .map(|n| {
            let bytes = std::fs::read(dir.join(&n)).unwrap();
            (n, bytes)
        })
        .collect()
}

fn manifest(dir: &Path) -> Option<serde_json::Value> {
    serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).ok()?).ok()
}

fn status(dir: &Path) -> Option<String> {
    manifest(dir)?["status"].as_str().map(str::to_string)
}

/// A folder's output files and how long the run took.
type Reference = (BTreeMap<String, Vec<u8>>, Duration);

/// The outputs of an uninterrupted run of a fixture, and how long it took (computed once).
fn reference(name: &str) -> (BTreeMap<String, Vec<u8>>, Duration) {
    reference_with(name, &[])
}

/// [`reference`] with extra arguments (e.g. `--runs`).
fn reference_with(name: &str, extra: &[&str]) -> (BTreeMap<String, Vec<u8>>, Duration) {
    let key = format!("{name} {extra:?}");
    static CACHE: OnceLock<Mutex<BTreeMap<String, Reference>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(r) = cache.lock().unwrap().get(&key) {
        return r.clone();
    }
    let d = tempfile::tempdir().unwrap();
    let start = Instant::now();
    let o = bin()
        .args(["run", p(&fixture(name)), "--out", p(d.path()), "--quiet"])
        .args(extra)
        .output()
        .unwrap();
    let took = start.elapsed();
    assert!(o.status.success(), "{}", text(&o));
    let out = outputs(d.path());
    assert!(out.len() >= 4, "{name}: {:?}", out.keys());
    assert_eq!(status(d.path()).as_deref(), Some("complete"));
    cache.lock().unwrap().insert(key, (out.clone(), took));
    (out, took)
}

fn assert_same(dir: &Path, reference: &BTreeMap<String, Vec<u8>>, what: &str) {
    let got = outputs(dir);
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        reference.keys().collect::<Vec<_>>(),
        "{what}: files"
    );
    for (n, bytes) in reference {
        assert!(&got[n] == bytes, "{what}: {n} differs");
    }
}

/// Done-when 1: SIGKILL at 24 moments drawn from a fixed seed over four experiments (finite,
/// linear, contextual, BAI), uniformly in [0, 1.2 x the uninterrupted run time] (so kills land
/// in start-up, simulation and output writing), then `--resume`: every output file is
/// byte-identical to the uninterrupted run's, and a killed folder never says `complete` unless
/// its outputs already are the final ones.
#[test]
fn sigkill_at_random_moments_then_resume_is_byte_identical() {
    let mut state: u64 = 0x5eed_0014;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (mut trials, mut killed, mut reused) = (0, 0, 0);
    for name in ["finite", "contextual", "bai", "linear"] {
        let (reference, took) = reference(name);
        for t in 0..6 {
            let d = tempfile::tempdir().unwrap();
            let delay = took.mul_f64((next() % 1200) as f64 / 1000.0);
            let mut child = bin()
                .args(["run", p(&fixture(name)), "--out", p(d.path()), "--quiet"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            std::thread::sleep(delay);
            let _ = child.kill();
            let st = child.wait().unwrap();
            if !st.success() {
                killed += 1;
            }
            let what = format!("{name}, trial {t}, SIGKILL after {delay:?}");
            if status(d.path()).as_deref() == Some("complete") {
                assert_same(d.path(), &reference, &format!("{what} (said complete)"));
            }
            let o = run(&[
                "run",
                p(&fixture(name)),
                "--out",
                p(d.path()),
                "--resume",
                "--quiet",
            ]);
            assert!(o.status.success(), "{what}: {}", text(&o));
            if text(&o).contains("resuming:") {
                reused += 1;
            }
            assert_same(d.path(), &reference, &what);
            assert_eq!(status(d.path()).as_deref(), Some("complete"), "{what}");
            trials += 1;
        }
    }
    assert!(trials >= 20);
    // Not vacuous: most kills hit a running process, and some left journalled jobs to reuse.
    assert!(
        killed >= 12,
        "only {killed} of {trials} kills hit a running process"
    );
    assert!(
        reused >= 3,
        "only {reused} of {trials} resumes reused journalled jobs"
    );
}

fn wait_for_manifest(dir: &Path) {
    let start = Instant::now();
    while manifest(dir).is_none() {
        assert!(start.elapsed() < Duration::from_secs(20), "no manifest");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// SIGTERM stops a run cleanly: exit code 130, `status = interrupted` with the missing jobs;
/// `--resume` completes it byte-identically.
#[test]
fn sigterm_interrupts_cleanly_and_resumes() {
    let name = "finite";
    let (reference, _) = reference(name);
    let d = tempfile::tempdir().unwrap();
    // One thread, 160 jobs of >= 20 ms: the run is under way, not finished, when its manifest
    // appears (the signal handler is installed before the folder is opened).
    let mut child = bin()
        .args(["run", p(&fixture(name)), "--out", p(d.path()), "--quiet"])
        .args(["--threads", "1"])
        .env("DPBANDITS_TEST_SLOW_JOBS_MS", "20")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_manifest(d.path());
    let k = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(k.success());
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(130), "{st:?}");
    let m = manifest(d.path()).unwrap();
    assert_eq!(m["status"], "interrupted");
    let jobs = &m["jobs"];
    assert!(jobs["journalled"].as_u64().unwrap() < jobs["in_shard"].as_u64().unwrap());
    assert!(!jobs["missing"].as_array().unwrap().is_empty());
    // Without --resume the unfinished folder is refused.
    let o = bin()
        .args(["run", p(&fixture(name)), "--out", p(d.path()), "--quiet"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("--resume"), "{}", text(&o));
    let o = bin()
        .args([
            "run",
            p(&fixture(name)),
            "--out",
            p(d.path()),
            "--resume",
            "--quiet",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_same(d.path(), &reference, "after SIGTERM + resume");
}

/// Done-when 2: shards 0/3, 1/3, 2/3 + merge equal the unsharded run in every setting; a
/// missing or duplicated shard and shards of different experiments exit 2 naming the problem.
#[test]
fn shards_merge_to_the_unsharded_run_in_every_setting() {
    let base = tempfile::tempdir().unwrap();
    for name in ["finite", "linear", "contextual", "bai"] {
        let (reference, _) = reference(name);
        let shards: Vec<PathBuf> = (0..3)
            .map(|i| {
                let s = base.path().join(format!("{name}-{i}"));
                let o = run(&[
                    "run",
                    p(&fixture(name)),
                    "--out",
                    p(&s),
                    "--shard",
                    &format!("{i}/3"),
                    "--quiet",
                ]);
                assert!(o.status.success(), "{name} shard {i}: {}", text(&o));
                assert_eq!(status(&s).as_deref(), Some("complete"));
                assert!(!s.join("summary.csv").exists(), "a shard writes no summary");
                s
            })
            .collect();
        let out = base.path().join(format!("{name}-merged"));
        // In any order.
        let o = run(&[
            "merge",
            p(&shards[2]),
            p(&shards[0]),
            p(&shards[1]),
            "--out",
            p(&out),
        ]);
        assert!(o.status.success(), "{name} merge: {}", text(&o));
        assert_same(&out, &reference, &format!("{name}: merged shards"));

        let o = run(&[
            "merge",
            p(&shards[0]),
            p(&shards[2]),
            "--out",
            p(&base.path().join("x")),
        ]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(text(&o).contains("shard 1/3 missing"), "{}", text(&o));
        let o = run(&[
            "merge",
            p(&shards[0]),
            p(&shards[1]),
            p(&shards[1]),
            p(&shards[2]),
            "--out",
            p(&base.path().join("x")),
        ]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(text(&o).contains("shard 1/3 given twice"), "{}", text(&o));
    }
    // Different experiments (same file, other --runs).
    let other = base.path().join("other-1");
    let o = run(&[
        "run",
        p(&fixture("finite")),
        "--out",
        p(&other),
        "--shard",
        "1/3",
        "--runs",
        "3",
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let o = run(&[
        "merge",
        p(&base.path().join("finite-0")),
        p(&other),
        p(&base.path().join("finite-2")),
        "--out",
        p(&base.path().join("x")),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("shards of different experiments"),
        "{}",
        text(&o)
    );
    // An unfinished shard is refused.
    let o = run(&[
        "merge",
        p(&base.path().join("nope")),
        "--out",
        p(&base.path().join("x")),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

/// Done-when 3: a second run into a folder in use is refused (even with --force) and nothing is
/// mixed; stale folders are refused; --force clears them.
#[test]
fn folder_lock_and_stale_folders() {
    let (reference, _) = reference("finite");
    let d = tempfile::tempdir().unwrap();
    let first = bin()
        .args([
            "run",
            p(&fixture("finite")),
            "--out",
            p(d.path()),
            "--quiet",
        ])
        .args(["--threads", "1"])
        // 160 jobs of >= 25 ms on one thread (4 s): still running when the second runs start, even
        // on a loaded machine.
        .env("DPBANDITS_TEST_SLOW_JOBS_MS", "25")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_manifest(d.path());
    let second: Vec<Output> = [&[][..], &["--force"][..], &["--resume"][..]]
        .iter()
        .map(|extra| {
            bin()
                .args(["run", p(&fixture("bai")), "--out", p(d.path()), "--quiet"])
                .args(*extra)
                .output()
                .unwrap()
        })
        .collect();
    let first = first.wait_with_output().unwrap();
    assert!(first.status.success(), "{}", text(&first));
    for o in second {
        assert_eq!(
            o.status.code(),
            Some(2),
            "{}\nfirst: {}",
            text(&o),
            text(&first)
        );
        assert!(
            text(&o).contains("in use by another dpbandits process"),
            "{}\nfirst: {}",
            text(&o),
            text(&first)
        );
    }
    assert_same(d.path(), &reference, "first run after a refused second run");

    // The same experiment again into its complete folder: idempotent (outputs re-written from
    // the journal, byte-identical), so the README's main command can be run twice.
    let o = run(&[
        "run",
        p(&fixture("finite")),
        "--out",
        p(d.path()),
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert_same(d.path(), &reference, "re-run into a complete folder");
    let o = run(&[
        "run",
        p(&fixture("finite")),
        "--out",
        p(d.path()),
        "--resume",
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert_same(d.path(), &reference, "resume of a complete run");
    // Another experiment: refused, then cleared with --force.
    let o = run(&["run", p(&fixture("bai")), "--out", p(d.path()), "--quiet"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("holds a run of another experiment"),
        "{}",
        text(&o)
    );
    let o = run(&[
        "run",
        p(&fixture("bai")),
        "--out",
        p(d.path()),
        "--force",
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert_same(d.path(), &self::reference("bai").0, "after --force");
    // A folder of an older run without a journal, and a folder of someone else's files.
    let old = tempfile::tempdir().unwrap();
    std::fs::write(old.path().join("manifest.json"), "{}").unwrap();
    let o = run(&["run", p(&fixture("bai")), "--out", p(old.path()), "--quiet"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("without a journal"), "{}", text(&o));
    let foreign = tempfile::tempdir().unwrap();
    std::fs::write(foreign.path().join("thesis.tex"), "x").unwrap();
    for extra in [&[][..], &["--force"][..]] {
        let o = bin()
            .args([
                "run",
                p(&fixture("bai")),
                "--out",
                p(foreign.path()),
                "--quiet",
            ])
            .args(extra)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2));
        assert!(
            text(&o).contains("not a dpbandits results folder"),
            "{}",
            text(&o)
        );
    }
    assert!(foreign.path().join("thesis.tex").exists());
}

/// Done-when 3: an unwritable folder fails before any simulation (a path below a regular file:
/// unwritable even for root).
#[test]
fn unwritable_folder_fails_before_simulating() {
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let out = file.join("results");
    let start = Instant::now();
    // fig4a in full takes far longer than the limit below in the test profile.
    let o = run(&[
        "run",
        p(&crate::repo().join("experiments/fig4a.toml")),
        "--out",
        p(&out),
        "--quiet",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("a-file/results"), "{}", text(&o));
    assert!(!text(&o).contains("simulated"), "{}", text(&o));
    assert!(start.elapsed() < Duration::from_secs(5));
}

/// Resource guards: refused within seconds, naming the field, the value and the limit.
#[test]
fn oversized_plans_are_refused_quickly() {
    let d = tempfile::tempdir().unwrap();
    let base = std::fs::read_to_string(fixture("finite")).unwrap();
    let cases = [
        (
            base.replace("points = 15", "points = 1e9"),
            ["checkpoints.points = 1000000000", "at most 100000"],
        ),
        (
            base.replace("horizon = 20_000", "horizon = 1e15"),
            ["horizon = 1000000000000000", "at most 1.0e13"],
        ),
        (
            base.replace(
                "kind = \"ucb1\"",
                &format!(
                    "kind = \"adac_ucb\"\nrho = [{}]\nbeta = [{}]",
                    (1..=300)
                        .map(|i| format!("{i}.0"))
                        .collect::<Vec<_>>()
                        .join(","),
                    (1..=300)
                        .map(|i| format!("1.{i}"))
                        .collect::<Vec<_>>()
                        .join(",")
                ),
            ),
            ["90003 configurations", "at most 10000"],
        ),
    ];
    for (i, (toml, needles)) in cases.iter().enumerate() {
        let f = d.path().join(format!("big{i}.toml"));
        std::fs::write(&f, toml).unwrap();
        let start = Instant::now();
        let o = run(&[
            "run",
            p(&f),
            "--out",
            p(&d.path().join(format!("o{i}"))),
            "--quiet",
        ]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        for n in needles {
            assert!(text(&o).contains(n), "case {i}: {}", text(&o));
        }
        assert!(text(&o).contains("--allow-large"), "{}", text(&o));
        assert!(start.elapsed() < Duration::from_secs(5));
    }
}
