//! Conformance suite: every algorithm and environment of the registry, in every setting, goes
//! through the same checks with its example parameters (regex's "one corpus, many engines"). A
//! new algorithm joins by being registered.
//!
//! Registry-wide:
//! * kinds are unique, every configuration reports its registry kind, and the parser, the
//!   restorer and the configuration of a kind are of the setting it declares;
//! * the source file `list` reports exists, and its module docs have a `# Parameters` section
//!   that names every parameter of the example;
//! * a private kind without its budget is refused with an error naming the budget;
//! * a private configuration declares a reward boundary, and the registry's claim agrees.
//!
//! Per setting: same seed -> same trajectory; no panic at the edges (K = 1, 2, T = 1, rewards at
//! and beyond the range, NaN); the best arm dominates on an easy instance.

use dpbandits::config::Setting;
use dpbandits::finite::simulate_finite;
use dpbandits::finite::{Bernoulli, Environment};
use dpbandits::finite::{Policy, PolicyConfig};
use dpbandits::privacy::{BoundaryMode, PrivacyGuarantee};
use dpbandits::registry::{Built, ENVIRONMENTS, POLICIES, PolicyEntry};
use dpbandits::sim::{CheckpointGrid, SimMode};
use std::path::Path;

/// Variants that one registry example cannot show (a second mechanism, a second index), run
/// through the same checks: (kind, parameters).
const EXTRA_EXAMPLES: &[(&str, &str)] = &[("ldp_ucb", "epsilon = 1.0\nmechanism = \"bernoulli\"")];

