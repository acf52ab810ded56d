//! # dpbandits
//!
//! Differentially private bandit algorithms with their privacy claims attached, the environments
//! to test them on, and a reproducible simulator that reproduces the papers' figures.
//!
//! ## Contents
//! Every setting has the same shape: a folder with its traits in `mod.rs`, one file per
//! environment, one file per paper algorithm family named after it, and its run loop in `sim.rs`
//! (`docs/architecture.md`).
//!
//! * [`finite`]: K-armed bandits: [`finite::Environment`] / [`finite::Policy`], Bernoulli,
//!   Gaussian, Beta, piecewise-stationary and corrupt-feedback environments, AdaC-UCB, AdaP-UCB,
//!   DP-SE, Lazy-DP-TS, LDP-UCB, kl-UCB-CF, the non-private baselines, the episode fast path.
//! * [`linear`]: linear bandits with a finite arm set: the Gaussian-noise instance, G-optimal
//!   design, GOPE and its rho-zCDP variants (AdaC-GOPE, AdaR-GOPE-Var, output perturbation),
//!   LinUCB.
//! * [`contextual`]: linear contextual bandits: the paper's context generator, feature files,
//!   OFUL / RS-OFUL / AdaC-OFUL, the common-random-numbers run loop.
//! * [`bai`]: fixed-confidence best-arm identification under eps-global DP (DP-TT, AdaP-TT,
//!   AdaP-TT*, DP-SE, EB-TCI), `d_eps`, transportation costs and characteristic times.
//! * [`privacy`]: budgets, [`privacy::PrivacyGuarantee`], mechanisms with privacy maps
//!   ([`privacy::GaussianMechanism`] calibrated for rho-zCDP), the reward boundary, budget
//!   conversions ([`privacy::pure_to_zcdp`], [`privacy::zcdp_to_approx_dp`]). There is no
//!   privacy accountant: each policy's [`privacy::PrivacyGuarantee`] states the budget of its whole run.
//! * [`sim`]: checkpoint grids, experiment cells, deterministic parallel jobs.
//! * [`rng`]: one master seed, named seed derivations, the portable Xoshiro256++ generator.
//! * [`config`]: the records and the config trait every algorithm file uses to describe itself.
//! * `registry` and `experiment` (feature `experiment`, on by default): every algorithm by its
//!   config `kind` and paper name; TOML experiment files, sweeps, outputs (manifest, CSV,
//!   SVG/PNG plots). With `default-features = false` the crate is the core only (no TOML, no
//!   plotting).
//!
//! ## Algorithms
//!
//! | kind | paper name | setting | privacy | reference | status |
//! |---|---|---|---|---|---|
//! | `adac_ucb` | AdaC-UCB | finite-armed | rho-Interactive zCDP, central | Azize & Basu 2024, Alg. 4, Eq. (14) | calibration-tested |
//! | `adaptive_ucb` | UCB with adaptive episodes and forgetting | finite-armed | none | Azize & Basu 2024, Sec. VII-A | tested |
//! | `ucb1` | UCB1 | finite-armed | none | Auer et al. 2002 | tested |
//! | `kl_ucb` | kl-UCB | finite-armed | none | Garivier & Cappe 2011 | tested |
//! | `thompson` | Thompson sampling | finite-armed | none | Agrawal & Goyal 2012 | tested |
//! | `adap_ucb` | AdaP-UCB | finite-armed | epsilon-DP, central | Azize & Basu 2022, Alg. 1-2 | calibration-tested |
//! | `adap_klucb` | AdaP-KLUCB | finite-armed | epsilon-DP, central | Azize & Basu 2022, Alg. 1, 3 | calibration-tested |
//! | `dp_se` | DP-SE | finite-armed | epsilon-DP, central | Sajed & Sheffet 2019, Alg. 1 | calibration-tested |
//! | `dp_ts` | Lazy-DP-TS | finite-armed | epsilon-DP, central | Hu & Hegde 2022 | calibration-tested |
//! | `ldp_ucb` | LDP-UCB-L / LDP-UCB-B | finite-armed | epsilon-LDP, local | Ren et al. 2020, Sec. 4 | calibration-tested |
//! | `kl_ucb_cf` | kl-UCB-CF | finite-armed | epsilon-LDP, local (randomized response) | Gajane, Urvoy & Kaufmann 2018 | equivalence-tested |
//! | `sw_klucb_cf` | SW-KLUCB-CF | finite-armed, piecewise-stationary | epsilon-LDP, local (randomized response) | Gajane 2023, Alg. 1 | equivalence-tested |
//! | `ldp` | any non-private policy on randomized-response feedback | finite-armed | epsilon-LDP, local | Gajane 2023, Sec. 3 | tested |
//! | `sw_ucb` | SW-UCB | finite-armed, piecewise-stationary | none | Garivier & Moulines 2011, Sec. 4 | tested |
//! | `sw_kl_ucb` | SW-kl-UCB | finite-armed, piecewise-stationary | none | SMPyBandits SWklUCB; f of Gajane 2023 | tested |
//! | `d_ucb` | Discounted UCB | finite-armed, piecewise-stationary | none | Garivier & Moulines 2011, Sec. 3 | tested |
//! | `dp_tt` | DP-TT | BAI (fixed confidence) | eps-global DP (pure, central) | Jourdan & Azize 2025, Alg. 1 (threshold: our delta-correct Proposal J) | tested, see docs/bai.md |
//! | `adap_tt` | AdaP-TT | BAI (fixed confidence) | eps-global DP (pure, central) | Azize et al. 2023; thesis (5.10)-(5.11) | tested |
//! | `adap_tt_star` | AdaP-TT* | BAI (fixed confidence) | eps-global DP (pure, central) | Azize et al. 2026 (JMLR); thesis (5.14) | tested |
//! | `dp_se_bai` | DP-SE (fixed-confidence BAI) | BAI (fixed confidence) | eps-global DP (pure, central) | Sajed & Sheffet 2019; Azize thesis (spec dp-bai §4.5) | tested |
//! | `eb_tci` | EB-TCI (Top Two) | BAI (fixed confidence) | none | Jourdan et al. 2022 | tested |
//! | `adac_gope` | AdaC-GOPE | linear (finite arm set) | rho-Interactive zCDP, central | Azize & Basu 2024, Alg. 2, Eq. (4)-(5) | calibration-tested |
//! | `gope` | GOPE (rho -> inf limit of Alg. 2) | linear (finite arm set) | none | Azize & Basu 2024, Sec. VII baseline; Lattimore & Szepesvari Alg. 12 | tested |
//! | `lin_ucb` | LinUCB (OFUL on a fixed arm set) | linear (finite arm set) | none | Abbasi-Yadkori et al. 2011, Alg. 1 | tested |
//! | `adar_gope_var` | AdaR-GOPE-Var (noise on per-arm reward sums, own phase length) | linear (finite arm set) | rho-Interactive zCDP, central | Azize & Basu 2024, App. E-C2, App. H | calibration-tested |
//! | `gope_output_perturbation` | GOPE with output perturbation | linear (finite arm set) | rho-Interactive zCDP, central | Azize & Basu 2024, App. E-C1 | calibration-tested |
//! | `adac_oful` | AdaC-OFUL | contextual linear | rho-Interactive zCDP, central | Azize & Basu 2024, Alg. 3, Thm 14 | calibration-tested |
//! | `rs_oful` | RS-OFUL (rarely switching) | contextual linear | none | Abbasi-Yadkori et al. 2011, Sec. 5 | tested |
//! | `oful` | OFUL | contextual linear | none | Abbasi-Yadkori et al. 2011, Alg. 1 | tested |
//!
//! ## Example
//! ```
//! use dpbandits::finite::{Bernoulli, Environment};
//! use dpbandits::finite::{AdaCUcb, AdaCUcbConfig, Policy};
//!
//! let mut env = Bernoulli::new(vec![0.75, 0.5, 0.25], 1).unwrap();
//! let mut policy = AdaCUcb::new(3, AdaCUcbConfig::private(0.5), 2).unwrap();
//! println!("{}", policy.guarantee().summary()); // rho-Interactive zCDP ... with rho = 0.5
//! let mut t = 0;
//! while t < 10_000 {
//!     let pull = policy.choose(t);
//!     let r = env.pull(pull.arm, t);
//!     policy.observe(pull.arm, r);
//!     t += 1;
//! }
//! assert!(policy.pulls()[0] > policy.pulls()[2]);
//! ```
//!
//! ## Security
//! See [`privacy`]: the floating-point, seeded mechanisms are simulation-grade.

#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![deny(missing_debug_implementations)]

#[cfg(feature = "experiment")]
pub mod audit;
pub mod bai;
pub mod config;
pub mod contextual;
pub mod error;
#[cfg(feature = "experiment")]
pub mod experiment;
pub mod finite;
pub mod linear;
pub mod math;
#[cfg(feature = "experiment")]
pub mod offline;
pub mod privacy;
pub mod protocol;
#[cfg(feature = "experiment")]
pub mod registry;
pub mod report;
pub mod rng;
#[cfg(feature = "experiment")]
pub mod session;
pub mod sim;
pub mod snapshot;

pub use error::{Error, Result};
