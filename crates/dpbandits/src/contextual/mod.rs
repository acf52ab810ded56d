//! Linear contextual bandits with changing action sets (spec zcdp §1.3): the setting's traits, its
//! environments, its algorithms and its run loop.
//!
//! # The setting
//! Every round `t` the environment reveals a public decision set `A_t` of `k_t` actions in `R^d`
//! (an [`ActionSet`]); the policy picks one, and observes `r_t = <theta*, a_t> + eta_t`. The metric
//! is the pseudo-regret `sum_t max_{a in A_t} <theta*, a - a_t>`. Contexts are public, rewards are
//! private (spec §1.3, Remark 4).
//!
//! # Layout
//! * this file: the traits [`ContextualEnvConfig`] / [`ContextualEnvironment`] and
//!   [`ContextualPolicyConfig`] / [`ContextualPolicy`], and [`ActionSet`];
//! * one file per environment: `gaussian.rs` (`contextual_gaussian`, the paper's contexts),
//!   `file.rs` (`contextual_file`, feature files);
//! * one folder per paper algorithm family: `oful/` (OFUL, RS-OFUL, AdaC-OFUL: the algorithm in
//!   `oful/mod.rs`, its exact fast argmax in `oful/argmax.rs`, its batched driver in
//!   `oful/batch.rs`);
//! * `sim.rs`: the common-random-numbers run loop ([`simulate_contextual`],
//!   [`simulate_configs`]) and the experiment cells ([`ContextualCell`], [`ContextualGroup`]);
//! * `lanes.rs`: the run loop's optional fast path (decision sets by coordinate, a shared
//!   reference direction, batched drivers per family); nothing in it changes a decision, and
//!   nothing in it is needed to add an algorithm or an environment.
//!
//! # Adding an algorithm or an environment
//! One file here implementing [`ContextualPolicyConfig`] + [`ContextualPolicy`] (or
//! [`ContextualEnvConfig`] + [`ContextualEnvironment`]), a `mod`/`pub use` line below, one entry in
//! `crate::registry` (feature `experiment`).
//!
//! # Common random numbers
//! The run loop draws each round's decision set and reward noise `eta_t` **once** and drives any
//! number of policies on it (the reward of action `a` in round `t` is `<theta*, a> + eta_t`
//! whichever policy plays it). Private and non-private policies therefore face identical data,
//! and generating the contexts (the dominant cost) is shared. Each policy keeps its own noise
//! stream, keyed by its label, so its trajectory does not depend on which other policies are
//! simulated with it. Nothing in the step loop allocates.

mod classification;
mod file;
mod gaussian;
mod joint_dp;
mod lanes;
mod lin_priv;
mod oful;
mod sim;

pub use classification::{
    CONTEXTUAL_CLASSIFICATION, ContextualClassification, ContextualClassificationConfig,
    LabelledData,
};
pub use file::{CONTEXTUAL_FILE, ContextOrder, ContextualFile, ContextualFileConfig, FeatureTable};
pub use gaussian::{CONTEXTUAL_GAUSSIAN, ContextualGaussian, ContextualGaussianConfig};
pub use joint_dp::{
    ADAC_OFUL_JOINT, AdacOfulJoint, AdacOfulJointConfig, SHARIFF_SHEFFET, ShariffSheffet,
    ShariffSheffetConfig,
};
pub use lanes::{ActionLanes, BatchDriver, BatchFamily, LaneSource};
pub use lin_priv::{LIN_PRIV, LIN_PRIV_MAX_ACTION_NORM, LinPriv, LinPrivConfig};
pub use oful::{
    ADAC_OFUL, MAX_DIM, MAX_DIM_DYN, OFUL, OFUL_BOUNDARY, OFUL_MAX_ACTION_NORM, OfulConfig,
    OfulDyn, OfulKind, OfulPolicy, PrivacyMode, RS_OFUL, RadiusMode, SquareOps, chi2_tail,
    lambda_min_lower_bound, restore_oful,
};
pub use sim::{ContextualCell, ContextualGroup, SimPath, simulate_configs, simulate_contextual};

use crate::error::Result;
use crate::privacy::{PrivacyGuarantee, RewardBoundary};
use std::fmt::Debug;

/// The report's view of a policy that keeps `theta~`, `V^{-1}` (row-major `d x d`) and a radius
/// with `||theta - theta~||_V <= radius` at `level` ([`crate::report::LinearReleased`]): the
/// ellipsoid's `shape = radius^2 V^{-1}` and `P = shape^{-1}`. `None` when a value is not finite
/// or the shape is singular.
pub(crate) fn ellipsoid_released(
    theta: &[f64],
    vinv: &[f64],
    radius: f64,
    level: f64,
    rewards: u64,
    boundary: RewardBoundary,
    method: String,
) -> Option<crate::report::LinearReleased> {
    let d = theta.len();
    let shape: Vec<Vec<f64>> = (0..d)
        .map(|i| (0..d).map(|j| radius * radius * vinv[i * d + j]).collect())
        .collect();
    let p = nalgebra::DMatrix::from_fn(d, d, |i, j| shape[i][j]).try_inverse()?;
    if !(theta.iter().all(|x| x.is_finite()) && p.iter().all(|x| x.is_finite())) {
        return None;
    }
    Some(crate::report::LinearReleased {
        theta: theta.to_vec(),
        precision: (0..d)
            .map(|i| (0..d).map(|j| p[(i, j)]).collect())
            .collect(),
        shape,
        span: None,
        level,
        rewards,
        range: (boundary.lo, boundary.hi),
        method,
    })
}

