//! Numerical helpers shared by several algorithms.

pub mod kl;
pub mod normal;
pub mod stats;
