//! The Bernoulli BAI environment: arm `a` yields i.i.d. `Ber(mu_a)` rewards.
//!
//! # Streams
//! Arm `a` has its own generator [`crate::rng::arm_rng`]`(env_seed, a)`, keyed by the run's
//! environment seed and the arm only, never by the algorithm: every algorithm of an experiment
//! faces the same per-arm reward stream (common random numbers), exactly as in the regret
//! settings.
//!
//! # Exact batching
//! A request of `n` samples is answered with one `Binomial(n, mu_a)` draw (`n` Bernoulli trials
//! when `n <= 32`, which is cheaper and has the same law): the sum of `n` i.i.d.
//! Bernoulli rewards has exactly that law, and the algorithms commit to the whole request before
//! seeing any of it, so nothing is lost by not drawing the rewards one by one. (The k-th reward
//! of an arm is therefore common to all algorithms only in law, not pathwise, when they batch
//! differently.)

use super::{BaiEnvConfig, BaiEnvironment};
use crate::config::{EnvInfo, Setting};
use crate::error::{Result, check};
use serde::Deserialize;

/// Registry record of the `bai_bernoulli` environment.
pub const BAI_BERNOULLI: EnvInfo = EnvInfo {
    kind: "bai_bernoulli",
    setting: Setting::Bai,
    description: "fixed-confidence BAI on Bernoulli arms with the given means (unique best arm) and risk delta; exact Binomial sums per request",
    source: file!(),
};

/// `[env]` with `kind = "bai_bernoulli"`: the means and the risk of a fixed-confidence problem.
/// Deserializing validates (the instance is always there).
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "RawBaiBernoulli")]
pub struct BaiBernoulliConfig {
    /// Bernoulli means in (0, 1), unique best arm.
    pub means: Vec<f64>,
    /// Risk delta in (0, 1).
    pub delta: f64,
    instance: BaiInstance,
}

/// The table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBaiBernoulli {
    means: Vec<f64>,
    delta: f64,
}

impl TryFrom<RawBaiBernoulli> for BaiBernoulliConfig {
    type Error = crate::error::Error;
    fn try_from(r: RawBaiBernoulli) -> Result<Self> {
        BaiBernoulliConfig::new(r.means, r.delta)
    }
}

impl BaiBernoulliConfig {
    /// A problem.
    ///
    /// # Errors
    /// See [`BaiInstance::new`]; delta in (0, 1).
    pub fn new(means: Vec<f64>, delta: f64) -> Result<Self> {
        check::open_unit("delta", delta)?;
        Ok(BaiBernoulliConfig {
            instance: BaiInstance::new(means.clone())?,
            means,
            delta,
        })
    }
}

impl crate::config::Config for BaiBernoulliConfig {
    fn validate(&mut self) -> Result<()> {
        // Checked when made (`new`, or deserialization through it).
        Ok(())
    }
}

impl BaiEnvConfig for BaiBernoulliConfig {
    fn kind(&self) -> &'static str {
        BAI_BERNOULLI.kind
    }
    fn instance(&self) -> &BaiInstance {
        &self.instance
    }
    fn delta(&self) -> f64 {
        self.delta
    }
    fn build(&self, env_seed: u64) -> Box<dyn BaiEnvironment> {
        Box::new(BernoulliArms::new(self.instance(), env_seed))
    }
    fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": BAI_BERNOULLI.kind,
            "means": self.means,
            "arms": self.means.len(),
            "best_arm": self.instance().best(),
            "delta": self.delta,
            "seed_derivation": crate::rng::describe(&[crate::rng::ENV_RUN, crate::rng::ENV_ARM]),
        })
    }
}
use super::charact::BaiInstance;
use crate::rng::{SimRng, arm_rng};
use rand::RngExt;
use rand_distr::{Binomial, Distribution};

/// Requests of at most this many samples are drawn as that many Bernoulli trials (one uniform
/// each) instead of one Binomial: the same law, and much cheaper for the small blocks the Top Two
/// algorithms request early and near releases (`Binomial::new` costs a `powf` when `n p < 10`).
const SMALL_BATCH: u64 = 32;

/// Bernoulli arms of a validated [`BaiInstance`] for one run.
#[derive(Debug, Clone)]
pub struct BernoulliArms {
    means: Vec<f64>,
    best: usize,
    rngs: Vec<SimRng>,
}

impl BernoulliArms {
    /// The environment of one run: arm `a` draws from [`arm_rng`]`(env_seed, a)`.
    pub fn new(instance: &BaiInstance, env_seed: u64) -> Self {
        let means = instance.means().to_vec();
        let rngs = (0..means.len()).map(|a| arm_rng(env_seed, a)).collect();
        BernoulliArms {
            means,
            best: instance.best(),
            rngs,
        }
    }

    /// The means.
    pub fn means(&self) -> &[f64] {
        &self.means
    }
}

impl BaiEnvironment for BernoulliArms {
    fn reward_range(&self) -> (f64, f64) {
        (0.0, 1.0)
    }
    fn num_arms(&self) -> usize {
        self.means.len()
    }

    fn best_arm(&self) -> usize {
        self.best
    }

    fn pull_sum(&mut self, arm: usize, n: u64) -> f64 {
        let (p, rng) = (self.means[arm], &mut self.rngs[arm]);
        if n <= SMALL_BATCH {
            return (0..n).filter(|_| rng.random::<f64>() < p).count() as f64;
        }
        // `BaiInstance` guarantees means in [0, 1], so `Binomial::new` cannot fail; NaN would make
        // the error visible in the outcome rather than panic inside a run.
        match Binomial::new(n, p) {
            Ok(b) => b.sample(rng) as f64,
            Err(_) => f64::NAN,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Same seed, same sums; arms use independent streams (arm 1's sums do not depend on how
    /// often arm 0 was pulled); the sum of n draws has mean n mu.
    #[test]
    fn streams_and_law() {
        let inst = BaiInstance::new(vec![0.7, 0.2]).unwrap();
        let mut a = BernoulliArms::new(&inst, 5);
        let mut b = BernoulliArms::new(&inst, 5);
        a.pull_sum(0, 10);
        assert_eq!(a.pull_sum(1, 3), b.pull_sum(1, 3));
        let s: f64 = (0..2000).map(|_| a.pull_sum(0, 50)).sum();
        let mean = s / (2000.0 * 50.0);
        // sd of the mean = sqrt(0.21 / 1e5) = 0.00145; 5 sd.
        assert!((mean - 0.7).abs() < 0.0073, "{mean}");
        assert_eq!(a.num_arms(), 2);
        assert_eq!(a.best_arm(), 0);
    }
}
