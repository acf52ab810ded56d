//! Exact block commitments of the per-step index policies (UCB1, kl-UCB; `finite::blocks`) against
//! the plain step loop: an exact check of the argument (the blocked policy never commits to an
//! arm the step-by-step policy would not choose, on any reward sequence, adversarial ones
//! included) and KS tests of the simulator's block path against the step loop.

use dpbandits::finite::{BernoulliConfig, EnvConfig, PolicyConfig};
use dpbandits::finite::{KlUcbConfig, Ucb1Config};
use dpbandits::math::kl::kl_upper;
use dpbandits::math::stats::{Summary, ks_critical, ks_statistic};
use dpbandits::rng::SimRng;
use dpbandits::sim::{CheckpointGrid, SimMode};
use rand::{RngExt, SeedableRng};
use std::sync::Arc;

/// The policies, each with its textbook index `(mean, pulls, t) -> index` (every arm solved, no
/// pruning), the reference the pruned argmax and the blocks are checked against.
type Index = Box<dyn Fn(f64, f64, u64) -> f64>;
fn configs() -> Vec<(Box<dyn PolicyConfig>, Index)> {
    let ucb = |alpha: f64| -> Index {
        Box::new(move |m, n, t| m + (alpha * (t.max(1) as f64).ln() * (1.0 / n)).sqrt())
    };
    let kl = |c: f64| -> Index {
        Box::new(move |m, n, t| {
            let lt = (t.max(1) as f64).ln();
            let level = if c > 0.0 && lt > 1.0 {
                lt + c * lt.ln()
            } else {
                lt
            };
            kl_upper(m, level * (1.0 / n))
        })
    };
    vec![
        (Box::new(Ucb1Config::default()), ucb(2.0)),
        (Box::new(Ucb1Config { alpha: 0.5 }), ucb(0.5)),
        (Box::new(KlUcbConfig::default()), kl(0.0)),
        (Box::new(KlUcbConfig { c: 3.0 }), kl(3.0)),
    ]
}

/// The lowest-index argmax of the textbook indices (unplayed arms first, lowest index).
fn textbook_choice(index: &Index, sums: &[f64], pulls: &[f64], t: u64) -> usize {
    if let Some(a) = pulls.iter().position(|&n| n == 0.0) {
        return a;
    }
    let mut best = (0, f64::NEG_INFINITY);
    for (a, (&s, &n)) in sums.iter().zip(pulls).enumerate() {
        let v = index(s / n, n, t);
        if v > best.1 {
            best = (a, v);
        }
    }
    best.0
}

/// How the rewards of a round are drawn.
#[derive(Debug, Clone, Copy)]
enum Rewards {
    /// Bernoulli(mean).
    Bernoulli,
    /// Uniform on [0, 2 mean] (continuous, inside [0, 1] for means <= 0.5).
    Continuous,
    /// The worst case of the argument: every reward inside a block is 0.
    Adversarial,
    /// Inside a block: 0 for the first half, 1 afterwards (a late recovery).
    LateRecovery,
}

