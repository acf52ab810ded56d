//! Finite-armed stochastic bandits: the setting's traits, its environments, its policies and its
//! run loop.
//!
//! # Layout
//! * this file: the traits [`Environment`] / [`EnvConfig`] (environments) and [`Policy`] /
//!   [`PolicyConfig`] (algorithms), and the small shared pieces ([`Pull`], [`Episode`],
//!   [`ArmStats`], [`argmax`]);
//! * one file per environment: `bernoulli.rs`, `gaussian.rs`, `beta.rs`, `piecewise.rs`;
//! * one file per paper algorithm family, named after it: `adac_ucb.rs` (AdaC-UCB and its
//!   non-private counterpart), `adap_ucb.rs` (AdaP-UCB, AdaP-KLUCB), `dp_se.rs`, `dp_ts.rs`,
//!   `ldp_ucb.rs`, `kl_ucb_cf.rs`, `ldp.rs`, `sw_ucb.rs`, `d_ucb.rs`, `ucb1.rs`, `kl_ucb.rs`,
//!   `thompson.rs`, `dp_ucb.rs` (DP-UCB, DP-UCB-Bound, DP-UCB-Hybrid: the tree-based baselines);
//! * `pipeline.rs`: pipelined episodes of the episodic policies (delayed outcomes);
//! * `sim.rs`: the run loop ([`simulate_finite`]) and the experiment cell ([`FiniteCell`]).
//!
//! # Environments
//! An [`Environment`] owns one generator per arm (seeded by [`crate::rng::arm_rng`] below the run's
//! environment seed): the k-th reward of an arm does not depend on which policy is playing (common
//! random numbers in step mode). [`Environment::pull_sum`] draws the *sum* of `n` consecutive
//! rewards of one arm exactly from its distribution: Binomial for Bernoulli arms, Normal for
//! unclipped Gaussian arms. Environments without a closed form (clipped Gaussian, Beta) fall back
//! to `n` single draws, which is exact too, only O(n). Environments with time-varying means
//! (piecewise-stationary) override [`Environment::mean`] and [`Environment::regret`]; the
//! simulator only uses these two to measure pseudo-regret.
//!
//! # The `Policy` contract
//! * [`Policy::choose`] returns a [`Pull`]: an arm and the number of consecutive rounds the policy
//!   *commits* to it. Per-step policies commit to 1 round. Episodic policies (AdaC-UCB and its
//!   non-private counterpart) commit to a whole episode, whose length depends only on public data
//!   (spec zcdp §1.8 condition (i), §8 T5). Calling `choose` again in the middle of an episode
//!   returns the same arm with the remaining length, so a plain step-by-step loop works for every
//!   policy.
//! * [`Policy::observe`] feeds one reward of the committed arm; [`Policy::observe_batch`] feeds a
//!   [`RewardSum`] of `n` rewards of it at once (the episode fast path of the simulator,
//!   O(episodes) per run). Both follow the one contract of [`crate::protocol`]: off-policy and
//!   out-of-order observations are refused with [`crate::Error::Protocol`], rewards pass the
//!   policy's boundary first, and a refused call changes nothing.
//! * Policies own their generators (policy stream and noise stream, see [`crate::rng`]); hot-path
//!   calls never allocate. Validation happens in the constructors.
//! * Ties in an argmax go to the **lowest arm index**. That rule is part of the reproducibility
//!   contract.
//!
//! # Adding a policy or an environment
//! One file in this folder with a `...Config` struct (serde, `deny_unknown_fields`) implementing
//! [`PolicyConfig`] (or [`EnvConfig`]), and the policy implementing [`Policy`] (or the environment
//! implementing [`Environment`]); a `mod` and a `pub use` line here; then one entry in
//! `crate::registry` (feature `experiment`). The conformance suite picks it up from the registry.

mod adac_ucb;
mod adap_ucb;
mod bernoulli;
mod beta;
pub mod blocks;
mod d_ucb;
mod dp_se;
mod dp_ts;
mod dp_ucb;
#[cfg(feature = "exercise")]
mod exercise_ucb;
mod gaussian;
mod kl_ucb;
mod kl_ucb_cf;
mod ldp;
mod ldp_ucb;
mod piecewise;
mod pipeline;
mod sim;
mod sw_ucb;
mod thompson;
mod ucb1;
mod window;

