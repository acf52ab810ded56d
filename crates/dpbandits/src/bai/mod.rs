//! Fixed-confidence best-arm identification (BAI) under eps-global differential privacy.
pub mod charact;
pub mod divergence;
pub mod threshold;
