//! The registry: every algorithm and environment by its config `kind`, its paper name, its
//! reference and its privacy claim. `dpbandits list` prints it; the experiment planner and the
//! conformance tests read it.
//!
//! Adding an algorithm = one file implementing it + one line in [`POLICIES`].

use crate::contextual::{
    ContextualEnvConfig, ContextualFileConfig, ContextualGaussianConfig, ContextualPolicyConfig,
    OfulConfig, OfulKind,
};
use crate::env::{BernoulliConfig, BetaConfig, EnvConfig, GaussianConfig};
use crate::error::{Error, Result};
use crate::policy::{AdaCUcbConfig, KlUcbConfig, PolicyConfig, ThompsonConfig, Ucb1Config};
use serde::de::DeserializeOwned;

/// The problem setting an algorithm or environment belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Setting {
    /// K-armed stochastic bandits, regret minimisation.
    FiniteArmed,
    /// Linear contextual bandits with a public decision set every round.
    Contextual,
}

impl std::fmt::Display for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Setting::FiniteArmed => "finite-armed",
            Setting::Contextual => "contextual linear",
        })
    }
}

/// How to turn one (sweep-expanded) `[[policy]]` table into a configuration.
#[derive(Clone, Copy)]
#[non_exhaustive]
pub enum PolicyParser {
    /// A finite-armed policy.
    Finite(fn(toml::Table) -> Result<Box<dyn PolicyConfig>>),
    /// A contextual linear policy.
    Contextual(fn(toml::Table) -> Result<Box<dyn ContextualPolicyConfig>>),
}

impl std::fmt::Debug for PolicyParser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PolicyParser")
    }
}

/// One algorithm.
#[derive(Debug, Clone, Copy)]
pub struct PolicyEntry {
    /// Config `kind` and module name.
    pub kind: &'static str,
    /// Name in the paper.
    pub name: &'static str,
    /// Setting.
    pub setting: Setting,
    /// Where it comes from (authors, year, algorithm/equation numbers).
    pub reference: &'static str,
    /// Privacy claim in one line.
    pub privacy: &'static str,
    /// Parser.
    pub parse: PolicyParser,
}

/// How to turn the `[env]` table into a configuration.
#[derive(Clone, Copy)]
#[non_exhaustive]
pub enum EnvParser {
    /// A finite-armed environment.
    Finite(fn(toml::Table) -> Result<Box<dyn EnvConfig>>),
    /// A contextual environment.
    Contextual(fn(toml::Table) -> Result<Box<dyn ContextualEnvConfig>>),
}

impl std::fmt::Debug for EnvParser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EnvParser")
    }
}

/// One environment.
#[derive(Debug, Clone, Copy)]
pub struct EnvEntry {
    /// Config `kind`.
    pub kind: &'static str,
    /// Setting.
    pub setting: Setting,
    /// What it models.
    pub description: &'static str,
    /// Parser.
    pub parse: EnvParser,
}

/// Deserialize a table into `T` with a clear message (unknown keys, wrong types).
pub fn from_table<T: DeserializeOwned>(t: toml::Table) -> Result<T> {
    toml::Value::Table(t)
        .try_into()
        .map_err(|e: toml::de::Error| Error::Config(e.message().trim().to_string()))
}

fn finite_policy<T: DeserializeOwned + PolicyConfig + 'static>(
    t: toml::Table,
    validate: fn(&T) -> Result<()>,
) -> Result<Box<dyn PolicyConfig>> {
    let cfg: T = from_table(t)?;
    validate(&cfg)?;
    Ok(Box::new(cfg))
}

