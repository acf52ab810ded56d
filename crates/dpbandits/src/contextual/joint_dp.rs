//! Joint-DP linear contextual bandits over a privately released design matrix: Shariff &
//! Sheffet's algorithm and the Joint-DP adaptation of AdaC-OFUL, both in zCDP form.
//!
//! # Algorithm
//! * **`shariff_sheffet`**: Shariff & Sheffet (NeurIPS 2018), "Differentially Private Contextual
//!   Linear Bandits", Alg. 1 (linear UCB with changing regularisers) with the tree-based
//!   algorithm of their Sec. 4 and its Gaussian-noise variant (Sec. 4.2; their Wishart variant is
//!   not implemented). Every round the row `v_s = (w_s, r_s)` (`w_s = a_s / max(1, ||a_s||)`,
//!   `r_s` clipped to [-1, 1]) enters the Gram tree ([`crate::privacy::GramTree`]) over the
//!   `(d+1) x (d+1)` matrices `v v^T`; its released sum holds `V~ = sum w w^T + N` (top-left block)
//!   and `u~ = sum r w + h` (last column). Round `t` plays
//!   `argmax_a <theta~, a> + beta_t ||a||_{V~_t^{-1}}` (ties: lowest index) with
//!   `V~_t = sum w w^T + N + (lambda + 2 Upsilon) I`, `theta~ = V~_t^{-1} u~`: the shift `2 Upsilon`
//!   makes `V~_t` positive definite w.h.p. (Sec. 4.2: `||N|| <= Upsilon` w.p. `1 - alpha/(2T)`
//!   per round, so `rho_min = lambda + Upsilon`, `rho_max = lambda + 3 Upsilon`), with
//!   `Upsilon = sigma sqrt(2 m) (4 sqrt(d+1) + 2 ln(2T/alpha))` (`sigma` the per-node off-diagonal
//!   scale, `m = L` the tree's levels; the paper's form as we transcribe it, which also dominates
//!   the GOE bound `sqrt(m) sigma (2 sqrt(d+1) + 2 sqrt(ln(2T/alpha)))`). The width is the paper's
//!   (Prop. 4 / Thm 5 form, reward noise 1-sub-Gaussian, `||a|| <= 1`):
//!   `beta_t = sqrt(2 ln(2/alpha) + d ln(rho_max/rho_min + t/(d rho_min))) + S sqrt(rho_max) + gamma_t`,
//!   `gamma_t = sigma sqrt(m_t) (sqrt d + sqrt(2 ln(2T/alpha))) / sqrt(rho_min)` the bound on
//!   `||h||_{H^{-1}}` (`m_t` the p-sums summed, `alpha = delta`). Should `V~_t` still not be
//!   positive definite, `lambda` is added again until it is (post-processing of released values).
//!   At `rho = inf` it is OFUL with the ridge `lambda`.
//! * **`adac_oful_joint`**: the Joint-DP adaptation of AdaC-OFUL that Azize & Basu 2024 sketch in
//!   Sec. V-B2, remark 2 ("Adapting AdaC-OFUL for private contexts": make `theta~` of Alg. 3 line 8
//!   private w.r.t. rewards and contexts by estimating the design matrix privately, as Shariff &
//!   Sheffet do). AdaC-OFUL (`oful/mod.rs`) with `V_t` replaced by the Gram tree's
//!   `V~_t = sum w w^T + N + (lambda + 2 Upsilon) I` (tree over the `d x d` matrices `w w^T`, released
//!   every round); the rarely-switching rule `det V~_t > (1 + C) det V~_tau` reads the released
//!   matrix (its episodes now depend on released values only; the first round is an episode of
//!   its own, as `V_0 = lambda I` makes it in AdaC-OFUL, where the shift would not), each episode's `sum r_s w_s` is
//!   released once at its end with `N(0, (2/rho) I)` exactly as in AdaC-OFUL, and
//!   `theta~ = V~_tau^{-1} (sum of the releases)`. Width: the `beta_t` above without `gamma_t`
//!   (no `h` here) plus AdaC-OFUL's empirical privacy radius
//!   `sqrt(m_tau (2/rho) f_F(d, delta/T) / rho_min)` (`m_tau` episode releases). The paper states the
//!   cost of this adaptation, by a first analysis, as regret `O(sqrt T + sqrt(T/rho))` (remark 2:
//!   "the bottleneck in the problem is the private estimation of the design matrix"); no theorem,
//!   so no bound is drawn.
//!
//! # Privacy
//! * Notion: rho-zCDP, **Joint DP** (Shariff & Sheffet Def. 2; Azize & Basu App. B-D Defs. 7-8):
//!   neighbouring inputs differ in one round's context (decision set) and reward; the protected
//!   output is the actions of every other round. A round's own action depends on its own context
//!   and is shown only to its user (standard DP over contexts forces linear regret, Shariff &
//!   Sheffet Claim 1). Central trust model. Everything a later round reads is post-processing of
//!   the releases below and of that round's own decision set (the billboard lemma, Hsu et al.
//!   2014, as Shariff & Sheffet Sec. 3 use it).
//! * `shariff_sheffet`: the Gram tree over `v = (w, r)`, `||v||^2 <= 2`: one row replaced moves a
//!   p-sum by `Delta_F^2 <= 2 * 2^2 = 8` (Frobenius); each p-sum released with the symmetrised
//!   Gaussian, `sigma^2 = 2^2 L / (2 rho)` off the diagonal and twice that on it, is
//!   `Delta_F^2 / (4 sigma^2) = rho / L`-zCDP (Bun & Steinke Prop. 1.6); a row is in at most
//!   `L = ceil(log2 T) + 1` p-sums, which compose to `rho` (Lemma 2.3; Chan, Shi & Song Thm 3.5).
//!   The worst case is attained by `(a, 1)` against `(-a, 1)` (or `(a, -1)`) for a unit `a`.
//! * `adac_oful_joint`: two releases see a round: the Gram tree over `w` (`||w||^2 <= 1`) at
//!   `rho / 4` (node scale `sigma^2 = L / (2 rho / 4)`), and its episode's `sum r w` with
//!   `N(0, (2/rho) I)`. For one replaced round `(w, r) -> (w', r')` the two divergences add (Bun &
//!   Steinke Lemma 2.3, per pair of inputs): `(rho/8) ||w w^T - w' w'^T||_F^2 + (rho/4)
//!   ||r w - r' w'||^2`. With `p = ||w||`, `q = ||w'||`, `c` the cosine: `||w w^T - w' w'^T||_F^2 =
//!   p^4 + q^4 - 2 p^2 q^2 c^2` and `||r w - r' w'||^2 <= p^2 + q^2 + 2 p q |c|`, so the sum is at
//!   most `(rho/8) (p^4 + q^4 + 2 p^2 + 2 q^2 + 2x(2 - x))` with `x = pq|c| <= 1`, at most
//!   `(rho/8)(1 + 1 + 2 + 2 + 2) = rho`: **rho-zCDP**, attained at `p = q = |c| = 1` (the context
//!   negated, `(a, 1) -> (-a, 1)`, or the reward flipped), where the Gram term vanishes. So the
//!   private design matrix costs no budget beyond AdaC-OFUL's own (the episode noise is AdaC-OFUL's
//!   `2/rho`); it costs regret (the shift and the noise in `V~`). Episode boundaries depend on
//!   released values only, so each round's reward is in exactly one episode release (parallel
//!   composition, Lemma 1 / App. D-B, as in AdaC-OFUL).
//! * Noise (`noise`): `simulation` (default) draws `f64` Gaussians from the seeded noise stream
//!   (simulation-grade); `deployment` keeps the tree's p-sums as exact integers (rows truncated to
//!   the `2^-grid_bits` grid) and releases them with the discrete Gaussian
//!   (`privacy/gram.rs`), and AdaC-OFUL-Joint's episode sums as an exact `LinearSum` released with
//!   the multivariate discrete Gaussian at a public sensitivity `2 (1 + sqrt(d) 2^-39)` (the
//!   weights are private here, so the calibration never reads them), the same per-release rho
//!   (CKS20 Thm 4), from an OS-seeded CSPRNG (deployment-grade, not reproducible).
//!
//! # Parameters
//! `rho > 0` (inf = the non-private limit), `lambda > 0` (ridge; default 1 for
//! `shariff_sheffet`, 0.1 for `adac_oful_joint`), `delta` in (0, 1) (`alpha` of the widths;
//! default 0.01, `adac_oful_joint` 0.001), `s > 0` (bound on `||theta*||`, default 1), `c >= 0`
//! (`adac_oful_joint` only: the switching constant `C`, default 1), `noise` (`simulation` |
//! `deployment`; finite rho only), `grid_bits` (1..=32, default 20).