fn examples() -> Vec<(&'static PolicyEntry, Built)> {
    let mut v: Vec<(&'static PolicyEntry, Built)> = POLICIES
        .iter()
        .map(|e| {
            let b = e
                .example()
                .unwrap_or_else(|err| panic!("{}: example: {err}", e.kind()));
            (e, b)
        })
        .collect();
    for &(kind, params) in EXTRA_EXAMPLES {
        let e = dpbandits::registry::policy(kind).unwrap();
        let b = e
            .build(toml::from_str(params).unwrap())
            .unwrap_or_else(|err| panic!("{kind}: extra example: {err}"));
        v.push((e, b));
    }
    v
}

fn finite_entries() -> Vec<(&'static PolicyEntry, Box<dyn PolicyConfig>)> {
    examples()
        .into_iter()
        .filter_map(|(e, b)| match b {
            Built::Finite(c) => Some((e, c)),
            _ => None,
        })
        .collect()
}

/// The kind and guarantee of any built configuration.
fn kind_and_guarantee(b: &Built) -> (&'static str, PrivacyGuarantee) {
    match b {
        Built::Finite(c) => (c.kind(), c.guarantee()),
        Built::Linear(c) => (c.kind(), c.guarantee()),
        Built::Contextual(c) => (c.kind(), c.guarantee()),
        Built::Bai(c) => (c.kind(), c.guarantee()),
    }
}

/// The workspace root, where `list`'s source paths (`file!()`) are relative to.
fn workspace() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

#[test]
fn registry_kinds_unique_and_reported_by_configs() {
    let mut kinds: Vec<&str> = POLICIES.iter().map(|e| e.kind()).collect();
    kinds.extend(ENVIRONMENTS.iter().map(|e| e.info.kind));
    let n = kinds.len();
    kinds.sort_unstable();
    kinds.dedup();
    assert_eq!(kinds.len(), n, "duplicate kind in the registry");
    for (e, b) in examples() {
        assert_eq!(
            kind_and_guarantee(&b).0,
            e.kind(),
            "config kind differs from registry kind"
        );
        // The declared setting is the setting of the parser, the restorer and the configuration.
        for (what, s) in [
            ("parse", e.parse.setting()),
            ("restore", e.restore.setting()),
            ("example", b.setting()),
        ] {
            assert_eq!(s, e.info.setting, "{}: {what}", e.kind());
        }
    }
    for e in ENVIRONMENTS {
        assert_eq!(e.parse.setting(), e.info.setting, "{}: parse", e.kind());
    }
    for s in [
        Setting::FiniteArmed,
        Setting::Linear,
        Setting::Contextual,
        Setting::Bai,
    ] {
        assert!(
            POLICIES.iter().any(|e| e.setting() == s),
            "no algorithm for {s}"
        );
        assert!(
            ENVIRONMENTS.iter().any(|e| e.info.setting == s),
            "no environment for {s}"
        );
    }
}

/// A newcomer finds every kind's source by the file `list` reports; the file documents its
/// parameters, and every parameter of the example is named there.
#[test]
fn every_kind_has_its_source_file_and_parameters() {
    for e in POLICIES {
        let path = workspace().join(e.info.source);
        assert!(
            path.is_file(),
            "{}: {} does not exist",
            e.kind(),
            path.display()
        );
        let doc = std::fs::read_to_string(&path).unwrap();
        assert_eq!(doc, e.info.doc, "{}: doc is not its source file", e.kind());
        let params = e.parameters();
        assert!(
            !params.is_empty(),
            "{}: no `# Parameters` section",
            e.kind()
        );
        let example: toml::Table = toml::from_str(e.info.example).unwrap();
        for key in example.keys() {
            let named = params.match_indices(&format!("`{key}")).any(|(i, m)| {
                params[i + m.len()..]
                    .chars()
                    .next()
                    .is_some_and(|c| !c.is_alphanumeric() && c != '_')
            });
            assert!(
                named,
                "{}: parameter `{key}` is not documented in {}",
                e.kind(),
                e.info.source
            );
        }
        // A family folder's `mod.rs` is named by its folder (`contextual/oful/mod.rs`).
        let source = Path::new(e.info.source);
        let named = match source.file_stem().unwrap().to_str().unwrap() {
            "mod" => source.parent().unwrap(),
            _ => source,
        };
        let stem = named.file_stem().unwrap().to_str().unwrap();
        assert!(
            e.kind().contains(stem)
                || stem.contains(e.kind())
                || e.info.name.to_lowercase().replace('-', "_").contains(stem)
                || stem_family(stem, e.kind()),
            "{}: source file {} is not named after its algorithm family",
            e.kind(),
            e.info.source
        );
    }
    for e in ENVIRONMENTS {
        let path = workspace().join(e.info.source);
        assert!(
            path.is_file(),
            "{}: {} does not exist",
            e.info.kind,
            path.display()
        );
    }
}

/// Families whose file carries the family's paper name (`adac_gope.rs` holds GOPE and its private
/// variants, `oful/` OFUL and RS-OFUL, `adac_ucb.rs` its non-private counterpart).
fn stem_family(stem: &str, kind: &str) -> bool {
    matches!(
        (stem, kind),
        (
            "adac_gope",
            "gope" | "adar_gope_var" | "gope_output_perturbation"
        ) | ("oful", "adac_oful" | "rs_oful")
            | ("adac_ucb", "adaptive_ucb")
            | ("adap_ucb", "adap_klucb")
            | ("kl_ucb_cf", "sw_klucb_cf")
            | ("sw_ucb", "sw_kl_ucb")
            | ("adap_tt", "adap_tt_star")
    )
}

/// Privacy budgets are required by the type: removing `rho`/`epsilon` from a private kind's
/// example is an error that names it (no silent default).
#[test]
fn private_kinds_require_their_budget() {
    for e in POLICIES {
        let example: toml::Table = toml::from_str(e.info.example).unwrap();
        for budget in ["rho", "epsilon"] {
            if !example.contains_key(budget) {
                continue;
            }
            let mut t = example.clone();
            t.remove(budget);
            let err = e
                .build(t)
                .err()
                .unwrap_or_else(|| panic!("{}: accepted a missing {budget}", e.kind()));
            assert!(
                err.to_string().contains(budget),
                "{}: error does not name {budget}: {err}",
                e.kind()
            );
        }
    }
}

#[test]
fn private_configs_declare_a_boundary() {
    for (e, b) in examples() {
        let (_, g) = kind_and_guarantee(&b);
        assert_eq!(
            e.info.private,
            g.is_private(),
            "{}: AlgorithmInfo::private disagrees with the example's guarantee",
            e.kind()
        );
        // A kind holding a `Release` (parsed by the registry) says so in its record: it takes the
        // three release keys. (Kinds not yet converted take them as fields of their own.)
        let release = match &b {
            Built::Finite(c) => c.release().copied(),
            Built::Linear(c) => c.release().copied(),
            Built::Contextual(c) => c.release().copied(),
            Built::Bai(_) => None,
        };
        assert_eq!(
            dpbandits::config::PRIVATE_RELEASE,
            dpbandits::privacy::Release::KEYS
        );
        if release.is_some() {
            assert_eq!(
                e.info.release_keys,
                dpbandits::config::PRIVATE_RELEASE,
                "{}: holds a Release but its record's release_keys differ",
                e.kind()
            );
        }
        if g.is_private() {
            assert!(
                g.boundary.is_some(),
                "{}: private without a reward boundary",
                e.kind()
            );
            assert!(
                e.info.privacy != "none",
                "{}: registry says non-private",
                e.kind()
            );
        } else {
            assert_eq!(
                e.info.privacy,
                "none",
                "{}: registry claims privacy",
                e.kind()
            );
        }
    }
}

/// Arms chosen in `t` rounds, step by step, on a fixed Bernoulli instance.
fn trajectory(cfg: &dyn PolicyConfig, seed: u64, horizon: u64) -> Vec<usize> {
    let mut env = Bernoulli::new(vec![0.6, 0.5, 0.4], 99).unwrap();
    let mut p = cfg.build(3, seed).unwrap();
    (0..horizon)
        .map(|t| {
            let a = p.choose(t).arm;
            let r = env.pull(a, t);
            p.observe(a, r).unwrap();
            a
        })
        .collect()
}

#[test]
fn finite_same_seed_same_trajectory() {
    for (e, cfg) in finite_entries() {
        let a = trajectory(cfg.as_ref(), 7, 3000);
        let b = trajectory(cfg.as_ref(), 7, 3000);
        assert_eq!(a, b, "{}: same seed gave different trajectories", e.kind());
    }
}

#[test]
fn finite_policies_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    for (_, cfg) in finite_entries() {
        let p: Box<dyn Policy> = cfg.build(2, 1).unwrap();
        assert_send(&p);
    }
}

