//! The contextual run loop and experiment cells.
//!
//! Every `[[policy]]` configuration of a contextual experiment is one cell, and
//! all of them form one [`CellGroup`], simulated one run per job on common random numbers
//! ([`simulate_configs`]): each round's decision set and reward noise are generated once and
//! shared by all policies. A cell run alone ([`Cell::run`]) gives exactly the numbers it gets in
//! the group (its randomness depends only on the master seed, the run and its own label).
//!
//! # Two paths, the same numbers
//! * **Per policy** ([`simulate_contextual`]): one [`ContextualPolicy::play`] call per policy
//!   and round. Any set of policies.
//! * **Batched** (`simulate_configs`): when every member's configuration offers the same policy
//!   family ([`ContextualPolicyConfig::batched`]) and the family accepts the group
//!   ([`BatchFamily::driver`]), the family's driver plays the whole group each round, with the
//!   round's decision set also given by coordinate ([`ActionLanes`], `lanes.rs`): the OFUL
//!   family (`oful/batch.rs`; Figure 4(c)). A group that mixes in another family's policy takes
//!   the per-policy path. Which path a group takes is in the manifest
//!   (`details.policy_path` of each cell, [`ContextualGroup::path`]).

use super::lanes::LaneSource;
use super::{
    ActionLanes, ActionSet, BatchDriver, BatchFamily, ContextualEnvConfig, ContextualEnvironment,
    ContextualPolicy, ContextualPolicyConfig,
};
use crate::error::Result;
use crate::privacy::PrivacyGuarantee;
use crate::rng;
use crate::sim::{Cell, CellGroup, CheckpointGrid, GroupMember};
use serde_json::json;
use std::sync::{Arc, OnceLock};

/// Which path the run loop took for a set of policies (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimPath {
    /// A family's batched driver ([`BatchDriver::path`] names it).
    Batched(&'static str),
    /// One [`ContextualPolicy::play`] call per policy and round.
    PerPolicy,
}

impl SimPath {
    /// For the manifest.
    pub fn describe(&self) -> String {
        match self {
            SimPath::Batched(p) => format!("batched: {p}"),
            SimPath::PerPolicy => "per policy: one play call per policy and round".into(),
        }
    }
}

/// All policies of a contextual experiment on one environment.
#[derive(Debug)]
pub struct ContextualGroup {
    env: Box<dyn ContextualEnvConfig>,
    policies: Vec<Box<dyn ContextualPolicyConfig>>,
    grid: Arc<CheckpointGrid>,
    master_seed: u64,
    /// The path of the whole group ([`Self::path`]), found once.
    path: OnceLock<SimPath>,
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
            path: OnceLock::new(),
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
        self.run_path(which, run, out).map(|_| ())
    }

    /// [`Self::run_members`], telling which path ran.
    pub fn run_path(&self, which: &[usize], run: u64, out: &mut [Vec<f64>]) -> Result<SimPath> {
        let mut env = self.env.build(self.master_seed, run)?;
        let configs: Vec<&dyn ContextualPolicyConfig> =
            which.iter().map(|&m| self.policies[m].as_ref()).collect();
        let seeds: Vec<u64> = which.iter().map(|&m| self.policy_seed(m, run)).collect();
        simulate_configs(env.as_mut(), &configs, &seeds, &self.grid, out)
    }

    /// The path the whole group's runs take: batched when every member offers the same family
    /// and the family accepts them, otherwise per policy.
    pub fn path(&self) -> SimPath {
        *self.path.get_or_init(|| {
            let configs: Vec<&dyn ContextualPolicyConfig> =
                self.policies.iter().map(|p| p.as_ref()).collect();
            let seeds: Vec<u64> = (0..configs.len()).map(|m| self.policy_seed(m, 0)).collect();
            match batch_driver(&configs, self.env.dim(), self.grid.horizon(), &seeds) {
                Some(Ok(driver)) => SimPath::Batched(driver.path()),
                _ => SimPath::PerPolicy,
            }
        })
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
    fn regret_bound(&self) -> Option<crate::config::RegretBound> {
        let env = &self.group.env;
        self.group.policies[self.index].regret_bound(&crate::config::BoundInstance {
            k: env.max_actions(),
            d: env.dim(),
            gaps: vec![],
        })
    }
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
            "policy_path": self.group.path().describe(),
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
/// Each round: the environment draws `A_t` and `eta_t` once; every policy chooses, is charged
/// `best - mean(a)`, and observes `mean(a) + eta_t` (one [`ContextualPolicy::play`] call per
/// policy: the per-policy path; [`simulate_configs`] may take a family's batched path, with the
/// same numbers).
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
    drive::<false>(env, grid, out, |t, actions, _, means, eta, chosen| {
        for (p, c) in policies.iter_mut().zip(chosen.iter_mut()) {
            *c = p.play(t, actions, means, eta)?;
        }
        Ok(())
    })
}

