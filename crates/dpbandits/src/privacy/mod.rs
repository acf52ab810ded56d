//! Privacy: budgets, guarantees, mechanisms and the reward boundary.
//!
//! Following OpenDP, the privacy claim is *data on the object*: every policy reports a
//! [`PrivacyGuarantee`] (notion, trust model, adjacency, budget, mechanism and its calibration with
//! the paper's equation number), and every mechanism exposes its privacy map (sensitivity to loss).
//! Calibrating constructors round in the direction that *overstates* the loss, so the realised
//! loss is never above the stated budget (tested in `gaussian.rs`).
//!
//! # Security
//! The mechanisms [`GaussianMechanism`] and [`LaplaceMechanism`] sample floating-point noise from a
//! seeded generator. That is what a reproducible simulator needs, and it is **simulation-grade**:
//! floating-point Gaussian/Laplace samplers leak through their bit patterns (Mironov 2012), and a
//! seeded generator is predictable. Every guarantee says which grade of noise it rests on
//! ([`PrivacyGuarantee::noise`]). The deployment path ([`NoiseSource`] with
//! [`NoiseKind::Deployment`]) rounds rewards to a `2^-k` grid and draws exact discrete Gaussian /
//! discrete Laplace noise ([`discrete`], Canonne, Kamath & Steinke 2020) from ChaCha20 seeded by the
//! operating system.

mod boundary;
mod conversion;
pub mod discrete;
mod gaussian;
mod gram;
mod laplace;
mod noise;
mod randomized_response;
mod release;
pub(crate) mod tap;
mod tree;

pub use boundary::{BoundaryMode, MAX_ABS_REWARD, RewardBoundary, RewardSum};
pub use conversion::{
    ZcdpConversion, bun_steinke_epsilon, cks_delta, pure_to_zcdp, zcdp_to_approx_dp,
};
pub use gaussian::{GaussianMechanism, NoisyMean};
pub use gram::GramTree;
pub use laplace::{LaplaceMechanism, sample_standard_laplace};
pub use noise::{
    DEFAULT_GRID_BITS, LinearSum, MAX_GRID_BITS, NoiseGrade, NoiseKind, NoiseSource, check_noise,
    noise_label, with_release_key,
};
pub use randomized_response::{LocalRandomizer, PerArmChannel, RandomizedResponse};
pub(crate) use randomized_response::{
    channels_for, check_channel_spec, exact_levels_for, randomizer_for,
};
pub use release::Release;
pub use tree::{
    BinaryCounter, HybridCounter, NoiseFamily, TreeBudget, VectorTree, binary_releases,
    hybrid_releases, levels_for, noise_bound,
};

use serde::Serialize;

pub use crate::error::check::{BUDGET_MAX, BUDGET_MIN, LOCAL_EPSILON_MAX};

/// A privacy budget in one of the usual currencies.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Budget {
    /// No privacy claim (a non-private algorithm, or the `rho = inf` limit).
    NonPrivate,
    /// Pure epsilon-DP.
    PureDp {
        /// epsilon
        epsilon: f64,
    },
    /// rho-zero-concentrated DP (Bun & Steinke 2016).
    Zcdp {
        /// rho
        rho: f64,
    },
    /// Approximate (epsilon, delta)-DP.
    ApproxDp {
        /// epsilon
        epsilon: f64,
        /// delta
        delta: f64,
    },
}

impl std::fmt::Display for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Budget::NonPrivate => write!(f, "none"),
            Budget::PureDp { epsilon } => write!(f, "epsilon = {epsilon}"),
            Budget::Zcdp { rho } => write!(f, "rho = {rho}"),
            Budget::ApproxDp { epsilon, delta } => {
                write!(f, "(epsilon, delta) = ({epsilon}, {delta})")
            }
        }
    }
}

/// Who is trusted with the raw rewards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TrustModel {
    /// The learner sees raw rewards; its published output (the action sequence) is private.
    Central,
    /// Each reward is privatised before the learner sees it.
    Local,
    /// No privacy.
    None,
}

