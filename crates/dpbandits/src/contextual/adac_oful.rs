//! OFUL, rarely-switching OFUL (RS-OFUL) and AdaC-OFUL: optimism in the face of uncertainty for
//! linear contextual bandits, non-private and under rho-Interactive zCDP.
//!
//! # Algorithm
//! * **OFUL** (`kind = "oful"`): Abbasi-Yadkori, Pal & Szepesvari (2011), "Improved Algorithms for
//!   Linear Stochastic Bandits", Algorithm 1 with the confidence radius of their Theorem 2:
//!   `beta_t = sqrt(2 ln(1/delta) + ln(det V_t / lambda^d)) + sqrt(lambda) S` (sub-Gaussian constant
//!   `R = 1`). Every round: `theta^ = V_{t-1}^{-1} sum_{s<t} a_s r_s`,
//!   `a_t = argmax_a <theta^, a> + beta_{t-1} ||a||_{V_{t-1}^{-1}}`.
//! * **RS-OFUL** (`kind = "rs_oful"`): the same paper, Section 5 ("rarely switching"): the estimate
//!   and the radius are recomputed only when `det V_{t-1} > (1 + C) det V_tau` (determinant
//!   doubling for `C = 1`); in between, `V_tau^{-1}`, `theta^` and `beta_tau` are frozen. This is the
//!   non-private baseline of the paper's Figure 4(c) and the `rho -> inf` limit of AdaC-OFUL
//!   (spec zcdp §4.4).
//! * **AdaC-OFUL** (`kind = "adac_oful"`): Azize & Basu (2024), "Concentrated Differential Privacy
//!   for Bandits", Algorithm 3 (spec §4.2): RS-OFUL whose episode statistic
//!   `sum_{s in episode} a_s r_s` is released once, at the end of the episode, with Gaussian noise
//!   `Y_l ~ N(0, (2/rho) I_d)`; the estimate uses the running sum of all releases (no forgetting:
//!   after `m` episodes it carries `sum_{j<=m} Y_j ~ N(0, (2m/rho) I)`), and the radius is enlarged to
//!   `beta~_t = beta_t + gamma_t / sqrt(t)` (Theorem 14, App. F-A).
//!
//! All three share one engine ([`OfulPolicy`]); OFUL is the engine with "update every round", RS-OFUL
//! is AdaC-OFUL with `rho = inf` (no noise is drawn, `gamma = 0`), so `adac_oful` with `rho = inf`
//! reproduces `rs_oful` exactly, action for action (spec §8 T10).
//!
//! ## Choices for the spec's ambiguities (spec §4.1, §4.3, §9 item 3)
//! * `delta`, `S`, `lambda_0` are not inputs of Algorithm 3: they are parameters here, with the
//!   paper's experimental values as defaults (`delta = 0.001`, `s = 1`; `lambda0` only for
//!   `radius = "theory"`).
//! * `gamma_t / sqrt t = sqrt((2 m_tau / rho) f_F(d, delta/T) / D_tau)`, with
//!   `f_F(d, x) = d + 2 sqrt(d ln(1/x)) + 2 ln(1/x)` at `x = delta/T` (consistent with the event
//!   `E_3` of App. F; `T` is the experiment's horizon) and `m_tau` the number of noise vectors inside
//!   `theta~`. The denominator `D_tau` is the paper's lower bound `lambda + g(t, lambda_0, delta, d)` on
//!   `lambda_min(V_t)`, where `g = lambda_0 t/4 - 8 ln((t+3)/(delta/d)) - 2 sqrt(t ln((t+3)/(delta/d)))`
//!   (Lemma 12) is **negative** for small `t` (for `lambda_0 = 0.1, d = 3, delta = 1e-3` until
//!   `t ~ 1.4e5`), which would make the radius undefined. Two faithful fixes:
//!   - `radius = "empirical"` (default): `D_tau = lambda_min(V_tau)`, the quantity `lambda + g` lower-bounds.
//!     The step of the proof it replaces is `||V^{-1} Y||_V = ||Y||_{V^{-1}} <= ||Y|| / sqrt(lambda_min(V))`,
//!     so this radius is valid without Assumption 2 and needs no `lambda_0`. `V_tau` depends only on
//!     public actions, so the radius is still post-processing of public data.
//!   - `radius = "theory"`: `D_tau = lambda + max(0, g(tau, lambda_0, delta, d))` (valid since
//!     `V_tau >= lambda I`), with `lambda0` required.
//! * Before the first update (`tau = 0`): `theta~ = 0`, `V_0 = lambda I`, `beta~_0 = beta_0` (the
//!   `gamma_0 / sqrt 0` term is undefined and irrelevant: the rule picks the longest action).
//! * The paper's regret proof assumes `lambda >= 1`; the experiments (and our defaults) use 0.1.
//!
//! # Privacy
//! * Notion: rho-Interactive zCDP (Def. 4), central trust model, reward-level adjacency.
//! * Mechanism (App. D-C): at the end of each episode, the sum `sum_{s in episode} a_s r_s` plus
//!   `N(0, sigma^2 I_d)` with `sigma^2 = 2/rho`: one reward changes the sum by at most
//!   `||a_s|| |r_s - r'_s| <= 2` when `||a|| <= 1` and `|r| <= 1` (L2 sensitivity 2), and
//!   `sigma^2 = s^2/(2 rho) = 2/rho` (Thm 18), calibrated by [`GaussianMechanism::for_zcdp`] (rounded
//!   up). Each episode's statistic is released once, when the episode ends, and cached in the
//!   running sum; nothing is re-sampled.
//! * Composition: episodes are disjoint blocks of rewards whose boundaries (determinant doubling)
//!   depend only on the public actions, so Lemma 1 with App. D-B gives rho overall (not rho per
//!   episode); `theta~`, the radius and the chosen actions are post-processing (Lemmas 3-4).
//! * Boundary (`mode`): `"guaranteed"` (default) clips each contribution at the privacy boundary:
//!   the reward to `[-1, 1]` and, for an action longer than 1, the contribution `a r` to
//!   `a r / ||a||`, so the sensitivity bound 2 holds for every input. `"reproduction"` adds nothing,
//!   as in the paper's experiments (Gaussian contexts and rewards, spec §6 fidelity note); the
//!   claim is then **conditional** on Assumption 1 and the reported guarantee says so.
//!
//! # Parameters
//! `rho > 0` (`adac_oful` only; `inf` = RS-OFUL), `lambda > 0` (default 0.1), `c >= 0` (switching
//! constant C, default 1; not for `oful`), `delta` in (0, 1) (default 0.001), `s > 0` (bound on
//! `||theta*||`, default 1), `radius` (`empirical` | `theory`), `lambda0 > 0` (theory radius),
//! `mode` (`guaranteed` | `reproduction`, `adac_oful` only).
//!
//! # Cost per round
//! Within an episode `V_tau^{-1}`, `theta~` and the radius are frozen (`beta~^2 V_tau^{-1}` is cached),
//! so a round costs `k` quadratic forms, a rank-one update of `V` and `det V` (closed form for
//! `d <= 3`, an on-stack LU otherwise). Updates factorise `V` with `nalgebra`'s Cholesky. Fixed-size
//! `nalgebra` types (`d <= MAX_DIM`): no allocation anywhere in the step loop.

use super::{
    ActionLanes, ActionSet, ContextualPolicy, ContextualPolicyConfig, LANE_GROUP, LaneReference,
};
use crate::config::{AlgorithmInfo, Setting};
use crate::error::{Error, Result, check};
use crate::privacy::{
    BoundaryMode, Budget, GaussianMechanism, PrivacyGuarantee, REWARD_ADJACENCY, RewardBoundary,
    TrustModel,
};
use crate::protocol::Gate;
use crate::rng::SimRng;
use nalgebra::{Cholesky, SMatrix, SVector};
use serde::Deserialize;
use std::cell::Cell;

/// Registry record of `oful`.
pub const OFUL: AlgorithmInfo = AlgorithmInfo {
    kind: "oful",
    name: "OFUL",
    setting: Setting::Contextual,
    reference: "Abbasi-Yadkori, Pal & Szepesvari 2011, Alg. 1, Thm 2 radius",
    privacy: "none",
    example: "",
    source: file!(),
    doc: include_str!("adac_oful.rs"),
};

/// Registry record of `rs_oful`.
pub const RS_OFUL: AlgorithmInfo = AlgorithmInfo {
    kind: "rs_oful",
    name: "RS-OFUL (rarely switching OFUL)",
    setting: Setting::Contextual,
    reference: "Abbasi-Yadkori, Pal & Szepesvari 2011, Sec. 5 (det V > (1+C) det V_tau); Azize & Basu 2024 Sec. VII baseline",
    privacy: "none",
    example: "c = 1.0",
    source: file!(),
    doc: include_str!("adac_oful.rs"),
};

/// Registry record of `adac_oful`.
pub const ADAC_OFUL: AlgorithmInfo = AlgorithmInfo {
    kind: "adac_oful",
    name: "AdaC-OFUL",
    setting: Setting::Contextual,
    reference: "Azize & Basu 2024, Algorithm 3, Thm 5/14 (radius beta + gamma/sqrt t)",
    privacy: "rho-Interactive zCDP (central), Gaussian mechanism on each episode's sum of a_s r_s",
    example: "rho = 1.0",
    source: file!(),
    doc: include_str!("adac_oful.rs"),
};

/// Largest supported feature dimension (fixed-size linear algebra is instantiated for 1..=MAX_DIM).
pub const MAX_DIM: usize = 16;

/// Which member of the family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OfulKind {
    /// OFUL: update every round.
    Oful,
    /// RS-OFUL: determinant-doubling updates, no noise.
    RsOful,
    /// AdaC-OFUL: RS-OFUL with Gaussian noise per episode and the enlarged radius.
    #[default]
    AdacOful,
}

/// How the noise part of the AdaC-OFUL radius is normalised (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RadiusMode {
    /// `lambda_min(V_tau)` (exact, no lambda_0 needed). Default.
    #[default]
    Empirical,
    /// `lambda + max(0, g(t, lambda_0, delta, d))` (Theorem 14 with the negative part removed).
    Theory,
}

/// Whether the privacy boundary is enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PrivacyMode {
    /// Clip rewards to [-1, 1] and contributions `a r` to the unit ball: the guarantee holds for
    /// every input. Default.
    #[default]
    Guaranteed,
    /// No clipping (the paper's experiments); the guarantee is conditional on Assumption 1.
    Reproduction,
}

/// `kind = "oful" | "rs_oful" | "adac_oful"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OfulConfig {
    /// zCDP budget (`adac_oful`; `inf` = the RS-OFUL limit).
    pub rho: f64,
    /// Regulariser lambda (default 0.1, the paper's experiments).
    #[serde(default = "default_lambda")]
    pub lambda: f64,
    /// Switching constant C (default 1: determinant doubling).
    #[serde(default = "one")]
    pub c: f64,
    /// Confidence delta (default 0.001).
    #[serde(default = "default_delta")]
    pub delta: f64,
    /// Bound S on `||theta*||` (default 1).
    #[serde(default = "one")]
    pub s: f64,
    /// Radius normalisation (default `empirical`).
    #[serde(default)]
    pub radius: RadiusMode,
    /// lambda_0 of Assumption 2 (required by `radius = "theory"`).
    #[serde(default)]
    pub lambda0: Option<f64>,
    /// Privacy boundary (default `guaranteed`).
    #[serde(default)]
    pub mode: PrivacyMode,
    /// Set by the registry.
    #[serde(skip)]
    pub kind: OfulKind,
}

fn one() -> f64 {
    1.0
}
fn f64_infinity() -> f64 {
    f64::INFINITY
}
fn infinity3() -> [f64; 3] {
    [f64::INFINITY; 3]
}
fn nan_array<const D: usize>() -> [f64; D] {
    [f64::NAN; D]
}
fn default_lambda() -> f64 {
    0.1
}
fn default_delta() -> f64 {
    0.001
}

impl OfulConfig {
    /// The paper's Figure 4(c) parameters (lambda = 0.1, C = 1, delta = 0.001, S = 1) for `kind`.
    pub fn paper(kind: OfulKind, rho: f64) -> Self {
        OfulConfig {
            rho,
            lambda: 0.1,
            c: 1.0,
            delta: 0.001,
            s: 1.0,
            radius: RadiusMode::Empirical,
            lambda0: None,
            mode: PrivacyMode::Guaranteed,
            kind,
        }
    }

