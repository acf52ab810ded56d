//! Stochastic linear bandits with a finite arm set (spec zcdp §1.2, §3): the setting's traits, its
//! environment, its algorithms and its run loop.
//!
//! # Layout
//! * this file: the traits [`LinearEnvConfig`] (an instance: arm vectors and a reward model) and
//!   [`LinearPolicy`] / [`LinearPolicyConfig`] (algorithms that see the arm vectors);
//! * one file per environment: `gaussian.rs` (`kind = "linear"`: `<theta*, a> + N(0, sigma^2)`);
//! * one file per paper algorithm family: `adac_gope.rs` (GOPE, AdaC-GOPE, AdaR-GOPE-Var, output
//!   perturbation), `lin_ucb.rs` (LinUCB: OFUL on the fixed arm set); `design.rs` is the G-optimal
//!   design solver the GOPE family shares;
//! * `sim.rs`: the run loop ([`simulate_linear`]) and the experiment cell ([`LinearCell`]).
//!
//! # The contract
//! A linear environment *is* a finite-armed [`crate::finite::Environment`] whose means are
//! `<theta*, a>`; what makes the setting linear is that policies are built from the arm vectors.
//! A [`LinearPolicy`] commits to blocks like a finite-armed policy ([`Pull`]): phased algorithms
//! return a whole block of one arm, and the run loop draws the block's reward sum exactly
//! (one Normal draw for Gaussian noise), so a phase costs O(support arms). Per-step policies
//! commit to one round. Rewards are clipped one by one at the policy's [`LinearPolicy::boundary`]
//! (if any) before they are summed.
//!
//! Linear algebra uses `nalgebra` (Cholesky for solves and log-determinants, the symmetric
//! eigendecomposition for `V^{-1/2}` and for the span of non-spanning arm sets).
//!
//! # Adding an algorithm or an environment
//! One file here implementing [`LinearPolicyConfig`] + [`LinearPolicy`] (or [`LinearEnvConfig`]),
//! a `mod`/`pub use` line below, one entry in `crate::registry` (feature `experiment`).

mod adac_gope;
mod design;
mod gaussian;
mod lin_ucb;
mod sim;

pub use adac_gope::{
    ADAC_GOPE, ADAR_GOPE_VAR, GOPE, GOPE_OUTPUT_PERTURBATION, GopeConfig, GopeConstants,
    NoiseCalibration, NoisePlacement, PhaseLength, PhasePlan, PhaseRelease, PhasedElimination,
    chi2_tail, delta_kl, per_arm_sums_privacy_term, phase_length,
};
pub use design::{
    Design, DesignOptions, DesignSolver, Span, g_optimal, info_matrix, leverages, ln_det,
};
pub use gaussian::{LINEAR, LinearConfig, LinearEnv, LinearInstance, unit_sphere};
pub use lin_ucb::{LIN_UCB, LinUcb, LinUcbConfig};
pub use sim::{LinearCell, simulate_linear};

use crate::error::Result;
use crate::finite::{Environment, Pull};
use crate::privacy::{PrivacyGuarantee, RewardBoundary, RewardSum};
use nalgebra::DVector;
use std::fmt::Debug;

/// What one run of a linear environment consists of: the arm vectors the policy sees and the
/// reward environment.
pub type LinearRun = (Vec<DVector<f64>>, Box<dyn Environment>);

/// A validated linear-bandit environment description (one `[env]` table).
pub trait LinearEnvConfig: Send + Sync + Debug {
    /// Registry kind.
    fn kind(&self) -> &'static str;
    /// Draw what every run shares (e.g. a random instance) from the master seed; called once by
    /// the planner.
    fn instantiate(&mut self, master_seed: u64) -> Result<()>;
    /// The arm vectors and the reward environment of run `run`.
    fn build(&self, master_seed: u64, run: u64) -> Result<LinearRun>;
    /// Instance facts for the manifest.
    fn describe(&self) -> serde_json::Value;
}

/// A linear-bandit policy for one run.
pub trait LinearPolicy: Send + Debug {
    /// The privacy claim.
    fn guarantee(&self) -> PrivacyGuarantee;
    /// The boundary every reward passes ([`crate::protocol`]): the privacy boundary of a private
    /// policy, [`RewardBoundary::numeric`] for a non-private one.
    fn boundary(&self) -> RewardBoundary;
    /// The next commitment; `t` = rounds played. Calling it again before the commitment is
    /// observed in full returns the rest of it.
    ///
    /// Unlike the other settings' `choose`, this one is fallible, because a phased-elimination
    /// policy solves a numerical problem inside it.
    ///
    /// # Errors
    /// Only the phased-elimination kinds (`gope`, `adac_gope`, `adar_gope_var`,
    /// `gope_output_perturbation`), and only when `choose` opens a new phase: the phase's
    /// G-optimal design on the surviving arms ([`g_optimal`] on their coordinates in their span,
    /// [`Span::of`]) fails when its information matrix is not numerically positive definite
    /// ([`crate::Error::Param`] on `arms`). Validated arm sets (finite coordinates) cannot be
    /// shown to avoid this in floating point, although in exact arithmetic the span coordinates
    /// always admit a design. The policy is then unchanged (no phase is opened; a repeated call
    /// fails the same way). LinUCB's `choose` never fails.
    fn choose(&mut self, t: u64) -> Result<Pull>;
    /// A sum of rewards of the committed `arm`, inside the current commitment
    /// ([`crate::protocol`]: off-policy or out-of-order observations are refused and change
    /// nothing).
    ///
    /// # Errors
    /// [`crate::Error::Protocol`] for another arm, no open commitment, more rounds than are left,
    /// or a sum built by a boundary wider than [`LinearPolicy::boundary`].
    fn observe_batch(&mut self, arm: usize, sum: &RewardSum) -> Result<()>;
    /// The private estimate of `theta` with its confidence ellipsoid at `level`, from released
    /// statistics only ([`crate::report`]), and the arm vectors to give value intervals for;
    /// `None` for a kind that keeps none (the default).
    fn released_estimate(
        &self,
        _level: f64,
    ) -> Option<(crate::report::LinearReleased, Vec<Vec<f64>>)> {
        None
    }
    /// Save the complete state (phase in progress, statistics, generators) for a bit-identical
    /// restore ([`crate::snapshot`]; restore with `registry::restore_linear`). Sensitive data:
    /// it holds raw reward sums and the noise generator's state.
    ///
    /// # Errors
    /// [`crate::error::Error::Snapshot`] if the state cannot be captured; the default refuses.
    fn snapshot(&self) -> Result<crate::snapshot::Snapshot> {
        Err(crate::snapshot::unsupported(&format!("{self:?}")))
    }
}

/// A validated linear-bandit policy configuration (one cell of a sweep).
pub trait LinearPolicyConfig: Send + Sync + Debug {
    /// Registry kind.
    fn kind(&self) -> &'static str;
    /// Label `kind(p=v,...)`; keys the policy's random streams. With a [`release`](Self::release), its noise path's suffix
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
    /// Numeric parameters identifying the cell.
    fn params(&self) -> Vec<(&'static str, f64)>;
    /// The privacy claim.
    fn guarantee(&self) -> PrivacyGuarantee;
    /// Facts for the manifest.
    fn describe(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
    /// Build the policy for one run on `arms`; `seed` is the run's policy seed.
    fn build(&self, arms: &[DVector<f64>], seed: u64) -> Result<Box<dyn LinearPolicy>>;
}