/// The privacy claim a policy makes, carried with the object and written to every manifest.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PrivacyGuarantee {
    /// The privacy notion, e.g. "rho-Interactive zCDP (Azize & Basu 2024, Def. 4)".
    pub notion: String,
    /// Trust model.
    pub model: TrustModel,
    /// Which inputs are neighbours.
    pub adjacency: String,
    /// The budget.
    pub budget: Budget,
    /// The mechanism and its calibration, with the paper's equation numbers.
    pub mechanism: String,
    /// The reward range the sensitivity argument assumes, and what happens outside it.
    pub boundary: Option<RewardBoundary>,
    /// The grade of the noise: `simulation-grade` (seeded floating-point noise, reproducible),
    /// `deployment-grade` (exact discrete noise from an OS-seeded CSPRNG, not reproducible) or
    /// `not-applicable` (no privacy noise).
    pub noise: NoiseGrade,
}

impl PrivacyGuarantee {
    /// The (absence of a) guarantee of a non-private algorithm.
    pub fn non_private() -> Self {
        PrivacyGuarantee {
            notion: "none".into(),
            model: TrustModel::None,
            adjacency: "-".into(),
            budget: Budget::NonPrivate,
            mechanism: "-".into(),
            boundary: None,
            noise: NoiseGrade::NotApplicable,
        }
    }

    /// Whether this guarantee makes any privacy claim.
    pub fn is_private(&self) -> bool {
        !matches!(self.budget, Budget::NonPrivate)
    }

    /// Whether the guarantee is Joint DP ([`JOINT_ADJACENCY`]): neighbours differ in one round's
    /// context and reward, and that round's own action is not part of the protected output.
    pub fn is_joint(&self) -> bool {
        self.adjacency == JOINT_ADJACENCY
    }

    /// One line for tables and logs (with the grade of the noise).
    pub fn summary(&self) -> String {
        if self.is_private() {
            format!(
                "{} with {} ({} noise)",
                self.notion,
                self.budget,
                self.noise.label()
            )
        } else {
            "non-private".into()
        }
    }
}

/// Adjacency used by all central-model bandit guarantees in this crate.
pub const REWARD_ADJACENCY: &str = "reward-level: reward tables (equivalently, observed reward sequences) differing in one user's rewards (Azize & Basu 2024, Def. 4; Table DP / View DP, Prop. 1)";

/// Adjacency of the Joint-DP contextual kinds (Shariff & Sheffet 2018, Def. 2 / Azize & Basu 2024
/// App. B-D, Defs. 7-8): sequences differing in one round's context (decision set) and reward;
/// the guarantee covers the actions of every **other** round (that round's own action, shown only
/// to its user, may depend on its context). The auditors read it from the guarantee
/// ([`PrivacyGuarantee::is_joint`]) and audit such a kind under this relation.
pub const JOINT_ADJACENCY: &str = "joint: sequences of (decision set, reward) differing in one round's context and reward; the output is the actions of every other round (Shariff & Sheffet 2018, Def. 2; Azize & Basu 2024, App. B-D, Defs. 7-8)";

/// Deliberately broken variants of a few private policies, used only by the mutation tests of
/// the privacy auditor (`crate::audit`). The field that holds one is `#[serde(skip)]` and
/// crate-private, so no experiment file, configuration or public API can build a mutant, and a
/// mutated policy's guarantee says it is a mutant ([`mutant_guarantee`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(clippy::enum_variant_names)] // each names what it does to the releases
pub(crate) enum AuditMutant {
    /// "Noise re-sampled inside an episode": every index evaluation re-draws the released
    /// statistics from the raw episode sums (fresh noise each time) instead of reusing the cached
    /// release.
    ResampleReleases,
    /// "Budget split across fewer episodes than the algorithm uses": each release is the running
    /// mean of *all* the arm's rewards so far (every reward enters every later release of its
    /// arm), each calibrated with the whole budget as if it were the only release.
    ForgetlessReleases,
    /// "Budget split across fewer episodes", literally (AdaP only): each release is the mean of
    /// the arm's last **two** episodes, calibrated with the whole budget, so every reward enters
    /// two releases (loss 2 epsilon).
    TwoEpisodeReleases,
}

/// The guarantee of a (possibly) mutated policy: a mutant never reports a normal guarantee.
pub(crate) fn mutant_guarantee(
    mut g: PrivacyGuarantee,
    mutant: Option<AuditMutant>,
) -> PrivacyGuarantee {
    if let Some(m) = mutant {
        g.notion = format!(
            "AUDIT MUTANT {m:?} (deliberately broken, NOT private): {}",
            g.notion
        );
        g.mechanism = format!("AUDIT MUTANT {m:?}: {}", g.mechanism);
    }
    g
}