#[test]
fn finite_no_panic_on_edge_cases() {
    for (e, cfg) in finite_entries() {
        for k in [1usize, 2] {
            // T = 1
            let mut p = cfg.build(k, 3).unwrap();
            let pull = p.choose(0);
            assert!(pull.arm < k && pull.steps >= 1, "{}", e.kind());
            p.observe(pull.arm, 1.0).unwrap();
            // rewards at and beyond the bounds, step by step: NaN is always refused, infinity
            // and 1e300 by the numeric boundary of non-private policies (audit finding: they
            // used to poison the baselines); a refused reward changes nothing, so the same
            // commitment is still open and takes the next reward.
            let mut p = cfg.build(k, 4).unwrap();
            let rewards = [0.0, 1.0, 1.5, -0.5, f64::NAN, f64::INFINITY, 1e300, 0.5];
            for t in 0..200u64 {
                let pull = p.choose(t);
                assert!(pull.arm < k, "{}: arm out of range", e.kind());
                let r = rewards[t as usize % rewards.len()];
                match p.observe(pull.arm, r) {
                    Ok(()) => assert!(!r.is_nan(), "{}: NaN admitted", e.kind()),
                    Err(err) => {
                        let private = p.guarantee().is_private();
                        assert!(
                            r.is_nan() || !private || p.boundary().mode == BoundaryMode::Reject,
                            "{}: reward {r} refused: {err}",
                            e.kind()
                        );
                        assert!(!r.is_finite() || r.abs() > 1.0, "{}: {r} refused", e.kind());
                        assert_eq!(
                            p.choose(t),
                            pull,
                            "{}: a refused reward changed the state",
                            e.kind()
                        );
                        p.observe(pull.arm, 0.5).unwrap();
                    }
                }
            }
            let pull = p.choose(200);
            assert!(pull.arm < k);
        }
        assert!(
            cfg.build(0, 1).is_err(),
            "{}: K = 0 must be an error",
            e.kind()
        );
    }
}

/// Easy instance (gap 0.8): after 20000 rounds the best arm has at least 90% of the pulls in every
/// one of 5 seeded runs. With these gaps the expected suboptimal pulls of every listed algorithm are
/// a few hundred, so a failure means a broken policy, not bad luck.
#[test]
fn finite_easy_instance_best_arm_dominates() {
    let horizon = 20_000;
    let grid = CheckpointGrid::log(horizon, 2, &[]).unwrap();
    for (e, cfg) in finite_entries() {
        for run in 0..5 {
            let mut env = Bernoulli::new(vec![0.1, 0.9], 1000 + run).unwrap();
            let mut p = cfg.build(2, 2000 + run).unwrap();
            let mut out = vec![0.0; grid.points().len()];
            simulate_finite(&mut env, p.as_mut(), &grid, SimMode::Episodes, &mut out).unwrap();
            // regret = 0.8 * suboptimal pulls
            let sub = out[out.len() - 1] / 0.8;
            assert!(
                sub <= 0.1 * horizon as f64,
                "{}: {sub} suboptimal pulls out of {horizon} (run {run})",
                e.kind()
            );
        }
    }
}

mod linear {
    use super::*;
    use dpbandits::linear::{LinearInstance, LinearPolicyConfig, simulate_linear};

    fn entries() -> Vec<(&'static PolicyEntry, Box<dyn LinearPolicyConfig>)> {
        examples()
            .into_iter()
            .filter_map(|(e, b)| match b {
                Built::Linear(c) => Some((e, c)),
                _ => None,
            })
            .collect()
    }

    /// An easy instance: 4 arms in R^2, gap >= 0.5 to the best arm, unit noise.
    fn instance() -> LinearInstance {
        LinearInstance::new(
            vec![
                vec![1.0, 0.0],
                vec![0.0, 1.0],
                vec![-1.0, 0.0],
                vec![0.0, -1.0],
            ],
            vec![0.9, 0.4],
            1.0,
        )
        .unwrap()
    }