    /// Check every parameter.
    pub fn validate(&self) -> Result<()> {
        check::budget("rho", self.rho)?;
        if self.kind != OfulKind::AdacOful && self.rho.is_finite() {
            return Err(Error::param(
                "rho",
                self.rho,
                "no rho for a non-private kind (use kind = \"adac_oful\")",
            ));
        }
        check::positive("lambda", self.lambda)?;
        if !(self.c.is_finite() && self.c >= 0.0) {
            return Err(Error::param("c", self.c, "a finite number >= 0"));
        }
        check::open_unit("delta", self.delta)?;
        check::positive("s", self.s)?;
        match (self.radius, self.lambda0) {
            (RadiusMode::Theory, None) => {
                return Err(Error::param(
                    "lambda0",
                    "(missing)",
                    "a number > 0 when radius = \"theory\" (e.g. 0.1 for the paper's contexts)",
                ));
            }
            (_, Some(l0)) => {
                check::positive("lambda0", l0)?;
            }
            _ => {}
        }
        Ok(())
    }

    fn private(&self) -> bool {
        self.kind == OfulKind::AdacOful && self.rho.is_finite()
    }
}

impl ContextualPolicyConfig for OfulConfig {
    fn kind(&self) -> &'static str {
        match self.kind {
            OfulKind::Oful => OFUL.kind,
            OfulKind::RsOful => RS_OFUL.kind,
            OfulKind::AdacOful => ADAC_OFUL.kind,
        }
    }
    fn params(&self) -> Vec<(&'static str, f64)> {
        let mut p = vec![];
        if self.kind == OfulKind::AdacOful {
            p.push(("rho", self.rho));
        }
        if self.lambda != default_lambda() {
            p.push(("lambda", self.lambda));
        }
        if self.kind != OfulKind::Oful && self.c != 1.0 {
            p.push(("c", self.c));
        }
        if self.delta != default_delta() {
            p.push(("delta", self.delta));
        }
        if self.s != 1.0 {
            p.push(("s", self.s));
        }
        p
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        guarantee(self)
    }
    fn build(&self, d: usize, horizon: u64, seed: u64) -> Result<Box<dyn ContextualPolicy>> {
        macro_rules! dispatch {
            ($($n:literal)*) => {
                match d {
                    $($n => Ok(Box::new(OfulPolicy::<$n>::new(self.clone(), horizon, seed)?)),)*
                    _ => Err(Error::param("d", d, format!("an integer in 1..={MAX_DIM}"))),
                }
            };
        }
        dispatch!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16)
    }
}

/// The largest action norm the OFUL family accepts online: `||a||_2 <= 1e6`, so one round adds
/// at most `1e12` to an entry of `V` and, with the numeric reward boundary `1e12`, at most
/// `1e18` to an entry of the episode statistic; past it the Gram matrix and its determinant lose
/// the precision the argmax and the switching rule rely on (one such round would poison the
/// policy for good). In `mode = "guaranteed"` contributions longer than 1 are also clipped to
/// the unit ball (the privacy bound), so any action within this bound keeps the guarantee.
pub const OFUL_MAX_ACTION_NORM: f64 = 1e6;

/// The privacy boundary of the guaranteed mode: rewards in [-1, 1], clipped.
pub const OFUL_BOUNDARY: RewardBoundary = RewardBoundary {
    lo: -1.0,
    hi: 1.0,
    mode: BoundaryMode::Clip,
};

fn guarantee(cfg: &OfulConfig) -> PrivacyGuarantee {
    if !cfg.private() {
        return PrivacyGuarantee::non_private();
    }
    let (notion, boundary) = match cfg.mode {
        PrivacyMode::Guaranteed => (
            "rho-Interactive zCDP (Azize & Basu 2024, Def. 4; Algorithm 3, App. D-C)".to_string(),
            Some(OFUL_BOUNDARY),
        ),
        PrivacyMode::Reproduction => (
            "CONDITIONAL rho-Interactive zCDP (Azize & Basu 2024, Def. 4; Algorithm 3): holds only if \
             |r_t| <= 1 and ||a_t|| <= 1 (Assumption 1), which mode = \"reproduction\" does not \
             enforce (paper's experiments, spec zcdp §6)"
                .to_string(),
            None,
        ),
    };
    PrivacyGuarantee {
        notion,
        model: TrustModel::Central,
        adjacency: REWARD_ADJACENCY.into(),
        budget: Budget::Zcdp { rho: cfg.rho },
        mechanism: format!(
            "Gaussian mechanism on each episode's sum of a_s r_s{}: L2 sensitivity 2, sigma^2 = 2/rho \
             per coordinate (Alg. 3, Thm 18); episodes end by determinant doubling (C = {}) of the \
             public design matrix; each episode released once and cached, the estimate uses the \
             running sum of releases; disjoint episodes compose in parallel (Lemma 1, App. D-B)",
            match cfg.mode {
                PrivacyMode::Guaranteed =>
                    " (reward clipped to [-1,1], contribution a r scaled into the unit ball)",
                PrivacyMode::Reproduction => " (no clipping)",
            },
            cfg.c
        ),
        boundary,
        noise: crate::privacy::NoiseGrade::Simulation,
    }
}

/// `f_F(d, x) = d + 2 sqrt(d ln(1/x)) + 2 ln(1/x)` (chi-square tail, App. F).
pub fn chi2_tail(d: usize, x: f64) -> f64 {
    let l = (1.0 / x).ln();
    d as f64 + 2.0 * (d as f64 * l).sqrt() + 2.0 * l
}

/// `g(t, lambda_0, delta, d) = lambda_0 t/4 - 8 ln((t+3)/(delta/d)) - 2 sqrt(t ln((t+3)/(delta/d)))`
/// (Lemma 12): a lower bound on `lambda_min(sum_{s<=t} a_s a_s^T)` under Assumption 2; negative for
/// small `t`.
pub fn lambda_min_lower_bound(t: f64, lambda0: f64, delta: f64, d: usize) -> f64 {
    let l = ((t + 3.0) / (delta / d as f64)).ln();
    lambda0 * t / 4.0 - 8.0 * l - 2.0 * (t * l).sqrt()
}

/// Determinant and smallest eigenvalue of a fixed-size symmetric matrix (nalgebra's closed form /
/// on-stack LU, and its symmetric eigen-solver), implemented for every supported dimension.
pub trait SquareOps {
    /// `det M`.
    fn det(&self) -> f64;
    /// Smallest eigenvalue of the symmetric `M`.
    fn lambda_min(&self) -> f64;
    /// Largest eigenvalue of the symmetric `M`.
    fn lambda_max(&self) -> f64;
    /// `(smallest, largest)` eigenvalue of the symmetric `M` (one decomposition).
    fn lambda_range(&self) -> (f64, f64);
}

macro_rules! square_ops {
    ($($n:literal)*) => {$(
        impl SquareOps for SMatrix<f64, $n, $n> {
            #[inline]
            fn det(&self) -> f64 {
                self.determinant()
            }
            fn lambda_min(&self) -> f64 {
                self.symmetric_eigenvalues().min()
            }
            fn lambda_max(&self) -> f64 {
                self.symmetric_eigenvalues().max()
            }
            fn lambda_range(&self) -> (f64, f64) {
                let e = self.symmetric_eigenvalues();
                (e.min(), e.max())
            }
        }
    )*};
}
square_ops!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16);

/// The snapshot form of [`OfulConfig`]: every field, including the family member the registry
/// sets from the kind.
#[derive(serde::Serialize, Deserialize)]
#[serde(remote = "OfulConfig", deny_unknown_fields)]
struct OfulConfigSnap {
    rho: f64,
    lambda: f64,
    c: f64,
    delta: f64,
    s: f64,
    radius: RadiusMode,
    lambda0: Option<f64>,
    mode: PrivacyMode,
    kind: OfulKind,
}

/// The snapshot state of an [`OfulPolicy`]: its dimension (which instantiation to rebuild) and
/// its fields.
#[derive(serde::Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct OfulSnap<P> {
    d: usize,
    policy: P,
}

/// Restore an OFUL-family policy (`oful`, `rs_oful`, `adac_oful`) saved by
/// [`ContextualPolicy::snapshot`]: reads the dimension, then the state of that instantiation.
///
/// # Errors
/// A refused snapshot ([`crate::snapshot::Snapshot::state`]) or an unsupported dimension.
pub fn restore_oful(snap: &crate::snapshot::Snapshot) -> Result<Box<dyn ContextualPolicy>> {
    #[derive(Deserialize)]
    struct Dim {
        d: usize,
    }
    let d = snap.state::<Dim>()?.d;
    macro_rules! dispatch {
        ($($n:literal)*) => {
            match d {
                $($n => Ok(Box::new(snap.state::<OfulSnap<OfulPolicy<$n>>>()?.policy)),)*
                _ => Err(Error::Snapshot(format!("d = {d}: expected an integer in 1..={MAX_DIM}"))),
            }
        };
    }
    dispatch!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16)
}

/// The OFUL-family engine for dimension `D` (see the module docs).
#[derive(Debug, Clone, serde::Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OfulPolicy<const D: usize> {
    #[serde(with = "OfulConfigSnap")]
    cfg: OfulConfig,
    /// `2 ln(1/delta)`.
    two_log_inv_delta: f64,
    /// `d ln lambda`.
    d_log_lambda: f64,
    /// `sqrt(lambda) S`.
    sqrt_lambda_s: f64,
    /// `f_F(d, delta/T)`.
    ff: f64,
    mech: GaussianMechanism,
    clip: bool,
    gate: Gate,
    /// `V_{t-1} = lambda I + sum a a^T`.
    v: SMatrix<f64, D, D>,
    /// `(1 + C) det V_tau`.
    threshold: f64,
    det_tau: f64,
    /// Unreleased statistic of the current episode.
    episode: SVector<f64, D>,
    /// Running sum of released episode statistics.
    released: SVector<f64, D>,
    /// Releases inside `released` (= noise vectors inside theta~ when private).
    releases: u64,
    theta: SVector<f64, D>,
    /// `beta~_tau^2 V_tau^{-1}`.
    m: SMatrix<f64, D, D>,
    /// Hot-path copy of `m`: upper triangle with doubled off-diagonal entries, so
    /// `a^T m a = sum_i a_i sum_{j >= i} w[i][j] a_j`.
    #[serde(with = "crate::snapshot::with::square")]
    w: [[f64; D]; D],
    /// Hot-path copy of `theta`.
    #[serde(with = "crate::snapshot::with::array")]
    th: [f64; D],
    /// `B`: `sqrt(max(q, 0)) <= B ||a||` for every action (see [`Self::refresh_hot_copies`]);
    /// recomputed from `m` and `th`, so not saved (`inf` after a restore until the next update:
    /// nothing is skipped, the same actions are chosen).
    #[serde(skip, default = "f64_infinity")]
    bound: f64,
    /// The direction `ref_c` was computed for (NaN: none; see [`Self::sync_reference`]).
    #[serde(skip, default = "nan_array")]
    ref_theta: [f64; D],
    /// `c` of the shared-reference test of [`Self::sync_reference`] (`inf`: never passes).
    #[serde(skip, default = "f64_infinity")]
    ref_c: f64,
    /// Relative error bound `eps_s` of a computed `sqrt(max(q, 0))` against the exact
    /// `||a||_S` (see [`Self::refresh_hot_copies`]; `inf`: unknown, the slope test never passes).
    #[serde(skip, default = "f64_infinity")]
    sq_rel: f64,
    /// `(c1^2, c2, c3)` of the slope test of [`Self::sync_reference`] (`inf`: never passes).
    #[serde(skip, default = "infinity3")]
    ref_slope: [f64; 3],
    beta: f64,
    gamma: f64,
    played: u64,
    tau: u64,
    noise: SimRng,
}