use super::{ActionSet, ContextualPolicy, ContextualPolicyConfig, OFUL_BOUNDARY, chi2_tail};
use crate::config::{AlgorithmInfo, Setting};
use crate::error::{Error, Result, check};
use crate::privacy::{
    Budget, DEFAULT_GRID_BITS, GaussianMechanism, GramTree, JOINT_ADJACENCY, LinearSum, NoiseGrade,
    NoiseKind, NoiseSource, PrivacyGuarantee, RewardBoundary, TrustModel,
};
use crate::protocol::Gate;
use serde::{Deserialize, Serialize};

/// Registry record of `shariff_sheffet`.
pub const SHARIFF_SHEFFET: AlgorithmInfo = AlgorithmInfo {
    kind: "shariff_sheffet",
    name: "Joint-DP linear UCB (Shariff & Sheffet)",
    setting: Setting::Contextual,
    reference: "Shariff & Sheffet 2018 (NeurIPS), Alg. 1 with the tree-based algorithm and shifted Gaussian noise (Sec. 4.2); zCDP form",
    privacy: "rho-zCDP, Joint DP (central; one round's context and reward protected from the other rounds' actions): Gram-matrix tree, symmetrised Gaussian",
    example: "rho = 1.0",
    source: file!(),
    doc: include_str!("joint_dp.rs"),
    private: true,
    release_keys: crate::config::NOISE_KEYS,
};

/// Registry record of `adac_oful_joint`.
pub const ADAC_OFUL_JOINT: AlgorithmInfo = AlgorithmInfo {
    kind: "adac_oful_joint",
    name: "Joint-DP AdaC-OFUL",
    setting: Setting::Contextual,
    reference: "Azize & Basu 2024, Sec. V-B2 remark 2 (AdaC-OFUL, Alg. 3, with the design matrix estimated privately as in Shariff & Sheffet 2018)",
    privacy: "rho-zCDP, Joint DP (central): Gram-matrix tree at rho/4 + AdaC-OFUL's episode releases at 2/rho, composed per pair to rho",
    example: "rho = 1.0\nlambda = 0.1\ndelta = 0.001",
    source: file!(),
    doc: include_str!("joint_dp.rs"),
    private: true,
    release_keys: crate::config::NOISE_KEYS,
};

/// The smallest budget accepted with `noise = "deployment"` (the integer noise must fit in 128
/// bits).
const MIN_DEPLOYMENT_RHO: f64 = 1e-12;

fn one() -> f64 {
    1.0
}
fn tenth() -> f64 {
    0.1
}
fn default_delta_ss() -> f64 {
    0.01
}
fn default_delta_adac() -> f64 {
    0.001
}
fn default_grid_bits() -> u32 {
    DEFAULT_GRID_BITS
}