/// [`simulate_contextual`] for the policies `configs` (built for the environment's dimension and
/// the grid's horizon, policy `p` with seed `seeds[p]`): through their family's batched driver
/// when every config offers the same family ([`ContextualPolicyConfig::batched`]) and the family
/// accepts them, otherwise one `play` call per policy. The same numbers either way; the path
/// taken is returned.
///
/// # Errors
/// A configuration that cannot be built; an observation a policy refuses.
pub fn simulate_configs(
    env: &mut dyn ContextualEnvironment,
    configs: &[&dyn ContextualPolicyConfig],
    seeds: &[u64],
    grid: &CheckpointGrid,
    out: &mut [Vec<f64>],
) -> Result<SimPath> {
    assert_eq!(configs.len(), seeds.len());
    assert_eq!(configs.len(), out.len());
    let (d, horizon) = (env.dim(), grid.horizon());
    if let Some(driver) = batch_driver(configs, d, horizon, seeds) {
        let mut driver = driver?;
        let path = SimPath::Batched(driver.path());
        drive::<true>(env, grid, out, |t, actions, lanes, means, eta, chosen| {
            let lanes = lanes.expect("lanes on the batched path");
            driver.play_round(t, actions, lanes, means, eta, chosen)
        })?;
        return Ok(path);
    }
    let mut policies = configs
        .iter()
        .zip(seeds)
        .map(|(c, &seed)| c.build(d, horizon, seed))
        .collect::<Result<Vec<_>>>()?;
    simulate_contextual(env, &mut policies, grid, out)?;
    Ok(SimPath::PerPolicy)
}

/// The batched driver of `configs`, if they all offer the same family and it accepts them.
fn batch_driver(
    configs: &[&dyn ContextualPolicyConfig],
    d: usize,
    horizon: u64,
    seeds: &[u64],
) -> Option<Result<Box<dyn BatchDriver>>> {
    let family: &dyn BatchFamily = configs.first()?.batched()?;
    if !configs
        .iter()
        .all(|c| c.batched().is_some_and(|f| f.id() == family.id()))
    {
        return None;
    }
    family.driver(configs, d, horizon, seeds)
}

