//! Finite-armed stochastic environments.
//!
//! An [`Environment`] owns one generator per arm (seeded from the experiment's master seed by
//! (environment seed, arm), see [`crate::rng`]): the k-th reward of an arm does not depend on which
//! policy is playing (common random numbers in step mode).
//!
//! # Episode fast path
//! [`Environment::pull_sum`] draws the *sum* of `n` consecutive rewards of one arm exactly from its
//! distribution: Binomial for Bernoulli arms, Normal for unclipped Gaussian arms. Environments
//! without a closed form (clipped Gaussian, Beta) fall back to `n` single draws, which is exact too,
//! only O(n). An episodic policy is then simulated in O(episodes) per run.
//!
//! Environments with time-varying means (piecewise-stationary, issue 6) override
//! [`Environment::mean`] and [`Environment::regret`]; the simulator only uses these two to measure
//! pseudo-regret.

mod bernoulli;
mod beta;
mod gaussian;
mod piecewise;

pub use bernoulli::{Bernoulli, BernoulliConfig};
pub use beta::{BetaArms, BetaConfig};
pub use gaussian::{Gaussian, GaussianConfig};
pub use piecewise::{FeedbackChannel, PiecewiseBernoulli, PiecewiseConfig, RandomSegments};

use crate::error::Result;
use std::fmt::Debug;

/// A finite-armed stochastic environment for one run.
pub trait Environment: Send + Debug {
    /// Number of arms K.
    fn num_arms(&self) -> usize;

    /// Mean reward of `arm` at round `t` (0-based).
    fn mean(&self, arm: usize, t: u64) -> f64;

    /// Highest mean at round `t`.
    fn best_mean(&self, t: u64) -> f64;

    /// Draw the reward of `arm` at round `t`.
    fn pull(&mut self, arm: usize, t: u64) -> f64;

    /// Draw the sum of the rewards of `n` consecutive pulls of `arm` starting at round `t`.
    /// Default: `n` single pulls.
    fn pull_sum(&mut self, arm: usize, t: u64, n: u64) -> f64 {
        (0..n).map(|i| self.pull(arm, t + i)).sum()
    }

    /// Pseudo-regret of playing `arm` for rounds `t .. t + n`. Default: stationary means.
    fn regret(&self, arm: usize, t: u64, n: u64) -> f64 {
        (self.best_mean(t) - self.mean(arm, t)) * n as f64
    }
}

/// A validated environment description, able to build a fresh [`Environment`] for each run.
pub trait EnvConfig: Send + Sync + Debug {
    /// Registry id (`bernoulli`, `gaussian`, ...).
    fn kind(&self) -> &'static str;
    /// Number of arms.
    fn num_arms(&self) -> usize;
    /// Interval that contains every reward this environment can emit (may be infinite).
    fn reward_range(&self) -> (f64, f64);
    /// Initial means, for display.
    fn means(&self) -> Vec<f64>;
    /// Build the environment of one run; `seed` is the run's environment seed.
    fn build(&self, seed: u64) -> Result<Box<dyn Environment>>;
    /// Called once by the planner with the experiment's horizon, before any run: environments
    /// with time structure place or check their breakpoints here. Default: nothing to do.
    fn set_horizon(&mut self, _horizon: u64) -> Result<()> {
        Ok(())
    }
    /// Instance facts for the manifest (e.g. generated segments). Default: none.
    fn describe(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
}

/// One generator per arm, keyed by (environment seed, arm): the k-th reward of an arm does not
/// depend on the other arms or on the policy.
pub fn arm_rngs(seed: u64, k: usize) -> Vec<crate::rng::SimRng> {
    (0..k as u64)
        .map(|a| crate::rng::stream_rng(seed, crate::rng::Stream::Env, &[a]))
        .collect()
}

/// The largest mean.
pub(crate) fn best(means: &[f64]) -> f64 {
    means.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}
