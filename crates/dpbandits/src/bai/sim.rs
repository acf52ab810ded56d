//! The BAI run loop: one [`BaiAlgorithm`] against one [`BaiEnvironment`], with a sample cap.
//!
//! The loop owns the clock and the counts, so an algorithm cannot misreport its stopping time
//! or its pulls, and the cap is applied the same way to every algorithm: a request is truncated
//! to the samples left, and once the cap is reached the algorithm is asked once more (a release
//! made by the last, truncated, request may fire its stopping rule; otherwise the run is
//! reported `capped`, never hidden).

use super::bernoulli::BernoulliArms;
use super::{
    BaiAlgorithm, BaiConfig, BaiEngine, BaiEnvConfig, BaiEnvironment, BaiInstance, BaiOutcome,
    BaiStep,
};
use crate::error::{Error, Result, ResultExt};
use crate::privacy::PrivacyGuarantee;
use crate::rng;
use crate::sim::Cell;
use std::sync::Arc;

/// Run `alg` on `env` until it stops or `max_samples` samples have been collected.
///
/// Each `Sample { arm, n }` is truncated to `max_samples - t`, answered with
/// `env.pull_sum(arm, n)` and passed to `alg.observe`. At `Stop` the outcome carries
/// `alg.recommendation()`; when `t >= max_samples` and the algorithm asks for more samples, the
/// outcome is `capped` (with the current recommendation). A request of `n = 0` (a contract
/// violation) is treated as one sample, so the loop always progresses.
///
/// # Errors
/// `env` and `alg` disagree on the number of arms, or the environment's reward range is not
/// inside the algorithm's boundary (its sums are drawn whole, so they could not be admitted
/// reward by reward); an observation the algorithm refuses.
pub fn simulate_bai(
    env: &mut dyn BaiEnvironment,
    alg: &mut dyn BaiAlgorithm,
    max_samples: u64,
) -> Result<BaiOutcome> {
    let k = env.num_arms();
    if k != alg.num_arms() {
        return Err(Error::Config(format!(
            "simulate_bai: the environment has {k} arms, the algorithm {}",
            alg.num_arms()
        )));
    }
    let boundary = alg.boundary();
    let (lo, hi) = env.reward_range();
    if !boundary.contains_range(lo, hi) {
        return Err(Error::Config(format!(
            "the environment's rewards in [{lo}, {hi}] are not inside the algorithm's boundary [{}, {}]",
            boundary.lo, boundary.hi
        )));
    }
    let mut pulls = vec![0u64; k];
    let mut t = 0u64;
    let capped = loop {
        match alg.next(t) {
            BaiStep::Stop => break false,
            BaiStep::Sample { arm, n } => {
                if t >= max_samples {
                    break true;
                }
                let n = n.max(1).min(max_samples - t);
                let sum = boundary.drawn_sum(env.pull_sum(arm, n), n);
                pulls[arm] += n;
                t += n;
                alg.observe(arm, &sum)?;
            }
        }
    };
    let recommendation = alg.recommendation();
    Ok(BaiOutcome {
        tau: t,
        recommendation,
        correct: recommendation == env.best_arm(),
        capped,
        noise_draws: alg.noise_draws(),
        pulls,
        releases: alg.releases(),
    })
}

/// Seeds of run `run` of the algorithm labelled `label`: `(environment seed, policy seed)`,
/// from [`rng::env_run_seed`]`(master, run)` (shared by every algorithm: common random numbers)
/// and [`rng::policy_seed`]`(master, label, run)`.
pub fn run_seeds(master: u64, label: &str, run: u64) -> (u64, u64) {
    (
        rng::env_run_seed(master, run),
        rng::policy_seed(master, label, run),
    )
}

/// One run of a prepared engine on Bernoulli arms: [`run_seeds`], [`BernoulliArms`],
/// [`BaiEngine::start`], [`simulate_bai`] (what the experiment runner does per (cell, run)).
pub fn run_one(
    engine: &Arc<dyn BaiEngine>,
    instance: &BaiInstance,
    master: u64,
    label: &str,
    run: u64,
    max_samples: u64,
) -> Result<BaiOutcome> {
    let (es, ps) = run_seeds(master, label, run);
    let mut env = BernoulliArms::new(instance, es);
    let mut alg = engine.clone().start(ps);
    simulate_bai(&mut env, alg.as_mut(), max_samples)
}

/// The values one BAI run writes into its job row, in this order: stopping time (samples
/// collected), recommended arm, whether it is the best arm (1/0), whether the run hit the sample
/// cap (1/0), Laplace draws made. All are integers below 2^53, exact in `f64`.
pub const OUTCOME_FIELDS: [&str; 5] = ["tau", "recommendation", "correct", "capped", "noise_draws"];

/// One BAI run as stored in its job row ([`OUTCOME_FIELDS`], in that order).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OutcomeRow {
    /// Samples collected.
    pub tau: f64,
    /// Recommended arm.
    pub recommendation: usize,
    /// Whether the recommendation is the best arm.
    pub correct: bool,
    /// Whether the run hit the sample cap.
    pub capped: bool,
    /// Laplace draws made.
    pub noise_draws: f64,
}

impl OutcomeRow {
    /// The row of an outcome.
    pub fn of(o: &BaiOutcome) -> [f64; 5] {
        [
            o.tau as f64,
            o.recommendation as f64,
            f64::from(u8::from(o.correct)),
            f64::from(u8::from(o.capped)),
            o.noise_draws as f64,
        ]
    }