    fn regret(cfg: &dyn LinearPolicyConfig, inst: &LinearInstance, seed: u64, t: u64) -> f64 {
        let grid = CheckpointGrid::log(t, 2, &[]).unwrap();
        let mut env = inst.env(seed);
        let mut p = cfg.build(inst.arms(), seed + 1).unwrap();
        let mut out = vec![0.0; grid.points().len()];
        simulate_linear(&mut env, p.as_mut(), &grid, &mut out).unwrap();
        out[out.len() - 1]
    }

    #[test]
    fn same_seed_same_regret() {
        let inst = instance();
        for (e, cfg) in entries() {
            let a = regret(cfg.as_ref(), &inst, 5, 20_000);
            let b = regret(cfg.as_ref(), &inst, 5, 20_000);
            assert_eq!(a.to_bits(), b.to_bits(), "{}", e.kind());
        }
    }

    /// Gap 0.5 (arm 1) and more: after 2e5 rounds regret stays below 3% of the worst (1.8 per
    /// round) in each of 3 seeded runs; a working algorithm's regret is logarithmic here.
    #[test]
    fn easy_instance_regret_is_small() {
        let inst = instance();
        let t = 200_000;
        for (e, cfg) in entries() {
            for run in 0..3 {
                let r = regret(cfg.as_ref(), &inst, 100 + run, t);
                assert!(
                    r < 0.03 * 1.8 * t as f64,
                    "{}: regret {r} (run {run})",
                    e.kind()
                );
            }
        }
    }

    #[test]
    fn edge_cases() {
        let one = LinearInstance::new(vec![vec![0.3, 0.1]], vec![1.0, 0.0], 1.0).unwrap();
        for (e, cfg) in entries() {
            // K = 1, T = 1 and T = 50
            assert_eq!(regret(cfg.as_ref(), &one, 1, 1), 0.0, "{}", e.kind());
            assert_eq!(regret(cfg.as_ref(), &one, 1, 50), 0.0, "{}", e.kind());
            assert!(
                cfg.build(&[], 1).is_err(),
                "{}: no arms must be an error",
                e.kind()
            );
        }
    }
}

mod contextual {
    use super::*;
    use dpbandits::contextual::{
        ContextualEnvConfig, ContextualGaussianConfig, ContextualPolicyConfig, simulate_contextual,
    };

    fn entries() -> Vec<(&'static PolicyEntry, Box<dyn ContextualPolicyConfig>)> {
        examples()
            .into_iter()
            .filter_map(|(e, b)| match b {
                Built::Contextual(c) => Some((e, c)),
                _ => None,
            })
            .collect()
    }

    fn env(d: usize, k: usize) -> ContextualGaussianConfig {
        let mut env: ContextualGaussianConfig =
            toml::from_str(&format!("d = {d}\nk = {k}")).unwrap();
        env.instantiate(3).unwrap();
        env
    }

    fn regret(
        cfg: &dyn ContextualPolicyConfig,
        env: &ContextualGaussianConfig,
        run: u64,
        t: u64,
    ) -> f64 {
        let grid = CheckpointGrid::log(t, 2, &[]).unwrap();
        let mut e = env.build(3, run).unwrap();
        let mut p = vec![cfg.build(env.dim(), t, run + 7).unwrap()];
        let mut out = vec![vec![0.0; grid.points().len()]];
        simulate_contextual(e.as_mut(), &mut p, &grid, &mut out).unwrap();
        out[0][grid.points().len() - 1]
    }

    #[test]
    fn same_seed_same_regret_and_sublinear() {
        let env = env(3, 10);
        for (e, cfg) in entries() {
            let a = regret(cfg.as_ref(), &env, 1, 20_000);
            let b = regret(cfg.as_ref(), &env, 1, 20_000);
            assert_eq!(a.to_bits(), b.to_bits(), "{}", e.kind());
            // Sublinear: the second half of a 40k run costs less than 0.8 of the first half.
            let half = regret(cfg.as_ref(), &env, 2, 20_000);
            let full = regret(cfg.as_ref(), &env, 2, 40_000);
            assert!(full - half < 0.8 * half, "{}: {half} then {full}", e.kind());
        }
    }

    #[test]
    fn edge_cases() {
        for (e, cfg) in entries() {
            // one action per round: zero regret; T = 1
            let env = env(2, 1);
            assert_eq!(regret(cfg.as_ref(), &env, 0, 1), 0.0, "{}", e.kind());
            assert_eq!(regret(cfg.as_ref(), &env, 0, 100), 0.0, "{}", e.kind());
            assert!(
                cfg.build(0, 10, 1).is_err(),
                "{}: d = 0 must be an error",
                e.kind()
            );
        }
    }
}

mod bai {
    use super::*;
    use dpbandits::bai::{BaiBernoulliConfig, BaiConfig, BaiEnvConfig, simulate_bai};

    fn entries() -> Vec<(&'static PolicyEntry, Box<dyn BaiConfig>)> {
        examples()
            .into_iter()
            .filter_map(|(e, b)| match b {
                Built::Bai(c) => Some((e, c)),
                _ => None,
            })
            .collect()
    }

