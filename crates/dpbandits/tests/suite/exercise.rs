//! Issue 44's exercise kind (`exercise_ucb`, one file and one registry line behind the crate
//! feature `exercise`) through the white-box audit, as `audit::whitebox::tests` audits every
//! private kind: tight at its example parameters, with the seeded noise and with
//! deployment-grade noise. Compiled only with the feature (`scripts/test` runs this suite with
//! it, beside the registry-wide conformance, deployment-noise and session suites, which pick
//! the kind up from the registry unedited).
//!
//! False-failure rate: each audit's intervals hold with probability >= 0.999 (the white-box
//! tests' confidence and 2000 samples), so a correct kind fails each leg with probability
//! <= 1e-3; the seeded leg is deterministic (fixed seed), the deployment leg draws OS-keyed
//! noise.

use dpbandits::audit::{AuditOptions, WhiteBoxOptions, WhiteVerdict, audit_white_box};
use dpbandits::registry;

fn options() -> (AuditOptions, WhiteBoxOptions) {
    (
        AuditOptions {
            confidence: 0.999,
            ..AuditOptions::default()
        },
        WhiteBoxOptions {
            samples: 2000,
            targets: vec![],
        },
    )
}

#[test]
fn the_exercise_kind_is_tight_in_the_white_box_audit() {
    let e = registry::policy("exercise_ucb").expect("the exercise kind is registered");
    assert!(e.info.private && e.info.deployable());
    let o = options();
    let seeded: toml::Table = toml::from_str(e.info.example).unwrap();
    let mut deployed = seeded.clone();
    deployed.insert("noise".into(), "deployment".into());
    for (t, reproducible) in [(seeded, true), (deployed, false)] {
        let r = audit_white_box("exercise_ucb", &t, &o.0, &o.1).unwrap();
        assert_eq!(r.verdict, WhiteVerdict::Tight, "{}", r.table());
        assert!((0.85..=1.15).contains(&r.ratio), "{}", r.table());
        assert_eq!(r.reproducible, reproducible, "{}", r.table());
    }
}