/// The blocked policy (promised range [0, 1]) and the plain one see the same rewards one by one;
/// at every round the blocked policy's open commitment must be the plain policy's choice, and both
/// must be the textbook argmax (every index computed, lowest index on ties). The policies are
/// deterministic and fed identical rewards, so their states are bit-identical and any block that
/// outlives its leader, or any wrongly pruned arm, fails the assertion.
#[test]
fn a_block_never_changes_a_choice() {
    let instances: [&[f64]; 3] = [
        &[0.45, 0.4],
        &[0.5, 0.4, 0.3, 0.2, 0.1],
        &[0.3, 0.45, 0.5, 0.2, 0.35, 0.5, 0.1, 0.25, 0.4, 0.05],
    ];
    let horizon = 30_000u64;
    for (cfg, index) in configs() {
        for means in instances {
            for mode in [
                Rewards::Bernoulli,
                Rewards::Continuous,
                Rewards::Adversarial,
                Rewards::LateRecovery,
            ] {
                let k = means.len();
                let mut blocked = cfg.build(k, 1).unwrap();
                blocked.enable_blocks((0.0, 1.0));
                let mut plain = cfg.build(k, 1).unwrap();
                let mut rng = SimRng::seed_from_u64(7);
                let (mut sums, mut pulls) = (vec![0.0; k], vec![0.0; k]);
                let (mut decisions, mut left, mut len) = (0u64, 0u64, 0u64);
                for t in 0..horizon {
                    let b = blocked.choose(t);
                    let p = plain.choose(t);
                    if left == 0 {
                        decisions += 1;
                        (left, len) = (b.steps, b.steps);
                    } else {
                        assert_eq!(b.steps, left, "the open commitment is what is left of it");
                    }
                    assert_eq!(
                        b.arm,
                        p.arm,
                        "{} {means:?} {mode:?}: round {t}, round {} of a block of {len}",
                        cfg.label(),
                        len - left
                    );
                    assert_eq!(
                        p.arm,
                        textbook_choice(&index, &sums, &pulls, t),
                        "{} {means:?} {mode:?}: round {t}: not the textbook argmax",
                        cfg.label()
                    );
                    let (in_block, pos) = (len > 1, len - left);
                    left -= 1;
                    let mu = means[b.arm];
                    let r = match mode {
                        Rewards::Bernoulli => f64::from(rng.random::<f64>() < mu),
                        Rewards::Continuous => 2.0 * mu * rng.random::<f64>(),
                        Rewards::Adversarial if in_block => 0.0,
                        Rewards::LateRecovery if in_block => f64::from(2 * pos >= len),
                        _ => f64::from(rng.random::<f64>() < mu),
                    };
                    (sums[b.arm], pulls[b.arm]) = (sums[b.arm] + r, pulls[b.arm] + 1.0);
                    blocked.observe(b.arm, r).unwrap();
                    plain.observe(p.arm, r).unwrap();
                }
                // The blocks must be used at all (else this test checks nothing); the adversarial
                // sequences keep a close leader from long blocks, so only the Bernoulli mode is held
                // to it.
                assert!(
                    !matches!(mode, Rewards::Bernoulli) || decisions < horizon / 2,
                    "{} {means:?} {mode:?}: {decisions} decisions in {horizon} rounds",
                    cfg.label()
                );
            }
        }
    }
}

/// Regret on the grid for `runs` runs on Bernoulli `means`: `[run][checkpoint]` (the fast-path
/// suite's runner).
fn regrets(
    means: &[f64],
    policy: Box<dyn PolicyConfig>,
    mode: SimMode,
    seed: u64,
    runs: u64,
    grid: &CheckpointGrid,
) -> Vec<Vec<f64>> {
    let env: Arc<dyn EnvConfig> = Arc::new(BernoulliConfig::new(means.to_vec()).unwrap());
    crate::fast_path::regrets(env, policy, mode, seed, runs, grid)
}