/// All algorithms.
pub static POLICIES: &[PolicyEntry] = &[
    PolicyEntry {
        kind: "ucb1",
        name: "UCB1",
        setting: Setting::FiniteArmed,
        reference: "Auer, Cesa-Bianchi & Fischer 2002, Fig. 1",
        privacy: "none",
        parse: PolicyParser::Finite(|t| {
            finite_policy::<Ucb1Config>(t, |c| {
                crate::error::check::positive("alpha", c.alpha).map(drop)
            })
        }),
    },
    PolicyEntry {
        kind: "kl_ucb",
        name: "kl-UCB",
        setting: Setting::FiniteArmed,
        reference: "Garivier & Cappe 2011, Eq. (2)",
        privacy: "none",
        parse: PolicyParser::Finite(|t| {
            finite_policy::<KlUcbConfig>(t, |c| crate::policy::KlUcb::new(1, c.c).map(drop))
        }),
    },
    PolicyEntry {
        kind: "thompson",
        name: "Thompson sampling (Beta-Bernoulli)",
        setting: Setting::FiniteArmed,
        reference: "Agrawal & Goyal 2012, Alg. 1-2 (Bernoulli trick for [0,1] rewards)",
        privacy: "none",
        parse: PolicyParser::Finite(|t| finite_policy::<ThompsonConfig>(t, |_| Ok(()))),
    },
    PolicyEntry {
        kind: "adaptive_ucb",
        name: "UCB with adaptive episodes and forgetting",
        setting: Setting::FiniteArmed,
        reference: "Azize & Basu 2024, Sec. VII-A baseline (AdaC-UCB with rho = inf; spec zcdp §2.7)",
        privacy: "none",
        parse: PolicyParser::Finite(|mut t| {
            t.entry("rho").or_insert(toml::Value::Float(f64::INFINITY));
            let mut cfg: AdaCUcbConfig = from_table(t)?;
            cfg.non_private_kind = true;
            cfg.validate()?;
            Ok(Box::new(cfg))
        }),
    },
    PolicyEntry {
        kind: "adac_ucb",
        name: "AdaC-UCB",
        setting: Setting::FiniteArmed,
        reference: "Azize & Basu 2024, Algorithm 4, Eq. (14)",
        privacy: "rho-Interactive zCDP (central), Gaussian mechanism per (arm, episode)",
        parse: PolicyParser::Finite(|t| {
            if !t.contains_key("rho") {
                return Err(Error::param(
                    "rho",
                    "(missing)",
                    "a number > 0 (inf gives the non-private limit)",
                ));
            }
            finite_policy::<AdaCUcbConfig>(t, AdaCUcbConfig::validate)
        }),
    },
    PolicyEntry {
        kind: "oful",
        name: "OFUL",
        setting: Setting::Contextual,
        reference: "Abbasi-Yadkori, Pal & Szepesvari 2011, Alg. 1, Thm 2 radius",
        privacy: "none",
        parse: PolicyParser::Contextual(|t| oful_policy(t, OfulKind::Oful)),
    },
    PolicyEntry {
        kind: "rs_oful",
        name: "RS-OFUL (rarely switching OFUL)",
        setting: Setting::Contextual,
        reference: "Abbasi-Yadkori, Pal & Szepesvari 2011, Sec. 5 (det V > (1+C) det V_tau); Azize & Basu 2024 Sec. VII baseline",
        privacy: "none",
        parse: PolicyParser::Contextual(|t| oful_policy(t, OfulKind::RsOful)),
    },
    PolicyEntry {
        kind: "adac_oful",
        name: "AdaC-OFUL",
        setting: Setting::Contextual,
        reference: "Azize & Basu 2024, Algorithm 3, Thm 5/14 (radius beta + gamma/sqrt t)",
        privacy: "rho-Interactive zCDP (central), Gaussian mechanism on each episode's sum of a_s r_s",
        parse: PolicyParser::Contextual(|t| {
            if !t.contains_key("rho") {
                return Err(Error::param(
                    "rho",
                    "(missing)",
                    "a number > 0 (inf gives the RS-OFUL limit)",
                ));
            }
            oful_policy(t, OfulKind::AdacOful)
        }),
    },
];

