//! The linear-bandit run loop and experiment cell.
//!
//! # Simulation
//! A commitment of `n` rounds of one arm (a phase block of `T_l(a)` pulls for the GOPE family, one
//! round for per-step policies) is advanced at once: pseudo-regret inside it is deterministic
//! (`Delta_a` per pull), so checkpoints falling inside are exact, and its reward sum is one exact
//! draw ([`Environment::pull_sum`]: `N(n <theta,a>, n sigma^2)` for Gaussian noise), except when the
//! policy clips rewards at its boundary: the sum of clipped rewards has no closed form, so that
//! block is drawn reward by reward (O(n), exact too). A commitment truncated by the horizon
//! releases nothing.
//!
//! # Streams
//! Random instances: [`crate::rng::instance`] paths below the master seed. Run `r`: rewards from
//! [`crate::rng::ENV_RUN`] / [`crate::rng::ENV_ARM`] (common to every policy), the policy's noise
//! below [`crate::rng::POLICY_RUN`] (keyed by its label).

use super::{LinearEnvConfig, LinearPolicy, LinearPolicyConfig};
use crate::error::Result;
use crate::finite::Environment;
use crate::privacy::PrivacyGuarantee;
use crate::rng;
use crate::sim::{Cell, CheckpointGrid};
use std::sync::Arc;

/// Play a linear policy against `env` up to the grid's horizon; write the cumulative
/// pseudo-regret at each checkpoint into `out`.
///
/// # Errors
/// A numerical failure of the policy.
pub fn simulate_linear(
    env: &mut dyn Environment,
    policy: &mut dyn LinearPolicy,
    grid: &CheckpointGrid,
    out: &mut [f64],
) -> Result<()> {
    let cps = grid.points();
    assert_eq!(out.len(), cps.len());
    let horizon = grid.horizon();
    let (lo, hi) = env.reward_range();
    let clip_each = policy
        .guarantee()
        .boundary
        .filter(|b| !b.contains_range(lo, hi));
    let boundary = policy.boundary();
    let (mut t, mut regret, mut ci) = (0u64, 0.0f64, 0usize);
    while t < horizon {
        let pull = policy.choose(t)?;
        let (arm, t0) = (pull.arm, t);
        let steps = pull.steps.clamp(1, horizon - t);
        while ci < cps.len() && cps[ci] <= t + steps {
            out[ci] = regret + env.regret(arm, t, cps[ci] - t);
            ci += 1;
        }
        regret += env.regret(arm, t, steps);
        t += steps;
        if t >= horizon {
            // Truncated or last commitment: nothing after the horizon is released.
            break;
        }
        let sum = match clip_each {
            Some(b) => b.sum_of((0..steps).map(|i| env.pull(arm, t0 + i)))?,
            // The environment's range lies inside the policy's boundary.
            None => boundary.drawn_sum(env.pull_sum(arm, t0, steps), steps),
        };
        policy.observe_batch(arm, &sum)?;
    }
    Ok(())
}

/// A linear-bandit experiment cell: an instance and a policy configuration.
#[derive(Debug)]
pub struct LinearCell {
    env: Arc<dyn LinearEnvConfig>,
    policy: Box<dyn LinearPolicyConfig>,
    grid: Arc<CheckpointGrid>,
    master_seed: u64,
    label: String,
}

impl LinearCell {
    /// A cell (the environment must be instantiated).
    pub fn new(
        env: Arc<dyn LinearEnvConfig>,
        policy: Box<dyn LinearPolicyConfig>,
        grid: Arc<CheckpointGrid>,
        master_seed: u64,
    ) -> Self {
        LinearCell {
            label: policy.label(),
            env,
            policy,
            grid,
            master_seed,
        }
    }
}

impl Cell for LinearCell {
    fn regret_bound(&self) -> Option<crate::config::RegretBound> {
        let (arms, _) = self.env.build(self.master_seed, 0).ok()?;
        self.policy.regret_bound(&crate::config::BoundInstance {
            k: arms.len(),
            d: arms.first().map_or(0, |a| a.len()),
            gaps: vec![],
        })
    }
    fn label(&self) -> String {
        self.label.clone()
    }
    fn kind(&self) -> &'static str {
        self.policy.kind()
    }
    fn params(&self) -> Vec<(&'static str, f64)> {
        self.policy.params()
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        self.policy.guarantee()
    }
    fn describe(&self) -> serde_json::Value {
        self.policy.describe()
    }
    fn width(&self) -> usize {
        self.grid.points().len()
    }
    fn run(&self, run: u64, out: &mut [f64]) -> Result<()> {
        let (arms, mut env) = self.env.build(self.master_seed, run)?;
        let seed = rng::policy_seed(self.master_seed, &self.label, run);
        let mut policy = self.policy.build(&arms, seed)?;
        simulate_linear(env.as_mut(), policy.as_mut(), &self.grid, out)
    }
}
