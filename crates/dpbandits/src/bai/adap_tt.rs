//! AdaP-TT and AdaP-TT*: Top Two with adaptive private episodes and forgetting.
//!
//! # Algorithm
//! * AdaP-TT: Azize, Jourdan, Al Marjani & Basu, "On the Complexity of Differentially Private
//!   Best-Arm Identification with Fixed Confidence", NeurIPS 2023; Azize thesis §5.4.1–5.4.2
//!   (spec dp-bai §4.3). Per-arm doubling phases (sizes 1, 1, 2, 4, ...); a phase end releases the
//!   mean of **that phase only** plus `Lap(1/(eps N~))` (forgetting). Leader: private UCB
//!   `mu~_a + sqrt(k_a / N~_a) + k_a / (eps N~_a)`; challenger `argmin (mu~_B - mu~_a) /
//!   sqrt(1/N_B + 1/N_a)` (current counts); beta-tracking; stopping `W^G(mu~, N~) > c^{G,eps}` with
//!   the thesis threshold (5.10)–(5.11), sigma = 1/2, `s = 2` (the thesis leaves `s > 1` free).
//! * AdaP-TT*: Azize et al., "Differentially Private Best-Arm Identification", JMLR 2026; thesis
//!   §5.4.3 (spec §4.4): same, with the cost `W^{G,eps} = Delta_+ min(3 eps, Delta_+) / (2 sigma^2
//!   (1/w_a + 1/w_b))` for both challenger and stopping and the threshold (5.14).
//!
//! Thresholds: `thesis` (default) or, for AdaP-TT, `code23`: only the *threshold formula* of the
//! DP-BAI code (2023), with its sigma = 1 cost, inside **our** stopping rule (EB leader, signed
//! gap). It is not the authors' algorithm: their code's stopping rule tests the UCB leader with an
//! unsigned gap. A heuristic, not proved delta-correct. Also for AdaP-TT (issue 43): `paper`, the
//! authors' private threshold `dp_c` of the same code (`algorithms/adapTT.py`, `C_G(x) = x + ln
//! x`, phase index `max(j_a, j_b)`; [`super::threshold`] docs), delta-correct by the authors' claim
//! only (not proved here); and `heuristic`, the code's `emp_c` (the threshold its experiments
//! call; the same formula and cost as `code23`), **not** delta-correct. Both use the code's
//! `sigma = 1` Gaussian cost and the last-phase counts. AdaP-TT* keeps `thesis` only (its cost
//! `W^{G,eps}` is not the one these formulas were written for).
//!
//! # Privacy
//! eps-global DP (central, pure), adjacency: reward tables differing in one row. Each phase mean
//! has L1-sensitivity `1/N~` (rewards in `[0, 1]`) and is released once with `Lap(1/(eps N~))`
//! ([`crate::privacy::LaplaceMechanism::for_pure_dp`] with sensitivity `1/N~`, scale rounded up);
//! phases use disjoint rewards, so parallel composition gives eps-DP; everything else (leader,
//! challenger, tracking, stopping, phase ends) is post-processing of releases and counts.
//!
//! # Parameters
//! `epsilon` (> 0), `beta` (default 1/2), `threshold` (`thesis` default; for AdaP-TT also
//! `code23`: the 2023 code's threshold formula in our stopping rule, a heuristic; `paper`: the
//! code's `dp_c`, delta-correct by the authors' claim only; `heuristic`: the code's `emp_c`, not
//! delta-correct), `lazy` (>= 0, default 0),
//! `noise` (`simulation` default | `deployment`: each release's integer grid sum plus an exact
//! discrete Laplace of scale `2^k/eps` from an OS-keyed ChaCha20, the same eps; `docs/privacy.md`,
//! "The Laplace family"), `grid_bits` (1..=32, default 20: rewards rounded to multiples of `2^-k`).

use super::top_two::{Challenger, Estimator, Forcing, Leader, StopCost, TopTwoParams};
use super::{ThresholdKind, TopTwo, TopTwoConfig, fmt_num, forcing_label};
use crate::config::{AlgorithmInfo, Setting};
use crate::error::Result;
use crate::privacy::NoiseKind;
use serde::Deserialize;

/// Registry record of `adap_tt`.
pub const ADAP_TT: AlgorithmInfo = AlgorithmInfo {
    kind: "adap_tt",
    name: "AdaP-TT",
    setting: Setting::Bai,
    reference: "Azize, Jourdan, Al Marjani & Basu 2023 (NeurIPS); thesis Sec. 5.4.1-5.4.2, thresholds (5.10)-(5.11)",
    privacy: "eps-global DP (pure, central), Laplace 1/(eps N) per phase mean, doubling phases with forgetting",
    example: "epsilon = 1.0",
    source: file!(),
    doc: include_str!("adap_tt.rs"),
    private: true,
    release_keys: crate::config::NOISE_KEYS,
};