/// One round's public decision set: `k` actions of dimension `d`, row-major (`features[i*d + j]`
/// is coordinate `j` of action `i`).
#[derive(Debug, Clone, Copy)]
pub struct ActionSet<'a> {
    /// Dimension.
    pub d: usize,
    /// Number of actions (>= 1).
    pub k: usize,
    /// `k * d` features.
    pub features: &'a [f64],
}

impl<'a> ActionSet<'a> {
    /// Action `i` as a slice of length `d`.
    #[inline]
    pub fn action(&self, i: usize) -> &'a [f64] {
        &self.features[i * self.d..(i + 1) * self.d]
    }
}

/// A contextual environment for one run.
pub trait ContextualEnvironment: Send + Debug {
    /// Dimension `d`.
    fn dim(&self) -> usize;
    /// Advance to round `t` (0-based): draw the decision set and the round's reward noise.
    fn next_round(&mut self, t: u64);
    /// The current decision set.
    fn actions(&self) -> ActionSet<'_>;
    /// `<theta*, a_i>` for the current decision set.
    fn means(&self) -> &[f64];
    /// `max_i <theta*, a_i>`.
    fn best_mean(&self) -> f64;
    /// The reward noise `eta_t` of the current round (shared by all actions and policies).
    fn noise(&self) -> f64;
    /// Reward of action `i` in the current round: `means()[i] + noise()`.
    #[inline]
    fn reward(&self, i: usize) -> f64 {
        self.means()[i] + self.noise()
    }
    /// Optional, for the run loop's speed only (an environment can ignore it): what the
    /// environment can share with the run loop's fast path ([`LaneSource`], in `lanes.rs`: the
    /// direction `theta*` of a linear environment, lanes it keeps itself). `None` (the default)
    /// gives the same numbers.
    fn fast_path(&self) -> Option<&dyn LaneSource> {
        None
    }
}

/// A validated contextual environment configuration; builds one environment per run.
pub trait ContextualEnvConfig: Send + Sync + Debug {
    /// Registry kind.
    fn kind(&self) -> &'static str;
    /// Dimension `d`.
    fn dim(&self) -> usize;
    /// Largest decision-set size.
    fn max_actions(&self) -> usize;
    /// Draw the problem instance (e.g. theta*) from the master seed; called once by the planner.
    fn instantiate(&mut self, master_seed: u64) -> Result<()>;
    /// The instance's theta*.
    fn theta(&self) -> &[f64];
    /// Build the environment of run `run` (streams derived from `master_seed`).
    fn build(&self, master_seed: u64, run: u64) -> Result<Box<dyn ContextualEnvironment>>;
    /// Upper bound on `||a||_2` over all actions, if known (`None`: unbounded, e.g. Gaussian).
    fn action_norm_bound(&self) -> Option<f64>;
    /// Facts for the manifest.
    fn describe(&self) -> serde_json::Value;
}