impl<const D: usize> OfulPolicy<D>
where
    SMatrix<f64, D, D>: SquareOps,
{
    /// A policy for horizon `horizon` (used only in `f_F(d, delta/T)`); `seed` keys its noise
    /// stream.
    pub fn new(cfg: OfulConfig, horizon: u64, seed: u64) -> Result<Self> {
        cfg.validate()?;
        if D == 0 || D > MAX_DIM {
            return Err(Error::param("d", D, format!("an integer in 1..={MAX_DIM}")));
        }
        let horizon = check::at_least("horizon", horizon, 1)?;
        let rho = if cfg.private() {
            cfg.rho
        } else {
            f64::INFINITY
        };
        // Sensitivity 2 (||a|| <= 1, |r| <= 1): sigma^2 = 4 / (2 rho) = 2 / rho (Alg. 3, Thm 18).
        let mech = GaussianMechanism::for_zcdp(2.0, rho)?;
        let lambda = cfg.lambda;
        let two_log_inv_delta = 2.0 * (1.0 / cfg.delta).ln();
        let sqrt_lambda_s = lambda.sqrt() * cfg.s;
        let beta0 = two_log_inv_delta.sqrt() + sqrt_lambda_s;
        let det0 = lambda.powi(D as i32);
        Ok(OfulPolicy {
            two_log_inv_delta,
            d_log_lambda: D as f64 * lambda.ln(),
            sqrt_lambda_s,
            ff: chi2_tail(D, cfg.delta / horizon as f64),
            mech,
            clip: cfg.private() && cfg.mode == PrivacyMode::Guaranteed,
            v: SMatrix::<f64, D, D>::identity() * lambda,
            threshold: (1.0 + cfg.c) * det0,
            det_tau: det0,
            episode: SVector::<f64, D>::zeros(),
            released: SVector::<f64, D>::zeros(),
            releases: 0,
            theta: SVector::<f64, D>::zeros(),
            m: SMatrix::<f64, D, D>::identity() * (beta0 * beta0 / lambda),
            w: [[0.0; D]; D],
            th: [0.0; D],
            bound: f64::INFINITY,
            ref_theta: [f64::NAN; D],
            ref_c: f64::INFINITY,
            sq_rel: f64::INFINITY,
            ref_slope: infinity3(),
            beta: beta0,
            gamma: 0.0,
            played: 0,
            tau: 0,
            noise: crate::rng::noise_rng(seed),
            gate: Gate::new(if cfg.private() && cfg.mode == PrivacyMode::Guaranteed {
                OFUL_BOUNDARY
            } else {
                RewardBoundary::numeric()
            }),
            cfg,
        }
        .with_hot_copies())
    }

    fn with_hot_copies(mut self) -> Self {
        self.refresh_hot_copies();
        self
    }

    /// Refresh `w`, `th` and the skip bound `B` from `m` and `theta`.
    ///
    /// `B` bounds the computed `sqrt(max(q, 0))` of [`Self::parts`] by `B ||a||` with room to
    /// spare for the rounding of the skip test of [`Self::argmax_block`]
    /// (`lin + B ||a|| < c - k |c| - 1e-300`, `k = 1e-9`, `eps = 2^-53`):
    ///
    /// * Let `S` be the symmetric matrix whose upper triangle is `m`'s (the form
    ///   [`Self::parts`] evaluates; `w` is `m` with doubled, hence exact, off-diagonal entries),
    ///   `F = ||S||_F` and `L = max(lambda_max, 0) + k F`, with `lambda_max` the computed largest
    ///   eigenvalue of `S` (a backward-stable solver: within a few `eps F` of the true one).
    ///   The computed `q` is at most `a^T S a + 6 eps sum_ij |S_ij| |a_i| |a_j|
    ///   <= (lambda_max(S) + 6 eps F) ||a||^2 <= L ||a||^2`, so with `B0 = sqrt(L) (1 + k)` the
    ///   computed square root `s` is at most `B0 ||a||` (`||a||` computed within a few `eps`).
    /// * `B = B0 + k (B0 + ||theta~||) (1 + k)` leaves a slack `k (B0 + ||theta~||) ||a||`,
    ///   at least `k (s + |lin|)` (Cauchy-Schwarz) and at least `k B ||a|| / 2`. Every rounding
    ///   in the computed index `fl(lin + s)` and in the test's left side is a few `eps` times
    ///   `|lin| + s + B ||a||`, far below the slack; the right side is below `c` by `k |c|`
    ///   (and `1e-300` for the subnormal range), far more than its own rounding. So a skipped
    ///   action's computed index is strictly below `c`.
    ///
    /// A non-finite `B` (or a NaN anywhere in the test) skips nothing.
    ///
    /// It also sets `eps_s`, a relative error bound of the computed `s` against the exact
    /// `||a||_S = sqrt(a^T S a)` when `S` is positive definite: with `lmin` the computed
    /// smallest eigenvalue and `l = lmin - k F > 0` (below the true one), the computed `q` (a
    /// sum of products, each through at most `2d + 1` roundings) is within
    /// `(2d + 1) eps F ||a||^2 <= (2d + 1) eps (F / l) a^T S a` of the exact form, and the
    /// square root adds at most `2 eps`, so `|s - ||a||_S| <= eps_s ||a||_S` with
    /// `eps_s = 2 (d + 2) eps F / l + 4 eps` (taken only when `eps_s <= 1e-3`; otherwise `inf`,
    /// and the slope test of [`Self::sync_reference`] never passes).
    #[allow(clippy::needless_range_loop)]
    fn refresh_hot_copies(&mut self) {
        for i in 0..D {
            self.th[i] = self.theta[i];
            for j in 0..D {
                self.w[i][j] = if j < i {
                    0.0
                } else if j == i {
                    self.m[(i, i)]
                } else {
                    2.0 * self.m[(i, j)]
                };
            }
        }
        let sym = SMatrix::<f64, D, D>::from_fn(|i, j| self.m[(i.min(j), i.max(j))]);
        let frob = sym.norm();
        let (lmin, lmax) = sym.lambda_range();
        let l = lmax.max(0.0) + CUT_MARGIN * frob;
        let b0 = l.sqrt() * (1.0 + CUT_MARGIN);
        let thn = self.theta.norm();
        let b = b0 + CUT_MARGIN * (b0 + thn) * (1.0 + CUT_MARGIN);
        self.bound = if b.is_finite() && lmax.is_finite() {
            b
        } else {
            f64::INFINITY
        };
        let eps = f64::EPSILON / 2.0;
        let lo = lmin - CUT_MARGIN * frob;
        let rel = 2.0 * (D as f64 + 2.0) * eps * frob / lo + 4.0 * eps;
        self.sq_rel = if lo > 0.0 && rel.is_finite() && rel <= 1e-3 {
            rel
        } else {
            f64::INFINITY
        };
        // The shared-reference constants depend on `th` and `B`: recompute them when next asked.
        self.ref_theta = [f64::NAN; D];
    }

    /// Make `ref_c` the constant of the shared-reference test for the direction `theta_ref`
    /// (recomputed only when the direction or the episode changes).
    ///
    /// **The test.** Given a round's [`LaneReference`] along `theta_ref` (`r_i`, `best`, `gap`,
    /// `max_norm` = `N`), if `gap > c N + 1e-300` with
    /// `c = (2 e (1 + k) + B)(1 + k) + k (||theta~|| + ||theta_ref|| + e + B)`,
    /// `e = ||theta~ - theta_ref||` and `k = 1e-9`, then `best` is the first maximiser of this
    /// policy's computed indices, so [`Self::argmax`] would return it.
    ///
    /// *Proof.* Write `lin_i` for the computed `<theta~, a_i>` and `v_i = fl(lin_i + s_i)` for
    /// the computed index (`0 <= s_i <= B ||a_i||`, [`Self::refresh_hot_copies`]). Exactly,
    /// `<theta~, a_i> = <theta_ref, a_i> + <theta~ - theta_ref, a_i>` and the last term is at
    /// most `e ||a_i||` in absolute value. Both computed inner products are within
    /// `d eps ||.|| ||a_i||` of the exact ones (`eps = 2^-53`), so, with
    /// `A = ||theta~|| + ||theta_ref|| + e + B` and `E` a few `d eps A N`:
    /// for `i != best`, `v_i <= r_i + (e + B) ||a_i|| + E <= r_best - gap + (e + B) N + E`;
    /// and `v_best >= lin_best >= r_best - e N - E` (rounding is monotone and `s >= 0`). So
    /// `v_best > v_i` as soon as `gap > (2e + B) N + 2E`, which the test implies: the computed
    /// `e`, `N`, `gap` and `c N` are within a few `eps` of their exact values, and the slack
    /// `k A N` (plus `1e-300` for the subnormal range) is a million times larger than every
    /// rounding term. `best` is then the strict maximiser, hence the first. A non-finite `c`,
    /// `N` or `gap` fails the test.
    ///
    /// **The slope test** (tried when the gap test fails; over a Figure 4(c) run of T = 1e6 it
    /// settles about 60% of the decisions the gap test leaves). With the round's `ratio2`
    /// (`R^2`, [`ActionLanes::ratio2`]) and the constants
    /// `c1 = (e + B)(1 + k)`, `c1^2 = c1 c1 (1 + k)`,
    /// `c2 = (2/k)((2d + 4) eps (||theta~|| + ||theta_ref|| + B) + 2 eps_s B)(1 + k)` and
    /// `c3 = (2/k)(e + B + 1) 1e-150`, if `gap > c2 N + c3` and `ratio2 > c1^2` then `best` is
    /// again this policy's first maximiser.
    ///
    /// *Proof.* Take `i != best`, `D_i = fl(r_best - r_i)`, which is at least `gap` (rounding is
    /// monotone), `dn_i = ||a_best - a_i||` exactly and `dn2_i` its computed square. `S` is
    /// positive definite (`eps_s` finite, [`Self::refresh_hot_copies`]), so `||.||_S` is a norm
    /// and `||a_i||_S - ||a_best||_S <= ||a_i - a_best||_S <= B dn_i`. Exactly,
    /// `<theta~, a_best - a_i> >= <theta_ref, a_best - a_i> - e dn_i`. Adding the rounding of
    /// the inner products (`d eps` relative to `||.|| N`), of `s` (`eps_s ||a||_S`, at most
    /// `eps_s B N`) and of the final sums, the computed indices satisfy
    /// `v_best - v_i >= D_i (1 - eps) - (e + B) dn_i - Err` with
    /// `Err = N ((2d + 4) eps (||theta~|| + ||theta_ref|| + B) + 2 eps_s B)`. Squared
    /// differences may underflow, so `dn_i <= sqrt(dn2_i)(1 + (d + 3) eps) + 1e-160`. As
    /// `gap > c3 >= 1e-150`, `fl(D_i^2)` is a normal number, so `R^2 <= fl(fl(D_i^2) / dn2_i)`
    /// gives `sqrt(dn2_i) <= D_i (1 + eps) / R`, and `R > c1 >= (e + B)(1 + k)`. Together,
    /// `v_best - v_i` is at least
    /// `D_i (1 - eps - (1 + (d + 5) eps) / (1 + k)) - (e + B) 1e-160 - Err`, hence at least
    /// `D_i k / 2 - (e + B) 1e-160 - Err`, which is positive: `D_i >= gap` and
    /// `gap k / 2 > (c2 N + c3) k / 2` exceeds both terms. So `v_best > v_i` for every `i`.
    /// The `(1 + k)` factors cover the rounding of the constants and of the test itself. A NaN
    /// or infinite constant, `ratio2` or `gap` fails the test (`ratio2 = inf` only for one
    /// action, whose `gap` is `inf` too).
    #[inline(always)]
    fn sync_reference(&mut self, theta_ref: &[f64]) {
        if theta_ref.len() == D && theta_ref.iter().zip(&self.ref_theta).all(|(a, b)| a == b) {
            return;
        }
        self.set_reference(theta_ref);
    }

    /// [`Self::sync_reference`] for a new direction or episode (the constants' computation).
    #[inline(never)]
    fn set_reference(&mut self, theta_ref: &[f64]) {
        if theta_ref.len() != D {
            self.ref_c = f64::INFINITY;
            self.ref_slope = infinity3();
            return;
        }
        let (mut e2, mut t2, mut r2) = (0.0f64, 0.0f64, 0.0f64);
        for (&x, &y) in self.th.iter().zip(theta_ref) {
            e2 += (x - y) * (x - y);
            t2 += x * x;
            r2 += y * y;
        }
        let (e, b) = (e2.sqrt() * (1.0 + CUT_MARGIN), self.bound);
        let c = (2.0 * e * (1.0 + CUT_MARGIN) + b) * (1.0 + CUT_MARGIN)
            + CUT_MARGIN * (t2.sqrt() + r2.sqrt() + e + b);
        self.ref_c = if c.is_finite() { c } else { f64::INFINITY };
        let eps = f64::EPSILON / 2.0;
        let c1 = (e + b) * (1.0 + CUT_MARGIN);
        let c1sq = c1 * c1 * (1.0 + CUT_MARGIN);
        let c2 = (2.0 / CUT_MARGIN)
            * ((2.0 * D as f64 + 4.0) * eps * (t2.sqrt() + r2.sqrt() + b) + 2.0 * self.sq_rel * b)
            * (1.0 + CUT_MARGIN);
        let c3 = (2.0 / CUT_MARGIN) * (e + b + 1.0) * 1e-150;
        self.ref_slope = if c1sq.is_finite() && c2.is_finite() && c3.is_finite() {
            [c1sq, c2, c3]
        } else {
            infinity3()
        };
        self.ref_theta.copy_from_slice(theta_ref);
    }

    /// The choice on a round with a shared reference `r` (of `lanes`), with this policy's
    /// reference constants `ref_c` and `slope = [c1^2, c2, c3]` ([`Self::sync_reference`]):
    /// `r.best` when the gap test or the slope test proves it is the argmax; when only the
    /// slope test's gap condition holds, the textbook scan over the actions the slope screen
    /// keeps ([`Self::argmax_screened`]); otherwise [`Self::argmax_lanes`]. Always the action
    /// of [`Self::argmax_reference`].
    #[inline(always)]
    fn choose_by_reference(
        &self,
        features: &[f64],
        lanes: &ActionLanes<'_>,
        r: &LaneReference<'_>,
        ref_c: f64,
        slope: [f64; 3],
    ) -> usize {
        if r.gap > ref_c * r.max_norm + 1e-300 {
            return r.best;
        }
        let [c1sq, c2, c3] = slope;
        if r.gap > c2 * r.max_norm + c3 {
            let ratio2 = lanes.ratio2();
            if ratio2 > c1sq {
                return r.best;
            }
            if !ratio2.is_nan() {
                return self.argmax_screened(features, lanes.ratios(), c1sq);
            }
        }
        self.argmax_lanes(features, lanes)
    }

    /// The textbook scan ([`Self::argmax_reference`]) over the actions whose own slope ratio
    /// `q_i` (shared, [`ActionLanes::ratios`]) is not above `c1^2`: on a round where the slope
    /// test's gap condition `gap > c2 N + c3` holds, the proof of [`Self::sync_reference`] run
    /// for one action `i` (with `q_i` in place of `R^2`) shows that `q_i > c1^2` puts `i`'s
    /// computed index strictly below `best`'s, so `i` is not the first maximiser; `best` itself
    /// (`q = NaN`) and exact ties are always scanned. The first maximiser of the scanned
    /// actions is therefore the textbook scan's.
    #[inline(never)]
    fn argmax_screened(&self, features: &[f64], ratios: &[Cell<f64>], c1sq: f64) -> usize {
        let mut best = (0usize, f64::NEG_INFINITY);
        for (i, (row, q)) in features.chunks_exact(D).zip(ratios).enumerate() {
            if q.get() > c1sq {
                continue;
            }
            let Ok(a) = <&[f64; D]>::try_from(row) else {
                continue;
            };
            let (l, qf) = self.parts(a);
            let v = l + qf.max(0.0).sqrt();
            if v > best.1 {
                best = (i, v);
            }
        }
        best.0
    }

    /// Number of updates (episodes started) so far.
    pub fn updates(&self) -> u64 {
        self.releases
    }
    /// `det V_tau` of the last update (`lambda^d` before the first).
    pub fn det_tau(&self) -> f64 {
        self.det_tau
    }
    /// `det V_{t-1}` now.
    pub fn det_v(&self) -> f64 {
        self.v.det()
    }
    /// The current (released) estimate `theta~`.
    pub fn theta(&self) -> &[f64] {
        self.theta.as_slice()
    }
    /// The running sum of released episode statistics (`sum a_s r_s + sum_m Y_m`).
    pub fn released_sum(&self) -> &[f64] {
        self.released.as_slice()
    }
    /// `(beta_tau, gamma_tau / sqrt(tau))`: the two parts of the current radius.
    pub fn radius(&self) -> (f64, f64) {
        (self.beta, self.gamma)
    }
    /// Rounds played at the last update (`tau`).
    pub fn tau(&self) -> u64 {
        self.tau
    }
    /// The noise mechanism of each release (sigma = 0 when non-private).
    pub fn mechanism(&self) -> GaussianMechanism {
        self.mech
    }

    #[inline]
    fn needs_update(&self) -> bool {
        match self.cfg.kind {
            OfulKind::Oful => self.played > self.tau,
            _ => self.v.det() > self.threshold,
        }
    }

    /// End the episode: release its statistic, recompute theta~, the radius and V_tau^{-1}.
    fn update(&mut self) {
        for j in 0..D {
            self.released[j] += self.mech.release(self.episode[j], &mut self.noise);
        }
        self.episode = SVector::<f64, D>::zeros();
        self.releases += 1;
        self.tau = self.played;
        let det = self.v.det();
        self.det_tau = det;
        self.threshold = (1.0 + self.cfg.c) * det;
        let Some(chol) = Cholesky::new(self.v) else {
            // V >= lambda I is positive definite for finite actions; keep the previous estimate
            // if rounding ever breaks that.
            return;
        };
        let vinv = chol.inverse();
        self.theta = vinv * self.released;
        self.beta = (self.two_log_inv_delta + (det.ln() - self.d_log_lambda).max(0.0)).sqrt()
            + self.sqrt_lambda_s;
        self.gamma = if self.mech.sigma() > 0.0 {
            let denom = match self.cfg.radius {
                RadiusMode::Empirical => self.v.lambda_min(),
                RadiusMode::Theory => {
                    self.cfg.lambda
                        + lambda_min_lower_bound(
                            self.tau as f64,
                            self.cfg.lambda0.unwrap_or(0.0),
                            self.cfg.delta,
                            D,
                        )
                        .max(0.0)
                }
            };
            (self.releases as f64 * self.mech.variance() * self.ff / denom).sqrt()
        } else {
            0.0
        };
        let bt = self.beta + self.gamma;
        self.m = vinv * (bt * bt);
        self.refresh_hot_copies();
    }

    /// `(<theta~, a>, beta~^2 ||a||^2_{V_tau^{-1}})`.
    #[inline(always)]
    #[allow(clippy::needless_range_loop)] // explicit indices over const bounds: fully unrolled
    fn parts(&self, a: &[f64; D]) -> (f64, f64) {
        let (mut lin, mut q) = (0.0, 0.0);
        for i in 0..D {
            lin += self.th[i] * a[i];
            let mut s = 0.0;
            for j in i..D {
                s += self.w[i][j] * a[j];
            }
            q += a[i] * s;
        }
        (lin, q)
    }

    /// The optimistic index `<theta~, a> + beta~ ||a||_{V_tau^{-1}}`.
    pub fn index(&self, a: &[f64]) -> f64 {
        let a: &[f64; D] = a.try_into().expect("an action of length d");
        let (lin, q) = self.parts(a);
        lin + q.max(0.0).sqrt()
    }

    /// One decision of [`ContextualPolicy::choose`] / `choose_lanes`: drop a round that was
    /// never observed (a new decision set replaces it; its context is gone), start a new episode
    /// if due, pick the action with `argmax` and open its one-round commitment.
    #[inline(always)]
    fn decide(&mut self, argmax: impl FnOnce(&mut Self) -> usize) -> usize {
        let best = self.pick(argmax);
        self.gate.commit(best, 1);
        best
    }

    /// [`Self::decide`] without opening the commitment (the caller does).
    #[inline(always)]
    fn pick(&mut self, argmax: impl FnOnce(&mut Self) -> usize) -> usize {
        self.gate.abandon();
        if self.needs_update() {
            self.update();
        }
        argmax(self)
    }

    /// The argmax of a decision set given both ways: the shared-reference test
    /// ([`Self::sync_reference`]), then [`Self::argmax_lanes`]. A lane view that is not this
    /// decision set's transpose is ignored (the row scan [`Self::argmax`] is the same function).
    #[inline(always)]
    fn lanes_argmax(&mut self, actions: &ActionSet<'_>, lanes: &ActionLanes<'_>) -> usize {
        if lanes.d == D && lanes.k * D == actions.features.len() {
            if let Some(r) = &lanes.reference {
                self.sync_reference(r.theta);
                if r.best < lanes.k && lanes.ratios().len() == lanes.k {
                    let (c, slope) = (self.ref_c, self.ref_slope);
                    return self.choose_by_reference(actions.features, lanes, r, c, slope);
                }
            }
            self.argmax_lanes(actions.features, lanes)
        } else {
            self.argmax(actions.features)
        }
    }

    /// Add an admitted reward of action `a` to the statistics: `V += a a^T`, the episode sum
    /// (with the contribution clipped into the unit ball in the guaranteed mode), one round.
    #[inline(always)]
    #[allow(clippy::needless_range_loop)] // explicit indices over const bounds: unrolled
    fn absorb(&mut self, a: &[f64; D], reward: f64) {
        // V += a a^T, entry by entry (the numbers of nalgebra's `ger(1, a, a, 1)`:
        // v_ij + a_j a_i, exact products commute).
        for j in 0..D {
            for i in 0..D {
                self.v[(i, j)] += a[j] * a[i];
            }
        }
        let r = contribution::<D>(self.clip, a, reward);
        // episode += r a (the numbers of nalgebra's `axpy(r, a, 1)`).
        for j in 0..D {
            self.episode[j] += r * a[j];
        }
        self.played += 1;
    }

    /// The optimistic action: `argmax_i <theta~, a_i> + sqrt(max(0, q_i))` over the rows of
    /// `features` (`q_i = beta~^2 ||a_i||^2_{V_tau^{-1}}`), ties to the lowest index: exactly
    /// the action of [`Self::argmax_reference`], which evaluates every index in order.
    /// Transposes the actions into lane groups on the stack, [`ARGMAX_BLOCK`] at a time, and
    /// runs [`Self::argmax_block`] on each block.
    #[inline]
    fn argmax(&self, features: &[f64]) -> usize {
        let mut best = (0usize, f64::NEG_INFINITY);
        let mut buf = [0.0f64; (MAX_DIM + 1) * ARGMAX_BLOCK];
        for (b, block) in features.chunks(ARGMAX_BLOCK * D).enumerate() {
            let n = block.len() / D;
            super::fill_groups::<D>(block, &mut buf);
            let last = (b + 1) * ARGMAX_BLOCK * D >= features.len();
            self.argmax_block(block, &buf, b * ARGMAX_BLOCK, n, last, &mut best);
        }
        best.0
    }

    /// [`Self::argmax`] on a decision set given both ways (`lanes` is `features` transposed).
    /// Not inlined: with the shared-reference test in front of it, it is the slow path, and
    /// its stack frame would otherwise be set up on every decision.
    #[inline(never)]
    fn argmax_lanes(&self, features: &[f64], lanes: &ActionLanes<'_>) -> usize {
        let size = (D + 1) * LANE_GROUP;
        let mut best = (0usize, f64::NEG_INFINITY);
        for (b, (groups, rows)) in lanes
            .groups
            .chunks(size * (ARGMAX_BLOCK / LANE_GROUP))
            .zip(features.chunks(ARGMAX_BLOCK * D))
            .enumerate()
        {
            let last = (b + 1) * ARGMAX_BLOCK >= lanes.k;
            self.argmax_block(
                rows,
                groups,
                b * ARGMAX_BLOCK,
                rows.len() / D,
                last,
                &mut best,
            );
        }
        best.0
    }

    /// Fold actions `first .. first + n` (`n <= ARGMAX_BLOCK`) into `best = (index, computed
    /// index value)`, the running first maximiser. The actions are given as rows (`rows`, `n`
    /// rows of `D`) and in lane groups as in [`ActionLanes`] (at least `ceil(n / LANE_GROUP)`
    /// groups of `(D + 1) * LANE_GROUP` numbers).
    ///
    /// 1. `lin_i = <theta~, a_i>` of every action, by groups (vectorised), and
    ///    `u_i = lin_i + B ||a_i||` with the per-episode bound `B` of
    ///    [`Self::refresh_hot_copies`].
    /// 2. The cut `c = max(best value so far, max_i lin_i)` is at most the final maximum: the
    ///    computed index of action `i` is `fl(lin_i + s_i) >= lin_i` (`s_i >= 0`, rounding is
    ///    monotone).
    /// 3. Action `i` is skipped when `u_i < c - 1e-9 |c| - 1e-300`: then its computed index is
    ///    strictly below `c` (proof at [`OfulPolicy::refresh_hot_copies`]), so it is not the
    ///    first maximiser.
    /// 4. Every other action, in index order, is evaluated exactly as the reference does (its
    ///    row, [`Self::parts`], `lin + q.max(0).sqrt()`) and replaces the best if strictly
    ///    larger: the reference's scan restricted to actions that can win. If only one action
    ///    survives in the only block (`last` and nothing before it), it is the answer without
    ///    any evaluation (all others are strictly below it); the value stored with it is then
    ///    NaN, unused.
    ///
    /// Late in a run `sqrt(q_i)` is small next to the spread of `lin_i` across actions, so
    /// usually one or two actions get the quadratic form and a square root.
    #[inline(always)]
    #[allow(clippy::needless_range_loop)] // explicit indices over const bounds: vectorised
    fn argmax_block(
        &self,
        rows: &[f64],
        groups: &[f64],
        first: usize,
        n: usize,
        last: bool,
        best: &mut (usize, f64),
    ) {
        const G: usize = LANE_GROUP;
        let size = (D + 1) * G;
        let n = n.min(ARGMAX_BLOCK).min(rows.len() / D);
        let groups_n = n.div_ceil(G).min(groups.len() / size);
        // Aligned, so that the mask's loads meet the stores exactly (a load straddling two
        // stores stalls store forwarding).
        let mut upper = Aligned([f64::INFINITY; ARGMAX_BLOCK]);
        let mut top = [best.1; G];
        let bound = self.bound;
        for g in 0..groups_n {
            let grp = &groups[g * size..(g + 1) * size];
            let mut l4 = [0.0f64; G];
            for j in 0..D {
                for l in 0..G {
                    l4[l] += self.th[j] * grp[j * G + l];
                }
            }
            for l in 0..G {
                top[l] = if l4[l] > top[l] { l4[l] } else { top[l] };
                upper.0[(g * G + l) % ARGMAX_BLOCK] = l4[l] + bound * grp[D * G + l].sqrt();
            }
        }
        let mut cut = top[0];
        for &t in &top[1..] {
            cut = if t > cut { t } else { cut };
        }
        let cut = cut - CUT_MARGIN * cut.abs() - 1e-300;
        // A fixed-width mask (vectorises); lanes past `n` are cleared.
        let mut survivors = 0u32;
        for (i, &u) in upper.0.iter().enumerate() {
            // `!(u < cut)`, not `u >= cut`: a NaN bound survives.
            #[allow(clippy::neg_cmp_op_on_partial_ord)]
            let may_win = !(u < cut);
            survivors |= u32::from(may_win) << i;
        }
        survivors &= (1u32 << n) - 1;
        if survivors != 0 && survivors & (survivors - 1) == 0 && first == 0 && last {
            // One action can win and nothing else is compared with it: it is the answer.
            *best = (first + survivors.trailing_zeros() as usize, f64::NAN);
            return;
        }
        while survivors != 0 {
            let i = survivors.trailing_zeros() as usize;
            survivors &= survivors - 1;
            let Some(Ok(a)) = rows.get(i * D..(i + 1) * D).map(<&[f64; D]>::try_from) else {
                continue;
            };
            let (l, q) = self.parts(a);
            let v = l + q.max(0.0).sqrt();
            if v > best.1 {
                *best = (first + i, v);
            }
        }
    }

    /// The textbook argmax (every index computed, scanned in order, ties to the lowest index):
    /// the specification [`Self::argmax`] is tested against.
    #[doc(hidden)]
    pub fn argmax_reference(&self, features: &[f64]) -> usize {
        let mut best = 0;
        let mut best_v = f64::NEG_INFINITY;
        for (i, row) in features.chunks_exact(D).enumerate() {
            let Ok(a) = <&[f64; D]>::try_from(row) else {
                continue;
            };
            let (lin, q) = self.parts(a);
            let v = lin + q.max(0.0).sqrt();
            if v > best_v {
                best = i;
                best_v = v;
            }
        }
        best
    }

    /// [`Self::argmax`] for a decision set (tests and benches).
    #[doc(hidden)]
    pub fn argmax_of(&self, features: &[f64]) -> usize {
        self.argmax(features)
    }

    /// [`Self::argmax`] on a transposed decision set (tests and benches).
    #[doc(hidden)]
    pub fn argmax_lanes_of(&self, features: &[f64], lanes: &ActionLanes<'_>) -> usize {
        self.argmax_lanes(features, lanes)
    }
}

