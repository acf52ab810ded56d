//! General bounded rewards in [0, 1]: Beta-distributed arms.

use super::{EnvConfig, Environment};
use crate::config::{EnvInfo, Setting};
use crate::error::{Result, check};
use crate::rng::SimRng;
use rand_distr::{Beta, Distribution};
use serde::Deserialize;

/// Registry record of the `beta` environment.
pub const BETA: EnvInfo = EnvInfo {
    kind: "beta",
    setting: Setting::FiniteArmed,
    description: "Beta arms with the given means in (0,1): general bounded rewards in [0,1]",
    source: file!(),
};

/// Configuration: `kind = "beta"`, `means = [...]` in (0, 1), `concentration = 2.0`.
/// Arm `a` draws from Beta(c mu_a, c (1 - mu_a)): mean mu_a, variance mu_a (1 - mu_a)/(c + 1).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BetaConfig {
    /// Arm means, each in (0, 1).
    pub means: Vec<f64>,
    /// Concentration c > 0.
    #[serde(default = "two")]
    pub concentration: f64,
}

fn two() -> f64 {
    2.0
}

impl BetaConfig {
    /// Validate.
    pub fn validate(&self) -> Result<()> {
        check::unit_means("means", &self.means)?;
        for (i, &m) in self.means.iter().enumerate() {
            check::open_unit(&format!("means[{i}]"), m)?;
        }
        check::positive("concentration", self.concentration)?;
        Ok(())
    }
}

impl EnvConfig for BetaConfig {
    fn kind(&self) -> &'static str {
        BETA.kind
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
        self.validate()?;
        let dists = self
            .means
            .iter()
            .map(|&m| {
                Beta::new(self.concentration * m, self.concentration * (1.0 - m))
                    .expect("validated")
            })
            .collect();
        let rngs = super::arm_rngs(seed, self.means.len());
        Ok(Box::new(BetaArms {
            means: self.means.clone(),
            best: super::best(&self.means),
            dists,
            rngs,
        }))
    }
}

/// Beta-distributed arms.
#[derive(Debug, Clone)]
pub struct BetaArms {
    means: Vec<f64>,
    best: f64,
    dists: Vec<Beta<f64>>,
    rngs: Vec<SimRng>,
}

impl Environment for BetaArms {
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
    fn pull(&mut self, arm: usize, _t: u64) -> f64 {
        self.dists[arm].sample(&mut self.rngs[arm])
    }
}

impl crate::config::Config for BetaConfig {
    fn validate(&mut self) -> crate::error::Result<()> {
        BetaConfig::validate(self)
    }
}