/// Registry record of `adap_tt_star`.
pub const ADAP_TT_STAR: AlgorithmInfo = AlgorithmInfo {
    kind: "adap_tt_star",
    name: "AdaP-TT*",
    setting: Setting::Bai,
    reference: "Azize, Jourdan, Al Marjani & Basu 2026 (JMLR); thesis Sec. 5.4.3, threshold (5.14)",
    privacy: "eps-global DP (pure, central), Laplace 1/(eps N) per phase mean, doubling phases with forgetting",
    example: "epsilon = 1.0",
    source: file!(),
    doc: include_str!("adap_tt.rs"),
    private: true,
    release_keys: crate::config::NOISE_KEYS,
};

/// AdaP-TT / AdaP-TT* configuration (`star` selects AdaP-TT*; set by the registry kind).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdapTtConfig {
    /// Privacy budget eps.
    pub epsilon: f64,
    /// Leader target.
    #[serde(default = "half")]
    pub beta: f64,
    /// Stopping threshold.
    #[serde(default = "thesis")]
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
    /// AdaP-TT* (not read from files; set by the registry kind).
    #[serde(skip)]
    pub star: bool,
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
fn thesis() -> ThresholdKind {
    ThresholdKind::Thesis
}

impl AdapTtConfig {
    /// Defaults for `epsilon`.
    pub fn new(epsilon: f64, star: bool) -> Self {
        AdapTtConfig {
            epsilon,
            beta: 0.5,
            threshold: ThresholdKind::Thesis,
            lazy: 0.0,
            forced_exploration: Forcing::PrivacyScaled,
            forcing_scale: super::PRIVATE_FORCING_SCALE,
            noise: NoiseKind::Simulation,
            grid_bits: crate::privacy::DEFAULT_GRID_BITS,
            star,
        }
    }

    /// The Top Two engine parameters.
    pub fn params(&self) -> TopTwoParams {
        TopTwoParams {
            epsilon: self.epsilon,
            beta: self.beta,
            estimator: Estimator::Forgetting,
            leader: Leader::PrivateUcb,
            challenger: if self.star {
                Challenger::GaussStar
            } else {
                Challenger::SignedGauss
            },
            cost: match (self.star, self.threshold) {
                (true, _) => StopCost::GaussStar,
                (
                    false,
                    ThresholdKind::Code23 | ThresholdKind::Paper | ThresholdKind::Heuristic,
                ) => StopCost::GaussUnit,
                _ => StopCost::Gauss,
            },
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
    /// See [`super::TopTwo::new`]; threshold `thesis` (or `code23`, `paper`, `heuristic` for
    /// AdaP-TT).
    pub fn validate(&self) -> Result<()> {
        if self.star {
            self.threshold.require(&[ThresholdKind::Thesis])?;
        } else {
            self.threshold.require(&[
                ThresholdKind::Thesis,
                ThresholdKind::Code23,
                ThresholdKind::Paper,
                ThresholdKind::Heuristic,
            ])?;
        }
        crate::privacy::check_noise(self.noise, self.grid_bits, self.epsilon.is_finite())?;
        TopTwo::new(self.params(), 2, 0.5).map(drop)
    }
}

impl TopTwoConfig for AdapTtConfig {
    fn top_two_info(&self) -> &'static AlgorithmInfo {
        if self.star { &ADAP_TT_STAR } else { &ADAP_TT }
    }
    fn top_two_label(&self) -> String {
        let label = format!(
            "{}(eps={},threshold={},beta={},lazy={},fe={})",
            self.top_two_info().kind,
            fmt_num(self.epsilon),
            self.threshold.name(),
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
            "Laplace mechanism, scale 1/(eps N~) (rounded up) on each per-arm phase mean (sensitivity 1/N~), doubling phases with forgetting (Azize et al. 2023, AdaP-TT; thesis Alg. 5.x)",
            "on each per-arm phase: the integer sum of its N~ rewards rounded to the 2^-k grid (sensitivity 2^k), discrete Laplace scale t = 2^k/eps exactly (the same eps), released mean (sum + noise)/(2^k N~)",
        )
    }
}

impl crate::config::Config for AdapTtConfig {
    fn validate(&mut self) -> crate::error::Result<()> {
        AdapTtConfig::validate(self)
    }
}
