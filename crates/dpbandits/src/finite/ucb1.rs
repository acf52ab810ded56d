//! UCB1: upper confidence bounds for bounded rewards.
//!
//! # Algorithm
//! Auer, Cesa-Bianchi & Fischer (2002), "Finite-time analysis of the multiarmed bandit problem",
//! Fig. 1 (UCB1). Pull each arm once, then `argmax_a mu_hat_a + sqrt(alpha ln t / N_a)` where `t` is
//! the number of rounds played; `alpha = 2` is UCB1 as published.
//!
//! # Privacy
//! None: a non-private baseline.
//!
//! # Parameters
//! `alpha` (finite, > 0, default 2: the exploration constant).
//!
//! # Blocks
//! With a promised reward range of finite lower end ([`Policy::enable_blocks`], the simulator's
//! episode mode), UCB1 commits to the rounds its leader keeps whatever the rewards
//! ([`super::blocks`]: proof, and which policies cannot do this).

use super::{ArmStats, Policy, PolicyConfig, Pull, argmax};
use crate::config::{AlgorithmInfo, Setting};
use crate::error::{Result, check};
use crate::privacy::PrivacyGuarantee;
use crate::privacy::{RewardBoundary, RewardSum};
use crate::protocol::Gate;
use serde::Deserialize;

/// Registry record of `ucb1`.
pub const UCB1: AlgorithmInfo = AlgorithmInfo {
    kind: "ucb1",
    name: "UCB1",
    setting: Setting::FiniteArmed,
    reference: "Auer, Cesa-Bianchi & Fischer 2002, Fig. 1",
    privacy: "none",
    example: "",
    source: file!(),
    doc: include_str!("ucb1.rs"),
    private: false,
    release_keys: crate::config::NO_RELEASE,
};

/// `kind = "ucb1"`; `alpha` (default 2, > 0) scales the exploration bonus.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ucb1Config {
    /// Exploration constant (bonus `sqrt(alpha ln t / N)`).
    #[serde(default = "two")]
    pub alpha: f64,
}

fn two() -> f64 {
    2.0
}

impl Default for Ucb1Config {
    fn default() -> Self {
        Ucb1Config { alpha: 2.0 }
    }
}

impl PolicyConfig for Ucb1Config {
    fn kind(&self) -> &'static str {
        UCB1.kind
    }
    fn params(&self) -> Vec<(&'static str, f64)> {
        if self.alpha == 2.0 {
            vec![]
        } else {
            vec![("alpha", self.alpha)]
        }
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        PrivacyGuarantee::non_private()
    }
    fn build(&self, k: usize, _seed: u64) -> Result<Box<dyn Policy>> {
        Ok(Box::new(Ucb1::new(k, self.alpha)?))
    }
}

/// UCB1 state.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ucb1 {
    gate: Gate,
    alpha: f64,
    stats: ArmStats,
    /// Block commitments enabled ([`Policy::enable_blocks`]); the gate holds the promised range.
    #[serde(default)]
    blocks: bool,
    /// The indices of the last decision, shared with the block computation (scratch: grown
    /// once, then reused; not part of the state).
    #[serde(skip)]
    indices: Vec<f64>,
}

impl Ucb1 {
    /// UCB1 on `k >= 1` arms.
    pub fn new(k: usize, alpha: f64) -> Result<Self> {
        check::arms("K", k)?;
        check::positive("alpha", alpha)?;
        Ok(Ucb1 {
            gate: Gate::new(RewardBoundary::numeric()),
            alpha,
            stats: ArmStats::new(k),
            blocks: false,
            indices: Vec::new(),
        })
    }
}

impl Policy for Ucb1 {
    fn snapshot(&self) -> Result<crate::snapshot::Snapshot> {
        crate::snapshot::Snapshot::new(Setting::FiniteArmed, UCB1.kind, self)
    }
    fn num_arms(&self) -> usize {
        self.stats.len()
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        PrivacyGuarantee::non_private()
    }
    fn choose(&mut self, t: u64) -> Pull {
        super::gated_choose(self, |p| &mut p.gate, |p| p.decide(t))
    }
    fn observe(&mut self, arm: usize, reward: f64) -> Result<()> {
        let reward = self.gate.admit(arm, reward)?;
        self.stats.record(arm, reward);
        Ok(())
    }
    fn observe_batch(&mut self, arm: usize, sum: &RewardSum) -> Result<()> {
        let total = self.gate.admit_sum(arm, sum)?;
        self.stats.record_sum(arm, sum.n(), total);
        Ok(())
    }
    fn boundary(&self) -> RewardBoundary {
        self.gate.boundary()
    }
    fn enable_blocks(&mut self, reward_range: (f64, f64)) {
        if let Some(b) = super::blocks::promised_boundary(reward_range)
            && reward_range.0.is_finite()
            && self.gate.open().is_none()
        {
            self.gate = Gate::new(b);
            self.blocks = true;
        }
    }
}
impl Ucb1 {
    /// The algorithm's choice when no commitment is open.
    fn decide(&mut self, t: u64) -> Pull {
        if let Some(a) = self.stats.first_unplayed() {
            return Pull { arm: a, steps: 1 };
        }
        let lt = (t.max(1) as f64).ln();
        let c = self.alpha * lt;
        let s = &self.stats;
        let index = |(&m, &inv): (&f64, &f64)| m + (c * inv).sqrt();
        if !self.blocks {
            let arm = argmax(s.means().iter().zip(s.inv_pulls()).map(index));
            return Pull { arm, steps: 1 };
        }
        self.indices.clear();
        self.indices
            .extend(s.means().iter().zip(s.inv_pulls()).map(index));
        let arm = argmax(self.indices.iter().copied());
        let lo = self.gate.boundary().lo;
        let steps = super::blocks::ucb1_block(s, arm, t, self.alpha, lo, lt, &self.indices);
        Pull { arm, steps }
    }
}

impl crate::config::Config for Ucb1Config {
    fn validate(&mut self) -> crate::error::Result<()> {
        crate::error::check::positive("alpha", self.alpha).map(drop)
    }
}
