//! The contextual run loop and experiment cells.
//!
//! Every `[[policy]]` configuration of a contextual experiment is one cell, and
//! all of them form one [`CellGroup`], simulated one run per job on common random numbers
//! ([`simulate_contextual`]): each round's decision set and reward noise are generated once and
//! shared by all policies. A cell run alone ([`Cell::run`]) gives exactly the numbers it gets in
//! the group (its randomness depends only on the master seed, the run and its own label).

use super::adac_oful::OfulBatch;
use super::{
    ActionLanes, ActionSet, ContextualEnvConfig, ContextualEnvironment, ContextualPolicy,
    ContextualPolicyConfig,
};
use crate::error::Result;
use crate::privacy::PrivacyGuarantee;
use crate::rng;
use crate::sim::{Cell, CellGroup, CheckpointGrid, GroupMember};
use serde_json::json;
use std::sync::Arc;

/// All policies of a contextual experiment on one environment.
#[derive(Debug)]
pub struct ContextualGroup {
    env: Box<dyn ContextualEnvConfig>,
    policies: Vec<Box<dyn ContextualPolicyConfig>>,
    grid: Arc<CheckpointGrid>,
    master_seed: u64,
}

impl ContextualGroup {
    /// A group; the environment must be instantiated already.
    pub fn new(
        env: Box<dyn ContextualEnvConfig>,
        policies: Vec<Box<dyn ContextualPolicyConfig>>,
        grid: Arc<CheckpointGrid>,
        master_seed: u64,
    ) -> Self {
        ContextualGroup {
            env,
            policies,
            grid,
            master_seed,
        }
    }

    /// One cell per policy, all simulated in this group.
    pub fn cells(self: &Arc<Self>) -> Vec<Box<dyn Cell>> {
        (0..self.policies.len())
            .map(|index| {
                Box::new(ContextualCell {
                    group: self.clone(),
                    index,
                }) as Box<dyn Cell>
            })
            .collect()
    }

    /// Policy seed of member `m` in run `run` (keyed by its label, not its position).
    pub fn policy_seed(&self, m: usize, run: u64) -> u64 {
        rng::policy_seed(self.master_seed, &self.policies[m].label(), run)
    }

    /// Run `run` of the members `which`, writing member `which[i]`'s regret into `out[i]`.
    pub fn run_members(&self, which: &[usize], run: u64, out: &mut [Vec<f64>]) -> Result<()> {
        let grid = &self.grid;
        let mut env = self.env.build(self.master_seed, run)?;
        let d = self.env.dim();
        let mut pols = which
            .iter()
            .map(|&m| self.policies[m].build(d, grid.horizon(), self.policy_seed(m, run)))
            .collect::<Result<Vec<_>>>()?;
        simulate_contextual(env.as_mut(), &mut pols, grid, out)
    }
}

impl CellGroup for ContextualGroup {
    fn members(&self) -> usize {
        self.policies.len()
    }
    fn width(&self) -> usize {
        self.grid.points().len()
    }
    fn run_group(&self, run: u64, out: &mut [Vec<f64>]) -> Result<()> {
        let all: Vec<usize> = (0..self.policies.len()).collect();
        self.run_members(&all, run, out)
    }
}

/// One policy configuration of a contextual experiment.
#[derive(Debug)]
pub struct ContextualCell {
    group: Arc<ContextualGroup>,
    index: usize,
}

impl Cell for ContextualCell {
    fn label(&self) -> String {
        self.group.policies[self.index].label()
    }
    fn kind(&self) -> &'static str {
        self.group.policies[self.index].kind()
    }
    fn params(&self) -> Vec<(&'static str, f64)> {
        self.group.policies[self.index].params()
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        self.group.policies[self.index].guarantee()
    }
    fn describe(&self) -> serde_json::Value {
        json!({
            "simulation_path": "step by step; all policies of the file driven on the same decision sets and reward noise (common random numbers), one job per run",
        })
    }
    fn width(&self) -> usize {
        self.group.grid.points().len()
    }
    fn run(&self, run: u64, out: &mut [f64]) -> Result<()> {
        let mut rows = vec![vec![0.0; out.len()]];
        self.group.run_members(&[self.index], run, &mut rows)?;
        out.copy_from_slice(&rows[0]);
        Ok(())
    }
    fn group(&self) -> Option<GroupMember> {
        Some(GroupMember {
            group: self.group.clone(),
            index: self.index,
        })
    }
}