/// The run loop with the policies' round `play_round(t, actions, lanes, means, noise, chosen)`
/// (every policy plays round `t`; `chosen[p]` receives policy `p`'s action). `LANES`: the round
/// is also given by coordinate (kept by the environment, [`LaneSource::lanes`], or transposed
/// here, with the shared reference along [`LaneSource::reference_theta`]); otherwise `lanes` is
/// `None`.
fn drive<const LANES: bool>(
    env: &mut dyn ContextualEnvironment,
    grid: &CheckpointGrid,
    out: &mut [Vec<f64>],
    mut play_round: impl FnMut(
        u64,
        &ActionSet<'_>,
        Option<&ActionLanes<'_>>,
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
    let reference_buf = env
        .fast_path()
        .and_then(LaneSource::reference_theta)
        .map(<[f64]>::to_vec);
    let reference = reference_buf.as_deref();
    for t in 0..horizon {
        env.next_round(t);
        let actions = env.actions();
        // Used where they are returned (a move of the lanes would copy them once more).
        let kept = if LANES {
            env.fast_path().and_then(LaneSource::lanes)
        } else {
            None
        };
        let built;
        let lanes = match (LANES, &kept, reference) {
            (false, _, _) => None,
            (true, Some(lanes), _) => Some(lanes),
            (true, None, Some(theta)) => {
                built = ActionLanes::transpose_with_reference(&actions, &mut lane_buf, theta);
                Some(&built)
            }
            (true, None, None) => {
                built = ActionLanes::transpose(&actions, &mut lane_buf);
                Some(&built)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contextual::{ContextualGaussianConfig, OfulConfig, OfulKind, PrivacyMode};
    use crate::privacy::RewardBoundary;

    /// A policy of no family: always the first action.
    #[derive(Debug, Clone)]
    struct First;

    impl ContextualPolicy for First {
        fn guarantee(&self) -> PrivacyGuarantee {
            PrivacyGuarantee::non_private()
        }
        fn dim(&self) -> usize {
            3
        }
        fn max_action_norm(&self) -> f64 {
            f64::INFINITY
        }
        fn propensity(&self) -> Option<f64> {
            Some(1.0)
        }
        fn boundary(&self) -> RewardBoundary {
            RewardBoundary::numeric()
        }
        fn choose(&mut self, _t: u64, _actions: &ActionSet<'_>) -> usize {
            0
        }
        fn observe(&mut self, _actions: &ActionSet<'_>, _arm: usize, _reward: f64) -> Result<()> {
            Ok(())
        }
    }

    impl ContextualPolicyConfig for First {
        fn kind(&self) -> &'static str {
            "first"
        }
        fn params(&self) -> Vec<(&'static str, f64)> {
            vec![]
        }
        fn guarantee(&self) -> PrivacyGuarantee {
            PrivacyGuarantee::non_private()
        }
        fn build(&self, _d: usize, _horizon: u64, _seed: u64) -> Result<Box<dyn ContextualPolicy>> {
            Ok(Box::new(First))
        }
    }

    fn oful(kind: OfulKind, rho: f64) -> Box<dyn ContextualPolicyConfig> {
        let mut c = OfulConfig::paper(kind, rho);
        c.mode = PrivacyMode::Reproduction;
        Box::new(c)
    }

    fn group(policies: Vec<Box<dyn ContextualPolicyConfig>>, horizon: u64) -> ContextualGroup {
        let mut env = ContextualGaussianConfig::paper();
        env.instantiate(20240917).unwrap();
        let grid = CheckpointGrid::explicit((1..=horizon).collect()).unwrap();
        ContextualGroup::new(Box::new(env), policies, Arc::new(grid), 20240917)
    }

    /// Figure 4(c)'s group (RS-OFUL and AdaC-OFUL over the rho grid, d = 3) takes the OFUL
    /// family's pair driver, and says so in every cell's manifest details.
    #[test]
    fn fig4c_group_is_batched() {
        let mut pols = vec![oful(OfulKind::RsOful, f64::INFINITY)];
        for rho in [0.1, 0.5, 1.0, 10.0, 316.0] {
            pols.push(oful(OfulKind::AdacOful, rho));
        }
        let g = Arc::new(group(pols, 100));
        let pairs = SimPath::Batched("oful family, batched by pairs (d <= 3)");
        assert_eq!(g.path(), pairs);
        let mut out = vec![vec![0.0; 100]; 6];
        assert_eq!(g.run_path(&[0, 1, 2, 3, 4, 5], 0, &mut out).unwrap(), pairs);
        let cell = &g.cells()[2];
        assert_eq!(cell.describe()["policy_path"], pairs.describe());
    }

    /// Mixing in a policy of no family puts the group on the per-policy path, with the same
    /// numbers for the OFUL members as in their batched group.
    #[test]
    fn mixed_group_is_per_policy_with_the_same_numbers() {
        let horizon = 3000;
        let batched = group(
            vec![
                oful(OfulKind::RsOful, f64::INFINITY),
                oful(OfulKind::AdacOful, 1.0),
            ],
            horizon,
        );
        let mixed = group(
            vec![
                oful(OfulKind::RsOful, f64::INFINITY),
                Box::new(First),
                oful(OfulKind::AdacOful, 1.0),
            ],
            horizon,
        );
        assert!(matches!(batched.path(), SimPath::Batched(_)));
        assert_eq!(mixed.path(), SimPath::PerPolicy);
        for run in 0..2 {
            let mut a = vec![vec![0.0; horizon as usize]; 2];
            let mut b = vec![vec![0.0; horizon as usize]; 3];
            batched.run_members(&[0, 1], run, &mut a).unwrap();
            assert_eq!(
                mixed.run_path(&[0, 1, 2], run, &mut b).unwrap(),
                SimPath::PerPolicy
            );
            let bits = |r: &[f64]| r.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&a[0]), bits(&b[0]), "run {run}: rs_oful");
            assert_eq!(bits(&a[1]), bits(&b[2]), "run {run}: adac_oful");
            assert!(b[1][horizon as usize - 1] > b[0][horizon as usize - 1]);
        }
    }
}
