//! Conformance suite: every finite-armed algorithm of the registry, with its example parameters,
//! goes through the same checks (regex's "one corpus, many engines"). A new algorithm joins by
//! being registered.
//!
//! * same seed -> same trajectory (and a different seed -> a different one, for randomised policies
//!   this is not required, so it is not checked);
//! * `Box<dyn Policy>` is `Send`;
//! * no panic at K = 1, K = 2, T = 1, and with rewards at and beyond the range bounds (NaN included);
//! * on an easy instance (means 0.9 / 0.1) the best arm gets most pulls;
//! * the guarantee is consistent: a private policy declares a reward boundary.

use dpbandits::env::{Bernoulli, Environment};
use dpbandits::policy::{Policy, PolicyConfig};
use dpbandits::registry::{POLICIES, PolicyEntry};
use dpbandits::sim::{CheckpointGrid, SimMode, simulate_finite};

/// Variants that one registry example cannot show (a second mechanism, a second index), run
/// through the same checks: (kind, parameters).
const EXTRA_EXAMPLES: &[(&str, &str)] = &[("ldp_ucb", "epsilon = 1.0\nmechanism = \"bernoulli\"")];

fn finite_entries() -> Vec<(&'static PolicyEntry, Box<dyn PolicyConfig>)> {
    let mut v: Vec<(&'static PolicyEntry, Box<dyn PolicyConfig>)> = POLICIES
        .iter()
        .filter_map(|e| {
            e.example_finite().map(|c| {
                (
                    e,
                    c.unwrap_or_else(|err| panic!("{}: example: {err}", e.kind)),
                )
            })
        })
        .collect();
    for &(kind, params) in EXTRA_EXAMPLES {
        let e = dpbandits::registry::policy(kind).unwrap();
        let dpbandits::registry::PolicyParser::Finite(parse) = e.parse else {
            panic!("{kind}: not finite-armed")
        };
        let cfg = parse(toml::from_str(params).unwrap())
            .unwrap_or_else(|err| panic!("{kind}: extra example: {err}"));
        v.push((e, cfg));
    }
    v
}

/// Arms chosen in `t` rounds, step by step, on a fixed Bernoulli instance.
fn trajectory(cfg: &dyn PolicyConfig, seed: u64, horizon: u64) -> Vec<usize> {
    let mut env = Bernoulli::new(vec![0.6, 0.5, 0.4], 99).unwrap();
    let mut p = cfg.build(3, seed).unwrap();
    (0..horizon)
        .map(|t| {
            let a = p.choose(t).arm;
            let r = env.pull(a, t);
            p.observe(a, r);
            a
        })
        .collect()
}

#[test]
fn registry_is_nonempty_and_kinds_unique() {
    let entries = finite_entries();
    assert!(entries.len() >= 5);
    let mut kinds: Vec<&str> = POLICIES.iter().map(|e| e.kind).collect();
    kinds.sort_unstable();
    kinds.dedup();
    assert_eq!(
        kinds.len(),
        POLICIES.len(),
        "duplicate kind in the registry"
    );
    for (e, cfg) in &entries {
        assert_eq!(cfg.kind(), e.kind, "config kind differs from registry kind");
    }
}

#[test]
fn same_seed_same_trajectory() {
    for (e, cfg) in finite_entries() {
        let a = trajectory(cfg.as_ref(), 7, 3000);
        let b = trajectory(cfg.as_ref(), 7, 3000);
        assert_eq!(a, b, "{}: same seed gave different trajectories", e.kind);
    }
}

#[test]
fn policies_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    for (_, cfg) in finite_entries() {
        let p: Box<dyn Policy> = cfg.build(2, 1).unwrap();
        assert_send(&p);
    }
}

#[test]
fn no_panic_on_edge_cases() {
    for (e, cfg) in finite_entries() {
        for k in [1usize, 2] {
            // T = 1
            let mut p = cfg.build(k, 3).unwrap();
            let pull = p.choose(0);
            assert!(pull.arm < k && pull.steps >= 1, "{}", e.kind);
            p.observe(pull.arm, 1.0);
            // rewards at and beyond the bounds, step by step
            let mut p = cfg.build(k, 4).unwrap();
            let rewards = [0.0, 1.0, 1.5, -0.5, f64::NAN, f64::INFINITY, 0.5];
            for t in 0..200u64 {
                let pull = p.choose(t);
                assert!(pull.arm < k, "{}: arm out of range", e.kind);
                p.observe(pull.arm, rewards[t as usize % rewards.len()]);
            }
            let pull = p.choose(200);
            assert!(pull.arm < k);
        }
        assert!(
            cfg.build(0, 1).is_err(),
            "{}: K = 0 must be an error",
            e.kind
        );
    }
}

#[test]
fn private_policies_declare_a_boundary() {
    for (e, cfg) in finite_entries() {
        let g = cfg.guarantee();
        if g.is_private() {
            assert!(
                g.boundary.is_some(),
                "{}: private without a reward boundary",
                e.kind
            );
            assert!(e.privacy != "none", "{}: registry says non-private", e.kind);
        }
    }
}

/// Easy instance (gap 0.8): after 20000 rounds the best arm has at least 90% of the pulls in every
/// one of 5 seeded runs. With these gaps the expected suboptimal pulls of every listed algorithm are
/// a few hundred, so a failure means a broken policy, not bad luck.
#[test]
fn easy_instance_best_arm_dominates() {
    let horizon = 20_000;
    let grid = CheckpointGrid::log(horizon, 2, &[]).unwrap();
    for (e, cfg) in finite_entries() {
        for run in 0..5 {
            let mut env = Bernoulli::new(vec![0.1, 0.9], 1000 + run).unwrap();
            let mut p = cfg.build(2, 2000 + run).unwrap();
            let mut out = vec![0.0; grid.points().len()];
            simulate_finite(
                &mut env,
                p.as_mut(),
                &grid,
                SimMode::Episodes,
                None,
                &mut out,
            );
            // regret = 0.8 * suboptimal pulls
            let sub = out[out.len() - 1] / 0.8;
            assert!(
                sub <= 0.1 * horizon as f64,
                "{}: {sub} suboptimal pulls out of {horizon} (run {run})",
                e.kind
            );
        }
    }
}
