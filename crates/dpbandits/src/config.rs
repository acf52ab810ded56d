//! The vocabulary every algorithm and environment file uses to describe itself: the [`Setting`]
//! (and [`BySetting`], one value of each setting), the [`AlgorithmInfo`] / [`EnvInfo`] records the registry lists, and the [`Config`] trait that
//! turns a parameter table into a validated configuration.
//!
//! A leaf module: it imports no setting and not the registry, so an algorithm file can declare its
//! own record (`pub const ADAC_UCB: AlgorithmInfo = ...`, the only place its kind string is
//! written) and the registry can list it without an import cycle.

use crate::error::Result;
use serde::de::DeserializeOwned;

/// The problem setting an algorithm or environment belongs to.
///
/// A closed set: every layer above the settings (registry, planner, auditor, snapshots, the
/// Python binding and the service) matches on all four, so adding a fifth is meant to be a
/// compile error everywhere it must be handled (no `#[non_exhaustive]`, no `_ =>` arms).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Setting {
    /// K-armed stochastic bandits, regret minimisation.
    FiniteArmed,
    /// Fixed-confidence best-arm identification (Bernoulli arms).
    Bai,
    /// Stochastic linear bandits with a fixed finite arm set in R^d.
    Linear,
    /// Linear contextual bandits with a public decision set every round.
    Contextual,
}

impl std::fmt::Display for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Setting::FiniteArmed => "finite-armed",
            Setting::Bai => "best-arm identification (fixed confidence)",
            Setting::Linear => "linear (finite arm set)",
            Setting::Contextual => "contextual linear",
        })
    }
}

/// One value of one of the four settings, typed per setting: the registry's parsers, restorers,
/// parsed configurations and restored policies are all `BySetting` of the setting's four types
/// (`registry::Parse`, `registry::Built`, ...), so that code holding one matches exactly the four
/// [`Setting`]s and a value of one setting can never be taken for another's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BySetting<F, L, C, B> {
    /// Finite-armed ([`Setting::FiniteArmed`]).
    Finite(F),
    /// Linear ([`Setting::Linear`]).
    Linear(L),
    /// Contextual linear ([`Setting::Contextual`]).
    Contextual(C),
    /// Fixed-confidence best-arm identification ([`Setting::Bai`]).
    Bai(B),
}

impl<F, L, C, B> BySetting<F, L, C, B> {
    /// The setting of the value.
    pub fn setting(&self) -> Setting {
        match self {
            BySetting::Finite(_) => Setting::FiniteArmed,
            BySetting::Linear(_) => Setting::Linear,
            BySetting::Contextual(_) => Setting::Contextual,
            BySetting::Bai(_) => Setting::Bai,
        }
    }

    /// A reference to the value, in its setting.
    pub fn as_ref(&self) -> BySetting<&F, &L, &C, &B> {
        match self {
            BySetting::Finite(x) => BySetting::Finite(x),
            BySetting::Linear(x) => BySetting::Linear(x),
            BySetting::Contextual(x) => BySetting::Contextual(x),
            BySetting::Bai(x) => BySetting::Bai(x),
        }
    }
}

/// What the registry and `dpbandits list` say about one algorithm kind. Declared as a constant in
/// the algorithm's own file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlgorithmInfo {
    /// Config `kind` (written only here).
    pub kind: &'static str,
    /// Name in the paper.
    pub name: &'static str,
    /// Setting.
    pub setting: Setting,
    /// Where it comes from (authors, year, algorithm/equation numbers).
    pub reference: &'static str,
    /// Privacy claim in one line.
    pub privacy: &'static str,
    /// Typical parameters as TOML (e.g. `rho = 1.0`), used by `dpbandits list`, the docs and the
    /// conformance tests (which run every algorithm with them).
    pub example: &'static str,
    /// The source file that implements it (`file!()` of the declaring file).
    pub source: &'static str,
    /// The module documentation of that file (its `# Parameters` section is what `list` shows).
    pub doc: &'static str,
    /// Whether the kind is private: its configurations carry a privacy guarantee (the `rho = inf`
    /// or `epsilon = inf` limit of a private kind is its non-private limit; the non-private
    /// member of a family, e.g. `adaptive_ucb`, says `false`). The conformance suite checks it
    /// against the example's guarantee.
    pub private: bool,
    /// The release keys its parameter table takes, of `boundary`, `noise` and `grid_bits`
    /// ([`PRIVATE_RELEASE`] for a kind whose configuration holds a [`crate::privacy::Release`]).
    /// A private kind taking `noise` deploys (exact discrete noise, `noise = "deployment"`). The
    /// conformance suite checks it against what the parse accepts.
    pub release_keys: &'static [&'static str],
}

/// The release keys of a kind whose configuration holds a [`crate::privacy::Release`] (all three:
/// `boundary`, `noise`, `grid_bits`; the same as `Release::KEYS`, written out: this file is a
/// leaf).
pub const PRIVATE_RELEASE: &[&str] = &["boundary", "noise", "grid_bits"];
/// The release keys of a kind with a deployment path but its own boundary (`noise`, `grid_bits`).
pub const NOISE_KEYS: &[&str] = &["noise", "grid_bits"];
/// No release keys (a non-private kind with no noise path).
pub const NO_RELEASE: &[&str] = &[];