    /// Easy problem (gap 0.6), delta = 0.05: every algorithm stops well before the cap in each of
    /// 20 seeded runs, twice with the same seed gives the same outcome, and at most 4 of 20
    /// recommendations are wrong. A delta-correct algorithm exceeds 4 errors with probability
    /// P(Bin(20, 0.05) >= 5) < 0.3% (false-failure rate; the real error rates are far below delta).
    #[test]
    fn stops_correctly_and_reproducibly_on_an_easy_problem() {
        let env = BaiBernoulliConfig::new(vec![0.9, 0.3, 0.2], 0.05).unwrap();
        for (e, cfg) in entries() {
            let engine = cfg.prepare(3, env.delta()).unwrap();
            let mut errors = 0;
            for run in 0..20u64 {
                let go = || {
                    let mut env_run = env.build(1000 + run);
                    let mut alg = engine.clone().start(2000 + run);
                    simulate_bai(env_run.as_mut(), alg.as_mut(), 1_000_000_000).unwrap()
                };
                let (a, b) = (go(), go());
                assert_eq!(a, b, "{}: same seeds, different outcomes", e.kind());
                assert!(
                    !a.capped,
                    "{}: capped at 1e9 samples on an easy problem",
                    e.kind()
                );
                assert_eq!(a.pulls.iter().sum::<u64>(), a.tau, "{}", e.kind());
                errors += u32::from(!a.correct);
            }
            assert!(
                errors <= 4,
                "{}: {errors} wrong recommendations of 20",
                e.kind()
            );
        }
    }

    #[test]
    fn edge_cases() {
        for (e, cfg) in entries() {
            assert!(
                cfg.prepare(1, 0.1).is_err(),
                "{}: one arm must be an error",
                e.kind()
            );
            assert!(
                cfg.prepare(2, 0.0).is_err(),
                "{}: delta = 0 must be an error",
                e.kind()
            );
            // A cap of one sample ends the run at once, capped, with a valid recommendation.
            let engine = cfg.prepare(2, 0.1).unwrap();
            let env = BaiBernoulliConfig::new(vec![0.6, 0.4], 0.1).unwrap();
            let o = simulate_bai(env.build(1).as_mut(), engine.start(2).as_mut(), 1).unwrap();
            assert!(o.recommendation < 2, "{}", e.kind());
            assert!(o.tau <= 2, "{}: tau {} past a cap of 1", e.kind(), o.tau);
        }
    }
}

/// Snapshots: for every kind of the registry, run a policy on a small problem, stop inside a
/// commitment where the kind has them (an episode, a phase, a BAI request in flight), save it,
/// restore it from JSON and from CBOR, and continue the original and both copies on the same
/// reward stream: every decision and the final state must agree bit for bit. Then the same
/// across a process boundary: this test binary re-runs itself (`current_exe()` with a test-name
/// filter and `DPBANDITS_SNAPSHOT_DIR`) to restore the files it wrote and continue them there.
mod snapshots {
    use super::*;
    use dpbandits::bai::BaiStep;
    use dpbandits::contextual::ActionSet;
    use dpbandits::registry::{Restored, restore, restore_kind};
    use dpbandits::rng::splitmix64;
    use dpbandits::snapshot::Snapshot;
    use nalgebra::DVector;

    /// Steps before the snapshot (then on to the next point inside a commitment), and after.
    const BEFORE: u64 = 400;
    const AFTER: u64 = 1500;
    const K: usize = 3;
    const MEANS: [f64; K] = [0.7, 0.5, 0.3];
    /// BAI: close means, so that no algorithm stops before the snapshot.
    const BAI_MEANS: [f64; K] = [0.52, 0.5, 0.48];
    const D: usize = 3;
    const DIR_VAR: &str = "DPBANDITS_SNAPSHOT_DIR";