/// `kind = "shariff_sheffet"`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShariffSheffetConfig {
    /// zCDP budget (`inf` = the non-private limit).
    pub rho: f64,
    /// Ridge `lambda`.
    #[serde(default = "one")]
    pub lambda: f64,
    /// `alpha` of the widths.
    #[serde(default = "default_delta_ss")]
    pub delta: f64,
    /// Bound `S` on `||theta*||`.
    #[serde(default = "one")]
    pub s: f64,
    /// Noise path.
    #[serde(default)]
    pub noise: NoiseKind,
    /// Deployment grid `2^-grid_bits`.
    #[serde(default = "default_grid_bits")]
    pub grid_bits: u32,
}

/// `kind = "adac_oful_joint"`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdacOfulJointConfig {
    /// zCDP budget (`inf` = the non-private limit).
    pub rho: f64,
    /// Ridge `lambda`.
    #[serde(default = "tenth")]
    pub lambda: f64,
    /// Switching constant `C` (`det V~ > (1 + C) det V~_tau`).
    #[serde(default = "one")]
    pub c: f64,
    /// `alpha` of the widths.
    #[serde(default = "default_delta_adac")]
    pub delta: f64,
    /// Bound `S` on `||theta*||`.
    #[serde(default = "one")]
    pub s: f64,
    /// Noise path.
    #[serde(default)]
    pub noise: NoiseKind,
    /// Deployment grid `2^-grid_bits`.
    #[serde(default = "default_grid_bits")]
    pub grid_bits: u32,
}

/// The parameters both kinds share, for validation and the widths.
struct Common {
    rho: f64,
    lambda: f64,
    delta: f64,
    s: f64,
    noise: NoiseKind,
    grid_bits: u32,
}

fn validate(c: &Common) -> Result<()> {
    check::budget("rho", c.rho)?;
    check::positive("lambda", c.lambda)?;
    check::positive("s", c.s)?;
    if !(c.delta > 0.0 && c.delta < 1.0) {
        return Err(Error::param("delta", c.delta, "a number in (0, 1)"));
    }
    if c.noise == NoiseKind::Deployment && c.rho < MIN_DEPLOYMENT_RHO {
        return Err(Error::param(
            "rho",
            c.rho,
            format!("a budget >= {MIN_DEPLOYMENT_RHO:e} with noise = \"deployment\""),
        ));
    }
    crate::privacy::check_noise(c.noise, c.grid_bits, c.rho.is_finite())
}

impl ShariffSheffetConfig {
    /// Shariff & Sheffet at `rho` with the defaults.
    pub fn new(rho: f64) -> Self {
        ShariffSheffetConfig {
            rho,
            lambda: 1.0,
            delta: default_delta_ss(),
            s: 1.0,
            noise: NoiseKind::Simulation,
            grid_bits: DEFAULT_GRID_BITS,
        }
    }
    fn common(&self) -> Common {
        Common {
            rho: self.rho,
            lambda: self.lambda,
            delta: self.delta,
            s: self.s,
            noise: self.noise,
            grid_bits: self.grid_bits,
        }
    }
    /// Check every parameter.
    pub fn validate(&self) -> Result<()> {
        validate(&self.common())
    }
}

impl AdacOfulJointConfig {
    /// Joint-DP AdaC-OFUL at `rho` with the defaults.
    pub fn new(rho: f64) -> Self {
        AdacOfulJointConfig {
            rho,
            lambda: 0.1,
            c: 1.0,
            delta: default_delta_adac(),
            s: 1.0,
            noise: NoiseKind::Simulation,
            grid_bits: DEFAULT_GRID_BITS,
        }
    }
    fn common(&self) -> Common {
        Common {
            rho: self.rho,
            lambda: self.lambda,
            delta: self.delta,
            s: self.s,
            noise: self.noise,
            grid_bits: self.grid_bits,
        }
    }
    /// Check every parameter.
    pub fn validate(&self) -> Result<()> {
        validate(&self.common())?;
        if !(self.c >= 0.0 && self.c.is_finite()) {
            return Err(Error::param("c", self.c, "a finite number >= 0"));
        }
        Ok(())
    }
}

fn noise_text(noise: NoiseKind, grid_bits: u32, episodes: bool) -> String {
    match noise {
        NoiseKind::Simulation => "f64 Gaussian noise from the seeded noise stream".to_string(),
        NoiseKind::Deployment => format!(
            "discrete Gaussian (Canonne, Kamath & Steinke 2020, Alg. 3, Thm 4) on the tree's p-sums \
             kept as exact integers (rows on the 2^-{grid_bits} grid){}, the same per-release rho; \
             noise from ChaCha20 seeded by the operating system: outputs are not reproducible",
            if episodes {
                ", and the multivariate discrete Gaussian on each episode sum kept exactly at the \
                 public sensitivity 2 (1 + sqrt(d) 2^-39)"
            } else {
                ""
            }
        ),
    }
}

fn levels_text(horizon: Option<u64>) -> String {
    horizon.map_or("L = ceil(log2 T) + 1 (T the horizon)".to_string(), |h| {
        format!(
            "L = ceil(log2 T) + 1 = {} (T = {h})",
            crate::privacy::levels_for(h)
        )
    })
}

fn ss_guarantee(cfg: &ShariffSheffetConfig, horizon: Option<u64>) -> PrivacyGuarantee {
    if cfg.rho.is_infinite() {
        return PrivacyGuarantee::non_private();
    }
    PrivacyGuarantee {
        notion: "rho-zCDP, Joint DP (Bun & Steinke 2016; Shariff & Sheffet 2018 Def. 2, in zCDP \
                 form: the actions of every other round)"
            .into(),
        model: TrustModel::Central,
        adjacency: JOINT_ADJACENCY.into(),
        budget: Budget::Zcdp { rho: cfg.rho },
        mechanism: format!(
            "tree-based algorithm (Chan, Shi & Song 2011 Alg. 2; Shariff & Sheffet Sec. 4) on the \
             Gram matrix of the rows v = (a / max(1, ||a||), r), r clipped to [-1,1], ||v||^2 <= 2: \
             one row replaced moves a p-sum by at most 2 * 2^2 = 8 in squared Frobenius norm; each \
             p-sum released with the symmetrised Gaussian, sigma^2 = 4 L / (2 rho) off the diagonal \
             and twice that on it (Delta_F^2 / (4 sigma^2) = rho/L, Bun & Steinke Prop. 1.6), \
             {levels}; a row enters at most L p-sums: rho/L x L = rho (Lemma 2.3); V~, u~, theta~, \
             the width and the other rounds' actions are post-processing; {noise}",
            levels = levels_text(horizon),
            noise = noise_text(cfg.noise, cfg.grid_bits, false)
        ),
        boundary: Some(OFUL_BOUNDARY),
        noise: NoiseGrade::of(cfg.noise),
    }
}