/// The coefficient `r` of an admitted reward's contribution `r a` to the episode sum: the
/// reward itself, or (`clip`, the guaranteed mode) the contribution clipped into the unit ball,
/// `|r| <= 1` and `a` scaled by `1 / max(1, ||a||)`.
#[inline(always)]
fn contribution<const D: usize>(clip: bool, a: &[f64; D], reward: f64) -> f64 {
    if clip {
        OFUL_BOUNDARY.clip(reward) / SVector::<f64, D>::from_column_slice(a).norm().max(1.0)
    } else {
        reward
    }
}

/// A cache-line aligned array.
#[repr(C, align(64))]
struct Aligned<T>(T);

/// Actions per block of [`OfulPolicy::argmax`] (stack buffers: no allocation for any `k`).
const ARGMAX_BLOCK: usize = 16;

/// Relative margin of the skip test of [`OfulPolicy::argmax_block`] (on the cut, and on the
/// bound `B`): far above the few ulps of rounding it must cover (`~1e-15`), far below any gap
/// that matters for pruning.
const CUT_MARGIN: f64 = 1e-9;

/// Policies per [`Pair`]: the two lanes of an SSE2 register.
const LANES: usize = 2;

/// The per-round state of two policies of an [`OfulBatch`] and the per-episode constants
/// their rounds read, lane by lane (lane `l` of pair `b` is policy `2 b + l`): the common
/// round of both (the `det V` test, the reward's products) runs on both lanes at once.
#[derive(Debug, Clone, Copy)]
struct Pair<const D: usize> {
    /// `V`; only the upper triangle (`i <= j`) is kept up to date (see [`OfulBatch`]).
    v: [[[f64; LANES]; D]; D],
    episode: [[f64; LANES]; D],
    played: [u64; LANES],
    threshold: [f64; LANES],
    ref_c: [f64; LANES],
    slope: [[f64; 3]; LANES],
    /// The policy's reward boundary and clipping (an index into [`OfulBatch`]'s classes).
    /// The last pair of an odd number of policies has an idle lane: threshold `inf`, the class
    /// of the other lane, never chosen for, never written back.
    class: [usize; LANES],
}

