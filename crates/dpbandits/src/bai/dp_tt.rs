//! DP-TT: Differentially Private Top Two for fixed-confidence best-arm identification.
//!
//! # Algorithm
//! Jourdan & Azize, "Optimal Best Arm Identification under Differential Privacy", NeurIPS 2025
//! (arXiv:2510.17348), Algorithm 1 as read on the authors' poster (spec dp-bai §3):
//! * private estimator: per arm, geometric phases on the grid `ceil((1 + eta)^j)` (de-duplicated,
//!   spec §3.4); at each phase switch the rewards collected in the finished phase are added to a
//!   **cumulative** noisy sum with a fresh `Lap(1/eps)` (no forgetting); `mu~ = S~ / N~`;
//! * recommendation and leader: `argmax clip(mu~)` (EB leader, ties uniformly at random, drawn at
//!   each release);
//! * challenger TCI: `argmin_{a != B} W_eps(m_B, m_a; N_B, N_a) + ln N_a` with current counts
//!   (ties: lowest index);
//! * tracking: deterministic, per leader, target `beta`;
//! * stopping: for every `a != a_hat`, `W_eps(m_a_hat, m_a; N~_a_hat, N~_a) > c(a_hat) + c(a)` with
//!   frozen counts, checked after every release.
//!
//! The paper's threshold (Eq. (8)) was **not recovered**. The default `threshold = "joint"` is our
//! delta-correct Proposal J ([`super::threshold`]: one Chernoff bound for the tested pair, valid
//! for any sampling rule); `r` is the spec's per-arm Proposal R (§3.5.2, also delta-correct, about
//! 1.35x-1.9x larger); `h_half` and `h_arm` (spec §3.5.3) are heuristics that approximate the
//! paper's figures and are **not** delta-correct at high privacy (docs/bai.md). The label of every
//! output names the threshold. `paper` is the authors' private threshold `dp_c` and `heuristic`
//! their `emp_c` (the one their experiments call), both from their DP-BAI code
//! (`algorithms/adapTT.py`, written for AdaP-TT; [`super::threshold`] docs), applied here to
//! DP-TT's `W_eps` statistic with the frozen counts `N~` and phase index `max(j_a, j_b)`:
//! `paper`'s delta-correctness is the authors' claim (not proved here, and not for this
//! statistic), `heuristic` is **not** delta-correct.
//!
//! Forced exploration (our addition, on by default, counts only): `N_a < sqrt(c t / min(1, eps)) -
//! K/2` with `c = 16` ([`super::PRIVATE_FORCING_SCALE`]), see [`super::top_two::Forcing`].
//!
//! # Privacy
//! eps-global DP (central, pure), adjacency: reward tables differing in one row. Each reward enters
//! exactly one phase increment of one arm; the increment has L1-sensitivity 1 (rewards in `[0, 1]`,
//! clipped at the boundary; Bernoulli rewards need no clipping) and is released once with
//! `Lap(1/eps)` ([`crate::privacy::LaplaceMechanism::for_pure_dp`], scale rounded up). The
//! increments are over disjoint rewards, so by parallel composition over users (adaptive version:
//! Azize thesis App. C.1.2) their collection is eps-DP; cumulative sums, means, stopping, leader,
//! challenger, tracking and phase switches (counts only) are post-processing. No decision reads an
//! unreleased reward (the run holds the reward sums it receives in `pending` until the release).
//!
//! # Parameters
//! `epsilon` (> 0, inf = non-private), `eta` (> 0, default 1), `beta` (in (0,1), default 1/2),
//! `threshold` (`joint` default, `r`, `h_half`, `h_arm`, `paper`: the authors' `dp_c`, delta-correct
//! by the authors' claim only, `heuristic`: the authors' `emp_c`, not delta-correct), `lazy` (>= 0, default 0: challenger every
//! round), `forced_exploration` (`privacy_scaled` default, `sqrt_t`, `none`), `forcing_scale`
//! (> 0, default 16),
//! `noise` (`simulation` default | `deployment`: each release's integer grid sum plus an exact
//! discrete Laplace of scale `2^k/eps` from an OS-keyed ChaCha20, the same eps; `docs/privacy.md`,
//! "The Laplace family"), `grid_bits` (1..=32, default 20: rewards rounded to multiples of `2^-k`).

use super::top_two::{Challenger, Estimator, Forcing, Leader, StopCost, TopTwoParams};
use super::{ThresholdKind, TopTwo, TopTwoConfig, fmt_num, forcing_label};
use crate::config::{AlgorithmInfo, Setting};
use crate::error::Result;
use crate::privacy::NoiseKind;
use serde::Deserialize;

/// Registry record of `dp_tt`.
pub const DP_TT: AlgorithmInfo = AlgorithmInfo {
    kind: "dp_tt",
    name: "DP-TT (Differentially Private Top Two)",
    setting: Setting::Bai,
    reference: "Jourdan & Azize 2025 (NeurIPS), Alg. 1; threshold: our delta-correct pair threshold Proposal J (default; the paper's Eq. (8) was not recovered), spec dp-bai 3.5.2 Proposal R as `r`",
    privacy: "eps-global DP (pure, central), Laplace 1/eps per phase increment, geometric phases, no forgetting",
    example: "epsilon = 1.0",
    source: file!(),
    doc: include_str!("dp_tt.rs"),
    private: true,
    release_keys: crate::config::NOISE_KEYS,
};