fn adac_guarantee(cfg: &AdacOfulJointConfig, horizon: Option<u64>) -> PrivacyGuarantee {
    if cfg.rho.is_infinite() {
        return PrivacyGuarantee::non_private();
    }
    PrivacyGuarantee {
        notion: "rho-zCDP, Joint DP (Bun & Steinke 2016; Azize & Basu 2024 Sec. V-B2 remark 2 and \
                 App. B-D Def. 8: the actions of every other round)"
            .into(),
        model: TrustModel::Central,
        adjacency: JOINT_ADJACENCY.into(),
        budget: Budget::Zcdp { rho: cfg.rho },
        mechanism: format!(
            "(i) tree-based algorithm on the Gram matrix of w = a / max(1, ||a||) at rho/4: \
             symmetrised Gaussian per p-sum, sigma^2 = L / (2 rho/4) off the diagonal, twice on it, \
             {levels}; (ii) AdaC-OFUL's release of each episode's sum of r w (r clipped to [-1,1]) \
             with N(0, (2/rho) I) (Alg. 3, App. D-C), episodes ending when det V~ > (1 + C) det V~_tau \
             on the released V~; for one round replaced the two divergences add to at most \
             (rho/8) ||w w^T - w' w'^T||_F^2 + (rho/4) ||r w - r' w'||^2 <= rho (module docs; \
             Bun & Steinke Prop. 1.6, Lemma 2.3; parallel composition over episodes, Lemma 1); \
             theta~ and the other rounds' actions are post-processing; {noise}",
            levels = levels_text(horizon),
            noise = noise_text(cfg.noise, cfg.grid_bits, true)
        ),
        boundary: Some(OFUL_BOUNDARY),
        noise: NoiseGrade::of(cfg.noise),
    }
}

impl ContextualPolicyConfig for ShariffSheffetConfig {
    fn kind(&self) -> &'static str {
        SHARIFF_SHEFFET.kind
    }
    fn params(&self) -> Vec<(&'static str, f64)> {
        vec![("rho", self.rho)]
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        ss_guarantee(self, None)
    }
    fn label(&self) -> String {
        crate::privacy::noise_label(
            crate::config::label(self.kind(), &self.params()),
            self.noise,
            self.grid_bits,
        )
    }
    fn build(&self, d: usize, horizon: u64, seed: u64) -> Result<Box<dyn ContextualPolicy>> {
        Ok(Box::new(ShariffSheffet::new(
            self.clone(),
            d,
            horizon,
            seed,
        )?))
    }
    fn releases_per_round(&self, horizon: u64, t: u64) -> u64 {
        crate::privacy::binary_releases(crate::privacy::levels_for(horizon), t)
    }
}

impl ContextualPolicyConfig for AdacOfulJointConfig {
    fn kind(&self) -> &'static str {
        ADAC_OFUL_JOINT.kind
    }
    fn params(&self) -> Vec<(&'static str, f64)> {
        vec![("rho", self.rho)]
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        adac_guarantee(self, None)
    }
    fn label(&self) -> String {
        crate::privacy::noise_label(
            crate::config::label(self.kind(), &self.params()),
            self.noise,
            self.grid_bits,
        )
    }
    fn build(&self, d: usize, horizon: u64, seed: u64) -> Result<Box<dyn ContextualPolicy>> {
        Ok(Box::new(AdacOfulJoint::new(
            self.clone(),
            d,
            horizon,
            seed,
        )?))
    }
    /// 1: at the worst joint neighbour (the context negated or the reward flipped: module docs)
    /// only the round's episode release carries; the Gram tree's p-sums hold the round too but
    /// carry nothing there (`w w^T` is unchanged), and the joint bound accounts for them.
    fn releases_per_round(&self, _horizon: u64, _t: u64) -> u64 {
        1
    }
}

impl crate::config::Config for ShariffSheffetConfig {
    fn validate(&mut self) -> Result<()> {
        ShariffSheffetConfig::validate(self)
    }
}

impl crate::config::Config for AdacOfulJointConfig {
    fn validate(&mut self) -> Result<()> {
        AdacOfulJointConfig::validate(self)
    }
}

/// The action scaled into the unit ball.
fn unit(a: &[f64]) -> Vec<f64> {
    let n = a.iter().map(|x| x * x).sum::<f64>().sqrt().max(1.0);
    a.iter().map(|x| x / n).collect()
}

/// `(V^{-1}, ln det V)` of the symmetric `d x d` matrix `m` (row-major) plus `shift I`, adding
/// `step I` again until it is positive definite (post-processing of released values).
fn inverse(m: &[f64], d: usize, shift: f64, step: f64) -> (Vec<f64>, f64) {
    let mut extra = shift;
    for _ in 0..200 {
        let v = nalgebra::DMatrix::from_fn(d, d, |i, j| {
            m[i * d + j] + if i == j { extra } else { 0.0 }
        });
        if let Some(ch) = v.cholesky() {
            let logdet = 2.0 * ch.l().diagonal().iter().map(|x| x.ln()).sum::<f64>();
            let inv = ch.inverse();
            let out = (0..d * d).map(|p| inv[(p / d, p % d)]).collect();
            return (out, logdet);
        }
        extra += step.max(1e-12) * (1.0 + extra.abs());
    }
    let mut out = vec![0.0; d * d];
    for i in 0..d {
        out[i * d + i] = 1.0 / step.max(1e-12);
    }
    (out, d as f64 * step.max(1e-12).ln())
}