impl<const D: usize> Pair<D> {
    /// `det V` of both lanes: nalgebra's closed form for `d <= 3` (`Matrix::determinant`) on
    /// the mirrored upper triangle, lane by lane.
    #[inline(always)]
    fn det(&self) -> [f64; LANES] {
        let mut out = [0.0; LANES];
        for (l, out) in out.iter_mut().enumerate() {
            let s = |i: usize, j: usize| self.v[i.min(j)][i.max(j)][l];
            *out = match D {
                1 => s(0, 0),
                2 => s(0, 0) * s(1, 1) - s(1, 0) * s(0, 1),
                _ => {
                    let minor_m12_m23 = s(1, 1) * s(2, 2) - s(2, 1) * s(1, 2);
                    let minor_m11_m23 = s(1, 0) * s(2, 2) - s(2, 0) * s(1, 2);
                    let minor_m11_m22 = s(1, 0) * s(2, 1) - s(2, 0) * s(1, 1);
                    s(0, 0) * minor_m12_m23 - s(0, 1) * minor_m11_m23 + s(0, 2) * minor_m11_m22
                }
            };
        }
        out
    }

    /// Add an action's products to lane `l`: `outer[i][j] = a[j] a[i]` (`i <= j`) and
    /// `ra[j] = r a[j]`.
    #[inline(always)]
    #[allow(clippy::needless_range_loop)] // explicit indices over const bounds: unrolled
    fn absorb(&mut self, l: usize, outer: &[[f64; D]; D], ra: &[f64; D]) {
        for i in 0..D {
            for j in i..D {
                self.v[i][j][l] += outer[i][j];
            }
            self.episode[i][l] += ra[i];
        }
        self.played[l] += 1;
    }

    /// [`Self::absorb`] of the same products on both lanes.
    #[inline(always)]
    #[allow(clippy::needless_range_loop)] // explicit indices over const bounds: unrolled
    fn absorb_both(&mut self, outer: &[[f64; D]; D], ra: &[f64; D]) {
        for i in 0..D {
            for j in i..D {
                for l in 0..LANES {
                    self.v[i][j][l] += outer[i][j];
                }
            }
            for l in 0..LANES {
                self.episode[i][l] += ra[i];
            }
        }
        for l in 0..LANES {
            self.played[l] += 1;
        }
    }
}

/// The products one admitted reward adds to a policy: `a a^T` (upper triangle, as
/// [`OfulPolicy::absorb`] computes them: `a[j] a[i]`) and `r a`, `r` the contribution.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // explicit indices over const bounds: unrolled
fn products<const D: usize>(clip: bool, a: &[f64; D], reward: f64) -> ([[f64; D]; D], [f64; D]) {
    let r = contribution::<D>(clip, a, reward);
    let mut outer = [[0.0; D]; D];
    let mut ra = [0.0; D];
    for i in 0..D {
        for j in i..D {
            outer[i][j] = a[j] * a[i];
        }
        ra[i] = r * a[i];
    }
    (outer, ra)
}

/// The OFUL-family policies of one run (`d <= 3`, `rs_oful` / `adac_oful`) driven together: the run loop's batched path ([`super::simulate_contextual`]).
///
/// One pass over the policies per round, statically dispatched, with each policy's round
/// state (`V`, the episode sum, the round count) and the per-episode constants its round reads
/// (the switching threshold, the shared-reference constants) side by side in one [`Hot`]
/// record. Per policy, as [`ContextualPolicy::play`]: the `det V` test and, when due, the
/// policy's own [`OfulPolicy::update`] (its state is written back first, the new constants
/// read after); the shared-reference test of [`OfulPolicy::sync_reference`], otherwise the
/// policy's own argmax; the admitted reward's products. The round's reference action is
/// admitted once per (boundary, clipping) class and its products `a a^T`, `r a` computed
/// once for all the policies of the class that chose it.
///
/// Every number is produced by the same operations in the same order as one `play` call per
/// policy: `V` is exactly symmetric (both triangles receive the same products, which commute
/// exactly), so the upper triangle and nalgebra's closed-form determinant on its mirror give
/// the same `det V`; sums are per policy and per entry. Decisions and outputs are therefore
/// bit-identical, which the tests check against the one-at-a-time loop. [`Self::finish`]
/// writes the state back into the policies, which then equal policies played one call at a
/// time (the gate ends with no open commitment, as after `play`). An anomaly (a refused
/// reward) writes every state back and lets that policy's own `play` produce the error and
/// the state of the one-at-a-time loop.
pub(crate) struct OfulBatch<'a, const D: usize> {
    pols: Vec<&'a mut OfulPolicy<D>>,
    pairs: Vec<Pair<D>>,
    /// The direction the reference constants were computed for (NaN: none yet).
    dir: [f64; D],
    /// The distinct (reward boundary, clipping) pairs of the policies (at most
    /// [`MAX_CLASSES`]; the crate's configurations have two: non-private and guaranteed).
    classes: Vec<(RewardBoundary, bool)>,
}

/// Most distinct (boundary, clipping) pairs in one [`OfulBatch`].
const MAX_CLASSES: usize = 4;