impl AlgorithmInfo {
    /// Whether the kind deploys: private, with the exact discrete noise path (`noise =
    /// "deployment"`). Every private kind of the registry does (the deployment-noise suite).
    pub fn deployable(&self) -> bool {
        self.private && self.takes_release_key("noise")
    }

    /// Whether the kind's parameter table takes the release key `key` (`boundary`, `noise`,
    /// `grid_bits`). For `ldp`, the keys of its inner kind are its inner kind's.
    pub fn takes_release_key(&self, key: &str) -> bool {
        self.release_keys.contains(&key)
    }
}

/// What the registry and `dpbandits list` say about one environment kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvInfo {
    /// Config `kind` (written only here).
    pub kind: &'static str,
    /// Setting.
    pub setting: Setting,
    /// What it models.
    pub description: &'static str,
    /// The source file that implements it.
    pub source: &'static str,
}

/// A configuration read from a parameter table: serde does the types, the required fields
/// (privacy budgets of private kinds have no default) and unknown keys; [`Config::validate`] does
/// the ranges serde cannot express. The registry calls both, once, and nothing re-checks.
pub trait Config: DeserializeOwned {
    /// Check every field (and resolve what follows from them, e.g. a feature file); errors name
    /// the field, the value and what is allowed.
    fn validate(&mut self) -> Result<()>;
}

/// The label `kind(p1=v1,p2=v2)` of a configuration (just `kind` without parameters): used in
/// outputs and to key the policy's random streams ([`crate::rng::POLICY_RUN`]).
pub fn label(kind: &str, params: &[(&str, f64)]) -> String {
    if params.is_empty() {
        kind.to_string()
    } else {
        let inner: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("{kind}({})", inner.join(","))
    }
}

/// The `# Parameters` section of a module documentation (the `//!` lines after the heading up to
/// the next heading), joined into one paragraph; empty if there is none.
pub fn parameters_section(doc: &str) -> String {
    let mut out = vec![];
    let mut inside = false;
    for line in doc.lines() {
        let Some(text) = line.strip_prefix("//!") else {
            if inside {
                break;
            }
            continue;
        };
        let text = text.trim();
        if text.starts_with('#') {
            if inside {
                break;
            }
            inside = text == "# Parameters";
            continue;
        }
        if inside && !text.is_empty() {
            out.push(text);
        }
    }
    out.join(" ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn parameters_section_is_extracted() {
        let doc = "//! # Algorithm\n//! x\n//!\n//! # Parameters\n//! `rho` (> 0),\n//! `beta` (default 1).\n//!\n//! # Privacy\n//! y\nuse a;";
        assert_eq!(
            super::parameters_section(doc),
            "`rho` (> 0), `beta` (default 1)."
        );
        assert_eq!(super::parameters_section("//! nothing"), "");
    }
}

/// What a theoretical regret bound reads of the problem (filled by the experiment's cell): the
/// number of arms (finite, linear) or of actions per round (contextual) `k`, the dimension `d`
/// (linear, contextual; 0 for finite), and the gaps `max_b mu_b - mu_a` of a fixed finite instance
/// (every arm; empty when the cell does not know them).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct BoundInstance {
    /// Arms (or actions per round).
    pub k: usize,
    /// Dimension (0 for finite-armed).
    pub d: usize,
    /// Gaps of every arm of a finite instance (0 for the best).
    pub gaps: Vec<f64>,
}

/// One term `coef * T^t_pow * ln(log_mult * T)^log_pow` of a [`RegretBound`].
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct BoundTerm {
    /// Constant factor (the theorem's constants times the instance's quantities).
    pub coef: f64,
    /// Power of `T`.
    pub t_pow: f64,
    /// Power of the logarithm.
    pub log_pow: f64,
    /// Factor inside the logarithm (`K` for `ln(KT)`, 1 for `ln T`).
    pub log_mult: f64,
}

/// A theoretical regret bound of a configuration on an instance: the paper's formula with the
/// constants it states, as a sum of [`BoundTerm`]s (every bound of the zCDP paper's Table II has
/// this form). Figures overlay it on regret against `T` (`[comparison] bounds = true`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RegretBound {
    /// Where it comes from (paper and theorem).
    pub source: &'static str,
    /// The formula as the paper writes it, with the constants used (e.g. unit constants where
    /// the theorem leaves them unspecified).
    pub formula: String,
    /// The terms, instance and parameters substituted.
    pub terms: Vec<BoundTerm>,
    /// Other rates stated for the same algorithm, each with a short tag (e.g. a published rate
    /// and its correction: LinPriv's, zCDP paper App. F-C), drawn as further overlays
    /// (`bound (<tag>): <label>`) with a slope row of their own; empty for most kinds.
    pub alternatives: Vec<(&'static str, RegretBound)>,
}

impl RegretBound {
    /// The bound at horizon `t` (> 1).
    pub fn at(&self, t: f64) -> f64 {
        self.terms
            .iter()
            .map(|b| {
                let log = (b.log_mult * t).ln().max(0.0);
                b.coef
                    * t.powf(b.t_pow)
                    * if b.log_pow == 0.0 {
                        1.0
                    } else {
                        log.powf(b.log_pow)
                    }
            })
            .sum()
    }

    /// Its log-log slope between `t / 10` and `t`: `log10(B(t) / B(t/10))`.
    pub fn slope(&self, t: f64) -> f64 {
        (self.at(t) / self.at(t / 10.0)).log10()
    }
}