/// The report's view of both kinds ([`super::ellipsoid_released`]).
#[allow(clippy::too_many_arguments)]
fn joint_released(
    kind: &str,
    theta: &[f64],
    vinv: &[f64],
    width: f64,
    c: &Common,
    rewards: u64,
    boundary: RewardBoundary,
    source: &str,
) -> Option<crate::report::LinearReleased> {
    let level = 1.0 - if c.rho.is_finite() { 2.0 } else { 1.0 } * c.delta;
    super::ellipsoid_released(
        theta,
        vinv,
        width,
        level,
        rewards,
        boundary,
        format!(
            "{kind}: the released theta~ = V~^-1 u~ (V~ the privately released design matrix, \
             shifted to be positive definite) with the policy's own width as the ellipsoid's \
             radius, ||theta - theta~||_(V~) <= beta_t ({source}), reported at level 1 - 2 delta \
             = {level} (delta = {} of the configuration, not the requested level), assuming \
             rewards <theta*, w> + 1-sub-Gaussian noise, w = a / max(1, ||a||), ||theta*|| <= s = \
             {}; value intervals <a, theta~> +- beta_t ||a||_(V~^-1), simultaneous over actions \
             and looks within the horizon, clipped to the reward range; post-processing of \
             released statistics",
            c.delta, c.s
        ),
    )
}

/// `M x` for a `d x d` row-major `m`.
fn mul(m: &[f64], x: &[f64]) -> Vec<f64> {
    m.chunks_exact(x.len())
        .map(|row| row.iter().zip(x).map(|(a, b)| a * b).sum())
        .collect()
}

/// `x^T M x`.
fn quad(m: &[f64], x: &[f64]) -> f64 {
    mul(m, x).iter().zip(x).map(|(a, b)| a * b).sum()
}

/// The shift and the width's regulariser bounds of Shariff & Sheffet Sec. 4.2 for a tree of
/// `levels` levels with per-node scale `sigma` over `n x n` matrices: `(Upsilon, rho_min, rho_max)`.
fn regulariser(
    sigma: f64,
    levels: u32,
    n: usize,
    horizon: u64,
    alpha: f64,
    lambda: f64,
) -> (f64, f64, f64) {
    let ups = if sigma > 0.0 {
        sigma
            * (2.0 * levels as f64).sqrt()
            * (4.0 * (n as f64).sqrt() + 2.0 * (2.0 * horizon.max(1) as f64 / alpha).ln())
    } else {
        0.0
    };
    (ups, lambda + ups, lambda + 3.0 * ups)
}

/// `sqrt(2 ln(2/alpha) + d ln(rho_max/rho_min + t/(d rho_min))) + S sqrt(rho_max)`.
fn base_width(d: usize, t: u64, alpha: f64, s: f64, rho_min: f64, rho_max: f64) -> f64 {
    let df = d as f64;
    (2.0 * (2.0 / alpha).ln() + df * (rho_max / rho_min + t as f64 / (df * rho_min)).ln())
        .max(0.0)
        .sqrt()
        + s * rho_max.sqrt()
}

/// The argmax of `<theta, a> + width ||a||_{V^{-1}}`, ties to the lowest index.
fn pick(actions: &ActionSet<'_>, theta: &[f64], vinv: &[f64], width: f64) -> usize {
    let mut best = 0;
    let mut best_v = f64::NEG_INFINITY;
    for i in 0..actions.k {
        let a = actions.action(i);
        let lin: f64 = a.iter().zip(theta).map(|(x, y)| x * y).sum();
        let v = lin + width * quad(vinv, a).max(0.0).sqrt();
        if v > best_v {
            best = i;
            best_v = v;
        }
    }
    best
}

fn check_dim(d: usize) -> Result<()> {
    if d == 0 || d > 256 {
        return Err(Error::param("d", d, "an integer in 1..=256"));
    }
    Ok(())
}

fn check_round(actions: &ActionSet<'_>, arm: usize, d: usize) -> Result<()> {
    if actions.d != d || arm >= actions.k {
        return Err(Error::Protocol(format!(
            "observed action {arm} of a decision set of {} actions of dimension {} (the policy has d = {d})",
            actions.k, actions.d
        )));
    }
    Ok(())
}

fn check_action(action: &[f64], d: usize) -> Result<()> {
    if action.len() != d {
        return Err(Error::Protocol(format!(
            "observed an action of length {} (the policy has d = {d})",
            action.len()
        )));
    }
    Ok(())
}

/// Shariff & Sheffet's Joint-DP linear UCB (module docs).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShariffSheffet {
    cfg: ShariffSheffetConfig,
    d: usize,
    horizon: u64,
    gate: Gate,
    tree: GramTree,
    noise: NoiseSource,
    upsilon: f64,
    vinv: Vec<f64>,
    theta: Vec<f64>,
    width: f64,
    t: u64,
}

impl ShariffSheffet {
    /// The policy in dimension `d` over `horizon` rounds.
    ///
    /// # Errors
    /// Bad parameters.
    pub fn new(cfg: ShariffSheffetConfig, d: usize, horizon: u64, seed: u64) -> Result<Self> {
        cfg.validate()?;
        check_dim(d)?;
        let levels = crate::privacy::levels_for(horizon.max(1));
        let tree = GramTree::new(levels, cfg.rho, d + 1, 2.0)?;
        let (upsilon, _, _) =
            regulariser(tree.sigma(), levels, d + 1, horizon, cfg.delta, cfg.lambda);
        let mut p = ShariffSheffet {
            gate: Gate::new(OFUL_BOUNDARY),
            noise: NoiseSource::new(cfg.noise, cfg.grid_bits, seed)?,
            tree,
            upsilon,
            vinv: vec![],
            theta: vec![0.0; d],
            width: 0.0,
            t: 0,
            d,
            horizon,
            cfg,
        };
        p.refresh();
        Ok(p)
    }