    /// A uniform number in [0, 1) fixed by `(a, b)`: the reward streams do not depend on the
    /// policy's generators, so the original and the restored run see the same data.
    fn unif(a: u64, b: u64) -> f64 {
        (splitmix64(splitmix64(a) ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15)) >> 11) as f64
            / (1u64 << 53) as f64
    }

    fn linear_arms() -> Vec<DVector<f64>> {
        [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.6, 0.6]]
            .iter()
            .map(|a| DVector::from_column_slice(a))
            .collect()
    }

    fn contexts(t: u64) -> Vec<f64> {
        (0..5 * D as u64).map(|i| unif(t, 1000 + i) - 0.5).collect()
    }

    /// A live run: the policy and the driver's cursor (round, BAI request in flight).
    struct Run {
        p: Restored,
        t: u64,
        pending: Option<(usize, u64)>,
        stopped: bool,
    }

    fn build(e: &PolicyEntry, seed: u64) -> Run {
        let p = match e.example().unwrap() {
            Built::Finite(c) => Restored::Finite(c.build(K, seed).unwrap()),
            Built::Linear(c) => Restored::Linear(c.build(&linear_arms(), seed).unwrap()),
            Built::Contextual(c) => {
                Restored::Contextual(c.build(D, BEFORE * 4 + AFTER, seed).unwrap())
            }
            Built::Bai(c) => Restored::Bai(c.prepare(K, 0.05).unwrap().start(seed)),
        };
        Run {
            p,
            t: 0,
            pending: None,
            stopped: false,
        }
    }

    impl Run {
        /// One step; returns its decision record and whether the run is now inside a
        /// commitment.
        fn step(&mut self) -> (Vec<u64>, bool) {
            let t = self.t;
            match &mut self.p {
                Restored::Finite(p) => {
                    let pull = p.choose(t);
                    let r = f64::from(u8::from(unif(t, pull.arm as u64) < MEANS[pull.arm]));
                    p.observe(pull.arm, r).unwrap();
                    self.t += 1;
                    (vec![pull.arm as u64, pull.steps], pull.steps > 1)
                }
                Restored::Linear(p) => {
                    let pull = p.choose(t).unwrap();
                    let a = &linear_arms()[pull.arm];
                    let r = 0.9 * a[0] + 0.4 * a[1] + 2.0 * unif(t, 7) - 1.0;
                    let one = p.boundary().sum_of([r]).unwrap();
                    p.observe_batch(pull.arm, &one).unwrap();
                    self.t += 1;
                    (vec![pull.arm as u64, pull.steps], pull.steps > 1)
                }
                Restored::Contextual(p) => {
                    let f = contexts(t);
                    let set = ActionSet {
                        d: D,
                        k: 5,
                        features: &f,
                    };
                    let arm = p.choose(t, &set);
                    let x = set.action(arm);
                    let r = 0.8 * x[0] - 0.5 * x[1] + 0.3 * x[2] + unif(t, 9) - 0.5;
                    p.observe(&set, arm, r).unwrap();
                    self.t += 1;
                    (vec![arm as u64], false)
                }
                Restored::Bai(p) => {
                    if self.stopped {
                        return (vec![u64::MAX], false);
                    }
                    match self.pending.take() {
                        None => match p.next(t) {
                            BaiStep::Sample { arm, n } => {
                                self.pending = Some((arm, n));
                                (vec![arm as u64, n], true)
                            }
                            BaiStep::Stop => {
                                self.stopped = true;
                                (vec![u64::MAX, p.recommendation() as u64], false)
                            }
                        },
                        Some((arm, n)) => {
                            let nf = n as f64;
                            let noise = (2.0 * unif(t, arm as u64) - 1.0) * nf.sqrt();
                            let sum = (nf * BAI_MEANS[arm] + noise).round().clamp(0.0, nf);
                            let ones = sum as usize;
                            let rewards = std::iter::repeat_n(1.0, ones)
                                .chain(std::iter::repeat_n(0.0, n as usize - ones));
                            let sum = p.boundary().sum_of(rewards).unwrap();
                            p.observe(arm, &sum).unwrap();
                            self.t += n;
                            let rel = p.releases();
                            let mut rec = vec![p.recommendation() as u64, p.noise_draws()];
                            rec.extend(rel);
                            (rec, false)
                        }
                    }
                }
            }
        }

        /// Run `BEFORE` steps, then on to the next step that leaves the run inside a
        /// commitment, if the kind makes any (at most `20 * BEFORE` more steps).
        fn advance_to_snapshot_point(&mut self, kind: &str) -> bool {
            // A BAI step is a whole request (DP-SE: an epoch of one arm), so fewer of them.
            let before = if matches!(self.p, Restored::Bai(_)) {
                6
            } else {
                BEFORE
            };
            let mut committed = false;
            let mut mid = false;
            for i in 0..BEFORE * 21 {
                let (_, m) = self.step();
                committed |= m;
                mid = m;
                if i + 1 >= before && (mid || !committed) || self.stopped {
                    break;
                }
            }
            assert!(
                mid || !committed || self.stopped,
                "{kind}: no commitment in progress after {} steps",
                BEFORE * 21
            );
            mid
        }

        fn continue_for(&mut self, steps: u64) -> Vec<Vec<u64>> {
            (0..steps).map(|_| self.step().0).collect()
        }

        fn resumed(&self, p: Restored) -> Run {
            Run {
                p,
                t: self.t,
                pending: self.pending,
                stopped: self.stopped,
            }
        }
    }

    fn cbor_state(p: &Restored) -> Vec<u8> {
        p.snapshot().unwrap().to_cbor().unwrap()
    }

    #[test]
    fn every_kind_continues_identically_after_restore() {
        let mut mid_kinds = 0;
        for (i, e) in POLICIES.iter().enumerate() {
            let kind = e.kind();
            let mut a = build(e, 77 + i as u64);
            mid_kinds += usize::from(a.advance_to_snapshot_point(e.kind()));
            assert!(
                !a.stopped,
                "{kind}: stopped before the snapshot at t = {}",
                a.t
            );
            let snap = a.p.snapshot().unwrap_or_else(|err| panic!("{kind}: {err}"));
            assert_eq!(snap.kind(), kind);
            assert_eq!(snap.setting(), e.setting());
            let json = snap.to_json().unwrap();
            let cbor = snap.to_cbor().unwrap();
            let from = |bytes: &[u8]| {
                Snapshot::decode(bytes)
                    .and_then(|s| restore_kind(&s, kind))
                    .unwrap_or_else(|err| panic!("{kind}: {err}"))
            };
            let mut b = a.resumed(from(json.as_bytes()));
            let mut c = a.resumed(from(&cbor));
            // A restore is a copy: the restored policies snapshot to the same bytes.
            assert_eq!(cbor_state(&b.p), cbor_state(&a.p), "{kind}: JSON restore");
            assert_eq!(cbor_state(&c.p), cbor_state(&a.p), "{kind}: CBOR restore");
            let da = a.continue_for(AFTER);
            assert_eq!(b.continue_for(AFTER), da, "{kind}: JSON restore diverged");
            assert_eq!(c.continue_for(AFTER), da, "{kind}: CBOR restore diverged");
            assert_eq!(
                cbor_state(&b.p),
                cbor_state(&a.p),
                "{kind}: final state (JSON)"
            );
            assert_eq!(
                cbor_state(&c.p),
                cbor_state(&a.p),
                "{kind}: final state (CBOR)"
            );
            // The continuation exercises the policy: more than one distinct decision.
            let mut distinct = da.clone();
            distinct.sort();
            distinct.dedup();
            assert!(
                distinct.len() > 1,
                "{kind}: one decision only after the restore"
            );
            // Another expected kind is refused, naming both.
            let other = POLICIES.iter().find(|o| o.kind() != kind).unwrap().kind();
            let err = restore_kind(&snap, other).unwrap_err().to_string();
            assert!(err.contains(kind) && err.contains(other), "{kind}: {err}");
        }
        // The episodic and phased kinds and every BAI kind were saved mid-commitment.
        assert!(
            mid_kinds >= 12,
            "only {mid_kinds} kinds saved mid-commitment"
        );
    }

    /// Corrupted, truncated and foreign snapshots are errors, never panics.
    #[test]
    fn damaged_snapshots_are_refused() {
        let e = dpbandits::registry::policy("adac_ucb").unwrap();
        let mut a = build(e, 5);
        a.advance_to_snapshot_point(e.kind());
        let snap = a.p.snapshot().unwrap();
        let json = snap.to_json().unwrap();
        let msg = |s: &str| match Snapshot::decode(s.as_bytes()).and_then(|s| restore(&s)) {
            Ok(_) => panic!("accepted a damaged snapshot"),
            Err(err) => err.to_string(),
        };
        let pos = json.find("\"pulls\"").unwrap();
        let tampered = format!("{}\"pullz\"{}", &json[..pos], &json[pos + 7..]);
        assert!(msg(&tampered).contains("corrupted"));
        let unknown = json.replace("\"kind\": \"adac_ucb\"", "\"kind\": \"nope\"");
        assert!(msg(&unknown).contains("checksum") || msg(&unknown).contains("nope"));
        assert!(msg(&json[..json.len() / 2]).contains("malformed"));
        let cbor = snap.to_cbor().unwrap();
        for cut in (0..cbor.len()).step_by(7) {
            assert!(Snapshot::decode(&cbor[..cut]).is_err());
        }
        // A snapshot of another setting is refused by the setting's restore.
        let err = dpbandits::registry::restore_bai(&snap)
            .unwrap_err()
            .to_string();
        assert!(err.contains("finite-armed"), "{err}");
    }

    fn lines(d: &[Vec<u64>]) -> String {
        d.iter()
            .map(|r| r.iter().map(u64::to_string).collect::<Vec<_>>().join(" "))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The parent: saves every kind (JSON and CBOR) and its cursor, runs the child, and compares
    /// the child's continuations with its own uninterrupted runs.
    #[test]
    fn every_kind_continues_identically_in_another_process() {
        let dir = tempfile::tempdir().unwrap();
        let mut expected = vec![];
        for (i, e) in POLICIES.iter().enumerate() {
            let mut a = build(e, 300 + i as u64);
            a.advance_to_snapshot_point(e.kind());
            let snap =
                a.p.snapshot()
                    .unwrap()
                    .with_label(format!("run {i}"))
                    .unwrap();
            let base = dir.path().join(e.kind());
            std::fs::write(base.with_extension("json"), snap.to_json().unwrap()).unwrap();
            std::fs::write(base.with_extension("cbor"), snap.to_cbor().unwrap()).unwrap();
            let (arm, n) = a.pending.map_or((u64::MAX, 0), |(a, n)| (a as u64, n));
            let cursor = format!("{} {} {} {}", a.t, arm, n, u8::from(a.stopped));
            std::fs::write(base.with_extension("cursor"), cursor).unwrap();
            expected.push((e.kind(), lines(&a.continue_for(AFTER))));
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "conformance::snapshots::child_process_restores",
                "--exact",
                "--test-threads=1",
            ])
            .env(DIR_VAR, dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "child failed: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        for (kind, want) in expected {
            for enc in ["json", "cbor"] {
                let got = std::fs::read_to_string(dir.path().join(format!("{kind}.{enc}.out")))
                    .unwrap_or_else(|err| panic!("{kind}: the child wrote no {enc} result: {err}"));
                assert!(
                    got == want,
                    "{kind}: the {enc} restore in another process diverged"
                );
            }
        }
    }

    /// The child (does nothing unless `DPBANDITS_SNAPSHOT_DIR` is set): restores every snapshot
    /// the parent wrote and writes its continuation.
    #[test]
    fn child_process_restores() {
        let Some(dir) = std::env::var_os(DIR_VAR) else {
            return;
        };
        let dir = Path::new(&dir);
        for e in POLICIES {
            let base = dir.join(e.kind());
            let cursor = std::fs::read_to_string(base.with_extension("cursor")).unwrap();
            let c: Vec<u64> = cursor.split(' ').map(|x| x.parse().unwrap()).collect();
            for enc in ["json", "cbor"] {
                let bytes = std::fs::read(base.with_extension(enc)).unwrap();
                let snap = Snapshot::decode(&bytes).unwrap();
                assert!(snap.header().label.is_some());
                let mut run = Run {
                    p: restore_kind(&snap, e.kind()).unwrap(),
                    t: c[0],
                    pending: (c[1] != u64::MAX).then_some((c[1] as usize, c[2])),
                    stopped: c[3] == 1,
                };
                let out = lines(&run.continue_for(AFTER));
                std::fs::write(dir.join(format!("{}.{enc}.out", e.kind())), out).unwrap();
            }
        }
    }
}

