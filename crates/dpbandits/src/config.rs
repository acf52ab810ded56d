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
