//! The finite-armed run loop and experiment cell.
//!
//! # Episode fast path
//! With [`SimMode::Episodes`] (the default) a policy that commits to an arm for `L` rounds is
//! advanced by one [`Environment::pull_sum`] (an exact draw of the sum of `L` rewards) and one
//! [`Policy::observe_batch`]. Pseudo-regret inside the episode is deterministic given the arm, so
//! checkpoints that fall inside an episode are still exact. [`SimMode::Steps`] is the plain
//! step-by-step loop, kept for testing the fast path against (the `fast_path` tests).
//!
//! # Streams
//! Run `r` of a cell uses the environment seed [`crate::rng::ENV_RUN`] (shared by every policy of
//! the experiment: common random numbers) and the policy seed [`crate::rng::POLICY_RUN`] (keyed by
//! the policy's label, so adding a policy to a file changes no other policy's stream).

use super::{EnvConfig, Environment, Policy, PolicyConfig};
use crate::error::{Error, Result};
use crate::privacy::{BoundaryMode, PrivacyGuarantee, RewardBoundary};
use crate::rng;
use crate::sim::{Cell, CheckpointGrid, SimMode};
use serde_json::json;
use std::sync::Arc;

/// Play `policy` against `env` up to the grid's horizon and write the cumulative pseudo-regret
/// at each checkpoint into `out` (length = number of checkpoints).
///
/// In episode mode, when the environment can emit rewards outside a private policy's boundary
/// ([`Environment::reward_range`]), the episode sum is built from rewards admitted one by one
/// (O(L)) instead of one exact draw, so the sensitivity argument holds for the fast path too.
///
/// # Errors
/// An observation the policy refuses (a reward outside a `reject` boundary).
pub fn simulate_finite(
    env: &mut dyn Environment,
    policy: &mut dyn Policy,
    grid: &CheckpointGrid,
    mode: SimMode,
    out: &mut [f64],
) -> Result<()> {
    let clip_each = clip_each(env.reward_range(), &policy.guarantee());
    if mode == SimMode::Episodes && clip_each.is_none() {
        // Per-step index policies may commit to exact blocks (`finite::blocks`).
        policy.enable_blocks(env.reward_range());
    }
    let cps = grid.points();
    assert_eq!(out.len(), cps.len());
    let horizon = grid.horizon();
    let (mut t, mut regret, mut ci) = (0u64, 0.0f64, 0usize);
    while t < horizon {
        let pull = policy.choose(t);
        let steps = match mode {
            SimMode::Episodes => pull.steps.clamp(1, horizon - t),
            SimMode::Steps => 1,
        };
        let arm = pull.arm;
        while ci < cps.len() && cps[ci] <= t + steps {
            out[ci] = regret + env.regret(arm, t, cps[ci] - t);
            ci += 1;
        }
        regret += env.regret(arm, t, steps);
        if steps == 1 {
            let r = env.pull(arm, t);
            policy.observe(arm, r)?;
        } else {
            let sum = match clip_each {
                Some(b) => b.sum_of((0..steps).map(|i| env.pull(arm, t + i)))?,
                // The environment's range lies inside the policy's boundary (checked by the
                // cell), so the exact draw of the sum is a sum of admitted rewards.
                None => policy
                    .boundary()
                    .drawn_sum(env.pull_sum(arm, t, steps), steps),
            };
            policy.observe_batch(arm, &sum)?;
        }
        t += steps;
    }
    Ok(())
}

/// The privacy boundary a run must admit rewards through one by one: a private policy's, when the
/// environment's range is not inside it.
fn clip_each((lo, hi): (f64, f64), g: &PrivacyGuarantee) -> Option<RewardBoundary> {
    g.boundary.filter(|b| !b.contains_range(lo, hi))
}

/// A finite-armed experiment cell: an environment config and a policy config.
#[derive(Debug)]
pub struct FiniteCell {
    env: Arc<dyn EnvConfig>,
    policy: Box<dyn PolicyConfig>,
    grid: Arc<CheckpointGrid>,
    master_seed: u64,
    mode: SimMode,
    clip_each: Option<RewardBoundary>,
    label: String,
}

impl FiniteCell {
    /// A cell; refuses an environment that can leave a `reject` privacy boundary.
    pub fn new(
        env: Arc<dyn EnvConfig>,
        policy: Box<dyn PolicyConfig>,
        grid: Arc<CheckpointGrid>,
        master_seed: u64,
        mode: SimMode,
    ) -> Result<Self> {
        let (lo, hi) = env.reward_range();
        let mut clip_each = None;
        if let Some(b) = policy.guarantee().boundary
            && !b.contains_range(lo, hi)
        {
            if b.mode == BoundaryMode::Reject {
                return Err(Error::Config(format!(
                    "environment '{}' can emit rewards in [{lo}, {hi}], outside the privacy boundary [{}, {}] \
                     of {}; boundary = \"reject\" refuses it (use boundary = \"clip\", or a bounded environment)",
                    env.kind(),
                    b.lo,
                    b.hi,
                    policy.label()
                )));
            }
            clip_each = Some(b);
        }
        Ok(FiniteCell {
            label: policy.label(),
            env,
            policy,
            grid,
            master_seed,
            mode,
            clip_each,
        })
    }

    /// Seeds of run `run`: (environment, policy) ([`rng::env_run_seed`], [`rng::policy_seed`]).
    pub fn seeds(&self, run: u64) -> (u64, u64) {
        (
            rng::env_run_seed(self.master_seed, run),
            rng::policy_seed(self.master_seed, &self.label, run),
        )
    }
}

impl Cell for FiniteCell {
    fn regret_bound(&self) -> Option<crate::config::RegretBound> {
        let means = self.env.means();
        let best = means.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        self.policy.regret_bound(&crate::config::BoundInstance {
            k: means.len(),
            d: 0,
            gaps: means.iter().map(|m| best - m).collect(),
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
        let path = match (self.mode, self.clip_each) {
            (SimMode::Steps, _) => "step by step".to_string(),
            (SimMode::Episodes, None) => format!(
                "episode sums drawn exactly from the '{}' environment",
                self.env.kind()
            ),
            (SimMode::Episodes, Some(b)) => format!(
                "episode sums of rewards clipped one by one to [{}, {}] (environment can leave the privacy boundary)",
                b.lo, b.hi
            ),
        };
        json!({ "simulation_path": path })
    }
    fn width(&self) -> usize {
        self.grid.points().len()
    }
    fn run(&self, run: u64, out: &mut [f64]) -> Result<()> {
        let (es, ps) = self.seeds(run);
        let mut env = self.env.build(es)?;
        let mut policy = self.policy.build(self.env.num_arms(), ps)?;
        simulate_finite(env.as_mut(), policy.as_mut(), &self.grid, self.mode, out)
    }
}
