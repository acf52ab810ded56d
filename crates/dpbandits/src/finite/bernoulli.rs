//! Bernoulli arms: rewards in {0, 1}.

use super::{EnvConfig, Environment};
use crate::config::{EnvInfo, Setting};
use crate::error::{Result, check};
use crate::rng::SimRng;
use rand::RngExt;
use rand_distr::{Binomial, Distribution};
use serde::Deserialize;

/// Registry record of the `bernoulli` environment.
pub const BERNOULLI: EnvInfo = EnvInfo {
    kind: "bernoulli",
    setting: Setting::FiniteArmed,
    description: "Bernoulli arms with the given means (rewards in {0,1}); exact Binomial episode sums",
    source: file!(),
};

/// Configuration: `kind = "bernoulli"`, `means = [...]` (each in [0, 1], K >= 1).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BernoulliConfig {
    /// Arm means.
    pub means: Vec<f64>,
}

impl BernoulliConfig {
    /// Checked configuration.
    pub fn new(means: Vec<f64>) -> Result<Self> {
        check::unit_means("means", &means)?;
        Ok(BernoulliConfig { means })
    }
}

impl EnvConfig for BernoulliConfig {
    fn kind(&self) -> &'static str {
        BERNOULLI.kind
    }
    fn num_arms(&self) -> usize {
        self.means.len()
    }
    fn reward_range(&self) -> (f64, f64) {
        (0.0, 1.0)
    }
    fn means(&self) -> Vec<f64> {
        self.means.clone()
    }
    fn build(&self, seed: u64) -> Result<Box<dyn Environment>> {
        Ok(Box::new(Bernoulli::new(self.means.clone(), seed)?))
    }
}

/// Bernoulli arms with one generator per arm.
#[derive(Debug, Clone)]
pub struct Bernoulli {
    means: Vec<f64>,
    best: f64,
    rngs: Vec<SimRng>,
}

impl Bernoulli {
    /// Arms with the given means (each in [0, 1]); `seed` keys the per-arm streams.
    pub fn new(means: Vec<f64>, seed: u64) -> Result<Self> {
        check::unit_means("means", &means)?;
        let rngs = super::arm_rngs(seed, means.len());
        Ok(Bernoulli {
            best: super::best(&means),
            means,
            rngs,
        })
    }
}

impl Environment for Bernoulli {
    fn reward_range(&self) -> (f64, f64) {
        (0.0, 1.0)
    }
    fn num_arms(&self) -> usize {
        self.means.len()
    }
    fn mean(&self, arm: usize, _t: u64) -> f64 {
        self.means[arm]
    }
    fn best_mean(&self, _t: u64) -> f64 {
        self.best
    }
    #[inline]
    fn pull(&mut self, arm: usize, _t: u64) -> f64 {
        let u: f64 = self.rngs[arm].random();
        if u < self.means[arm] { 1.0 } else { 0.0 }
    }
    /// Exact: the sum of `n` Bernoulli(p) rewards is Binomial(n, p).
    fn pull_sum(&mut self, arm: usize, _t: u64, n: u64) -> f64 {
        let p = self.means[arm];
        // p is checked to be in [0, 1] at construction, so Binomial::new cannot fail.
        let b = Binomial::new(n, p).expect("p in [0, 1]");
        b.sample(&mut self.rngs[arm]) as f64
    }
}

impl crate::config::Config for BernoulliConfig {
    fn validate(&mut self) -> crate::error::Result<()> {
        crate::error::check::unit_means("means", &self.means)
    }
}
