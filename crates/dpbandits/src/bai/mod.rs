//! Fixed-confidence best-arm identification (BAI) under eps-global differential privacy.
//!
//! A BAI algorithm has a sampling rule, a stopping rule and a recommendation; a run reports its
//! stopping time, its recommendation and whether it is wrong ([`BaiOutcome`]). Spec:
//! `dp-bai.md` (Jourdan & Azize 2025 "Optimal BAI under DP"; Azize et al. 2023/2026; Azize thesis).
//!
//! * [`divergence`]: `d_eps`, its signed versions (closed form for Bernoulli) and transportation costs;
//! * [`charact`]: characteristic times `T*_KL`, `T*_eps`, `T*_{eps,beta}`, `T*_TV`, validated instances;
//! * [`threshold`]: stopping thresholds (the delta-correct pair threshold Proposal J is the default
//!   of DP-TT);
//! * [`top_two`]: the shared Top Two engine with the exact bulk fast path;
//! * algorithms: [`dp_tt`] (DP-TT), [`adap_tt`] (AdaP-TT, AdaP-TT*), [`eb_tci`] (non-private EB-TCI).

pub mod adap_tt;
pub mod charact;
pub mod divergence;
pub mod dp_tt;
pub mod eb_tci;
pub mod threshold;
pub mod top_two;

pub use charact::{BaiInstance, Bounds};
pub use threshold::ThresholdKind;
pub use top_two::{BaiOutcome, Forcing, RunSeeds, TopTwo, TopTwoParams};

use crate::error::Result;
use crate::privacy::PrivacyGuarantee;

/// A BAI algorithm configuration (one `[[algorithm]]` table), object-safe.
pub trait BaiConfig: Send + Sync + std::fmt::Debug {
    /// Registry kind.
    fn kind(&self) -> &'static str;
    /// Label with every parameter (e.g.
    /// `dp_tt(eps=0.1,threshold=joint,eta=1,beta=0.5,lazy=0.01,fe=privacy_scaled*16)`).
    fn label(&self) -> String;
    /// The privacy budget (`inf` for non-private algorithms).
    fn epsilon(&self) -> f64;
    /// The stopping threshold used.
    fn threshold(&self) -> ThresholdKind;
    /// The privacy claim.
    fn guarantee(&self) -> PrivacyGuarantee;
    /// Engine parameters.
    fn params(&self) -> TopTwoParams;
    /// Build for `K` arms and risk `delta`.
    fn build(&self, k: usize, delta: f64) -> Result<TopTwo> {
        TopTwo::new(self.params(), k, delta)
    }
}

/// How the registry parses a BAI algorithm table.
#[derive(Clone, Copy)]
pub struct BaiParser {
    /// Parse one table (with `epsilon` inserted by the experiment for private algorithms).
    pub parse: fn(toml::Table) -> Result<Box<dyn BaiConfig>>,
    /// Whether the algorithm takes `epsilon` (private) or not.
    pub private: bool,
}

impl std::fmt::Debug for BaiParser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BaiParser(private: {})", self.private)
    }
}

pub(crate) fn fmt_num(x: f64) -> String {
    if x.is_infinite() {
        "inf".into()
    } else {
        format!("{x}")
    }
}

/// Default forcing scale `c` of the private Top Two algorithms (DP-TT, AdaP-TT, AdaP-TT*): forced
/// exploration `N_a < sqrt(16 t / min(1, eps)) - K/2`. Chosen from `c in {1, 4, 16}` on the two
/// paper instances (docs/bai.md, "forcing scale"): it shortens DP-TT's stopping-time tail at
/// eps <= 0.005 and changes AdaP-TT by less than 3%; the cost is at most `4 K sqrt(t / eps)`
/// forced samples. EB-TCI keeps Garivier–Kaufmann's `sqrt(t)`.
pub const PRIVATE_FORCING_SCALE: f64 = 16.0;

/// Label part of a forcing rule: its name, with `*c` when the scale is not 1.
pub(crate) fn forcing_label(f: Forcing, scale: f64) -> String {
    if scale == 1.0 {
        f.name().into()
    } else {
        format!("{}*{}", f.name(), scale)
    }
}

pub(crate) fn pure_dp_guarantee(epsilon: f64, mechanism: &str) -> PrivacyGuarantee {
    use crate::privacy::{BoundaryMode, Budget, RewardBoundary, TrustModel};
    if epsilon.is_infinite() {
        return PrivacyGuarantee::non_private();
    }
    PrivacyGuarantee {
        notion: "eps-global DP for BAI (pure, central; output = stopping time, recommendation and action sequence; Azize et al. 2023 Def. 2, Jourdan & Azize 2025)".into(),
        model: TrustModel::Central,
        adjacency: "reward tables differing in one row (one user's potential rewards)".into(),
        budget: Budget::PureDp { epsilon },
        mechanism: mechanism.into(),
        boundary: Some(RewardBoundary::new(0.0, 1.0, BoundaryMode::Clip).expect("valid range")),
    }
}
