//! Issue 13, "no panic or hang reachable from a TOML file": a property test over experiment
//! files. Every registry kind of every setting gets its example parameters with each numeric value
//! replaced by an extreme one (0, negative, subnormal, 1e-309, 1e308, +-inf, NaN, ...), and extreme
//! horizons and checkpoint counts; planning must return `Ok` or an `Err` (never panic), and a plan
//! that is accepted runs to the end (short horizons) within a time limit, without panicking.
//!
//! Deterministic: 600 cases from the crate's portable generator with a fixed seed.

use dpbandits::config::Setting;
use dpbandits::experiment::{Plan, run};
use dpbandits::registry::POLICIES;
use dpbandits::rng::{Stream, stream_rng};
use rand::RngExt;
use std::sync::mpsc;
use std::time::Duration;

/// Extreme and ordinary values for every numeric parameter.
const VALUES: [&str; 15] = [
    "0.0", "-1.0", "5e-324", "1e-309", "1e-12", "1e-9", "0.5", "1.0", "3.0", "20.0", "100.0",
    "1e9", "1e308", "inf", "nan",
];
const HORIZONS: [&str; 4] = ["1", "2", "40", "1e15"];
const POINTS: [&str; 4] = ["2", "3", "1000000", "1e9"];

fn env_table(setting: Setting) -> &'static str {
    match setting {
        Setting::FiniteArmed => "kind = \"bernoulli\"\nmeans = [0.9, 0.5]\n",
        Setting::Linear => {
            "kind = \"linear\"\narms = [[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]]\ntheta = [0.9, 0.3]\nsigma = 1.0\n"
        }
        Setting::Contextual => "kind = \"contextual_gaussian\"\nd = 3\nk = 4\n",
        Setting::Bai => "kind = \"bai_bernoulli\"\nmeans = [0.9, 0.3]\ndelta = 0.1\n",
    }
}

/// The experiment file of one case.
fn file(kind: usize, picks: &[usize], horizon: usize, points: usize, sweep: bool) -> String {
    let e = &POLICIES[kind];
    let example: toml::Table = toml::from_str(e.info.example).unwrap();
    let mut params = String::new();
    for (i, (k, v)) in example.iter().enumerate() {
        let value = match v {
            toml::Value::Float(_) | toml::Value::Integer(_) => {
                let x = VALUES[picks[i % picks.len()]];
                if sweep && i == 0 {
                    format!("[{x}, 0.5]")
                } else {
                    x.to_string()
                }
            }
            other => other.to_string(),
        };
        params.push_str(&format!("{k} = {value}\n"));
    }
    format!(
        "name = \"fuzz\"\nmaster_seed = 1\nhorizon = {}\nruns = 1\n[checkpoints]\npoints = {}\n[env]\n{}[[policy]]\nkind = \"{}\"\n{params}",
        HORIZONS[horizon],
        POINTS[points],
        env_table(e.info.setting),
        e.kind()
    )
}

/// What happened to one case.
#[derive(Debug, PartialEq)]
enum Fate {
    Refused,
    Planned,
    Ran,
}

/// Plan and (for short horizons) run `text` on another thread; `Err` on a panic or after 60 s.
fn plan_and_run(text: String) -> Result<Fate, String> {
    let (tx, rx) = mpsc::channel();
    let t = text.clone();
    std::thread::spawn(move || {
        let r = std::panic::catch_unwind(|| match Plan::from_toml(&t) {
            Err(_) => Fate::Refused,
            Ok(plan) if plan.spec.horizon <= 40 => {
                let _ = run(&plan, &|| {});
                Fate::Ran
            }
            Ok(_) => Fate::Planned,
        });
        let _ = tx.send(r.ok());
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(Some(f)) => Ok(f),
        Ok(None) => Err(format!("panicked on:\n{text}")),
        Err(_) => Err(format!("no answer within 60 s on:\n{text}")),
    }
}

/// 600 cases drawn from the portable generator with a fixed seed; every case must end without a
/// panic, and enough of them must be accepted and run that the test exercises the run loops.
#[test]
fn experiment_files_never_panic_or_hang() {
    let mut rng = stream_rng(20_261_123, Stream::Policy, &[]);
    let (mut ran, mut refused) = (0, 0);
    for _ in 0..600 {
        let kind = rng.random_range(0..POLICIES.len());
        let picks: Vec<usize> = (0..rng.random_range(1..4))
            .map(|_| rng.random_range(0..VALUES.len()))
            .collect();
        let text = file(
            kind,
            &picks,
            rng.random_range(0..HORIZONS.len()),
            rng.random_range(0..POINTS.len()),
            rng.random::<bool>(),
        );
        match plan_and_run(text) {
            Ok(Fate::Ran) => ran += 1,
            Ok(Fate::Refused) => refused += 1,
            Ok(Fate::Planned) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        ran >= 60 && refused >= 60,
        "ran {ran}, refused {refused} of 600"
    );
}

/// The reproducers of the outside audit end at once with an error naming the field.
#[test]
fn audit_reproducers_end_with_clear_errors() {
    let base = |env: &str, policy: &str, extra: &str| {
        format!(
            "name = \"r\"\nmaster_seed = 1\nhorizon = 100\nruns = 1\n{extra}[env]\n{env}[[policy]]\n{policy}"
        )
    };
    let fin = env_table(Setting::FiniteArmed);
    for (text, needle) in [
        (
            base(fin, "kind = \"adac_ucb\"\nrho = 1e308\n", ""),
            "rho = 1e308",
        ),
        (
            base(
                env_table(Setting::Contextual),
                "kind = \"adac_oful\"\nrho = 1e308\n",
                "",
            ),
            "rho = 1e308",
        ),
        (
            base(
                fin,
                "kind = \"ldp_ucb\"\nmechanism = \"bernoulli\"\nepsilon = 100.0\n",
                "",
            ),
            "epsilon = 100",
        ),
        (
            base(fin, "kind = \"dp_ts\"\nepsilon = 1e-309\n", ""),
            "epsilon = 1e-309",
        ),
        (
            base(fin, "kind = \"ucb1\"\n", "[checkpoints]\npoints = 1e9\n"),
            "checkpoints.points",
        ),
    ] {
        let start = std::time::Instant::now();
        let e = Plan::from_toml(&text)
            .err()
            .unwrap_or_else(|| panic!("accepted:\n{text}"));
        assert!(e.to_string().contains(needle), "{e}");
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{needle}: {:?}",
            start.elapsed()
        );
    }
}