    /// Releases made so far (one per observed round).
    pub fn releases(&self) -> u64 {
        self.tree.releases()
    }

    /// The current estimate `theta~` and width `beta_t`.
    pub fn estimate(&self) -> (&[f64], f64) {
        (&self.theta, self.width)
    }

    /// Recompute `V~^{-1}`, `theta~` and the width from the released matrix.
    fn refresh(&mut self) {
        let d = self.d;
        let n = d + 1;
        let m = self.tree.matrix();
        let mut v = vec![0.0; d * d];
        let mut u = vec![0.0; d];
        for i in 0..d {
            v[i * d..(i + 1) * d].copy_from_slice(&m[i * n..i * n + d]);
            u[i] = m[i * n + d];
        }
        let (vinv, _) = inverse(&v, d, self.cfg.lambda + 2.0 * self.upsilon, self.cfg.lambda);
        self.theta = mul(&vinv, &u);
        self.vinv = vinv;
        let levels = crate::privacy::levels_for(self.horizon.max(1));
        let (_, rmin, rmax) = regulariser(
            self.tree.sigma(),
            levels,
            n,
            self.horizon,
            self.cfg.delta,
            self.cfg.lambda,
        );
        let l = (2.0 * self.horizon.max(1) as f64 / self.cfg.delta).ln();
        let gamma = self.tree.sigma()
            * (self.tree.terms() as f64).sqrt()
            * ((d as f64).sqrt() + (2.0 * l).sqrt())
            / rmin.sqrt();
        self.width = base_width(d, self.t, self.cfg.delta, self.cfg.s, rmin, rmax) + gamma;
    }

    fn absorb(&mut self, a: &[f64], reward: f64) -> Result<()> {
        let mut v = unit(a);
        v.push(OFUL_BOUNDARY.clip(reward));
        let mut tree = self.tree.clone();
        tree.push(&v, &mut self.noise)?;
        self.tree = tree;
        self.t += 1;
        self.refresh();
        Ok(())
    }
}

impl ContextualPolicy for ShariffSheffet {
    fn guarantee(&self) -> PrivacyGuarantee {
        ss_guarantee(&self.cfg, Some(self.horizon))
    }
    fn dim(&self) -> usize {
        self.d
    }
    fn max_action_norm(&self) -> f64 {
        super::LIN_PRIV_MAX_ACTION_NORM
    }
    fn boundary(&self) -> RewardBoundary {
        self.gate.boundary()
    }
    /// Deterministic: the argmax of the index, ties to the lowest index.
    fn propensity(&self) -> Option<f64> {
        Some(1.0)
    }
    fn choose(&mut self, _t: u64, actions: &ActionSet<'_>) -> usize {
        self.gate.abandon();
        let i = pick(actions, &self.theta, &self.vinv, self.width);
        self.gate.commit(i, 1);
        i
    }
    fn observe(&mut self, actions: &ActionSet<'_>, arm: usize, reward: f64) -> Result<()> {
        check_round(actions, arm, self.d)?;
        let mut gate = self.gate;
        let reward = gate.admit(arm, reward)?;
        self.absorb(actions.action(arm), reward)?;
        self.gate = gate;
        Ok(())
    }
    /// A round observed out of order (pipelined session): the tree's positions are the order in
    /// which rounds arrive, so the accounting is unchanged.
    fn observe_round(&mut self, action: &[f64], reward: f64) -> Result<()> {
        check_action(action, self.d)?;
        let reward = self.gate.boundary().admit(reward)?;
        self.absorb(action, reward)
    }
    fn snapshot(&self) -> Result<crate::snapshot::Snapshot> {
        crate::snapshot::Snapshot::new(Setting::Contextual, SHARIFF_SHEFFET.kind, self)
    }
    /// The released `theta~` with the policy's own width as the ellipsoid's radius,
    /// `||theta - theta~||_(V~) <= width`, reported at level `1 - 2 delta` (the width's events
    /// each spend at most `delta/2` or `delta`: module docs), valid at every look within the
    /// horizon.
    fn released_estimate(&self) -> Option<crate::report::LinearReleased> {
        joint_released(
            SHARIFF_SHEFFET.kind,
            &self.theta,
            &self.vinv,
            self.width,
            &self.cfg.common(),
            self.t,
            self.gate.boundary(),
            "Shariff & Sheffet 2018, Prop. 4 / Thm 5 as transcribed in the module docs",
        )
    }
}

/// Joint-DP AdaC-OFUL (module docs).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdacOfulJoint {
    cfg: AdacOfulJointConfig,
    d: usize,
    horizon: u64,
    gate: Gate,
    gram: GramTree,
    noise: NoiseSource,
    /// The episode release's mechanism (sensitivity 2 at rho: `sigma^2 = 2/rho`).
    mech: GaussianMechanism,
    upsilon: f64,
    /// `sum r w` of the current episode (simulation path).
    episode: Vec<f64>,
    /// The same, exactly (deployment path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    exact: Option<LinearSum>,
    /// Running sum of the episode releases.
    released: Vec<f64>,
    releases: u64,
    /// Largest per-coordinate variance of an episode release so far.
    variance: f64,
    /// `ln det V~_t` of the released matrix now.
    logdet: f64,
    /// `ln det V~_tau` at the last switch.
    logdet_tau: f64,
    vinv: Vec<f64>,
    theta: Vec<f64>,
    width: f64,
    t: u64,
    tau: u64,
}

