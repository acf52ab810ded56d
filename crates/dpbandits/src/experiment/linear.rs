//! Linear-bandit cells: a resolved instance and a GOPE-family configuration.
//!
//! # Simulation
//! A phase plays each support arm `a` in one block of `T_l(a)` pulls, in ascending arm order.
//! Pseudo-regret inside a block is deterministic (`Delta_a` per pull), so checkpoints falling
//! inside a phase are exact. Each block's reward sum is one exact draw `N(n <theta,a>, n sigma^2)`
//! (O(support arms) per phase), except when the policy clips rewards (`clip_rewards = true`):
//! the sum of clipped rewards has no closed form, so that block is drawn reward by reward (O(T_l),
//! exact too). A phase truncated by the horizon releases nothing.

use super::ExperimentSpec;
use super::plan::{expand_sweep, policy_kind, without_kind};
use crate::error::{Error, Result, ResultExt};
use crate::linear::{GopeConfig, LinearConfig, LinearInstance};
use crate::privacy::PrivacyGuarantee;
use crate::registry::{self, PolicyParser};
use crate::rng::{Stream, derive_seed, label_hash};
use crate::sim::{Cell, CheckpointGrid};
use serde_json::json;
use std::sync::Arc;

/// A linear-bandit experiment cell.
#[derive(Debug)]
pub struct LinearCell {
    instance: Arc<LinearInstance>,
    /// Set when the instance is redrawn for every run.
    redraw: Option<Arc<LinearConfig>>,
    policy: GopeConfig,
    master_seed: u64,
    label: String,
}

impl LinearCell {
    /// A cell.
    pub fn new(instance: Arc<LinearInstance>, policy: GopeConfig, master_seed: u64) -> Self {
        LinearCell {
            label: policy.label(),
            instance,
            redraw: None,
            policy,
            master_seed,
        }
    }

    /// Seeds of run `run`: (environment, policy). The environment seed does not depend on the
    /// policy (common random numbers); the policy (noise) seed is keyed by the label.
    pub fn seeds(&self, run: u64) -> (u64, u64) {
        (
            LinearInstance::run_seed(self.master_seed, run),
            derive_seed(
                self.master_seed,
                Stream::Policy,
                &[label_hash(&self.label), run],
            ),
        )
    }
}

/// Play a GOPE-family policy on `instance` up to the grid's horizon; write the cumulative
/// pseudo-regret at each checkpoint into `out`. Returns the policy (for its releases).
pub fn simulate_linear(
    instance: &LinearInstance,
    cfg: &GopeConfig,
    env_seed: u64,
    policy_seed: u64,
    grid: &CheckpointGrid,
    out: &mut [f64],
) -> Result<crate::linear::PhasedElimination> {
    let cps = grid.points();
    assert_eq!(out.len(), cps.len());
    let horizon = grid.horizon();
    let mut env = instance.env(env_seed);
    let mut policy = cfg.build(instance.arms(), policy_seed)?;
    let boundary = cfg.boundary();
    let (mut t, mut regret, mut ci) = (0u64, 0.0f64, 0usize);
    let mut sums = vec![];
    'run: while t < horizon {
        let plan = policy.plan_phase()?;
        sums.clear();
        for &(arm, n) in &plan.blocks {
            let steps = n.min(horizon - t);
            while ci < cps.len() && cps[ci] <= t + steps {
                out[ci] = regret + env.regret(arm, cps[ci] - t);
                ci += 1;
            }
            regret += env.regret(arm, steps);
            t += steps;
            if t >= horizon {
                // Truncated or last phase: nothing after the horizon is released.
                break 'run;
            }
            let s = match boundary {
                Some(b) => (0..steps).map(|_| b.clip(env.pull(arm))).sum(),
                None => env.pull_sum(arm, steps),
            };
            sums.push(s);
        }
        policy.finish_phase(&sums);
    }
    Ok(policy)
}

impl Cell for LinearCell {
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
        let path = if self.policy.clip_rewards {
            "per-reward draws, each clipped to [-1, 1] (clip_rewards = true: O(T) per run)"
        } else {
            "one exact N(n <theta,a>, n sigma^2) draw per (phase, support arm) block (clip_rewards = false)"
        };
        json!({
            "simulation_path": path,
            "clip_rewards": self.policy.clip_rewards,
            "delta": self.policy.delta,
            "noise_placement": self.policy.placement,
            "noise_calibration": self.policy.noise_calibration,
            "constants": self.policy.constants,
            "design_tolerance": self.policy.design_tolerance,
            "design_solver": self.policy.design_solver,
        })
    }
    fn run(&self, run: u64, grid: &CheckpointGrid, out: &mut [f64]) -> Result<()> {
        let (es, ps) = self.seeds(run);
        match &self.redraw {
            Some(cfg) => {
                let inst = cfg.instance_for_run(self.master_seed, run)?;
                simulate_linear(&inst, &self.policy, es, ps, grid, out).map(drop)
            }
            None => simulate_linear(&self.instance, &self.policy, es, ps, grid, out).map(drop),
        }
    }
}

/// Build the cells of a linear-bandit experiment.
pub(super) fn plan(
    spec: &ExperimentSpec,
    env: LinearConfig,
) -> Result<(Vec<Box<dyn Cell>>, serde_json::Value)> {
    let instance = Arc::new(
        env.instance(spec.master_seed)
            .at(|| "env (linear)".into())?,
    );
    let redraw = env.redraw_per_run.then(|| Arc::new(env.clone()));
    let mut cells: Vec<Box<dyn Cell>> = vec![];
    for (i, table) in spec.policy.iter().enumerate() {
        let kind = policy_kind(table, i)?;
        let entry = registry::policy(&kind).at(|| format!("policy[{i}]"))?;
        let parse = match entry.parse {
            PolicyParser::Linear(f) => f,
            #[allow(unreachable_patterns)]
            _ => {
                return Err(Error::Config(format!(
                    "policy[{i}]: '{kind}' is a {} algorithm, but env 'linear' is a linear bandit",
                    entry.setting
                )));
            }
        };
        for t in expand_sweep(&without_kind(table)).at(|| format!("policy[{i}] ({kind})"))? {
            let cfg = parse(t).at(|| format!("policy[{i}] ({kind})"))?;
            let mut cell = LinearCell::new(instance.clone(), cfg, spec.master_seed);
            cell.redraw = redraw.clone();
            cells.push(Box::new(cell));
        }
    }
    let arms: Vec<Vec<f64>> = instance
        .arms()
        .iter()
        .map(|a| a.iter().copied().collect())
        .collect();
    let info = json!({
        "kind": "linear",
        "arms": instance.num_arms(),
        "dim": instance.dim(),
        "sigma": instance.sigma(),
        "arm_vectors": arms,
        "theta": instance.theta().iter().copied().collect::<Vec<_>>(),
        "means": instance.means(),
        "gaps": instance.gaps(),
        "reward_range": [f64::NEG_INFINITY.to_string(), f64::INFINITY.to_string()],
        "redraw_per_run": env.redraw_per_run,
        "instance_note": if env.redraw_per_run { "random arms/theta are redrawn for every run (paths [0, r], [1, r]); the vectors shown are the once-per-experiment draw, not used" } else { "one instance for all runs and policies" },
        "seed_derivation": "random arms: derive_seed(master_seed, Instance, [0]); random theta: derive_seed(master_seed, Instance, [1]) (drawn once per experiment); environment run r: derive_seed(master_seed, Env, [0, r]); arm a: derive_seed(that, Env, [a])",
    });
    Ok((cells, info))
}