fn oful_policy(t: toml::Table, kind: OfulKind) -> Result<Box<dyn ContextualPolicyConfig>> {
    let refused: &[&str] = match kind {
        OfulKind::Oful => &["rho", "c", "mode", "radius", "lambda0"],
        OfulKind::RsOful => &["rho", "mode", "radius", "lambda0"],
        OfulKind::AdacOful => &[],
    };
    for &k in refused {
        if let Some(v) = t.get(k) {
            return Err(Error::param(
                k,
                v,
                "nothing: this parameter does not apply to this non-private kind",
            ));
        }
    }
    let mut cfg: OfulConfig = from_table(t)?;
    cfg.kind = kind;
    cfg.validate()?;
    Ok(Box::new(cfg))
}

fn finite_env<T: DeserializeOwned + EnvConfig + 'static>(
    t: toml::Table,
    validate: fn(&T) -> Result<()>,
) -> Result<Box<dyn EnvConfig>> {
    let cfg: T = from_table(t)?;
    validate(&cfg)?;
    Ok(Box::new(cfg))
}

/// All environments.
pub static ENVIRONMENTS: &[EnvEntry] = &[
    EnvEntry {
        kind: "bernoulli",
        setting: Setting::FiniteArmed,
        description: "Bernoulli arms with the given means (rewards in {0,1}); exact Binomial episode sums",
        parse: EnvParser::Finite(|t| {
            finite_env::<BernoulliConfig>(t, |c| crate::error::check::unit_means("means", &c.means))
        }),
    },
    EnvEntry {
        kind: "gaussian",
        setting: Setting::FiniteArmed,
        description: "Gaussian arms N(mean, sigma^2), optionally clipped to [lo, hi]; exact Normal episode sums when unclipped",
        parse: EnvParser::Finite(|t| finite_env::<GaussianConfig>(t, GaussianConfig::validate)),
    },
    EnvEntry {
        kind: "beta",
        setting: Setting::FiniteArmed,
        description: "Beta arms with the given means in (0,1): general bounded rewards in [0,1]",
        parse: EnvParser::Finite(|t| finite_env::<BetaConfig>(t, BetaConfig::validate)),
    },
    EnvEntry {
        kind: "contextual_gaussian",
        setting: Setting::Contextual,
        description: "the paper's contexts: every round k fresh actions i.i.d. N(mean 1, variance I_d), theta* on the unit sphere, Gaussian reward noise",
        parse: EnvParser::Contextual(|t| {
            let cfg: ContextualGaussianConfig = from_table(t)?;
            cfg.validate()?;
            Ok(Box::new(cfg))
        }),
    },
    EnvEntry {
        kind: "contextual_file",
        setting: Setting::Contextual,
        description: "decision sets replayed from a feature file (.npy of shape (n, K, d), or .csv lines 'context,f_1..f_d'), Gaussian reward noise",
        parse: EnvParser::Contextual(|t| {
            let mut cfg: ContextualFileConfig = from_table(t)?;
            cfg.validate()?;
            Ok(Box::new(cfg))
        }),
    },
];

/// Look up an algorithm by kind.
pub fn policy(kind: &str) -> Result<&'static PolicyEntry> {
    POLICIES.iter().find(|e| e.kind == kind).ok_or_else(|| {
        let known: Vec<&str> = POLICIES.iter().map(|e| e.kind).collect();
        Error::param(
            "kind",
            format!("\"{kind}\""),
            format!("one of: {}", known.join(", ")),
        )
    })
}

/// Look up an environment by kind.
pub fn environment(kind: &str) -> Result<&'static EnvEntry> {
    ENVIRONMENTS.iter().find(|e| e.kind == kind).ok_or_else(|| {
        let known: Vec<&str> = ENVIRONMENTS.iter().map(|e| e.kind).collect();
        Error::param(
            "kind",
            format!("\"{kind}\""),
            format!("one of: {}", known.join(", ")),
        )
    })
}