    /// Read a row written by [`OutcomeRow::of`].
    pub fn from_row(r: &[f64]) -> Self {
        OutcomeRow {
            tau: r[0],
            recommendation: r[1] as usize,
            correct: r[2] == 1.0,
            capped: r[3] == 1.0,
            noise_draws: r[4],
        }
    }
}

/// A BAI experiment cell: one algorithm configuration (one `epsilon`) on one problem.
#[derive(Debug)]
pub struct BaiCell {
    config: Box<dyn BaiConfig>,
    engine: Arc<dyn BaiEngine>,
    env: Arc<dyn BaiEnvConfig>,
    master_seed: u64,
    max_samples: u64,
    label: String,
}

impl BaiCell {
    /// A cell: prepares the configuration's engine (thresholds, caches) for the problem once.
    ///
    /// # Errors
    /// The configuration does not fit the problem (e.g. too few arms).
    pub fn new(
        config: Box<dyn BaiConfig>,
        env: Arc<dyn BaiEnvConfig>,
        master_seed: u64,
        max_samples: u64,
    ) -> Result<Self> {
        let engine = config
            .prepare(env.instance().k(), env.delta())
            .at(|| config.label())?;
        Ok(BaiCell {
            label: config.label(),
            config,
            engine,
            env,
            master_seed,
            max_samples,
        })
    }

    /// Run `run` ([`run_seeds`]: environment seed by run, policy seed by label and run).
    ///
    /// # Errors
    /// As [`simulate_bai`].
    pub fn outcome(&self, run: u64) -> Result<BaiOutcome> {
        let (es, ps) = run_seeds(self.master_seed, &self.label, run);
        let mut env = self.env.build(es);
        let mut alg = self.engine.clone().start(ps);
        simulate_bai(env.as_mut(), alg.as_mut(), self.max_samples)
    }
}

impl Cell for BaiCell {
    fn label(&self) -> String {
        self.label.clone()
    }
    fn kind(&self) -> &'static str {
        self.config.kind()
    }
    fn params(&self) -> Vec<(&'static str, f64)> {
        vec![("epsilon", self.config.epsilon())]
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        self.config.guarantee()
    }
    fn describe(&self) -> serde_json::Value {
        let mut v = serde_json::json!({
            "threshold": self.config.threshold_name(),
            "threshold_proved_delta_correct": self.config.threshold_proved(),
            "simulation_path": "requests of n samples of one arm answered with one exact reward-sum draw; stopping checked after each release; runs that reach the horizon (the sample cap) stop as capped",
        });
        if let serde_json::Value::Object(facts) = self.config.describe() {
            for (key, x) in facts {
                v[key] = x;
            }
        }
        v
    }
    fn width(&self) -> usize {
        OUTCOME_FIELDS.len()
    }
    fn run(&self, run: u64, out: &mut [f64]) -> Result<()> {
        out.copy_from_slice(&OutcomeRow::of(&self.outcome(run)?));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_rows_round_trip() {
        let o = BaiOutcome {
            tau: 123_456_789_012,
            recommendation: 3,
            correct: false,
            capped: true,
            noise_draws: 77,
            pulls: vec![],
            releases: vec![],
        };
        let r = OutcomeRow::from_row(&OutcomeRow::of(&o));
        assert_eq!(r.tau, 123_456_789_012.0);
        assert_eq!(r.recommendation, 3);
        assert!(!r.correct && r.capped);
        assert_eq!(r.noise_draws, 77.0);
        assert_eq!(OUTCOME_FIELDS.len(), OutcomeRow::of(&o).len());
    }

    use crate::privacy::{RewardBoundary, RewardSum};

    /// A scripted algorithm: asks for 3 samples of arm 0, then 5 of arm 1, then stops.
    #[derive(Debug, Default)]
    struct Script {
        step: usize,
        seen: Vec<(usize, u64)>,
    }

    impl BaiAlgorithm for Script {
        fn num_arms(&self) -> usize {
            2
        }
        fn next(&mut self, _t: u64) -> BaiStep {
            self.step += 1;
            match self.step {
                1 => BaiStep::Sample { arm: 0, n: 3 },
                2 => BaiStep::Sample { arm: 1, n: 5 },
                _ => BaiStep::Stop,
            }
        }
        fn observe(&mut self, arm: usize, sum: &RewardSum) -> Result<()> {
            self.seen.push((arm, sum.n()));
            Ok(())
        }
        fn boundary(&self) -> RewardBoundary {
            RewardBoundary::unit(crate::privacy::BoundaryMode::Clip)
        }
        fn recommendation(&self) -> usize {
            1
        }
        fn noise_draws(&self) -> u64 {
            0
        }
        fn releases(&self) -> Vec<u64> {
            vec![0, 0]
        }
    }

    #[test]
    fn loop_counts_and_caps() {
        let inst = BaiInstance::new(vec![0.2, 0.8]).unwrap();
        let mut env = BernoulliArms::new(&inst, 1);
        let mut s = Script::default();
        let o = simulate_bai(&mut env, &mut s, 100).unwrap();
        assert_eq!((o.tau, o.capped, o.correct), (8, false, true));
        assert_eq!(o.pulls, vec![3, 5]);
        // Cap 4: the second request is truncated to 1 sample, the run is capped at 4.
        let mut s = Script::default();
        let o = simulate_bai(&mut env, &mut s, 4).unwrap();
        assert_eq!(s.seen, vec![(0, 3), (1, 1)]);
        assert_eq!((o.tau, o.pulls.clone()), (4, vec![3, 1]));
        // Asked once more after the cap: Stop wins (not capped).
        assert!(!o.capped);
        let mut s = Script::default();
        let o = simulate_bai(&mut env, &mut s, 3).unwrap();
        assert!(o.capped && o.tau == 3);
    }
}