/// Play every policy against the same environment stream up to the grid's horizon; `out[p]`
/// receives policy `p`'s cumulative pseudo-regret at each checkpoint.
///
/// Each round: the environment draws `A_t` and `eta_t` once (and the loop transposes `A_t` once,
/// [`ActionLanes`]); every policy chooses, is charged
/// `best - mean(a)`, and observes `mean(a) + eta_t`.
///
/// When every policy is an OFUL-family engine of dimension `d <= 3` (`rs_oful`, `adac_oful`:
/// Figure 4(c)), the round's policy work runs batched over the policies (`OfulBatch` in
/// `adac_oful.rs`): the same numbers, bit for bit, as one [`ContextualPolicy::play`] call per
/// policy, which is the path for every other set of policies.
///
/// # Errors
/// An observation a policy refuses (never for the crate's environments and policies).
pub fn simulate_contextual(
    env: &mut dyn ContextualEnvironment,
    policies: &mut [Box<dyn ContextualPolicy>],
    grid: &CheckpointGrid,
    out: &mut [Vec<f64>],
) -> Result<()> {
    assert_eq!(policies.len(), out.len());
    macro_rules! batched {
        ($($n:literal)*) => {
            match env.dim() {
                $($n => if let Some(mut batch) = OfulBatch::<$n>::new(policies) {
                    let run = drive(env, grid, out, |t, a, l, m, e, c| batch.play_round(t, a, l, m, e, c));
                    batch.finish();
                    return run;
                })*
                _ => {}
            }
        };
    }
    batched!(1 2 3);
    drive(env, grid, out, |t, actions, lanes, means, eta, chosen| {
        for (p, c) in policies.iter_mut().zip(chosen.iter_mut()) {
            *c = p.play(t, actions, lanes, means, eta)?;
        }
        Ok(())
    })
}

/// The run loop of [`simulate_contextual`] with the policies' round `play_round(t, actions,
/// lanes, means, noise, chosen)` (every policy plays round `t`; `chosen[p]` receives policy
/// `p`'s action).
fn drive(
    env: &mut dyn ContextualEnvironment,
    grid: &CheckpointGrid,
    out: &mut [Vec<f64>],
    mut play_round: impl FnMut(
        u64,
        &ActionSet<'_>,
        &ActionLanes<'_>,
        &[f64],
        f64,
        &mut [usize],
    ) -> Result<()>,
) -> Result<()> {
    let cps = grid.points();
    let horizon = grid.horizon();
    let mut regret = vec![0.0f64; out.len()];
    let mut chosen = vec![0usize; out.len()];
    let mut ci = 0usize;
    let mut lane_buf = Vec::new();
    // The environment's theta*, copied once (the environment is borrowed mutably each round).
    let reference_buf = env.reference_theta().map(<[f64]>::to_vec);
    let reference = reference_buf.as_deref();
    for t in 0..horizon {
        env.next_round(t);
        let actions = env.actions();
        // Used where they are returned (a move of the lanes would copy them once more).
        let kept = env.lanes();
        let built;
        let lanes = match (&kept, reference) {
            (Some(lanes), _) => lanes,
            (None, Some(theta)) => {
                built = ActionLanes::transpose_with_reference(&actions, &mut lane_buf, theta);
                &built
            }
            (None, None) => {
                built = ActionLanes::transpose(&actions, &mut lane_buf);
                &built
            }
        };
        let means = env.means();
        let best = env.best_mean();
        let eta = env.noise();
        play_round(t, &actions, lanes, means, eta, &mut chosen)?;
        for (reg, &i) in regret.iter_mut().zip(&chosen) {
            *reg += best - means[i];
        }
        // Checkpoints are 1-based round counts: after round index t, t + 1 rounds are played.
        while ci < cps.len() && cps[ci] == t + 1 {
            for (row, &r) in out.iter_mut().zip(&regret) {
                row[ci] = r;
            }
            ci += 1;
        }
    }
    Ok(())
}
