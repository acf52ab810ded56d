//! kl-UCB for Bernoulli (and [0, 1]-bounded) rewards.
//!
//! # Algorithm
//! Garivier & Cappe (2011), "The KL-UCB algorithm for bounded stochastic bandits and beyond",
//! Eq. (2): pull each arm once, then
//! `argmax_a max{q : N_a kl(mu_hat_a, q) <= ln t + c ln ln t}` (c = 0 by default, as in their
//! experiments; c = 3 in the theorem). The index is solved by [`crate::math::kl::kl_upper`].
//!
//! # Privacy
//! None: a non-private baseline.
//!
//! # Parameters
//! `c` (finite, >= 0, default 0: the `c ln ln t` term of the exploration function).
//!
//! # Blocks
//! With a promised reward range inside `[0, 1]` ([`Policy::enable_blocks`], the simulator's
//! episode mode on Bernoulli or Beta arms), kl-UCB commits to the rounds its leader keeps whatever
//! the rewards ([`super::blocks`]: proof, and which policies cannot do this).

use super::{ArmStats, Policy, PolicyConfig, Pull};
use crate::config::{AlgorithmInfo, Setting};
use crate::error::{Error, Result, check};
use crate::math::kl::{kl_upper, kl_upper_bound, kl_upper_may_reach};
use crate::privacy::PrivacyGuarantee;
use crate::privacy::{RewardBoundary, RewardSum};
use crate::protocol::Gate;
use serde::Deserialize;

/// Registry record of `kl_ucb`.
pub const KL_UCB: AlgorithmInfo = AlgorithmInfo {
    kind: "kl_ucb",
    name: "kl-UCB",
    setting: Setting::FiniteArmed,
    reference: "Garivier & Cappe 2011, Eq. (2)",
    privacy: "none",
    example: "",
    source: file!(),
    doc: include_str!("kl_ucb.rs"),
    private: false,
    release_keys: crate::config::NO_RELEASE,
};

/// `kind = "kl_ucb"`; `c` (default 0, >= 0) weights the `ln ln t` term.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KlUcbConfig {
    /// Weight of `ln ln t` in the exploration level.
    #[serde(default)]
    pub c: f64,
}

impl PolicyConfig for KlUcbConfig {
    fn kind(&self) -> &'static str {
        KL_UCB.kind
    }
    fn params(&self) -> Vec<(&'static str, f64)> {
        if self.c == 0.0 {
            vec![]
        } else {
            vec![("c", self.c)]
        }
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        PrivacyGuarantee::non_private()
    }
    fn build(&self, k: usize, _seed: u64) -> Result<Box<dyn Policy>> {
        Ok(Box::new(KlUcb::new(k, self.c)?))
    }
}

/// kl-UCB state.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KlUcb {
    gate: Gate,
    c: f64,
    stats: ArmStats,
    /// Block commitments enabled ([`Policy::enable_blocks`]); the gate holds the promised range.
    #[serde(default)]
    blocks: bool,
    /// The last leader: where the argmax search starts (any start gives the same argmax).
    #[serde(skip)]
    hint: usize,
}

impl KlUcb {
    /// kl-UCB on `k >= 1` arms.
    pub fn new(k: usize, c: f64) -> Result<Self> {
        check::arms("K", k)?;
        if !(c.is_finite() && c >= 0.0) {
            return Err(Error::param("c", c, "a finite number >= 0"));
        }
        Ok(KlUcb {
            gate: Gate::new(RewardBoundary::numeric()),
            c,
            stats: ArmStats::new(k),
            blocks: false,
            hint: 0,
        })
    }
}

impl Policy for KlUcb {
    fn snapshot(&self) -> Result<crate::snapshot::Snapshot> {
        crate::snapshot::Snapshot::new(Setting::FiniteArmed, KL_UCB.kind, self)
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
        self.stats.record(arm, reward.clamp(0.0, 1.0));
        Ok(())
    }
    fn observe_batch(&mut self, arm: usize, sum: &RewardSum) -> Result<()> {
        if sum.n() == 1 {
            return self.observe(arm, sum.sum());
        }
        // Rewards are clamped one by one; a sum can only be taken when nothing needs clamping.
        let (lo, hi) = sum.range();
        if lo < 0.0 || hi > 1.0 {
            return Err(Error::Protocol(format!(
                "a sum of {} rewards in [{lo}, {hi}]: kl-UCB clamps each reward to [0, 1]; \
                 observe them one by one",
                sum.n()
            )));
        }
        let total = self.gate.admit_sum(arm, sum)?;
        self.stats.record_sum(arm, sum.n(), total);
        Ok(())
    }
    fn boundary(&self) -> RewardBoundary {
        self.gate.boundary()
    }
    fn enable_blocks(&mut self, reward_range: (f64, f64)) {
        let (lo, hi) = reward_range;
        if lo >= 0.0
            && hi <= 1.0
            && self.gate.open().is_none()
            && let Some(b) = super::blocks::promised_boundary(reward_range)
        {
            self.gate = Gate::new(b);
            self.blocks = true;
        }
    }
}
impl KlUcb {
    /// The algorithm's choice when no commitment is open.
    fn decide(&mut self, t: u64) -> Pull {
        if let Some(a) = self.stats.first_unplayed() {
            return Pull { arm: a, steps: 1 };
        }
        let level = super::blocks::kl_level(t, self.c);
        let (arm, best) = argmax_index(&self.stats, level, self.hint);
        self.hint = arm;
        let steps = if self.blocks {
            super::blocks::kl_ucb_block(&self.stats, arm, t, self.c, best)
        } else {
            1
        };
        Pull { arm, steps }
    }
}

/// The lowest-index argmax of the kl-UCB indices at `level` (all arms played) and its index.
///
/// Exactly the argmax of the solved indices, with few KL inversions: the index of `hint` (the
/// last leader, usually the argmax again) is solved first; then an arm is skipped without solving
/// when its cheap bound ([`kl_upper_bound`], above the solver's result) cannot beat the best index
/// so far under the lowest-index tie rule, or when `kl(p, best)` exceeds its `d` by more than the
/// solver's tolerance ([`beats`]: the solver's result then lies below `best`). Only arms that may
/// beat the best are solved, usually none: at steady state a round costs one inversion and one KL
/// evaluation per arm instead of K inversions.
pub(crate) fn argmax_index(stats: &ArmStats, level: f64, hint: usize) -> (usize, f64) {
    let (means, inv) = (stats.means(), stats.inv_pulls());
    let h = hint.min(means.len() - 1);
    let (mut arm, mut best) = (h, kl_upper(means[h], level * inv[h]));
    for (a, (&p, &i)) in means.iter().zip(inv).enumerate() {
        if a == h {
            continue;
        }
        let d = level * i;
        let bound = kl_upper_bound(p, d);
        if bound < best || (bound == best && a > arm) || !kl_upper_may_reach(p, d, best) {
            continue;
        }
        let u = kl_upper(p, d);
        if u > best || (u == best && a < arm) {
            best = u;
            arm = a;
        }
    }
    (arm, best)
}

impl crate::config::Config for KlUcbConfig {
    fn validate(&mut self) -> crate::error::Result<()> {
        KlUcb::new(1, self.c).map(drop)
    }
}
