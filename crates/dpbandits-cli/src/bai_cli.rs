//! `dpbandits bounds` and the BAI branch of `dpbandits run`.

use anyhow::{Context, Result, bail};
use dpbandits::bai::{BaiInstance, Bounds};
use dpbandits::experiment::bai::{self, BaiPlan};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

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

/// Run a BAI experiment file.
pub fn run(
    text: &str,
    source: &str,
    out: Option<PathBuf>,
    threads: Option<usize>,
    runs: Option<u64>,
    quiet: bool,
) -> Result<ExitCode> {
    let mut spec = bai::BaiSpec::from_toml(text).with_context(|| source.to_string())?;
    if let Some(r) = runs {
        if r == 0 {
            bail!("--runs 0: expected an integer >= 1");
        }
        spec.runs = r;
    }
    let plan = BaiPlan::new(spec).with_context(|| source.to_string())?;
    let out = out.unwrap_or_else(|| PathBuf::from("results").join(&plan.spec.name));
    let pool = crate::thread_pool(threads)?;
    let jobs = plan.cells.len() as u64 * plan.spec.runs;
    eprintln!(
        "{}: {} configurations x {} runs (BAI, delta = {}), {} threads",
        plan.spec.name,
        plan.cells.len(),
        plan.spec.runs,
        plan.spec.delta,
        pool.current_num_threads()
    );
    let bar = crate::progress_bar(jobs, quiet);
    let start = Instant::now();
    let results = pool.install(|| bai::run(&plan, &|| bar.inc(1)));
    bar.finish_and_clear();
    let elapsed = start.elapsed();
    let files = bai::write_outputs(&plan, &results, &out).context("writing results")?;
    eprintln!("simulated in {:.2} s; wrote:", elapsed.as_secs_f64());
    for f in &files {
        println!("{}", f.display());
    }
    let failed: Vec<String> = plan
        .cells
        .iter()
        .zip(&results)
        .filter_map(|(c, r)| {
            r.as_ref()
                .err()
                .map(|e| format!("{}: {e}", c.config.label()))
        })
        .collect();
    let capped: u64 = results
        .iter()
        .flatten()
        .flatten()
        .filter(|o| o.capped)
        .count() as u64;
    if capped > 0 {
        eprintln!(
            "warning: {capped} runs hit max_samples = {} (counted in the 'capped' column)",
            plan.spec.max_samples
        );
    }
    if failed.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        for f in &failed {
            eprintln!("error: {f}");
        }
        Ok(ExitCode::from(1))
    }
}