impl<'a, const D: usize> OfulBatch<'a, D>
where
    SMatrix<f64, D, D>: SquareOps,
{
    /// The batch over `policies`, or `None` when the batched path does not apply (another
    /// policy type, `d > 3`, plain OFUL, more than [`MAX_CLASSES`] boundaries, a
    /// non-symmetric `V`); the caller then plays them one at a time.
    pub(crate) fn new(policies: &'a mut [Box<dyn ContextualPolicy>]) -> Option<Self> {
        if D == 0 || D > 3 || policies.is_empty() {
            return None;
        }
        let pols = policies
            .iter_mut()
            .map(|p| p.as_any_mut()?.downcast_mut::<OfulPolicy<D>>())
            .collect::<Option<Vec<_>>>()?;
        let mut classes: Vec<(RewardBoundary, bool)> = Vec::new();
        let mut class = Vec::with_capacity(pols.len());
        for p in &pols {
            let symmetric = (0..D).all(|i| (0..D).all(|j| p.v[(i, j)] == p.v[(j, i)]));
            if p.cfg.kind == OfulKind::Oful || !symmetric {
                return None;
            }
            let key = (p.gate.boundary(), p.clip);
            class.push(match classes.iter().position(|c| *c == key) {
                Some(c) => c,
                None if classes.len() < MAX_CLASSES => {
                    classes.push(key);
                    classes.len() - 1
                }
                None => return None,
            });
        }
        let idle = Pair {
            v: [[[0.0; LANES]; D]; D],
            episode: [[0.0; LANES]; D],
            played: [0; LANES],
            threshold: [f64::INFINITY; LANES],
            // An idle lane passes the gap test (so its pair can take the common round) and
            // absorbs what it is given, unread.
            ref_c: [0.0; LANES],
            slope: [infinity3(); LANES],
            class: [0; LANES],
        };
        let mut b = OfulBatch {
            pairs: vec![idle; pols.len().div_ceil(LANES)],
            pols,
            dir: [f64::NAN; D],
            classes,
        };
        for (p, c) in class.into_iter().enumerate() {
            let pair = &mut b.pairs[p / LANES];
            if p % LANES == 0 {
                // Lanes that no later policy fills stay idle with this policy's class, so that
                // the pair can still share the reference action's products.
                pair.class = [c; LANES];
            }
            pair.class[p % LANES] = c;
        }
        for p in 0..b.pols.len() {
            // `play` starts by dropping an unobserved round.
            b.pols[p].gate.abandon();
            b.load(p);
        }
        Some(b)
    }

    /// Write policy `p`'s round state back into it.
    fn store(&mut self, p: usize) {
        let (pol, h, l) = (&mut *self.pols[p], &self.pairs[p / LANES], p % LANES);
        for i in 0..D {
            for j in i..D {
                pol.v[(i, j)] = h.v[i][j][l];
                pol.v[(j, i)] = h.v[i][j][l];
            }
            pol.episode[i] = h.episode[i][l];
        }
        pol.played = h.played[l];
    }

    /// Read policy `p`'s per-episode constants (after an update or for a new direction).
    fn load_constants(&mut self, p: usize) {
        let (pol, h, l) = (&mut *self.pols[p], &mut self.pairs[p / LANES], p % LANES);
        if self.dir.iter().all(|x| !x.is_nan()) {
            pol.sync_reference(&self.dir);
        }
        h.threshold[l] = pol.threshold;
        h.ref_c[l] = pol.ref_c;
        h.slope[l] = pol.ref_slope;
    }

    /// Read policy `p`'s whole state (after it was changed through the policy itself).
    fn load(&mut self, p: usize) {
        let (pol, h, l) = (&*self.pols[p], &mut self.pairs[p / LANES], p % LANES);
        for i in 0..D {
            for j in 0..D {
                h.v[i][j][l] = pol.v[(i, j)];
            }
            h.episode[i][l] = pol.episode[i];
        }
        h.played[l] = pol.played;
        self.load_constants(p);
    }

    /// Write every policy's state back (call once the run is over, or failed).
    pub(crate) fn finish(&mut self) {
        for p in 0..self.pols.len() {
            self.store(p);
        }
    }

    /// One round of every policy: `chosen[p]` receives policy `p`'s action.
    ///
    /// # Errors
    /// As [`ContextualPolicy::play`] of the first policy whose reward is refused.
    #[allow(clippy::needless_range_loop)] // lanes index several per-lane arrays
    pub(crate) fn play_round(
        &mut self,
        t: u64,
        actions: &ActionSet<'_>,
        lanes: &ActionLanes<'_>,
        means: &[f64],
        noise: f64,
        chosen: &mut [usize],
    ) -> Result<()> {
        let consistent = lanes.d == D && lanes.k * D == actions.features.len();
        let reference = lanes.reference.as_ref().filter(|r| {
            consistent && r.theta.len() == D && r.best < lanes.k && r.ratios.len() == lanes.k
        });
        if let Some(r) = reference
            && r.theta.iter().zip(&self.dir).any(|(a, b)| a != b)
        {
            self.dir.copy_from_slice(r.theta);
            for p in 0..self.pols.len() {
                self.load_constants(p);
            }
        }
        let row = |i: usize| -> Option<&[f64; D]> {
            actions.features.get(i * D..(i + 1) * D)?.try_into().ok()
        };
        // The reference action's reward and products, once per class (`None`: no reference,
        // or refused: every policy then takes its own path below).
        let mut shared = [None; MAX_CLASSES];
        if let Some((r, (a, &m))) =
            reference.and_then(|r| Some((r, row(r.best).zip(means.get(r.best))?)))
        {
            for (c, &(boundary, clip)) in self.classes.iter().enumerate() {
                shared[c] = boundary
                    .admit(m + noise)
                    .ok()
                    .map(|reward| (r.best, products::<D>(clip, a, reward)));
            }
        }
        let n = self.pols.len();
        for b in 0..self.pairs.len() {
            let det = self.pairs[b].det();
            let pair = &self.pairs[b];
            let due = [det[0] > pair.threshold[0], det[1] > pair.threshold[1]];
            // Both lanes' common round: no episode ends, the gap test passes for both and the
            // reference action's products are the same for both (one class).
            if !(due[0] | due[1])
                && let Some(r) = reference
                && pair.class[0] == pair.class[1]
                && let Some((_, (outer, ra))) = &shared[pair.class[0]]
                && (0..LANES).all(|l| r.gap > pair.ref_c[l] * r.max_norm + 1e-300)
            {
                self.pairs[b].absorb_both(outer, ra);
                for c in chosen.iter_mut().skip(b * LANES).take(LANES) {
                    *c = r.best;
                }
                continue;
            }
            for l in 0..LANES {
                let p = b * LANES + l;
                if p >= n {
                    break;
                }
                // Policy by policy, as the one-at-a-time loop: its episode, then its round.
                if due[l] {
                    self.store(p);
                    self.pols[p].update();
                    self.load(p);
                }
                let h = &self.pairs[b];
                let i = match reference {
                    Some(r) => self.pols[p].choose_by_reference(
                        actions.features,
                        lanes,
                        r,
                        h.ref_c[l],
                        h.slope[l],
                    ),
                    None if consistent => self.pols[p].argmax_lanes(actions.features, lanes),
                    None => self.pols[p].argmax(actions.features),
                };
                let class = h.class[l];
                match &shared[class] {
                    Some((s, (outer, ra))) if *s == i => self.pairs[b].absorb(l, outer, ra),
                    _ => {
                        let (boundary, clip) = self.classes[class];
                        let own = row(i).zip(means.get(i)).and_then(|(a, &m)| {
                            let reward = boundary.admit(m + noise).ok()?;
                            Some(products::<D>(clip, a, reward))
                        });
                        match own {
                            Some((outer, ra)) => self.pairs[b].absorb(l, &outer, &ra),
                            None => {
                                // The policy's own round gives the error (and the state) of
                                // the one-at-a-time loop.
                                self.finish();
                                let played = self.pols[p].play(t, actions, lanes, means, noise);
                                self.load(p);
                                chosen[p] = played?;
                                continue;
                            }
                        }
                    }
                }
                chosen[p] = i;
            }
        }
        Ok(())
    }
}

impl<const D: usize> ContextualPolicy for OfulPolicy<D>
where
    SMatrix<f64, D, D>: SquareOps,
{
    fn guarantee(&self) -> PrivacyGuarantee {
        guarantee(&self.cfg)
    }

    fn dim(&self) -> usize {
        D
    }
    fn max_action_norm(&self) -> f64 {
        OFUL_MAX_ACTION_NORM
    }
    fn boundary(&self) -> RewardBoundary {
        self.gate.boundary()
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }

    fn snapshot(&self) -> Result<crate::snapshot::Snapshot> {
        let st = OfulSnap { d: D, policy: self };
        crate::snapshot::Snapshot::new(Setting::Contextual, self.cfg.kind(), &st)
    }

    #[inline]
    fn choose(&mut self, _t: u64, actions: &ActionSet<'_>) -> usize {
        debug_assert_eq!(actions.d, D);
        self.decide(|p| p.argmax(actions.features))
    }

    #[inline]
    fn choose_lanes(&mut self, _t: u64, actions: &ActionSet<'_>, lanes: &ActionLanes<'_>) -> usize {
        debug_assert_eq!(actions.d, D);
        debug_assert_eq!(lanes.d, D);
        self.decide(|p| p.lanes_argmax(actions, lanes))
    }

    #[inline]
    fn play(
        &mut self,
        _t: u64,
        actions: &ActionSet<'_>,
        lanes: &ActionLanes<'_>,
        means: &[f64],
        noise: f64,
    ) -> Result<usize> {
        let i = self.pick(|p| p.lanes_argmax(actions, lanes));
        let row = actions.features.get(i * D..(i + 1) * D);
        let (Some(&m), Some(Ok(a))) = (means.get(i), row.map(<&[f64; D]>::try_from)) else {
            self.gate.commit(i, 1);
            return Err(Error::Protocol(format!(
                "chose action {i} of a round with {} means and {} actions of dimension {D}",
                means.len(),
                actions.features.len() / D
            )));
        };
        // Gate::commit_admit leaves the round open on a refused reward.
        let reward = self.gate.commit_admit(i, m + noise)?;
        self.absorb(a, reward);
        Ok(i)
    }

    #[inline]
    #[allow(clippy::needless_range_loop)] // explicit indices over const bounds: unrolled
    fn observe(&mut self, actions: &ActionSet<'_>, arm: usize, reward: f64) -> Result<()> {
        if actions.d != D || arm >= actions.features.len() / D.max(1) {
            return Err(Error::Protocol(format!(
                "observed action {arm} of a decision set of {} actions of dimension {} (the policy has d = {D})",
                actions.features.len() / actions.d.max(1),
                actions.d
            )));
        }
        // Gate::admit changes nothing on error.
        let reward = self.gate.admit(arm, reward)?;
        let row = actions.action(arm);
        let Ok(a) = <&[f64; D]>::try_from(row) else {
            unreachable!("an action of length d = {D} (checked above)");
        };
        self.absorb(a, reward);
        Ok(())
    }
}

