//! Stochastic linear bandits with a finite arm set (spec zcdp §1.2, §3): the environment, the
//! G-optimal design solver, and GOPE with its rho-zCDP variants (AdaC-GOPE, AdaR-GOPE-Var, output
//! perturbation).
//!
//! Phased algorithms are simulated in O(support arms) per phase: each support arm's block of
//! `T_l(a)` pulls is one exact draw of its reward sum (see `experiment::LinearCell`).
//! Linear algebra uses `nalgebra` (Cholesky for solves and log-determinants, the symmetric
//! eigendecomposition for `V^{-1/2}` and for the span of non-spanning arm sets).

pub mod design;
pub mod env;
pub mod gope;

pub use design::{Design, DesignOptions, DesignSolver, Span, g_optimal};
pub use env::{LinearConfig, LinearEnv, LinearInstance};
pub use gope::{
    GopeConfig, GopeConstants, NoiseCalibration, NoisePlacement, PhaseLength, PhasePlan,
    PhaseRelease, PhasedElimination, per_arm_sums_privacy_term, phase_length,
};
