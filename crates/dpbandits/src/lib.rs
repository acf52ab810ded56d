//! # dpbandits
//!
//! Differentially private bandit algorithms with their privacy claims attached, the environments
//! to test them on, and a reproducible simulator that reproduces the papers' figures.
//!
//! ## Contents
//! * [`privacy`]: budgets, [`privacy::PrivacyGuarantee`], mechanisms with privacy maps
//!   ([`privacy::GaussianMechanism`] calibrated for rho-zCDP), the reward boundary.
//! * [`env`]: finite-armed environments (Bernoulli, Gaussian with optional clipping, Beta) with
//!   exact episode sums.
//! * [`policy`]: the object-safe [`policy::Policy`] trait and the finite-armed policies.
//! * [`contextual`]: linear contextual bandits: the paper's context generator, feature files,
//!   OFUL / RS-OFUL / AdaC-OFUL, the common-random-numbers run loop.
//! * [`sim`]: checkpoint grids, the episode fast path, deterministic parallel runs.
//! * [`experiment`]: TOML experiment files, sweeps, outputs (manifest, CSV, SVG/PNG plots).
//! * [`registry`]: every algorithm by its config `kind` and paper name.
//! * [`rng`]: one master seed, named streams, the portable Xoshiro256++ generator.
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
//! | `adac_oful` | AdaC-OFUL | contextual linear | rho-Interactive zCDP, central | Azize & Basu 2024, Alg. 3, Thm 14 | calibration-tested |
//! | `rs_oful` | RS-OFUL (rarely switching) | contextual linear | none | Abbasi-Yadkori et al. 2011, Sec. 5 | tested |
//! | `oful` | OFUL | contextual linear | none | Abbasi-Yadkori et al. 2011, Alg. 1 | tested |
//!
//! ## Example
//! ```
//! use dpbandits::env::{Bernoulli, Environment};
//! use dpbandits::policy::{AdaCUcb, AdaCUcbConfig, Policy};
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

pub mod contextual;
pub mod env;
pub mod error;
pub mod experiment;
pub mod math;
pub mod policy;
pub mod privacy;
pub mod registry;
pub mod rng;
pub mod sim;

pub use error::{Error, Result};