/// A contextual policy for one run.
pub trait ContextualPolicy: Send + Debug {
    /// The privacy claim.
    fn guarantee(&self) -> PrivacyGuarantee;
    /// The dimension `d` of the actions this policy chooses among.
    fn dim(&self) -> usize;
    /// The largest action norm `||a||_2` this policy accepts (its documented bound, or the
    /// numeric bound past which its statistics lose precision): the online session refuses a
    /// longer action before the policy sees it.
    fn max_action_norm(&self) -> f64;
    /// The boundary every reward passes ([`crate::protocol`]).
    fn boundary(&self) -> RewardBoundary;
    /// The probability with which [`Self::choose`] picks the action it picks, given the state
    /// and the action set: `Some(1.0)` for a deterministic choice (an argmax with a fixed
    /// tie-break), `None` where the policy cannot say. Logged with each decision (the decision
    /// service) for offline evaluation; no default, so every policy states it.
    fn propensity(&self) -> Option<f64>;
    /// Choose an action of the decision set; `t` = rounds already played. Opens a one-round
    /// commitment (replacing a round that was never observed: its context is gone).
    fn choose(&mut self, t: u64, actions: &ActionSet<'_>) -> usize;
    /// Observe the reward of the chosen action `arm` of `actions` ([`crate::protocol`]).
    ///
    /// # Errors
    /// [`crate::Error::Protocol`] for another action than the chosen one, no open round, or an
    /// action outside `actions`; a reward the boundary refuses. The policy is then unchanged.
    fn observe(&mut self, actions: &ActionSet<'_>, arm: usize, reward: f64) -> Result<()>;
    /// Observe the reward of an earlier round whose chosen action was `action` (a row of that
    /// round's set, length `d`), in any order and while later rounds are open: the pipelined
    /// online session (`crate::session`, [`crate::session::WhilePending::Pipeline`]) serves
    /// decisions before earlier rewards arrive. The reward passes the policy's boundary and
    /// enters the statistics the textbook [`Self::observe`] gives it, once; the round's
    /// commitment (if still open) is not consumed. The default refuses: a policy that cannot
    /// take a round out of order is served one round at a time.
    ///
    /// # Errors
    /// [`crate::Error::Protocol`] when the policy cannot; an action of another length; a
    /// reward the boundary refuses. The policy is then unchanged.
    fn observe_round(&mut self, action: &[f64], reward: f64) -> Result<()> {
        let _ = (action, reward);
        Err(crate::Error::Protocol(format!(
            "{self:?} cannot observe a round out of order"
        )))
    }
    /// Whether the next [`Self::choose`] draws a release first (an episode ends): the decision
    /// service commits a ledger intent before such a decision. Public data only. The default is
    /// conservative: every decision of a private policy may release.
    fn release_due(&self) -> bool {
        !matches!(self.guarantee().budget, crate::privacy::Budget::NonPrivate)
    }
    /// Draw the release [`Self::release_due`] announces now (the next [`Self::choose`] then
    /// draws none); nothing when none is due. The default does nothing (its `choose` draws).
    fn release_now(&mut self) {}
    /// The private estimate of `theta` with its confidence ellipsoid, from released statistics
    /// only ([`crate::report`]), at the level the policy's own radius holds; `None` for a kind
    /// that keeps none (the default).
    fn released_estimate(&self) -> Option<crate::report::LinearReleased> {
        None
    }
    /// One simulated round: [`Self::choose`], then [`Self::observe`] of `means[i] + noise` for
    /// the chosen `i`, which is returned. The run loop's per-policy path uses it; a policy may
    /// fuse the two calls (the same action and the same state change).
    ///
    /// # Errors
    /// As [`Self::observe`]; the round stays open.
    fn play(
        &mut self,
        t: u64,
        actions: &ActionSet<'_>,
        means: &[f64],
        noise: f64,
    ) -> Result<usize> {
        let i = self.choose(t, actions);
        let m = *means.get(i).ok_or_else(|| {
            crate::Error::Protocol(format!(
                "chose action {i} of a round with {} means",
                means.len()
            ))
        })?;
        self.observe(actions, i, m + noise)?;
        Ok(i)
    }
    /// Save the complete state (episode in progress, Gram matrix, released statistics,
    /// generators) for a bit-identical restore ([`crate::snapshot`]; restore with
    /// `registry::restore_contextual`). Sensitive data: it holds the unreleased episode
    /// statistic and the noise generator's state.
    ///
    /// # Errors
    /// [`crate::error::Error::Snapshot`] if the state cannot be captured; the default refuses.
    fn snapshot(&self) -> Result<crate::snapshot::Snapshot> {
        Err(crate::snapshot::unsupported(&format!("{self:?}")))
    }
}

/// A validated contextual policy configuration (one cell). `Any`: a policy family's batched
/// driver reads its own configurations back ([`BatchFamily`]).
pub trait ContextualPolicyConfig: Send + Sync + Debug + std::any::Any {
    /// Registry kind.
    fn kind(&self) -> &'static str;
    /// Numeric parameters identifying the cell.
    fn params(&self) -> Vec<(&'static str, f64)>;
    /// The privacy claim.
    fn guarantee(&self) -> PrivacyGuarantee;
    /// Build for dimension `d` and horizon `horizon`; `seed` keys the policy's streams.
    fn build(&self, d: usize, horizon: u64, seed: u64) -> Result<Box<dyn ContextualPolicy>>;
    /// Label `kind(p=v,...)`. With a [`release`](Self::release), its noise path's suffix
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
    /// How many releases the reward of round `t` (0-based) enters in a run of `horizon` rounds,
    /// once they are all made: the composition the guarantee accounts for (the white-box
    /// auditor compares the releases it finds carrying one reward with it). Default 1: the
    /// episodic kinds release each reward once; the tree-based kinds (`lin_priv.rs`) say how
    /// many p-sums hold it.
    fn releases_per_round(&self, horizon: u64, t: u64) -> u64 {
        let _ = (horizon, t);
        1
    }
    /// Optional, for the run loop's speed only: the policy family whose batched driver can play
    /// a group of these policies together ([`BatchFamily`], in `lanes.rs`; the OFUL family's is
    /// in `oful/batch.rs`). `None` (the default): played one [`ContextualPolicy::play`] call at
    /// a time. A group is batched only when every member offers the same family: mixing in
    /// another family's policy puts the whole group on the per-policy path (same numbers).
    fn batched(&self) -> Option<&'static dyn BatchFamily> {
        None
    }
}