impl AdacOfulJoint {
    /// The policy in dimension `d` over `horizon` rounds.
    ///
    /// # Errors
    /// Bad parameters.
    pub fn new(cfg: AdacOfulJointConfig, d: usize, horizon: u64, seed: u64) -> Result<Self> {
        cfg.validate()?;
        check_dim(d)?;
        let levels = crate::privacy::levels_for(horizon.max(1));
        let gram = GramTree::new(levels, cfg.rho / 4.0, d, 1.0)?;
        let (upsilon, _, _) = regulariser(gram.sigma(), levels, d, horizon, cfg.delta, cfg.lambda);
        let mech = GaussianMechanism::for_zcdp(2.0, cfg.rho)?;
        let noise = NoiseSource::new(cfg.noise, cfg.grid_bits, seed)?;
        let exact = noise.linear_sum(d, 1, 1.0, &OFUL_BOUNDARY);
        let mut p = AdacOfulJoint {
            gate: Gate::new(OFUL_BOUNDARY),
            gram,
            noise,
            variance: mech.variance(),
            mech,
            upsilon,
            episode: vec![0.0; d],
            exact,
            released: vec![0.0; d],
            releases: 0,
            logdet: 0.0,
            logdet_tau: 0.0,
            vinv: vec![],
            theta: vec![0.0; d],
            width: 0.0,
            t: 0,
            tau: 0,
            d,
            horizon,
            cfg,
        };
        let (vinv, logdet) = p.released_v();
        p.logdet = logdet;
        p.logdet_tau = logdet;
        p.vinv = vinv;
        p.width = p.base();
        Ok(p)
    }

    /// Episode releases so far.
    pub fn updates(&self) -> u64 {
        self.releases
    }

    /// Gram-tree releases so far (one per observed round).
    pub fn gram_releases(&self) -> u64 {
        self.gram.releases()
    }

    /// `(V~_t^{-1}, ln det V~_t)` of the released design matrix.
    fn released_v(&self) -> (Vec<f64>, f64) {
        inverse(
            &self.gram.matrix(),
            self.d,
            self.cfg.lambda + 2.0 * self.upsilon,
            self.cfg.lambda,
        )
    }

    fn bounds(&self) -> (f64, f64) {
        let levels = crate::privacy::levels_for(self.horizon.max(1));
        let (_, rmin, rmax) = regulariser(
            self.gram.sigma(),
            levels,
            self.d,
            self.horizon,
            self.cfg.delta,
            self.cfg.lambda,
        );
        (rmin, rmax)
    }

    fn base(&self) -> f64 {
        let (rmin, rmax) = self.bounds();
        base_width(self.d, self.t, self.cfg.delta, self.cfg.s, rmin, rmax)
    }

    /// End the episode: release its statistic, recompute `theta~` and the width on `V~_tau`.
    fn update(&mut self) {
        match &mut self.exact {
            None => {
                let rng = self
                    .noise
                    .simulation_rng()
                    .expect("no exact statistic: the simulation path");
                for (x, &e) in self.released.iter_mut().zip(&self.episode) {
                    *x += self.mech.release(e, rng);
                }
            }
            Some(acc) => {
                let sens = 2.0 * (1.0 + (self.d as f64).sqrt() * 2f64.powi(-39));
                // Cannot fail: deployment path, rho >= MIN_DEPLOYMENT_RHO (validated).
                let (q, sigma) = self
                    .noise
                    .gaussian_linear_sum(self.cfg.rho, sens, acc, &OFUL_BOUNDARY)
                    .expect("a validated deployment release");
                for (x, qj) in self.released.iter_mut().zip(&q) {
                    crate::privacy::tap::record(crate::privacy::tap::Family::Gaussian, *qj);
                    *x += qj;
                }
                self.variance = self.variance.max(sigma * sigma);
                acc.clear();
            }
        }
        self.episode.iter_mut().for_each(|x| *x = 0.0);
        self.releases += 1;
        self.tau = self.t;
        let (vinv, logdet) = self.released_v();
        self.logdet_tau = logdet;
        self.theta = mul(&vinv, &self.released);
        self.vinv = vinv;
        let (rmin, _) = self.bounds();
        let gamma = if self.cfg.rho.is_finite() {
            (self.releases as f64
                * self.variance
                * chi2_tail(self.d, self.cfg.delta / self.horizon.max(1) as f64)
                / rmin)
                .sqrt()
        } else {
            0.0
        };
        self.width = self.base() + gamma;
    }

    /// The first round is an episode of its own (as in AdaC-OFUL, where `V_0 = lambda I` makes
    /// the first row double the determinant; here the shift `2 Upsilon` would otherwise keep the
    /// first episode long); then `det V~_t > (1 + C) det V~_tau`.
    fn needs_update(&self) -> bool {
        self.t > self.tau
            && (self.releases == 0 || self.logdet > self.logdet_tau + (1.0 + self.cfg.c).ln())
    }

    fn absorb(&mut self, a: &[f64], reward: f64) -> Result<()> {
        let w = unit(a);
        let r = OFUL_BOUNDARY.clip(reward);
        let mut gram = self.gram.clone();
        gram.push(&w, &mut self.noise)?;
        if let Some(acc) = &mut self.exact {
            acc.push(&OFUL_BOUNDARY.drawn_sum(r, 1), &w, &OFUL_BOUNDARY)?;
        }
        self.gram = gram;
        for (e, wj) in self.episode.iter_mut().zip(&w) {
            *e += r * wj;
        }
        self.t += 1;
        self.logdet = self.released_v().1;
        Ok(())
    }
}

