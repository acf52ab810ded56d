//! The registry: every algorithm and environment by its config `kind`, its paper name, its
//! reference and its privacy claim. `dpbandits list` prints it; the experiment planner and the
//! conformance tests read it.
//!
//! Adding an algorithm = one file implementing it + one line in [`POLICIES`].

use crate::contextual::{
    ContextualEnvConfig, ContextualFileConfig, ContextualGaussianConfig, ContextualPolicyConfig,
    OfulConfig, OfulKind,
};
use crate::env::{BernoulliConfig, BetaConfig, EnvConfig, GaussianConfig, PiecewiseConfig};
use crate::error::{Error, Result};
use crate::policy::{AdaCUcbConfig, KlUcbConfig, PolicyConfig, ThompsonConfig, Ucb1Config};
use crate::policy::{CfConfig, DUcbConfig, LdpConfig, SwKlUcbConfig, SwUcbConfig};
use serde::de::DeserializeOwned;

/// The problem setting an algorithm or environment belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
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

/// How to turn one (sweep-expanded) `[[policy]]` table into a configuration.
#[derive(Clone, Copy)]
#[non_exhaustive]
pub enum PolicyParser {
    /// A finite-armed policy.
    Finite(fn(toml::Table) -> Result<Box<dyn PolicyConfig>>),
    /// A fixed-confidence BAI algorithm (run by `experiment::bai`).
    Bai(crate::bai::BaiParser),
    /// A linear-bandit policy of the GOPE family.
    Linear(fn(toml::Table) -> Result<crate::linear::GopeConfig>),
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
    /// Typical parameters as TOML (e.g. `rho = 1.0`), used by `dpbandits list`, the docs and the
    /// conformance tests (which run every algorithm with them).
    pub example: &'static str,
    /// Parser.
    pub parse: PolicyParser,
}

