//! `dpbandits bounds`: characteristic times of fixed-confidence BAI.

use anyhow::{Context, Result, bail};
use dpbandits::bai::{BaiInstance, Bounds};
use std::process::ExitCode;

/// Print the characteristic times for one instance, eps and delta.
pub fn bounds(means: Vec<f64>, epsilon: f64, delta: f64) -> Result<ExitCode> {
    if means.is_empty() {
        bail!("--means: expected a comma-separated list of Bernoulli means in (0, 1)");
    }
    let inst = BaiInstance::new(means.clone()).context("--means")?;
    let b = Bounds::compute(&inst, epsilon, delta).context("bounds")?;
    println!(
        "instance: means = {means:?} (best arm {}), epsilon = {epsilon}, delta = {delta}",
        inst.best()
    );
    println!(
        "T*_KL                      = {:.6} (beta* = {:.4})",
        b.t_kl, b.beta_kl
    );
    println!("T*_KL,1/2                  = {:.6}", b.t_kl_half);
    println!("T*_TV                      = {:.6}", b.t_tv);
    println!(
        "T*_eps                     = {:.6} (beta* = {:.4})",
        b.t_eps, b.beta_eps
    );
    println!("T*_eps,1/2                 = {:.6}", b.t_eps_half);
    println!(
        "max(T*_KL, T*_TV/eps)      = {:.6}",
        b.t_kl.max(b.t_tv / epsilon)
    );
    println!(
        "low-privacy boundary       = {:.6} (T*_eps = T*_KL for eps above it)",
        b.boundary
    );
    println!("lower bound T*_eps ln(1/delta)     = {:.6}", b.lower_bound);
    println!(
        "lower bound T*_eps ln(1/(3 delta)) = {:.6} (Jourdan & Azize 2025)",
        b.lower_bound_3delta
    );
    Ok(ExitCode::SUCCESS)
}
