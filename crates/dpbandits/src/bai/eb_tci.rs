//! EB-TCI: the non-private Top Two reference (Empirical-Best leader, Transportation Cost Improved
//! challenger).
//!
//! # Algorithm
//! Jourdan, Degenne, Baudry, de Heide & Kaufmann, "Top Two Algorithms Revisited", NeurIPS 2022
//! (spec dp-bai §4.1): EB leader `argmax mu^` (ties at random), TCI challenger
//! `argmin W_KL(mu^_B, mu^_a; N_B, N_a) + ln N_a`, deterministic beta-tracking, Bernoulli KL GLR
//! stopping checked after every sample. It equals DP-TT with `eps = inf` and a release after every
//! sample.
//!
//! Thresholds: `r` (default; Proposal R with no noise: per arm `ln(K zeta(2) N^2 / delta)`, a union
//! bound over every count, delta-correct) or `eb` (the authors' heuristic `ln((1 + ln n)/delta)` for
//! the pair, as in the papers' plots; not proved).
//!
//! # Privacy
//! None (non-private reference).
//!
//! # Parameters
//! `beta` (default 1/2), `threshold` (`r` or `eb`), `lazy` (no effect: a release after every sample).

use super::top_two::{Challenger, Estimator, Forcing, Leader, StopCost, TopTwoParams};
use super::{ThresholdKind, TopTwo, TopTwoConfig, forcing_label};
use crate::config::{AlgorithmInfo, Setting};
use crate::error::Result;
use serde::Deserialize;

/// Registry record of `eb_tci`.
pub const EB_TCI: AlgorithmInfo = AlgorithmInfo {
    kind: "eb_tci",
    name: "EB-TCI (non-private Top Two)",
    setting: Setting::Bai,
    reference: "Jourdan, Degenne, Baudry, de Heide & Kaufmann 2022 (NeurIPS), EB leader + TCI challenger",
    privacy: "none",
    example: "",
    source: file!(),
    doc: include_str!("eb_tci.rs"),
    private: false,
    release_keys: crate::config::NO_RELEASE,
};

/// EB-TCI configuration.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EbTciConfig {
    /// Leader target.
    #[serde(default = "half")]
    pub beta: f64,
    /// Stopping threshold (`r` or `eb`).
    #[serde(default = "r")]
    pub threshold: ThresholdKind,
    /// Forced exploration (`privacy_scaled` default, `sqrt_t`, `none`; `true`/`false` accepted),
    /// see [`Forcing`].
    #[serde(default = "forcing")]
    pub forced_exploration: Forcing,
    /// Scale `c > 0` of the forced-exploration rule `N_a < sqrt(c t / min(1, eps)) - K/2`
    /// (default 1).
    #[serde(default = "one_scale")]
    pub forcing_scale: f64,
}

fn one_scale() -> f64 {
    1.0
}
fn forcing() -> Forcing {
    Forcing::SqrtT
}
fn half() -> f64 {
    0.5
}
fn r() -> ThresholdKind {
    ThresholdKind::R
}

impl Default for EbTciConfig {
    fn default() -> Self {
        EbTciConfig {
            beta: 0.5,
            threshold: ThresholdKind::R,
            forced_exploration: Forcing::SqrtT,
            forcing_scale: 1.0,
        }
    }
}

impl EbTciConfig {
    /// The Top Two engine parameters.
    pub fn params(&self) -> TopTwoParams {
        TopTwoParams {
            epsilon: f64::INFINITY,
            beta: self.beta,
            estimator: Estimator::Exact,
            leader: Leader::EmpiricalBest,
            challenger: Challenger::Tci,
            cost: StopCost::DEps,
            threshold: self.threshold,
            lazy: 0.0,
            forced: self.forced_exploration,
            forcing_scale: self.forcing_scale,
            noise: crate::privacy::NoiseKind::Simulation,
            grid_bits: crate::privacy::DEFAULT_GRID_BITS,
        }
    }

    /// Validate.
    ///
    /// # Errors
    /// beta in (0, 1); threshold `r` or `eb`.
    pub fn validate(&self) -> Result<()> {
        self.threshold
            .require(&[ThresholdKind::R, ThresholdKind::Eb])?;
        TopTwo::new(self.params(), 2, 0.5).map(drop)
    }
}

impl TopTwoConfig for EbTciConfig {
    fn top_two_info(&self) -> &'static AlgorithmInfo {
        &EB_TCI
    }
    fn top_two_label(&self) -> String {
        format!(
            "eb_tci(threshold={},beta={},fe={})",
            self.threshold.name(),
            self.beta,
            forcing_label(self.forced_exploration, self.forcing_scale)
        )
    }
    fn top_two_params(&self) -> TopTwoParams {
        self.params()
    }
    fn top_two_check(&self) -> Result<()> {
        self.validate()
    }
    /// Non-private (`epsilon = inf`): no mechanism.
    fn top_two_mechanism(&self) -> (&'static str, &'static str) {
        ("", "")
    }
    fn top_two_describe(&self) -> serde_json::Value {
        serde_json::json!({ "lazy_challenger": 0.0 })
    }
}

impl crate::config::Config for EbTciConfig {
    fn validate(&mut self) -> crate::error::Result<()> {
        EbTciConfig::validate(self)
    }
}