pub use adac_ucb::{ADAC_UCB, ADAPTIVE_UCB, AdaCUcb, AdaCUcbConfig, InitCount};
pub use adap_ucb::{ADAP_KLUCB, ADAP_UCB, AdaP, AdaPConfig, AdaPIndex};
pub use bernoulli::{BERNOULLI, Bernoulli, BernoulliConfig};
pub use beta::{BETA, BetaArms, BetaConfig};
pub use d_ucb::{D_UCB, DUcb, DUcbConfig};
pub use dp_se::{DP_SE, DpSe, DpSeConfig};
pub use dp_ts::{DP_TS, DpTs, DpTsConfig};
pub use dp_ucb::{DP_UCB, DP_UCB_BOUND, DP_UCB_HYBRID, DpUcb, DpUcbConfig, DpUcbVariant};
#[cfg(feature = "exercise")]
pub use exercise_ucb::{EXERCISE_UCB, ExerciseUcb, ExerciseUcbConfig};
pub use gaussian::{GAUSSIAN, Gaussian, GaussianConfig};
pub use kl_ucb::{KL_UCB, KlUcb, KlUcbConfig};
pub use kl_ucb_cf::{
    CF_LEARNER, CfConfig, CfLearner, KL_UCB_CF, SW_KLUCB_CF, cf_index, f_safe, theory_window,
};
pub use ldp::{LDP, Ldp, LdpConfig, ldp_guarantee};
pub use ldp_ucb::{LDP_UCB, LdpUcb, LdpUcbConfig, LocalMechanism};
pub use piecewise::{
    CORRUPT_BERNOULLI, FeedbackChannel, PIECEWISE_BERNOULLI, PiecewiseBernoulli, PiecewiseConfig,
    RandomSegments,
};
pub use pipeline::{InFlight, Pipelined};
pub use sim::{FiniteCell, simulate_finite};
pub use sw_ucb::{SW_KL_UCB, SW_UCB, SwKlUcbConfig, SwUcb, SwUcbConfig};
pub use thompson::{THOMPSON, ThompsonConfig, ThompsonSampling};
pub use ucb1::{UCB1, Ucb1, Ucb1Config};
pub use window::SlidingWindow;