/// `PolicyEntry::takes` agrees with what a parse accepts: for every kind, its example with
/// `boundary = "reject"` (resp. `noise = "simulation"`) parses exactly when the kind takes the
/// key; `keys()` lists every key of the example; an unknown key is the typed `UnknownField`
/// error naming it and the allowed keys, with serde's wording.
#[test]
fn registry_takes_agrees_with_the_parsers() {
    use dpbandits::Error;
    let mut taking = std::collections::BTreeMap::new();
    for e in POLICIES {
        let example: toml::Table = toml::from_str(e.info.example).unwrap();
        for (key, value) in [
            ("boundary", toml::Value::String("reject".into())),
            ("noise", toml::Value::String("simulation".into())),
            ("grid_bits", toml::Value::Integer(20)),
        ] {
            let mut t = example.clone();
            t.insert(key.into(), value.clone());
            let parsed = e.build(t);
            assert_eq!(
                e.takes(key),
                parsed.is_ok(),
                "{}: takes({key:?}) = {} but the parse with {key} = {value:?} gives {:?}",
                e.kind(),
                e.takes(key),
                parsed.err().map(|e| e.to_string())
            );
            assert_eq!(e.takes(key), e.takes_in(key, &example), "{}", e.kind());
            taking
                .entry(key)
                .or_insert_with(Vec::new)
                .push((e.kind(), e.takes(key)));
        }
        let keys = e.keys();
        for k in example.keys() {
            assert!(
                keys.contains(k),
                "{}: keys() = {keys:?} misses {k}",
                e.kind()
            );
        }
        let mut t = example.clone();
        t.insert("zz_not_a_key".into(), toml::Value::Integer(1));
        let mut err = e.build(t).unwrap_err();
        while let Error::At { inner, .. } = err {
            err = *inner;
        }
        match &err {
            Error::UnknownField { field, allowed } => {
                assert_eq!(field, "zz_not_a_key", "{}", e.kind());
                let want = if allowed.is_empty() {
                    "unknown field `zz_not_a_key`, there are no fields"
                } else {
                    "unknown field `zz_not_a_key`, expected"
                };
                assert!(err.to_string().starts_with(want), "{}: {err}", e.kind());
            }
            other => panic!("{}: {other:?}", e.kind()),
        }
    }
    // Both answers occur (the check is not vacuous).
    for (key, v) in &taking {
        assert!(
            v.iter().any(|x| x.1) && v.iter().any(|x| !x.1),
            "{key}: {v:?}"
        );
    }
    // A refused key of a shared configuration type is not taken.
    let oful = dpbandits::registry::policy("oful").unwrap();
    assert!(!oful.takes("rho"));
    assert!(
        dpbandits::registry::policy("adac_oful")
            .unwrap()
            .takes("rho")
    );
}
