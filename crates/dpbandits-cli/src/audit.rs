//! `dpbandits audit`: argument parsing and printing around `dpbandits::audit`.

use anyhow::{Context, Result};
use dpbandits::audit::{self, AuditOptions, Scenario, Verdict};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub(crate) struct AuditArgs {
    /// The private kind to audit (`dpbandits list`).
    kind: String,
    /// A parameter of the kind, `key=value` (repeatable), e.g. `--param rho=0.5`.
    #[arg(long = "param")]
    params: Vec<String>,
    /// Runs per table and scenario (half select events, half evaluate them).
    #[arg(long, default_value_t = 4000, value_parser = dpbandits::experiment::parse_count)]
    runs: u64,
    /// Master seed.
    #[arg(long, default_value_t = 20240917)]
    seed: u64,
    /// Deltas of the bound and the claim (repeatable; default 1e-5 for zCDP, 0 for pure DP).
    #[arg(long = "delta", allow_hyphen_values = true)]
    deltas: Vec<f64>,
    /// Noise relative to the claimed one (< 1 under-noises: only to show the auditor's power).
    #[arg(long, default_value_t = 1.0, allow_hyphen_values = true)]
    noise_multiplier: f64,
    /// Confidence of the lower bound.
    #[arg(long, default_value_t = 0.95, allow_hyphen_values = true)]
    confidence: f64,
    /// Horizon (BAI: sample cap); default depends on the setting. `1e5` allowed.
    #[arg(long, value_parser = dpbandits::experiment::parse_count)]
    horizon: Option<u64>,
    /// Number of arms.
    #[arg(long, default_value_t = 2)]
    arms: usize,
    /// Scenarios (repeatable): first, late, first_tie (default: these three), mid_tie, tuned
    /// (a design picked by pilot runs; give a horizon long enough for the decision to tune).
    #[arg(long = "scenario")]
    scenarios: Vec<String>,
    /// Worker threads (default: all cores). Results do not depend on it.
    #[arg(long)]
    threads: Option<usize>,
    /// Write the report as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

pub(crate) fn audit(a: AuditArgs) -> Result<ExitCode> {
    let params = audit::parse_params(a.params.iter().map(String::as_str))?;
    let mut opts = AuditOptions::default();
    opts.runs = a.runs;
    opts.seed = a.seed;
    opts.deltas = a.deltas;
    opts.noise_multiplier = a.noise_multiplier;
    opts.confidence = a.confidence;
    opts.horizon = a.horizon;
    opts.arms = a.arms;
    if !a.scenarios.is_empty() {
        opts.scenarios = a
            .scenarios
            .iter()
            .map(|s| Scenario::parse(s))
            .collect::<dpbandits::error::Result<_>>()?;
    }
    let pool = crate::thread_pool(a.threads)?;
    let report = pool.install(|| audit::audit(&a.kind, &params, &opts))?;
    print!("{}", report.table());
    if let Some(path) = a.json {
        let text = serde_json::to_string_pretty(&report)? + "\n";
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(match report.verdict {
        Verdict::Pass => ExitCode::SUCCESS,
        Verdict::Fail => ExitCode::from(1),
    })
}
