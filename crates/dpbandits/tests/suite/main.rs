//! The library's integration tests, in one binary (one link step): the conformance suite over
//! the registry, the fast-path equivalence tests and the per-setting tests.

mod architecture;
mod bai;
mod blocks;
mod conformance;
mod contextual;
mod deployment_noise;
mod fast_path;
mod fuzz;
mod ldp_nonstationary;
mod linear;
mod pipeline;
mod private_baselines;
mod session;
