//! Contextual cells: every `[[policy]]` configuration of a contextual experiment is one cell, and
//! all of them form one [`CellGroup`], simulated one run per job on common random numbers
//! ([`simulate_contextual`]): each round's decision set and reward noise are generated once and
//! shared by all policies. A cell run alone ([`Cell::run`]) gives exactly the numbers it gets in
//! the group (its randomness depends only on the master seed, the run and its own label).

use super::ExperimentSpec;
use super::plan::{expand_sweep, policy_kind, without_kind};
use crate::contextual::{ContextualEnvConfig, ContextualPolicyConfig, simulate_contextual};
use crate::error::{Error, Result, ResultExt};
use crate::privacy::PrivacyGuarantee;
use crate::registry::{self, PolicyParser};
use crate::rng::{Stream, derive_seed, label_hash};
use crate::sim::{Cell, CellGroup, CheckpointGrid, GroupMember};
use serde_json::json;
use std::sync::Arc;

/// All policies of a contextual experiment on one environment.
#[derive(Debug)]
pub struct ContextualGroup {
    env: Box<dyn ContextualEnvConfig>,
    policies: Vec<Box<dyn ContextualPolicyConfig>>,
    master_seed: u64,
}

impl ContextualGroup {
    /// A group; the environment must be instantiated already.
    pub fn new(
        env: Box<dyn ContextualEnvConfig>,
        policies: Vec<Box<dyn ContextualPolicyConfig>>,
        master_seed: u64,
    ) -> Self {
        ContextualGroup {
            env,
            policies,
            master_seed,
        }
    }

    /// Policy seed of member `m` in run `run` (keyed by its label, not its position).
    pub fn policy_seed(&self, m: usize, run: u64) -> u64 {
        derive_seed(
            self.master_seed,
            Stream::Policy,
            &[label_hash(&self.policies[m].label()), run],
        )
    }

    /// Run `run` of the members `which`, writing member `which[i]`'s regret into `out[i]`.
    pub fn run_members(
        &self,
        which: &[usize],
        run: u64,
        grid: &CheckpointGrid,
        out: &mut [Vec<f64>],
    ) -> Result<()> {
        let mut env = self.env.build(self.master_seed, run)?;
        let d = self.env.dim();
        let mut pols = which
            .iter()
            .map(|&m| self.policies[m].build(d, grid.horizon(), self.policy_seed(m, run)))
            .collect::<Result<Vec<_>>>()?;
        simulate_contextual(env.as_mut(), &mut pols, grid, out);
        Ok(())
    }
}

impl CellGroup for ContextualGroup {
    fn members(&self) -> usize {
        self.policies.len()
    }
    fn run_group(&self, run: u64, grid: &CheckpointGrid, out: &mut [Vec<f64>]) -> Result<()> {
        let all: Vec<usize> = (0..self.policies.len()).collect();
        self.run_members(&all, run, grid, out)
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
    fn run(&self, run: u64, grid: &CheckpointGrid, out: &mut [f64]) -> Result<()> {
        let mut rows = vec![vec![0.0; out.len()]];
        self.group
            .run_members(&[self.index], run, grid, &mut rows)?;
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

/// Build the cells of a contextual experiment.
pub(super) fn plan(
    spec: &ExperimentSpec,
    mut env: Box<dyn ContextualEnvConfig>,
) -> Result<(Vec<Box<dyn Cell>>, serde_json::Value)> {
    env.instantiate(spec.master_seed).at(|| "env".into())?;
    let mut policies: Vec<Box<dyn ContextualPolicyConfig>> = vec![];
    for (i, table) in spec.policy.iter().enumerate() {
        let kind = policy_kind(table, i)?;
        let entry = registry::policy(&kind).at(|| format!("policy[{i}]"))?;
        let parse = match entry.parse {
            PolicyParser::Contextual(f) => f,
            #[allow(unreachable_patterns)]
            _ => {
                return Err(Error::Config(format!(
                    "policy[{i}]: '{kind}' is a {} algorithm, but env '{}' is a contextual linear bandit",
                    entry.setting,
                    env.kind()
                )));
            }
        };
        for t in expand_sweep(&without_kind(table)).at(|| format!("policy[{i}] ({kind})"))? {
            let cfg = parse(t).at(|| format!("policy[{i}] ({kind})"))?;
            // Build once to surface dimension errors at plan time.
            cfg.build(env.dim(), spec.horizon, 0)
                .at(|| format!("policy[{i}] ({kind})"))?;
            policies.push(cfg);
        }
    }
    let info = env.describe();
    let group = Arc::new(ContextualGroup::new(env, policies, spec.master_seed));
    let cells = (0..group.policies.len())
        .map(|index| {
            Box::new(ContextualCell {
                group: group.clone(),
                index,
            }) as Box<dyn Cell>
        })
        .collect();
    Ok((cells, info))
}