impl crate::config::Config for OfulConfig {
    fn validate(&mut self) -> crate::error::Result<()> {
        OfulConfig::validate(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chi2_and_g_values() {
        // spec §4.3: g is negative at 1e5 (about -450) and positive at 1e6 (about 1.5e4).
        let g5 = lambda_min_lower_bound(1e5, 0.1, 1e-3, 3);
        let g6 = lambda_min_lower_bound(1e6, 0.1, 1e-3, 3);
        assert!((-470.0..-430.0).contains(&g5), "{g5}");
        assert!((1.4e4..1.6e4).contains(&g6), "{g6}");
        assert!((chi2_tail(3, 1.0) - 3.0).abs() < 1e-12);
    }

    /// The fast argmax (rows and lanes) against the textbook scan: random policy states driven
    /// through real episodes, random and adversarial decision sets (exact ties, near-ties one
    /// ulp apart, NaN, zero and huge actions, every size around the block and group edges).
    fn check_argmax<const D: usize>(seed: u64, rounds: usize)
    where
        SMatrix<f64, D, D>: SquareOps,
    {
        use rand::{RngExt, SeedableRng};
        use rand_distr::{Distribution, StandardNormal};
        let mut rng = SimRng::seed_from_u64(seed);
        let mut cfg = OfulConfig::paper(OfulKind::AdacOful, 1.0);
        cfg.mode = PrivacyMode::Reproduction;
        let mut pol = OfulPolicy::<D>::new(cfg, 1_000_000, seed).unwrap();
        let (mut buf, mut buf2) = (Vec::new(), Vec::new());
        let (mut checked, mut skipped_some, mut passed) = (0usize, false, 0usize);
        for round in 0..rounds {
            let k = [1, 2, 3, 4, 5, 7, 10, 15, 16, 17, 31, 33][rng.random_range(0..12)];
            let mut f: Vec<f64> = (0..k * D)
                .map(|_| {
                    let z: f64 = StandardNormal.sample(&mut rng);
                    0.5 + 0.3 * z
                })
                .collect();
            match round % 7 {
                // exact ties: copies of one action
                1 if k > 2 => {
                    let (a, b) = (rng.random_range(0..k), rng.random_range(0..k));
                    let row: Vec<f64> = f[a * D..(a + 1) * D].to_vec();
                    f[b * D..(b + 1) * D].copy_from_slice(&row);
                }
                // near-ties: one coordinate one ulp away
                2 if k > 2 => {
                    let (a, b) = (rng.random_range(0..k), rng.random_range(0..k));
                    let row: Vec<f64> = f[a * D..(a + 1) * D].to_vec();
                    f[b * D..(b + 1) * D].copy_from_slice(&row);
                    let j = b * D + rng.random_range(0..D);
                    f[j] = f64::from_bits(f[j].to_bits() + 1);
                }
                3 => {
                    let i = rng.random_range(0..k * D);
                    f[i] = [f64::NAN, 0.0, 1e150, -1e150, 1e-300][rng.random_range(0..5)];
                }
                4 => {
                    let i = rng.random_range(0..k);
                    f[i * D..(i + 1) * D].fill(0.0);
                }
                _ => {}
            }
            if pol.needs_update() {
                pol.update();
            }
            let want = pol.argmax_reference(&f);
            assert_eq!(pol.argmax_of(&f), want, "rows, round {round}, k {k}: {f:?}");
            let set = ActionSet {
                d: D,
                k,
                features: &f,
            };
            let lanes = ActionLanes::transpose(&set, &mut buf);
            assert_eq!(
                pol.argmax_lanes_of(&f, &lanes),
                want,
                "lanes, round {round}, k {k}"
            );
            // The shared-reference test in front, along directions at every distance from
            // theta~ (itself, a few ulps off, near, far, non-finite).
            let th = pol.th;
            let scale = [0.0, 1e-15, 1e-6, 1e-3, 1e-1, 1.0][rng.random_range(0..6)];
            let mut dir: Vec<f64> = th
                .iter()
                .map(|&x| {
                    let z: f64 = StandardNormal.sample(&mut rng);
                    x + scale * z
                })
                .collect();
            if round % 11 == 5 {
                dir[rng.random_range(0..D)] = [f64::NAN, f64::INFINITY][rng.random_range(0..2)];
            }
            let with_ref = ActionLanes::transpose_with_reference(&set, &mut buf2, &dir);
            let r = with_ref.reference.clone().expect("a reference of length d");
            assert_eq!(
                pol.lanes_argmax(&set, &with_ref),
                want,
                "reference at {scale}, round {round}, k {k}: {r:?}"
            );
            passed += usize::from(r.gap > pol.ref_c * r.max_norm + 1e-300);
            checked += 1;
            // Drive the policy on with finite actions so its state (episodes, radius) evolves.
            if f.iter().all(|x| x.is_finite() && x.abs() < 1e3) {
                let i = pol.choose_lanes(round as u64, &set, &lanes);
                assert_eq!(i, want);
                let r: f64 = StandardNormal.sample(&mut rng);
                pol.observe(&set, i, r).unwrap();
            }
            skipped_some |= pol.bound.is_finite();
        }
        assert_eq!(checked, rounds);
        assert!(skipped_some, "the skip bound was never finite");
        assert!(
            passed > rounds / 20,
            "the reference test passed {passed} times"
        );
    }

    #[test]
    fn argmax_is_the_reference_scan() {
        check_argmax::<1>(1, 3_000);
        check_argmax::<2>(2, 3_000);
        check_argmax::<3>(3, 20_000);
        check_argmax::<5>(5, 3_000);
        check_argmax::<16>(16, 1_000);
    }

    /// The skip test's margins: an action whose index is within a few ulps of the best (above
    /// or below) is chosen exactly as the reference chooses.
    #[test]
    fn skip_bound_is_exact_at_the_edge() {
        let mut cfg = OfulConfig::paper(OfulKind::RsOful, f64::INFINITY);
        cfg.mode = PrivacyMode::Guaranteed;
        let mut pol = OfulPolicy::<3>::new(cfg, 1000, 1).unwrap();
        // A frozen state: theta~ = e_1, m = 1e-6 I.
        pol.theta = SVector::<f64, 3>::new(1.0, 0.0, 0.0);
        pol.m = SMatrix::<f64, 3, 3>::identity() * 1e-6;
        pol.refresh_hot_copies();
        assert!(pol.bound > 1e-3 && pol.bound < 1.1e-3, "{}", pol.bound);
        let mut buf = Vec::new();
        for ulps in 0..64u64 {
            // action 0: index 1 + 1e-3; action 1: lin chosen so that its index is within
            // `ulps` of action 0's from below or above.
            let best = 1.0 + 1e-3;
            let lin1 = f64::from_bits((best - 1e-3 * 0.5f64.sqrt()).to_bits() + ulps);
            let f = [1.0, 0.0, 0.0, lin1, 0.0, 0.5f64.sqrt(), 0.0, 0.0, 0.0];
            let want = pol.argmax_reference(&f);
            assert_eq!(pol.argmax_of(&f), want, "{ulps}");
            let set = ActionSet {
                d: 3,
                k: 3,
                features: &f,
            };
            let lanes = ActionLanes::transpose(&set, &mut buf);
            assert_eq!(pol.argmax_lanes_of(&f, &lanes), want, "{ulps}");
            // The shared-reference test along theta~ itself (e = 0): the gap is the lin gap.
            let th = pol.th;
            let lanes = ActionLanes::transpose_with_reference(&set, &mut buf, &th);
            assert_eq!(pol.lanes_argmax(&set, &lanes), want, "{ulps} (reference)");
        }
    }

    /// The gap at which the shared-reference test starts to pass is above `B ||a||` by no more
    /// than its margins, and the test never passes below it.
    #[test]
    fn reference_test_edge() {
        let mut cfg = OfulConfig::paper(OfulKind::RsOful, f64::INFINITY);
        cfg.mode = PrivacyMode::Guaranteed;
        let mut pol = OfulPolicy::<3>::new(cfg, 1000, 1).unwrap();
        pol.theta = SVector::<f64, 3>::new(1.0, 0.0, 0.0);
        pol.m = SMatrix::<f64, 3, 3>::identity() * 1e-6;
        pol.refresh_hot_copies();
        let b = pol.bound;
        let mut buf = Vec::new();
        let th = pol.th;
        // Two unit actions along e_1 with values 1 and 1 - g: the policy's true indices are
        // 1 + 1e-3 and 1 - g + 1e-3, so action 0 wins for every g > 0, but the test may only
        // claim it when g exceeds its bound (2e + B) N = B.
        let mut passes = vec![];
        for g in [0.5 * b, 0.999 * b, 1.001 * b, 1.01 * b, 2.0 * b] {
            let f = [1.0, 0.0, 0.0, 1.0 - g, 0.0, 0.0];
            let set = ActionSet {
                d: 3,
                k: 2,
                features: &f,
            };
            let lanes = ActionLanes::transpose_with_reference(&set, &mut buf, &th);
            let r = lanes.reference.clone().unwrap();
            assert_eq!(r.best, 0);
            pol.sync_reference(&th);
            passes.push(r.gap > pol.ref_c * r.max_norm + 1e-300);
            assert_eq!(pol.lanes_argmax(&set, &lanes), 0);
        }
        assert_eq!(passes, [false, false, true, true, true]);
    }

    /// Whether the slope test alone (not the gap test) passes for `lanes`.
    fn slope_only(pol: &OfulPolicy<3>, lanes: &ActionLanes<'_>) -> bool {
        let r = lanes.reference.as_ref().unwrap();
        let [c1sq, c2, c3] = pol.ref_slope;
        r.gap <= pol.ref_c * r.max_norm + 1e-300
            && r.gap > c2 * r.max_norm + c3
            && lanes.ratio2() > c1sq
    }

    /// The slope test on late-run states (small radius, `S` of condition number up to 1e6,
    /// `theta~` at distances 0 to 1e-2 from the reference direction), on the paper's decision
    /// sets and on adversarial ones (exact and one-ulp copies of the reference maximiser, an
    /// action on the ray through it): the choice is always the textbook scan's, and the slope
    /// test alone settles a good share of the decisions.
    #[test]
    fn slope_test_is_exact_on_late_states() {
        use rand::{RngExt, SeedableRng};
        use rand_distr::{Distribution, StandardNormal};
        let mut rng = SimRng::seed_from_u64(12);
        let cfg = OfulConfig::paper(OfulKind::RsOful, f64::INFINITY);
        let mut pol = OfulPolicy::<3>::new(cfg, 1000, 1).unwrap();
        let mut buf = Vec::new();
        let normal = |rng: &mut SimRng| -> f64 { StandardNormal.sample(rng) };
        let (mut slope, mut screened, rounds) = (0usize, 0usize, 30_000usize);
        let theta_ref = [0.6, -0.48, 0.64];
        for round in 0..rounds {
            if round % 50 == 0 {
                // A random state: m = scale * Q diag(1, c, c^2) Q^T (Q from a QR of a Gaussian).
                let g = SMatrix::<f64, 3, 3>::from_fn(|_, _| normal(&mut rng));
                let q = g.qr().q();
                let c = 10f64.powf(-rng.random_range(0.0..3.0));
                let scale = 10f64.powf(-rng.random_range(2.0..8.0));
                let diag =
                    SMatrix::<f64, 3, 3>::from_diagonal(&SVector::<f64, 3>::new(1.0, c, c * c));
                pol.m = q * diag * q.transpose() * scale;
                let e = [0.0, 1e-9, 1e-5, 1e-3, 1e-2][rng.random_range(0..5)];
                pol.theta = SVector::<f64, 3>::from_fn(|j, _| theta_ref[j] + e * normal(&mut rng));
                pol.refresh_hot_copies();
            }
            let k = [2, 3, 4, 5, 10, 17, 33][rng.random_range(0..7)];
            let m = 1.0 / 3f64.sqrt();
            let mut f: Vec<f64> = (0..k * 3)
                .map(|_| m + 0.1f64.sqrt() * normal(&mut rng))
                .collect();
            let vals: Vec<f64> = f
                .chunks_exact(3)
                .map(|a| a.iter().zip(&theta_ref).map(|(x, t)| x * t).sum())
                .collect();
            let best = (0..k).fold(0, |b, i| if vals[i] > vals[b] { i } else { b });
            let other = (best + 1 + rng.random_range(0..k - 1)) % k;
            let ab: Vec<f64> = f[best * 3..best * 3 + 3].to_vec();
            match round % 5 {
                // an exact copy of the maximiser
                1 => f[other * 3..other * 3 + 3].copy_from_slice(&ab),
                // one ulp off the maximiser in one coordinate
                2 => {
                    f[other * 3..other * 3 + 3].copy_from_slice(&ab);
                    let j = other * 3 + rng.random_range(0..3);
                    f[j] = f64::from_bits(f[j].to_bits() + rng.random_range(1..3));
                }
                // on the ray through the maximiser, a hair shorter or longer
                3 => {
                    let t = 1.0 + rng.random_range(-1e-3..1e-3);
                    for j in 0..3 {
                        f[other * 3 + j] = ab[j] * t;
                    }
                }
                _ => {}
            }
            let set = ActionSet {
                d: 3,
                k,
                features: &f,
            };
            let want = pol.argmax_reference(&f);
            let lanes = ActionLanes::transpose_with_reference(&set, &mut buf, &theta_ref);
            pol.sync_reference(&theta_ref);
            slope += usize::from(slope_only(&pol, &lanes));
            let r = lanes.reference.as_ref().unwrap();
            let [c1sq, c2, c3] = pol.ref_slope;
            screened += usize::from(
                r.gap <= pol.ref_c * r.max_norm + 1e-300
                    && r.gap > c2 * r.max_norm + c3
                    && lanes.ratio2() <= c1sq,
            );
            assert_eq!(pol.lanes_argmax(&set, &lanes), want, "round {round}: {f:?}");
        }
        assert!(screened > 200, "the screened scan ran {screened} times");
        assert!(
            slope > rounds / 20,
            "the slope test alone passed {slope} times"
        );
    }

    /// The slope test's edge: two actions on one ray, `a_0 = -e_1` and `a_1 = (1 + t) a_0`,
    /// `S = s I`, `theta_ref = w e_1` and `theta~ = (w - e) e_1` (the estimate's error favours
    /// `a_1`). Then `D / dn = w` and the policy's true margin is
    /// `v_0 - v_1 = t (w - e - sqrt s)`: `a_0` wins exactly when `w > e + sqrt s`. The test
    /// passes just above its constant `(e + B)(1 + 1e-9)`, never where `a_1` wins, and the
    /// choice is always the textbook scan's.
    #[test]
    fn slope_test_edge() {
        let cfg = OfulConfig::paper(OfulKind::RsOful, f64::INFINITY);
        let mut pol = OfulPolicy::<3>::new(cfg, 1000, 1).unwrap();
        let (s, e, t): (f64, f64, f64) = (1e-6, 1e-4, 0.01);
        let f = [-1.0, 0.0, 0.0, -(1.0 + t), 0.0, 0.0];
        let set = ActionSet {
            d: 3,
            k: 2,
            features: &f,
        };
        let edge = e + s.sqrt();
        let mut buf = Vec::new();
        let (mut passes, mut chosen) = (vec![], vec![]);
        for q in [0.5, 0.999, 0.999_999, 1.01, 2.0] {
            let w = q * edge;
            let th = [w, 0.0, 0.0];
            pol.theta = SVector::<f64, 3>::new(w - e, 0.0, 0.0);
            pol.m = SMatrix::<f64, 3, 3>::identity() * s;
            pol.refresh_hot_copies();
            let lanes = ActionLanes::transpose_with_reference(&set, &mut buf, &th);
            pol.sync_reference(&th);
            passes.push(slope_only(&pol, &lanes));
            let want = pol.argmax_reference(&f);
            assert_eq!(pol.lanes_argmax(&set, &lanes), want, "{q}");
            chosen.push(want);
        }
        assert_eq!(chosen, [1, 1, 1, 0, 0]);
        assert_eq!(passes, [false, false, false, true, true]);
    }

    /// `play` (the run loop's fused round) is `choose_lanes` then `observe`: the same actions
    /// and, at the end, the same state, for every family member and both privacy modes.
    #[test]
    fn play_is_choose_then_observe() {
        use rand::SeedableRng;
        use rand_distr::{Distribution, StandardNormal};
        for (kind, rho, mode) in [
            (OfulKind::Oful, f64::INFINITY, PrivacyMode::Guaranteed),
            (OfulKind::RsOful, f64::INFINITY, PrivacyMode::Guaranteed),
            (OfulKind::AdacOful, 1.0, PrivacyMode::Guaranteed),
            (OfulKind::AdacOful, 0.1, PrivacyMode::Reproduction),
        ] {
            let mut cfg = OfulConfig::paper(kind, rho);
            cfg.mode = mode;
            let mut a = OfulPolicy::<3>::new(cfg.clone(), 5000, 9).unwrap();
            let mut b = OfulPolicy::<3>::new(cfg, 5000, 9).unwrap();
            let mut rng = SimRng::seed_from_u64(3);
            let theta = [0.6, -0.48, 0.64];
            let mut buf = Vec::new();
            for t in 0..5000u64 {
                let f: Vec<f64> = (0..30)
                    .map(|_| {
                        let z: f64 = StandardNormal.sample(&mut rng);
                        0.577 + 0.316 * z
                    })
                    .collect();
                let means: Vec<f64> = f
                    .chunks_exact(3)
                    .map(|x| x.iter().zip(&theta).map(|(x, t)| x * t).sum())
                    .collect();
                let eta: f64 = StandardNormal.sample(&mut rng);
                let set = ActionSet {
                    d: 3,
                    k: 10,
                    features: &f,
                };
                let lanes = ActionLanes::transpose_with_reference(&set, &mut buf, &theta);
                let i = a.play(t, &set, &lanes, &means, eta).unwrap();
                let j = b.choose_lanes(t, &set, &lanes);
                b.observe(&set, j, means[j] + eta).unwrap();
                assert_eq!(i, j, "{kind:?} round {t}");
            }
            assert_eq!(format!("{a:?}"), format!("{b:?}"), "{kind:?}");
            // A refused reward leaves the round open, as a failed observe does.
            let f = [1.0; 30];
            let set = ActionSet {
                d: 3,
                k: 10,
                features: &f,
            };
            let lanes = ActionLanes::transpose(&set, &mut buf);
            let means = [f64::NAN; 10];
            assert!(a.play(0, &set, &lanes, &means, 0.0).is_err());
            let j = b.choose_lanes(0, &set, &lanes);
            assert!(b.observe(&set, j, f64::NAN).is_err());
            assert_eq!(
                format!("{a:?}"),
                format!("{b:?}"),
                "{kind:?} after a refusal"
            );
            // No mean for the chosen action: an error, not a panic.
            assert!(a.play(0, &set, &lanes, &[], 0.0).is_err());
        }
    }

    /// A test environment: Gaussian actions around `1/sqrt(d)`, `theta*` fixed, Gaussian noise,
    /// and (from round `bad_from` on) a NaN reward noise that every boundary refuses.
    #[derive(Debug)]
    struct TestEnv {
        d: usize,
        k: usize,
        theta: Vec<f64>,
        rng: SimRng,
        features: Vec<f64>,
        means: Vec<f64>,
        eta: f64,
        bad_from: u64,
    }

    impl TestEnv {
        fn new(d: usize, k: usize, seed: u64, bad_from: u64) -> Self {
            use rand::SeedableRng;
            let theta: Vec<f64> = (0..d).map(|j| [0.6, -0.48, 0.64][j % 3]).collect();
            TestEnv {
                d,
                k,
                theta,
                rng: SimRng::seed_from_u64(seed),
                features: vec![0.0; d * k],
                means: vec![0.0; k],
                eta: 0.0,
                bad_from,
            }
        }
    }

    impl super::super::ContextualEnvironment for TestEnv {
        fn dim(&self) -> usize {
            self.d
        }
        fn next_round(&mut self, t: u64) {
            use rand_distr::{Distribution, StandardNormal};
            let m = 1.0 / (self.d as f64).sqrt();
            for x in &mut self.features {
                let z: f64 = StandardNormal.sample(&mut self.rng);
                *x = m + 0.3 * z;
            }
            for (i, mean) in self.means.iter_mut().enumerate() {
                let a = &self.features[i * self.d..(i + 1) * self.d];
                *mean = a.iter().zip(&self.theta).map(|(x, t)| x * t).sum();
            }
            let z: f64 = StandardNormal.sample(&mut self.rng);
            self.eta = if t >= self.bad_from { f64::NAN } else { z };
        }
        fn actions(&self) -> ActionSet<'_> {
            ActionSet {
                d: self.d,
                k: self.k,
                features: &self.features,
            }
        }
        fn means(&self) -> &[f64] {
            &self.means
        }
        fn best_mean(&self) -> f64 {
            self.means.iter().copied().fold(f64::NEG_INFINITY, f64::max)
        }
        fn noise(&self) -> f64 {
            self.eta
        }
        fn reference_theta(&self) -> Option<&[f64]> {
            Some(&self.theta)
        }
    }

    /// Policies of one family set: RS-OFUL and AdaC-OFUL at several rho, one mode.
    fn family<const D: usize>(mode: PrivacyMode, horizon: u64) -> Vec<Box<dyn ContextualPolicy>>
    where
        SMatrix<f64, D, D>: SquareOps,
    {
        let mut out: Vec<Box<dyn ContextualPolicy>> = Vec::new();
        for (s, rho) in [f64::INFINITY, 0.1, 1.0, 10.0, 1e3].into_iter().enumerate() {
            let kind = if rho.is_infinite() {
                OfulKind::RsOful
            } else {
                OfulKind::AdacOful
            };
            let mut cfg = OfulConfig::paper(kind, rho);
            cfg.mode = mode;
            out.push(Box::new(
                OfulPolicy::<D>::new(cfg, horizon, 100 + s as u64).unwrap(),
            ));
        }
        out
    }

    /// The one-at-a-time loop (`play` per policy), the specification of the batched path:
    /// regret per round and the first error.
    fn one_at_a_time(
        env: &mut dyn super::super::ContextualEnvironment,
        pols: &mut [Box<dyn ContextualPolicy>],
        horizon: u64,
    ) -> (Vec<Vec<f64>>, Option<String>) {
        let mut buf = Vec::new();
        let mut regret = vec![0.0; pols.len()];
        let mut rows = vec![vec![]; pols.len()];
        let theta = env.reference_theta().map(<[f64]>::to_vec);
        for t in 0..horizon {
            env.next_round(t);
            let actions = env.actions();
            let lanes = match &theta {
                Some(th) => ActionLanes::transpose_with_reference(&actions, &mut buf, th),
                None => ActionLanes::transpose(&actions, &mut buf),
            };
            for (p, pol) in pols.iter_mut().enumerate() {
                match pol.play(t, &actions, &lanes, env.means(), env.noise()) {
                    Ok(i) => regret[p] += env.best_mean() - env.means()[i],
                    Err(e) => return (rows, Some(e.to_string())),
                }
                rows[p].push(regret[p]);
            }
        }
        (rows, None)
    }

    fn batched_matches<const D: usize>(mode: PrivacyMode, horizon: u64, bad_from: u64)
    where
        SMatrix<f64, D, D>: SquareOps,
    {
        use crate::sim::CheckpointGrid;
        let grid = CheckpointGrid::explicit((1..=horizon).collect()).unwrap();
        let mut a = family::<D>(mode, horizon);
        let mut b = family::<D>(mode, horizon);
        assert!(
            OfulBatch::<D>::new(&mut a).is_some(),
            "the batched path applies"
        );
        let mut out = vec![vec![0.0; grid.points().len()]; a.len()];
        let got = super::super::simulate_contextual(
            &mut TestEnv::new(D, 10, 7, bad_from),
            &mut a,
            &grid,
            &mut out,
        );
        let (want, err) = one_at_a_time(&mut TestEnv::new(D, 10, 7, bad_from), &mut b, horizon);
        match err {
            None => {
                got.unwrap();
                for (p, row) in want.iter().enumerate() {
                    assert!(
                        row.iter()
                            .zip(&out[p])
                            .all(|(x, y)| x.to_bits() == y.to_bits()),
                        "d = {D}, {mode:?}, policy {p}: regret differs"
                    );
                }
            }
            Some(e) => assert_eq!(got.unwrap_err().to_string(), e),
        }
        for (p, (x, y)) in a.iter().zip(&b).enumerate() {
            assert_eq!(
                format!("{x:?}"),
                format!("{y:?}"),
                "d = {D}, {mode:?}, policy {p}: state differs"
            );
        }
    }

    /// The batched run loop is one `play` call per policy: every round's regret bit for bit,
    /// every final state (episodes, Gram matrices, released sums, generators, gates), in both
    /// privacy modes and d = 1, 2, 3; and a refused reward gives the same error and states.
    #[test]
    fn batched_path_is_one_play_per_policy() {
        for mode in [PrivacyMode::Reproduction, PrivacyMode::Guaranteed] {
            batched_matches::<1>(mode, 3000, u64::MAX);
            batched_matches::<2>(mode, 3000, u64::MAX);
            batched_matches::<3>(mode, 20_000, u64::MAX);
            batched_matches::<3>(mode, 500, 321);
        }
        // Not batched: plain OFUL, d > 3.
        let mut cfg = OfulConfig::paper(OfulKind::Oful, f64::INFINITY);
        cfg.mode = PrivacyMode::Guaranteed;
        let mut v: Vec<Box<dyn ContextualPolicy>> =
            vec![Box::new(OfulPolicy::<3>::new(cfg, 10, 1).unwrap())];
        assert!(OfulBatch::<3>::new(&mut v).is_none());
        assert!(OfulBatch::<5>::new(&mut family::<5>(PrivacyMode::Guaranteed, 10)).is_none());
    }

    #[test]
    fn validation_names_fields() {
        let mut c = OfulConfig::paper(OfulKind::AdacOful, -1.0);
        assert!(c.validate().unwrap_err().to_string().contains("rho"));
        c.rho = 1.0;
        c.radius = RadiusMode::Theory;
        assert!(c.validate().unwrap_err().to_string().contains("lambda0"));
        let c = OfulConfig::paper(OfulKind::RsOful, 1.0);
        assert!(c.validate().is_err());
        assert!(c.build(17, 10, 1).is_err() || c.validate().is_err());
        let c = OfulConfig::paper(OfulKind::RsOful, f64::INFINITY);
        let e = c.build(17, 10, 1).unwrap_err().to_string();
        assert!(e.contains("d = 17"), "{e}");
    }
}