use crate::error::{Error, Result};
use crate::privacy::{NoiseGrade, NoiseSource, PrivacyGuarantee, RewardBoundary, RewardSum};
use crate::protocol::Gate;
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

    /// An interval that contains every reward this environment can emit. The run loop draws an
    /// episode's reward sum exactly only when this interval lies inside a private policy's
    /// boundary; otherwise it admits the rewards one by one. Default: unbounded.
    fn reward_range(&self) -> (f64, f64) {
        (f64::NEG_INFINITY, f64::INFINITY)
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
    /// Called once by the planner with the experiment's master seed and horizon, before any
    /// run: environments with a random instance draw it from the master seed
    /// ([`crate::rng::instance`] paths), environments with time structure place or check their
    /// breakpoints. Default: nothing to do.
    fn instantiate(&mut self, _master_seed: u64, _horizon: u64) -> Result<()> {
        Ok(())
    }
    /// Instance facts for the manifest (e.g. generated segments). Default: none.
    fn describe(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
}

/// One generator per arm ([`crate::rng::arm_rng`]): the k-th reward of an arm does not depend on
/// the other arms or on the policy.
pub fn arm_rngs(seed: u64, k: usize) -> Vec<crate::rng::SimRng> {
    (0..k).map(|a| crate::rng::arm_rng(seed, a)).collect()
}

/// The largest mean.
pub(crate) fn best(means: &[f64]) -> f64 {
    means.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

/// An arm and how many consecutive rounds the policy commits to it (>= 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pull {
    /// The arm.
    pub arm: usize,
    /// Committed rounds (>= 1).
    pub steps: u64,
}

/// A finite-armed bandit policy for one run.
pub trait Policy: Send + Debug {
    /// Number of arms.
    fn num_arms(&self) -> usize;

    /// The privacy claim of this policy.
    fn guarantee(&self) -> PrivacyGuarantee;

    /// Choose the next arm; `t` is the number of rounds already played (0-based round index).
    /// While a commitment is open, returns what is left of it.
    fn choose(&mut self, t: u64) -> Pull;

    /// Observe the reward of one round of the committed `arm` ([`crate::protocol`]).
    ///
    /// # Errors
    /// [`Error::Protocol`] (no open commitment, another arm), [`Error::Boundary`] or
    /// [`Error::Param`] (a reward the boundary refuses); the policy is then unchanged.
    fn observe(&mut self, arm: usize, reward: f64) -> Result<()>;

    /// Observe the sum of `sum.n()` consecutive rewards of the committed `arm`.
    ///
    /// # Errors
    /// As [`Policy::observe`], and more rounds than the commitment has left, or a sum built by a
    /// boundary wider than the policy's. The default implementation (policies that commit to one
    /// round at a time) accepts sums of one reward.
    fn observe_batch(&mut self, arm: usize, sum: &RewardSum) -> Result<()> {
        if sum.n() != 1 {
            return Err(Error::Protocol(format!(
                "a sum of {} rewards: this policy commits to one round at a time; observe rewards one by one",
                sum.n()
            )));
        }
        self.observe(arm, sum.sum())
    }

    /// The boundary every reward passes: the privacy boundary of a private policy, the numeric
    /// boundary ([`RewardBoundary::numeric`]) of a non-private one.
    fn boundary(&self) -> RewardBoundary;

    /// Allow exact block commitments ([`blocks`]): the caller promises that every reward lies in
    /// `reward_range` (the simulator passes [`Environment::reward_range`] in episode mode) and
    /// will observe a block's rewards as one [`RewardSum`] or one by one. A per-step index policy
    /// that can use it (UCB1, kl-UCB) then commits to as many rounds as it provably keeps its
    /// leader whatever those rewards are, and its gate refuses rewards outside the range from
    /// then on ([`Policy::boundary`] narrows to it). Call it before the first `choose`. Default:
    /// nothing (the policy keeps committing as before).
    fn enable_blocks(&mut self, _reward_range: (f64, f64)) {}

    /// The latest released mean of every arm with its sample count and noise scale (`None` for
    /// an arm with no release yet), for a closing report computed from released statistics
    /// only ([`crate::report`]). `None` (the default): the kind keeps no per-arm released mean
    /// with a known noise law, so a report gives no estimates for it.
    fn released_estimates(&self) -> Option<crate::report::Released> {
        None
    }

    /// Whether the next reward of `arm`, completing the open commitment, makes the policy draw
    /// a release (public counts only): the decision service commits a ledger intent before such
    /// a reward. The default, `true`, is the conservative answer (every completed commitment
    /// may release); a kind that releases on a schedule of its own says exactly when.
    fn releases_on_next_reward(&self, arm: usize) -> bool {
        let _ = arm;
        true
    }

    /// Pipelined episodes (`pipeline.rs`): an episodic policy that can open its next episode
    /// from released statistics while earlier episodes wait for their rewards. `None` (the
    /// default): the caller waits at each commitment boundary.
    fn pipelined(&mut self) -> Option<&mut dyn Pipelined> {
        None
    }

    /// Save the complete state (statistics, generators, the episode in progress) for a
    /// bit-identical restore ([`crate::snapshot`]; restore with `registry::restore_finite`).
    /// The snapshot is sensitive data: it holds raw reward sums and the noise generators' state.
    ///
    /// # Errors
    /// [`crate::error::Error::Snapshot`] if the state cannot be captured. The default refuses
    /// (a policy must opt in; every registry kind does).
    fn snapshot(&self) -> Result<crate::snapshot::Snapshot> {
        Err(crate::snapshot::unsupported(&format!("{self:?}")))
    }
}

/// A validated policy configuration (one cell of a sweep) that builds a fresh policy per run.
pub trait PolicyConfig: Send + Sync + Debug {
    /// Registry id, equal to the config `kind` (e.g. `adac_ucb`).
    fn kind(&self) -> &'static str;
    /// Numeric parameters that identify this cell (e.g. `[("rho", 0.1)]`), used in labels and
    /// figure axes.
    fn params(&self) -> Vec<(&'static str, f64)>;
    /// The privacy claim of the policies this config builds.
    fn guarantee(&self) -> PrivacyGuarantee;
    /// Build the policy for `k` arms; `seed` is the run's policy seed (policies derive their
    /// policy and noise streams from it).
    fn build(&self, k: usize, seed: u64) -> Result<Box<dyn Policy>>;
    /// Label `kind(p1=v1,p2=v2)`; used in outputs and to key random streams. With a [`release`](Self::release), its noise path's suffix
    /// ([`crate::privacy::Release::label`]: `[deployment]` on the deployment path).
    fn label(&self) -> String {
        let label = crate::config::label(self.kind(), &self.params());
        match self.release() {
            Some(r) => r.label(label),
            None => label,
        }
    }
    /// The release keys (`boundary`, `noise`, `grid_bits`) the registry parsed into this
    /// configuration, for a kind whose configuration holds a [`crate::privacy::Release`] (then:
    /// `Some(&self.release)`, the one line such a kind writes); `None` otherwise.
    fn release(&self) -> Option<&crate::privacy::Release> {
        None
    }
    /// The algorithm's theoretical regret bound on `instance` (the paper's formula with its
    /// stated constants), overlaid by `[comparison] bounds = true`; `None` (default): none stated.
    fn regret_bound(
        &self,
        _instance: &crate::config::BoundInstance,
    ) -> Option<crate::config::RegretBound> {
        None
    }
    /// How many releases the `j`-th reward (0-based) of an arm enters, once they are all made:
    /// the composition the guarantee accounts for (the white-box auditor compares the releases
    /// it finds carrying one reward with it). Default 1: the episodic and per-reward kinds
    /// release each reward once (disjoint episodes, parallel composition); the tree-based kinds
    /// (`dp_ucb.rs`) say how many p-sums hold it.
    fn releases_per_reward(&self, j: u64) -> u64 {
        let _ = j;
        1
    }
}

/// `choose` through a policy's [`Gate`]: what is left of the open commitment while one is
/// open, else `decide`'s pull, now committed. The `choose` of every per-step policy.
#[inline]
pub fn gated_choose<P: ?Sized>(
    policy: &mut P,
    gate: fn(&mut P) -> &mut Gate,
    decide: impl FnOnce(&mut P) -> Pull,
) -> Pull {
    if let Some(c) = gate(policy).open() {
        return Pull {
            arm: c.arm,
            steps: c.left,
        };
    }
    let pull = decide(policy);
    gate(policy).commit(pull.arm, pull.steps);
    pull
}

/// The observation step of the episodic policies (AdaC-UCB, AdaP-UCB/KLUCB): the gate admits
/// `sum` of `arm` (on a copy, returned, so a refused call changes nothing), deployment-grade noise
/// moves it onto the release's grid (the identity for simulation noise), and the open episode
/// takes it. Returns the updated gate and, when the episode is now complete, the episode to
/// release.
pub(crate) fn episode_step(
    mut gate: Gate,
    noise: &NoiseSource,
    boundary: &RewardBoundary,
    episode: &mut Option<Episode>,
    arm: usize,
    sum: &RewardSum,
) -> Result<(Gate, Option<Episode>)> {
    gate.admit_sum(arm, sum)?;
    let Some(ep) = episode.as_mut() else {
        return Err(Error::Protocol("observe without a chosen arm".into()));
    };
    let sum = if noise.grade() == NoiseGrade::Deployment {
        // The total onto the release's 2^-k grid (a sum of grid points stays one).
        let s = noise.discretise(sum.sum(), ep.len, boundary);
        gate.boundary().drawn_sum(s, sum.n())
    } else {
        *sum
    };
    let done = ep.record(arm, &sum)?.then_some(*ep);
    Ok((gate, done))
}

/// An episode in progress: the arm a policy committed to, the episode's length, and the rewards
/// seen so far. Shared by the episodic policies (AdaC-UCB, AdaP-UCB/KLUCB), whose episodes end
/// exactly when `len` rewards of the committed arm have been observed. The policy's
/// [`crate::protocol::Gate`] has checked every observation before it reaches the episode.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Episode {
    /// The committed arm.
    pub arm: usize,
    /// Committed rounds.
    pub len: u64,
    /// The rewards observed so far, each admitted by the policy's boundary.
    pub sum: RewardSum,
}

impl Episode {
    /// A new episode of `len` rounds of `arm`, collecting rewards inside `boundary`.
    pub fn start(arm: usize, len: u64, boundary: &RewardBoundary) -> Self {
        Episode {
            arm,
            len,
            sum: boundary.empty_sum(),
        }
    }

    /// The commitment still to be played.
    pub fn remaining(&self) -> Pull {
        Pull {
            arm: self.arm,
            steps: self.len - self.sum.n(),
        }
    }

    /// Add admitted rewards; returns whether the episode is now complete.
    ///
    /// # Errors
    /// [`Error::Protocol`] for another arm, more rewards than are left, or a sum from a wider
    /// boundary (the gate has already refused all three); the episode is then unchanged.
    pub fn record(&mut self, arm: usize, sum: &RewardSum) -> Result<bool> {
        if arm != self.arm || self.sum.n() + sum.n() > self.len {
            return Err(Error::Protocol(format!(
                "{} reward(s) of arm {arm} do not fit the episode of arm {} ({} of {} rounds observed)",
                sum.n(),
                self.arm,
                self.sum.n(),
                self.len
            )));
        }
        self.sum.add(sum)?;
        Ok(self.sum.n() == self.len)
    }
}

/// Per-arm pull counts and empirical means, with the cached `1/N_a` that index policies need.
/// Updating is O(1) per observation and never allocates.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ArmStats {
    pulls: Vec<u64>,
    sums: Vec<f64>,
    means: Vec<f64>,
    inv_pulls: Vec<f64>,
}