impl ContextualPolicy for AdacOfulJoint {
    fn guarantee(&self) -> PrivacyGuarantee {
        adac_guarantee(&self.cfg, Some(self.horizon))
    }
    fn dim(&self) -> usize {
        self.d
    }
    fn max_action_norm(&self) -> f64 {
        super::LIN_PRIV_MAX_ACTION_NORM
    }
    fn boundary(&self) -> RewardBoundary {
        self.gate.boundary()
    }
    /// Deterministic: the argmax of the index, ties to the lowest index.
    fn propensity(&self) -> Option<f64> {
        Some(1.0)
    }
    fn choose(&mut self, _t: u64, actions: &ActionSet<'_>) -> usize {
        self.gate.abandon();
        if self.needs_update() {
            self.update();
        }
        let i = pick(actions, &self.theta, &self.vinv, self.width);
        self.gate.commit(i, 1);
        i
    }
    fn observe(&mut self, actions: &ActionSet<'_>, arm: usize, reward: f64) -> Result<()> {
        check_round(actions, arm, self.d)?;
        let mut gate = self.gate;
        let reward = gate.admit(arm, reward)?;
        self.absorb(actions.action(arm), reward)?;
        self.gate = gate;
        Ok(())
    }
    /// A round observed out of order (pipelined session): the same statistics as
    /// [`Self::observe`]; the tree's positions and the episodes follow arrival order.
    fn observe_round(&mut self, action: &[f64], reward: f64) -> Result<()> {
        check_action(action, self.d)?;
        let reward = self.gate.boundary().admit(reward)?;
        self.absorb(action, reward)
    }
    fn snapshot(&self) -> Result<crate::snapshot::Snapshot> {
        crate::snapshot::Snapshot::new(Setting::Contextual, ADAC_OFUL_JOINT.kind, self)
    }
    /// The released `theta~` with the policy's own width as the ellipsoid's radius,
    /// `||theta - theta~||_(V~) <= width`, reported at level `1 - 2 delta` (the width's events
    /// each spend at most `delta/2` or `delta`: module docs), valid at every look within the
    /// horizon.
    fn released_estimate(&self) -> Option<crate::report::LinearReleased> {
        joint_released(
            ADAC_OFUL_JOINT.kind,
            &self.theta,
            &self.vinv,
            self.width,
            &self.cfg.common(),
            self.tau,
            self.gate.boundary(),
            "Azize & Basu 2024 Sec. V-B2 remark 2: AdaC-OFUL's width on the released design matrix",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set() -> (Vec<f64>, usize) {
        (vec![1.0, 0.0, 0.0, 1.0], 2)
    }

    /// The non-private limits learn an easy instance; one release per round (and per episode);
    /// refusals name the key; the guarantees state joint adjacency.
    #[test]
    fn learn_release_and_validate() {
        let (feats, k) = set();
        let actions = ActionSet {
            d: 2,
            k,
            features: &feats,
        };
        let mut ss =
            ShariffSheffet::new(ShariffSheffetConfig::new(f64::INFINITY), 2, 500, 1).unwrap();
        let mut aj =
            AdacOfulJoint::new(AdacOfulJointConfig::new(f64::INFINITY), 2, 500, 1).unwrap();
        let (mut b1, mut b2) = (0, 0);
        for t in 0..500u64 {
            let i = ss.choose(t, &actions);
            b1 += usize::from(i == 0);
            assert!(ss.observe(&actions, 1 - i, 0.0).is_err());
            ss.observe(&actions, i, if i == 0 { 0.8 } else { 0.2 })
                .unwrap();
            let j = aj.choose(t, &actions);
            b2 += usize::from(j == 0);
            aj.observe(&actions, j, if j == 0 { 0.8 } else { 0.2 })
                .unwrap();
        }
        assert!(b1 > 400 && b2 > 400, "{b1} {b2}");
        assert_eq!(ss.releases(), 500);
        assert_eq!(aj.gram_releases(), 500);
        assert!(aj.updates() >= 3, "{}", aj.updates());
        for (k, v) in [("rho", 0.0), ("lambda", -1.0), ("delta", 1.0), ("s", 0.0)] {
            let mut c = ShariffSheffetConfig::new(1.0);
            let mut a = AdacOfulJointConfig::new(1.0);
            match k {
                "rho" => (c.rho, a.rho) = (v, v),
                "lambda" => (c.lambda, a.lambda) = (v, v),
                "delta" => (c.delta, a.delta) = (v, v),
                _ => (c.s, a.s) = (v, v),
            }
            for e in [c.validate().unwrap_err(), a.validate().unwrap_err()] {
                assert!(e.to_string().starts_with(k), "{e}");
            }
        }
        assert!(ShariffSheffetConfig::new(1.0).guarantee().is_joint());
        assert!(AdacOfulJointConfig::new(1.0).guarantee().is_joint());
        assert_eq!(ShariffSheffetConfig::new(1.0).releases_per_round(64, 0), 7);
    }

    /// The joint bound of `adac_oful_joint` (module docs): `(1/8) ||w w^T - w' w'^T||_F^2 + (1/4)
    /// ||r w - r' w'||^2 <= 1` (in units of rho) over random pairs in the unit ball and
    /// rewards in [-1, 1], with equality at `(a, 1)` vs `(-a, 1)`.
    #[test]
    fn joint_bound_of_the_two_releases() {
        use rand::{RngExt, SeedableRng};
        let loss = |w: &[f64; 3], r: f64, x: &[f64; 3], q: f64| {
            let f: f64 = (0..9)
                .map(|p| (w[p / 3] * w[p % 3] - x[p / 3] * x[p % 3]).powi(2))
                .sum();
            let u: f64 = (0..3).map(|i| (r * w[i] - q * x[i]).powi(2)).sum();
            f / 8.0 + u / 4.0
        };
        let a = [0.6, 0.8, 0.0];
        assert!((loss(&a, 1.0, &[-0.6, -0.8, 0.0], 1.0) - 1.0).abs() < 1e-12);
        let mut rng = crate::rng::SimRng::seed_from_u64(3);
        let mut ball = || {
            let v: [f64; 3] = std::array::from_fn(|_| rng.random_range(-1.0..1.0));
            let n = v.iter().map(|x| x * x).sum::<f64>().sqrt().max(1.0);
            v.map(|x| x / n)
        };
        let mut worst: f64 = 0.0;
        for _ in 0..20_000 {
            let (w, x) = (ball(), ball());
            for (r, q) in [(1.0, 1.0), (1.0, -1.0), (0.3, -0.7)] {
                worst = worst.max(loss(&w, r, &x, q));
            }
        }
        assert!(worst <= 1.0 + 1e-12, "{worst}");
    }
}
