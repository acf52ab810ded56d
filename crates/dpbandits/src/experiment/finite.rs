//! Finite-armed cells: an environment config and a policy config.

use super::ExperimentSpec;
use super::plan::{expand_sweep, policy_kind, without_kind};
use crate::env::EnvConfig;
use crate::error::{Error, Result, ResultExt};
use crate::policy::PolicyConfig;
use crate::privacy::{BoundaryMode, PrivacyGuarantee, RewardBoundary};
use crate::registry::{self, PolicyParser};
use crate::rng::{Stream, derive_seed, label_hash};
use crate::sim::{Cell, CheckpointGrid, SimMode, simulate_finite};
use serde_json::json;
use std::sync::Arc;

/// A finite-armed experiment cell.
#[derive(Debug)]
pub struct FiniteCell {
    env: Arc<dyn EnvConfig>,
    policy: Box<dyn PolicyConfig>,
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
            master_seed,
            mode,
            clip_each,
        })
    }

    /// Seeds of run `run`: (environment, policy). The environment seed does not depend on the
    /// policy (common random numbers); the policy seed is keyed by the label.
    pub fn seeds(&self, run: u64) -> (u64, u64) {
        (
            derive_seed(self.master_seed, Stream::Env, &[0, run]),
            derive_seed(
                self.master_seed,
                Stream::Policy,
                &[label_hash(&self.label), run],
            ),
        )
    }
}

impl Cell for FiniteCell {
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
    fn run(&self, run: u64, grid: &CheckpointGrid, out: &mut [f64]) -> Result<()> {
        let (es, ps) = self.seeds(run);
        let mut env = self.env.build(es)?;
        let mut policy = self.policy.build(self.env.num_arms(), ps)?;
        simulate_finite(
            env.as_mut(),
            policy.as_mut(),
            grid,
            self.mode,
            self.clip_each,
            out,
        );
        Ok(())
    }
}

/// Build the cells of a finite-armed experiment.
pub(super) fn plan(
    spec: &ExperimentSpec,
    env: Box<dyn EnvConfig>,
) -> Result<(Vec<Box<dyn Cell>>, serde_json::Value)> {
    let mut env = env;
    let env_kind = env.kind();
    env.set_horizon(spec.horizon)
        .at(|| format!("env ({env_kind})"))?;
    let env: Arc<dyn EnvConfig> = Arc::from(env);
    let mut cells: Vec<Box<dyn Cell>> = vec![];
    for (i, table) in spec.policy.iter().enumerate() {
        let kind = policy_kind(table, i)?;
        let entry = registry::policy(&kind).at(|| format!("policy[{i}]"))?;
        let parse = match entry.parse {
            PolicyParser::Finite(f) => f,
            #[allow(unreachable_patterns)]
            _ => {
                return Err(Error::Config(format!(
                    "policy[{i}]: '{kind}' is a {} algorithm, but env '{}' is finite-armed",
                    entry.setting,
                    env.kind()
                )));
            }
        };
        for t in expand_sweep(&without_kind(table)).at(|| format!("policy[{i}] ({kind})"))? {
            let cfg = parse(t).at(|| format!("policy[{i}] ({kind})"))?;
            let cell = FiniteCell::new(env.clone(), cfg, spec.master_seed, spec.simulation)
                .at(|| format!("policy[{i}] ({kind})"))?;
            cells.push(Box::new(cell));
        }
    }
    let (lo, hi) = env.reward_range();
    let info = json!({
        "kind": env.kind(),
        "arms": env.num_arms(),
        "means": env.means(),
        "reward_range": [lo, hi],
        "instance": env.describe(),
        "seed_derivation": "environment run r: derive_seed(master_seed, Env, [0, r]); arm a: derive_seed(that, Env, [a]) (SplitMix64 + Xoshiro256++)",
    });
    Ok((cells, info))
}