impl ArmStats {
    /// Statistics of `k` unplayed arms (`1/N = inf`).
    pub fn new(k: usize) -> Self {
        ArmStats {
            pulls: vec![0; k],
            sums: vec![0.0; k],
            means: vec![0.0; k],
            inv_pulls: vec![f64::INFINITY; k],
        }
    }
    /// Number of arms.
    pub fn len(&self) -> usize {
        self.pulls.len()
    }
    /// Whether there are no arms.
    pub fn is_empty(&self) -> bool {
        self.pulls.is_empty()
    }
    /// Add one reward of `arm`.
    #[inline]
    pub fn record(&mut self, arm: usize, reward: f64) {
        self.pulls[arm] += 1;
        self.sums[arm] += reward;
        let n = self.pulls[arm] as f64;
        self.means[arm] = self.sums[arm] / n;
        self.inv_pulls[arm] = 1.0 / n;
    }
    /// Add `n >= 1` rewards of `arm` whose total is `sum` (a block of the episode fast path).
    #[inline]
    pub fn record_sum(&mut self, arm: usize, n: u64, sum: f64) {
        self.pulls[arm] += n;
        self.sums[arm] += sum;
        let n = self.pulls[arm] as f64;
        self.means[arm] = self.sums[arm] / n;
        self.inv_pulls[arm] = 1.0 / n;
    }
    /// Reward sums.
    pub fn sums(&self) -> &[f64] {
        &self.sums
    }
    /// The first arm never played, if any (initialisation rounds of index policies).
    #[inline]
    pub fn first_unplayed(&self) -> Option<usize> {
        self.pulls.iter().position(|&n| n == 0)
    }
    /// Pull counts.
    pub fn pulls(&self) -> &[u64] {
        &self.pulls
    }
    /// Empirical means (0 for unplayed arms).
    pub fn means(&self) -> &[f64] {
        &self.means
    }
    /// `1/N_a` (inf for unplayed arms).
    pub fn inv_pulls(&self) -> &[f64] {
        &self.inv_pulls
    }
}

/// Index of the maximum of `values`; ties go to the lowest index. NaN is never chosen over a number.
#[inline]
pub fn argmax(values: impl IntoIterator<Item = f64>) -> usize {
    let mut best = 0;
    let mut best_v = f64::NEG_INFINITY;
    for (i, v) in values.into_iter().enumerate() {
        if v > best_v {
            best = i;
            best_v = v;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::{ArmStats, argmax};

    #[test]
    fn arm_stats() {
        let mut s = ArmStats::new(2);
        assert_eq!(s.first_unplayed(), Some(0));
        s.record(0, 1.0);
        s.record(0, 0.0);
        assert_eq!(s.first_unplayed(), Some(1));
        assert_eq!(s.means()[0], 0.5);
        assert_eq!(s.inv_pulls()[0], 0.5);
        assert_eq!(s.pulls(), &[2, 0]);
    }

    #[test]
    fn argmax_lowest_index_on_ties() {
        assert_eq!(argmax([1.0, 3.0, 3.0]), 1);
        assert_eq!(argmax([f64::NAN, 0.0]), 1);
        assert_eq!(argmax([f64::INFINITY, f64::INFINITY]), 0);
    }
}
