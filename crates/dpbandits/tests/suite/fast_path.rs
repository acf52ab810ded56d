//! The episode fast path against the plain step loop, and the rho -> infinity limit.
//!
//! Spec zcdp §8 T10/T11 and issue 2, "Done when" 3.

use dpbandits::finite::FiniteCell;
use dpbandits::finite::{AdaCUcbConfig, PolicyConfig};
use dpbandits::finite::{BernoulliConfig, EnvConfig, GaussianConfig};
use dpbandits::math::stats::{Summary, ks_critical, ks_statistic};
use dpbandits::sim::{Cell, CheckpointGrid, SimMode};
use std::sync::Arc;

const MEANS: [f64; 5] = [0.75, 0.625, 0.5, 0.375, 0.25];

fn bernoulli() -> Arc<dyn EnvConfig> {
    Arc::new(BernoulliConfig::new(MEANS.to_vec()).unwrap())
}

/// Regret at every checkpoint for `runs` runs: `[run][checkpoint]`.
pub(crate) fn regrets(
    env: Arc<dyn EnvConfig>,
    policy: Box<dyn PolicyConfig>,
    mode: SimMode,
    seed: u64,
    runs: u64,
    grid: &CheckpointGrid,
) -> Vec<Vec<f64>> {
    let cell = FiniteCell::new(env, policy, Arc::new(grid.clone()), seed, mode).unwrap();
    (0..runs)
        .map(|r| {
            let mut out = vec![0.0; grid.points().len()];
            cell.run(r, &mut out).unwrap();
            out
        })
        .collect()
}

fn column(v: &[Vec<f64>], i: usize) -> Vec<f64> {
    v.iter().map(|r| r[i]).collect()
}

/// Two-sample KS tests of the regret distribution, fast path vs step loop, at three checkpoints
/// (T/100, T/10, T), for the private and the non-private episodic policy, on Bernoulli (exact
/// Binomial sums) and Gaussian (exact Normal sums) arms. Different master seeds make the two samples
/// independent. Each of the 12 tests has level 1e-4 (asymptotic KS critical value, conservative for
/// these discrete distributions), so the false-failure rate of this test is < 1.2e-3.
#[test]
fn fast_path_matches_step_loop_in_distribution() {
    let horizon = 20_000;
    let grid = CheckpointGrid::log(horizon, 8, &[200, 2000]).unwrap();
    let idx: Vec<usize> = [200, 2000, horizon]
        .iter()
        .map(|&t| grid.position(t).unwrap())
        .collect();
    let runs = 400;
    let gaussian: Arc<dyn EnvConfig> = Arc::new(GaussianConfig {
        means: MEANS.to_vec(),
        sigma: 0.5,
        clip: None,
    });
    // (name, environment, rho); rho = inf is the non-private counterpart `adaptive_ucb`.
    let cases = [
        ("bernoulli/adac_ucb(rho=0.5)", bernoulli(), 0.5),
        ("bernoulli/adaptive_ucb", bernoulli(), f64::INFINITY),
        ("gaussian/adaptive_ucb", gaussian.clone(), f64::INFINITY),
        ("gaussian/adac_ucb(rho=0.5) (clipped sums)", gaussian, 0.5),
    ];
    for (name, env, rho) in cases {
        let fast = regrets(env.clone(), adac(rho), SimMode::Episodes, 1, runs, &grid);
        let slow = regrets(env, adac(rho), SimMode::Steps, 2, runs, &grid);
        for &i in &idx {
            let (a, b) = (column(&fast, i), column(&slow, i));
            let d = ks_statistic(&a, &b);
            let crit = ks_critical(a.len(), b.len(), 1e-4);
            let (sa, sb) = (Summary::of(&mut a.clone()), Summary::of(&mut b.clone()));
            assert!(
                d < crit,
                "{name} at t={}: KS D = {d:.4} >= {crit:.4} (fast mean {:.2}, step mean {:.2})",
                grid.points()[i],
                sa.mean,
                sb.mean
            );
        }
    }
}

/// AdaC-UCB with `rho`, or its non-private counterpart for `rho = inf`.
fn adac(rho: f64) -> Box<dyn PolicyConfig> {
    if rho.is_infinite() {
        Box::new(AdaCUcbConfig::non_private())
    } else {
        Box::new(AdaCUcbConfig::private(rho))
    }
}

/// With rho = inf, AdaC-UCB draws no noise and has no privacy term: on the same environment streams
/// it makes exactly the choices of the non-private counterpart (spec T10), in both simulation modes.
#[test]
fn rho_infinity_is_exactly_the_non_private_counterpart() {
    let grid = CheckpointGrid::log(1_000_000, 50, &[]).unwrap();
    for mode in [SimMode::Episodes, SimMode::Steps] {
        let runs = if mode == SimMode::Steps { 5 } else { 100 };
        let grid = if mode == SimMode::Steps {
            CheckpointGrid::log(50_000, 20, &[]).unwrap()
        } else {
            grid.clone()
        };
        // The label (and so the policy stream) differs, the environment stream does not.
        let inf = regrets(
            bernoulli(),
            Box::new(AdaCUcbConfig::private(f64::INFINITY)),
            mode,
            3,
            runs,
            &grid,
        );
        let np = regrets(
            bernoulli(),
            Box::new(AdaCUcbConfig::non_private()),
            mode,
            3,
            runs,
            &grid,
        );
        assert_eq!(inf, np, "{mode:?}");
    }
}

/// Large finite rho converges to the non-private counterpart, and the gap shrinks as rho grows
/// (spec T10/T11). 300 paired runs at T = 1e5; observed gaps (fig4a) are ~58 +- 5 at rho = 0.1 and
/// ~0 at rho = 1e6. The assertions leave > 5 standard errors of margin (false-failure rate < 1e-6).
#[test]
fn gap_shrinks_as_rho_grows() {
    let horizon = 100_000;
    let grid = CheckpointGrid::log(horizon, 4, &[]).unwrap();
    let last = grid.points().len() - 1;
    let runs = 300;
    let base = regrets(
        bernoulli(),
        Box::new(AdaCUcbConfig::non_private()),
        SimMode::Episodes,
        5,
        runs,
        &grid,
    );
    let gap = |rho: f64| {
        let p = regrets(
            bernoulli(),
            Box::new(AdaCUcbConfig::private(rho)),
            SimMode::Episodes,
            5,
            runs,
            &grid,
        );
        let mut d: Vec<f64> = p
            .iter()
            .zip(&base)
            .map(|(a, b)| a[last] - b[last])
            .collect();
        Summary::of(&mut d)
    };
    let (g01, g10, g1e6) = (gap(0.1), gap(10.0), gap(1e6));
    assert!(
        g01.mean - 5.0 * g01.sem > g10.mean + 5.0 * g10.sem,
        "gap(0.1) = {g01:?}, gap(10) = {g10:?}"
    );
    assert!(
        g1e6.mean.abs() <= 5.0 * g1e6.sem.max(0.2),
        "gap(1e6) = {g1e6:?}"
    );
    assert!(
        g01.mean > 20.0,
        "private regret must exceed non-private at rho = 0.1: {g01:?}"
    );
}