/// DP-TT configuration.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DpTtConfig {
    /// Privacy budget eps.
    pub epsilon: f64,
    /// Geometric grid parameter.
    #[serde(default = "one")]
    pub eta: f64,
    /// Leader target.
    #[serde(default = "half")]
    pub beta: f64,
    /// Stopping threshold.
    #[serde(default = "joint")]
    pub threshold: ThresholdKind,
    /// Lazy challenger parameter.
    #[serde(default)]
    pub lazy: f64,
    /// Forced exploration (`privacy_scaled` default, `sqrt_t`, `none`; `true`/`false` accepted),
    /// see [`Forcing`].
    #[serde(default = "forcing")]
    pub forced_exploration: Forcing,
    /// Scale `c > 0` of the forced-exploration rule `N_a < sqrt(c t / min(1, eps)) - K/2`
    /// (default [`super::PRIVATE_FORCING_SCALE`] = 16).
    #[serde(default = "default_scale")]
    pub forcing_scale: f64,
    /// Noise path: seeded `f64` Laplace (`simulation`, default) or the exact discrete Laplace on
    /// rewards rounded to the `2^-grid_bits` grid from an OS-keyed ChaCha20 (`deployment`).
    #[serde(default)]
    pub noise: NoiseKind,
    /// Deployment grid: rewards are rounded to multiples of `2^-grid_bits` (default 20).
    #[serde(default = "default_grid_bits")]
    pub grid_bits: u32,
}

fn one() -> f64 {
    1.0
}
fn default_grid_bits() -> u32 {
    crate::privacy::DEFAULT_GRID_BITS
}
fn default_scale() -> f64 {
    super::PRIVATE_FORCING_SCALE
}
fn forcing() -> Forcing {
    Forcing::PrivacyScaled
}
fn half() -> f64 {
    0.5
}
fn joint() -> ThresholdKind {
    ThresholdKind::Joint
}

impl DpTtConfig {
    /// Defaults for `epsilon` (eta = 1, beta = 1/2, threshold `joint`, lazy = 0, forced
    /// exploration `privacy_scaled`).
    pub fn new(epsilon: f64) -> Self {
        DpTtConfig {
            epsilon,
            eta: 1.0,
            beta: 0.5,
            threshold: ThresholdKind::Joint,
            lazy: 0.0,
            forced_exploration: Forcing::PrivacyScaled,
            forcing_scale: super::PRIVATE_FORCING_SCALE,
            noise: NoiseKind::Simulation,
            grid_bits: crate::privacy::DEFAULT_GRID_BITS,
        }
    }

    /// The Top Two engine parameters.
    pub fn params(&self) -> TopTwoParams {
        TopTwoParams {
            epsilon: self.epsilon,
            beta: self.beta,
            estimator: Estimator::Cumulative { eta: self.eta },
            leader: Leader::EmpiricalBest,
            challenger: Challenger::Tci,
            cost: StopCost::DEps,
            threshold: self.threshold,
            lazy: self.lazy,
            forced: self.forced_exploration,
            forcing_scale: self.forcing_scale,
            noise: self.noise,
            grid_bits: self.grid_bits,
        }
    }

    /// Validate.
    ///
    /// # Errors
    /// See [`super::TopTwo::new`]; threshold one of `joint`, `r`, `h_half`, `h_arm`, `paper`,
    /// `heuristic`.
    pub fn validate(&self) -> Result<()> {
        self.threshold.require(&[
            ThresholdKind::Joint,
            ThresholdKind::R,
            ThresholdKind::HHalf,
            ThresholdKind::HArm,
            ThresholdKind::Paper,
            ThresholdKind::Heuristic,
        ])?;
        crate::privacy::check_noise(self.noise, self.grid_bits, self.epsilon.is_finite())?;
        TopTwo::new(self.params(), 2, 0.5).map(drop)
    }
}

impl TopTwoConfig for DpTtConfig {
    fn top_two_info(&self) -> &'static AlgorithmInfo {
        &DP_TT
    }
    fn top_two_label(&self) -> String {
        let label = format!(
            "dp_tt(eps={},threshold={},eta={},beta={},lazy={},fe={})",
            fmt_num(self.epsilon),
            self.threshold.name(),
            self.eta,
            self.beta,
            self.lazy,
            forcing_label(self.forced_exploration, self.forcing_scale)
        );
        crate::privacy::noise_label(label, self.noise, self.grid_bits)
    }
    fn top_two_params(&self) -> TopTwoParams {
        self.params()
    }
    fn top_two_check(&self) -> Result<()> {
        self.validate()
    }
    fn top_two_mechanism(&self) -> (&'static str, &'static str) {
        (
            "Laplace mechanism, scale 1/eps (rounded up) on each per-arm phase increment of the reward sum (sensitivity 1), geometric phases ceil((1+eta)^j), cumulative sums, no forgetting (Jourdan & Azize 2025, Alg. 1)",
            "on each per-arm phase increment: the integer sum of its rewards rounded to the 2^-k grid (sensitivity 2^k), discrete Laplace scale t = 2^k/eps exactly (the same eps as Alg. 1), released (sum + noise)/2^k",
        )
    }
}

impl crate::config::Config for DpTtConfig {
    fn validate(&mut self) -> crate::error::Result<()> {
        DpTtConfig::validate(self)
    }
}
