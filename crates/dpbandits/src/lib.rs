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
//! * [`linear`]: linear bandits with a finite arm set: environment, G-optimal design, GOPE and
//!   its rho-zCDP variants.
//! * [`policy`]: the object-safe [`policy::Policy`] trait and the finite-armed policies.
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
//! | `adac_gope` | AdaC-GOPE | linear (finite arm set) | rho-Interactive zCDP, central | Azize & Basu 2024, Alg. 2, Eq. (4)-(5) | calibration-tested |
//! | `gope` | GOPE (rho -> inf limit of Alg. 2) | linear (finite arm set) | none | Azize & Basu 2024, Sec. VII baseline; Lattimore & Szepesvari Alg. 12 | tested |
//! | `adar_gope_var` | AdaR-GOPE-Var (noise on per-arm reward sums) | linear (finite arm set) | rho-Interactive zCDP, central | Azize & Basu 2024, App. E-C2, App. H | calibration-tested |
//! | `gope_output_perturbation` | GOPE with output perturbation | linear (finite arm set) | rho-Interactive zCDP, central | Azize & Basu 2024, App. E-C1 | calibration-tested |
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

pub mod env;
pub mod error;
pub mod experiment;
pub mod linear;
pub mod math;
pub mod policy;
pub mod privacy;
pub mod registry;
pub mod rng;
pub mod sim;

pub use error::{Error, Result};