/// Two-sample KS tests of the regret distribution, block path (episode mode) vs step loop, at
/// three checkpoints, for UCB1 and kl-UCB on three Bernoulli instances. Different master seeds make
/// the samples independent. Each of the 18 tests has level 1e-4 (asymptotic KS critical value,
/// conservative for these discrete distributions): false-failure rate < 1.8e-3.
#[test]
fn block_path_matches_step_loop_in_distribution() {
    let instances: [&[f64]; 3] = [
        &[0.5, 0.45],
        &[0.75, 0.625, 0.5, 0.375, 0.25],
        &[0.9, 0.85, 0.8, 0.5, 0.5, 0.3, 0.2, 0.1],
    ];
    type Make = fn() -> Box<dyn PolicyConfig>;
    let cases: [(Make, u64, u64); 2] = [
        (|| Box::new(Ucb1Config::default()), 20_000, 400),
        (|| Box::new(KlUcbConfig::default()), 5_000, 300),
    ];
    for (cfg, horizon, runs) in cases {
        let (t1, t2) = (horizon / 100, horizon / 10);
        let grid = CheckpointGrid::log(horizon, 8, &[t1, t2]).unwrap();
        let idx: Vec<usize> = [t1, t2, horizon]
            .iter()
            .map(|&t| grid.position(t).unwrap())
            .collect();
        for means in instances {
            let fast = regrets(means, cfg(), SimMode::Episodes, 1, runs, &grid);
            let slow = regrets(means, cfg(), SimMode::Steps, 2, runs, &grid);
            for &i in &idx {
                let col = |v: &[Vec<f64>]| v.iter().map(|r| r[i]).collect::<Vec<f64>>();
                let (a, b) = (col(&fast), col(&slow));
                let d = ks_statistic(&a, &b);
                let crit = ks_critical(a.len(), b.len(), 1e-4);
                let (sa, sb) = (Summary::of(&mut a.clone()), Summary::of(&mut b.clone()));
                assert!(
                    d < crit,
                    "{} {means:?} at t={}: KS D = {d:.4} >= {crit:.4} (blocks mean {:.2}, steps mean {:.2})",
                    cfg().label(),
                    grid.points()[i],
                    sa.mean,
                    sb.mean
                );
            }
        }
    }
}

/// The promise is enforced: once blocks are enabled, a reward outside the promised range is
/// refused (naming the reward and the range) and changes nothing; UCB1 without a finite lower
/// end, and kl-UCB with a range outside [0, 1], do not enable blocks at all; kl-UCB refuses a sum
/// of rewards it would have had to clamp one by one.
#[test]
fn the_promised_range_is_enforced() {
    use dpbandits::Error;
    use dpbandits::finite::{KlUcb, Policy, Ucb1};
    use dpbandits::privacy::RewardSum;
    let mut p = Ucb1::new(2, 2.0).unwrap();
    p.enable_blocks((0.0, 1.0));
    assert_eq!((p.boundary().lo, p.boundary().hi), (0.0, 1.0));
    let c = p.choose(0);
    let err = p.observe(c.arm, 1.5).unwrap_err();
    assert!(
        matches!(err, Error::Boundary { .. } | Error::Param { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("1.5"), "{err}");
    p.observe(c.arm, 1.0).unwrap();

    let mut g = Ucb1::new(2, 2.0).unwrap();
    g.enable_blocks((f64::NEG_INFINITY, f64::INFINITY));
    assert_eq!(
        g.boundary().lo,
        -1e12,
        "no finite lower end: no blocks, numeric boundary"
    );
    let mut g = Ucb1::new(2, 2.0).unwrap();
    g.enable_blocks((f64::NEG_INFINITY, f64::INFINITY));
    for t in 0..1000 {
        let c = g.choose(t);
        assert_eq!(c.steps, 1, "round {t}");
        g.observe(c.arm, if c.arm == 0 { 0.9 } else { 0.1 })
            .unwrap();
    }

    let mut k = KlUcb::new(2, 0.0).unwrap();
    k.enable_blocks((-1.0, 2.0));
    assert_eq!(k.boundary().lo, -1e12, "range outside [0, 1]: no blocks");
    let c = k.choose(0);
    let sum = RewardSum::numeric(1.0, 1).unwrap();
    k.observe_batch(c.arm, &sum).unwrap();
    let mut k = KlUcb::new(1, 0.0).unwrap();
    let c = k.choose(0);
    assert_eq!(c.steps, 1, "blocks are off until enabled");
    let mut k = KlUcb::new(1, 0.0).unwrap();
    k.enable_blocks((0.0, 1.0));
    let c = k.choose(0);
    assert_eq!(c.steps, 1, "the first round of an arm is a single round");
    k.observe(c.arm, 1.0).unwrap();
    let c = k.choose(1);
    assert!(
        c.steps > 1_000_000,
        "one arm: the rest of the run is one block ({c:?})"
    );
    let wide = RewardSum::numeric(2.0, 2).unwrap();
    assert!(matches!(
        k.observe_batch(c.arm, &wide),
        Err(Error::Protocol(_))
    ));
}