/// How to turn the `[env]` table into a configuration.
#[derive(Clone, Copy)]
#[non_exhaustive]
pub enum EnvParser {
    /// A finite-armed environment.
    Finite(fn(toml::Table) -> Result<Box<dyn EnvConfig>>),
    /// A linear-bandit environment.
    Linear(fn(toml::Table) -> Result<crate::linear::LinearConfig>),
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
        example: "",
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
        example: "",
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
        example: "",
        name: "Thompson sampling (Beta-Bernoulli)",
        setting: Setting::FiniteArmed,
        reference: "Agrawal & Goyal 2012, Alg. 1-2 (Bernoulli trick for [0,1] rewards)",
        privacy: "none",
        parse: PolicyParser::Finite(|t| finite_policy::<ThompsonConfig>(t, |_| Ok(()))),
    },
    PolicyEntry {
        kind: "adaptive_ucb",
        example: "beta = 1.0",
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
        example: "rho = 1.0",
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
        kind: "adap_ucb",
        example: "epsilon = 1.0",
        name: "AdaP-UCB",
        setting: Setting::FiniteArmed,
        reference: "Azize & Basu 2022 (arXiv:2209.02570), Alg. 1-2",
        privacy: "epsilon-DP (central), Laplace mechanism per (arm, episode)",
        parse: PolicyParser::Finite(|t| {
            crate::policy::adap_ucb::parse(t, crate::policy::AdaPIndex::Ucb)
        }),
    },
    PolicyEntry {
        kind: "adap_klucb",
        example: "epsilon = 1.0",
        name: "AdaP-KLUCB",
        setting: Setting::FiniteArmed,
        reference: "Azize & Basu 2022 (arXiv:2209.02570), Alg. 1 and 3",
        privacy: "epsilon-DP (central), Laplace mechanism per (arm, episode)",
        parse: PolicyParser::Finite(|t| {
            crate::policy::adap_ucb::parse(t, crate::policy::AdaPIndex::KlUcb)
        }),
    },
    PolicyEntry {
        kind: "dp_se",
        example: "epsilon = 1.0\nbeta = 0.001",
        name: "DP-SE",
        setting: Setting::FiniteArmed,
        reference: "Sajed & Sheffet 2019 (arXiv:1905.09383), Alg. 1",
        privacy: "epsilon-DP (central), Laplace mechanism per (arm, epoch)",
        parse: PolicyParser::Finite(crate::policy::dp_se::parse),
    },
    PolicyEntry {
        kind: "dp_ts",
        example: "epsilon = 1.0",
        name: "Lazy-DP-TS",
        setting: Setting::FiniteArmed,
        reference: "Hu & Hegde 2022 (UAI, PMLR 180), Lazy-DP-TS",
        privacy: "epsilon-DP (central), Laplace mechanism per (arm, doubling batch)",
        parse: PolicyParser::Finite(crate::policy::dp_ts::parse),
    },
    PolicyEntry {
        kind: "ldp_ucb",
        example: "epsilon = 1.0",
        name: "LDP-UCB-L / LDP-UCB-B",
        setting: Setting::FiniteArmed,
        reference: "Ren, Zhou, Liu & Shroff 2020 (arXiv:2007.03121), Sec. 4",
        privacy: "epsilon-local DP: Laplace (CTL) or Bernoulli response (CTB) on each reward",
        parse: PolicyParser::Finite(crate::policy::ldp_ucb::parse),
    },
    PolicyEntry {
        kind: "kl_ucb_cf",
        example: "epsilon = 1.0",
        name: "kl-UCB-CF",
        setting: Setting::FiniteArmed,
        reference: "Gajane, Urvoy & Kaufmann 2018 (ALT), kl-UCB-CF; f(t) = ln t + c ln max(1, ln t)",
        privacy: "epsilon-local DP (user-side randomized response per arm; Gajane 2023 Cor. 2)",
        parse: PolicyParser::Finite(|t| {
            let cfg: CfConfig = from_table(t)?;
            cfg.validate()?;
            Ok(Box::new(cfg))
        }),
    },
    PolicyEntry {
        kind: "sw_klucb_cf",
        example: "epsilon = 1.0\nwindow = 1000",
        name: "SW-KLUCB-CF",
        setting: Setting::FiniteArmed,
        reference: "Gajane 2023, Algorithm 1 (index in two-step form, f(t ^ w) with f_safe)",
        privacy: "epsilon-local DP (user-side randomized response per arm; Gajane 2023 Cor. 2)",
        parse: PolicyParser::Finite(|t| {
            let mut cfg: CfConfig = from_table(t)?;
            cfg.windowed = true;
            cfg.validate()?;
            Ok(Box::new(cfg))
        }),
    },
    PolicyEntry {
        kind: "ldp",
        example: "inner = \"kl_ucb\"\nepsilon = 1.0",
        name: "LDP wrapper: any non-private policy on randomized-response feedback",
        setting: Setting::FiniteArmed,
        reference: "Gajane 2023, Sec. 3 (corruption-oblivious baseline); Ren et al. 2020 Bernoulli response",
        privacy: "epsilon-local DP (user-side randomized response per arm)",
        parse: PolicyParser::Finite(|t| Ok(Box::new(LdpConfig::from_table(t)?))),
    },
    PolicyEntry {
        kind: "sw_ucb",
        example: "window = 1000",
        name: "SW-UCB",
        setting: Setting::FiniteArmed,
        reference: "Garivier & Moulines 2011, Sec. 4 (sliding-window UCB)",
        privacy: "none",
        parse: PolicyParser::Finite(|t| finite_policy::<SwUcbConfig>(t, SwUcbConfig::validate)),
    },
    PolicyEntry {
        kind: "sw_kl_ucb",
        example: "window = 1000",
        name: "SW-kl-UCB",
        setting: Setting::FiniteArmed,
        reference: "sliding-window kl-UCB (SMPyBandits SWklUCB) with Gajane 2023's f(t ^ w)",
        privacy: "none",
        parse: PolicyParser::Finite(|t| finite_policy::<SwKlUcbConfig>(t, SwKlUcbConfig::validate)),
    },
    PolicyEntry {
        kind: "d_ucb",
        example: "gamma = 0.999",
        name: "Discounted UCB (D-UCB)",
        setting: Setting::FiniteArmed,
        reference: "Garivier & Moulines 2011, Sec. 3 (discounted UCB)",
        privacy: "none",
        parse: PolicyParser::Finite(|t| finite_policy::<DUcbConfig>(t, DUcbConfig::validate)),
    },
    PolicyEntry {
        kind: "dp_tt",
        example: "epsilon = 1.0",
        name: "DP-TT (Differentially Private Top Two)",
        setting: Setting::Bai,
        reference: "Jourdan & Azize 2025 (NeurIPS), Alg. 1; threshold: spec dp-bai 3.5.2 Proposal R (paper's Eq. (8) not recovered)",
        privacy: "eps-global DP (pure, central), Laplace 1/eps per phase increment, geometric phases, no forgetting",
        parse: PolicyParser::Bai(crate::bai::BaiParser {
            parse: |t| {
                let cfg: crate::bai::dp_tt::DpTtConfig = from_table(t)?;
                cfg.validate()?;
                Ok(Box::new(cfg))
            },
            private: true,
        }),
    },
    PolicyEntry {
        kind: "adap_tt",
        example: "epsilon = 1.0",
        name: "AdaP-TT",
        setting: Setting::Bai,
        reference: "Azize, Jourdan, Al Marjani & Basu 2023 (NeurIPS); thesis Sec. 5.4.1-5.4.2, thresholds (5.10)-(5.11)",
        privacy: "eps-global DP (pure, central), Laplace 1/(eps N) per phase mean, doubling phases with forgetting",
        parse: PolicyParser::Bai(crate::bai::BaiParser {
            parse: |t| {
                let cfg: crate::bai::adap_tt::AdapTtConfig = from_table(t)?;
                cfg.validate()?;
                Ok(Box::new(cfg))
            },
            private: true,
        }),
    },
    PolicyEntry {
        kind: "adap_tt_star",
        example: "epsilon = 1.0",
        name: "AdaP-TT*",
        setting: Setting::Bai,
        reference: "Azize, Jourdan, Al Marjani & Basu 2026 (JMLR); thesis Sec. 5.4.3, threshold (5.14)",
        privacy: "eps-global DP (pure, central), Laplace 1/(eps N) per phase mean, doubling phases with forgetting",
        parse: PolicyParser::Bai(crate::bai::BaiParser {
            parse: |t| {
                let mut cfg: crate::bai::adap_tt::AdapTtConfig = from_table(t)?;
                cfg.star = true;
                cfg.validate()?;
                Ok(Box::new(cfg))
            },
            private: true,
        }),
    },
    PolicyEntry {
        kind: "eb_tci",
        example: "",
        name: "EB-TCI (non-private Top Two)",
        setting: Setting::Bai,
        reference: "Jourdan, Degenne, Baudry, de Heide & Kaufmann 2022 (NeurIPS), EB leader + TCI challenger",
        privacy: "none",
        parse: PolicyParser::Bai(crate::bai::BaiParser {
            parse: |t| {
                let cfg: crate::bai::eb_tci::EbTciConfig = from_table(t)?;
                cfg.validate()?;
                Ok(Box::new(cfg))
            },
            private: false,
        }),
    },
    PolicyEntry {
        kind: "gope",
        example: "delta = 0.001",
        name: "GOPE (G-optimal phased elimination)",
        setting: Setting::Linear,
        reference: "Azize & Basu 2024, Sec. VII baseline: Algorithm 2 with rho = inf (spec zcdp §3.6); Lattimore & Szepesvari 2020, Alg. 12",
        privacy: "none",
        parse: PolicyParser::Linear(|t| {
            linear_policy(t, crate::linear::NoisePlacement::None, false)
        }),
    },
    PolicyEntry {
        kind: "adac_gope",
        example: "rho = 1.0\ndelta = 0.001",
        name: "AdaC-GOPE",
        setting: Setting::Linear,
        reference: "Azize & Basu 2024, Algorithm 2, Eq. (4)-(5), App. D-C, E",
        privacy: "rho-Interactive zCDP (central), Gaussian noise V^(-1/2) N on the phase statistic, once per phase",
        parse: PolicyParser::Linear(|t| {
            linear_policy(t, crate::linear::NoisePlacement::Intermediate, true)
        }),
    },
    PolicyEntry {
        kind: "adar_gope_var",
        example: "rho = 1.0\ndelta = 0.001",
        name: "AdaR-GOPE-Var (noise on each per-arm sum of rewards)",
        setting: Setting::Linear,
        reference: "Azize & Basu 2024, App. E-C2 and App. H (Fig. 5); zCDP form of Hanna et al. 2022 / Li, Zhou & Ji 2022; phase length derived for its noise (Thm 13 steps, linear/gope.rs), phase_length = \"eq4\" for Eq. (4)",
        privacy: "rho-Interactive zCDP (central), Gaussian noise N(0, 2/rho) on each per-arm reward sum, once per phase",
        parse: PolicyParser::Linear(|t| {
            linear_policy(t, crate::linear::NoisePlacement::PerArmSums, true)
        }),
    },
    PolicyEntry {
        kind: "gope_output_perturbation",
        example: "rho = 1.0\ndelta = 0.001",
        name: "GOPE with output perturbation",
        setting: Setting::Linear,
        reference: "Azize & Basu 2024, App. E-C1 (calibration derived in spec zcdp §3.7)",
        privacy: "rho-Interactive zCDP (central), Gaussian noise on theta^ with sensitivity 2 max ||V^(-1) a||, once per phase",
        parse: PolicyParser::Linear(|t| {
            linear_policy(t, crate::linear::NoisePlacement::Output, true)
        }),
    },
    PolicyEntry {
        kind: "oful",
        example: "",
        name: "OFUL",
        setting: Setting::Contextual,
        reference: "Abbasi-Yadkori, Pal & Szepesvari 2011, Alg. 1, Thm 2 radius",
        privacy: "none",
        parse: PolicyParser::Contextual(|t| oful_policy(t, OfulKind::Oful)),
    },
    PolicyEntry {
        kind: "rs_oful",
        example: "c = 1.0",
        name: "RS-OFUL (rarely switching OFUL)",
        setting: Setting::Contextual,
        reference: "Abbasi-Yadkori, Pal & Szepesvari 2011, Sec. 5 (det V > (1+C) det V_tau); Azize & Basu 2024 Sec. VII baseline",
        privacy: "none",
        parse: PolicyParser::Contextual(|t| oful_policy(t, OfulKind::RsOful)),
    },
    PolicyEntry {
        kind: "adac_oful",
        example: "rho = 1.0",
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

fn linear_policy(
    mut t: toml::Table,
    placement: crate::linear::NoisePlacement,
    needs_rho: bool,
) -> Result<crate::linear::GopeConfig> {
    if needs_rho && !t.contains_key("rho") {
        return Err(Error::param(
            "rho",
            "(missing)",
            "a number > 0 (inf gives the non-private limit)",
        ));
    }
    if !needs_rho {
        t.entry("rho").or_insert(toml::Value::Float(f64::INFINITY));
    }
    let mut cfg: crate::linear::GopeConfig = from_table(t)?;
    cfg.placement = placement;
    cfg.validate()?;
    Ok(cfg)
}

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
        kind: "piecewise_bernoulli",
        setting: Setting::FiniteArmed,
        description: "piecewise-stationary Bernoulli arms: means per segment, breakpoints given (or as fractions of T) or a seeded random instance; dynamic regret, exact across breakpoints",
        parse: EnvParser::Finite(|t| {
            let mut cfg: PiecewiseConfig = from_table(t)?;
            cfg.validate()?;
            Ok(Box::new(cfg))
        }),
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
        kind: "corrupt_bernoulli",
        setting: Setting::FiniteArmed,
        description: "piecewise-stationary Bernoulli arms whose learner sees only randomized-response feedback (per-arm p00, p11 or epsilon); regret on the true means",
        parse: EnvParser::Finite(|t| {
            let mut cfg: PiecewiseConfig = from_table(t)?;
            cfg.corrupt_kind = true;
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
    EnvEntry {
        kind: "linear",
        setting: Setting::Linear,
        description: "Linear bandit: K arms in R^d (given, or uniform on the unit sphere), reward <theta, a> + N(0, sigma^2); exact Normal block sums",
        parse: EnvParser::Linear(|t| {
            let cfg: crate::linear::LinearConfig = from_table(t)?;
            cfg.validate()?;
            Ok(cfg)
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

impl PolicyEntry {
    /// The entry's example configuration, parsed (`None` if the algorithm is not finite-armed).
    pub fn example_finite(&self) -> Option<Result<Box<dyn PolicyConfig>>> {
        match self.parse {
            PolicyParser::Finite(parse) => Some(
                toml::from_str::<toml::Table>(self.example)
                    .map_err(|e| Error::Config(e.to_string()))
                    .and_then(parse),
            ),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }
}
