//! `dpbandits audit`: argument parsing and printing around `dpbandits::audit`.

use anyhow::{Context, Result};
use dpbandits::audit::{self, AuditOptions, Scenario, Verdict, WhiteBoxOptions, WhiteVerdict};
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
    /// The audited policy's noise: `simulation` (seeded floating-point noise, reproducible) or
    /// `deployment` (exact discrete noise keyed by the operating system: the report is not
    /// reproducible from the seed). Shorthand for `--param noise=...`; default: the kind's.
    #[arg(long, value_parser = ["simulation", "deployment"])]
    noise: Option<String>,
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
    /// Audit mode: `black-box` (default: a lower bound on epsilon from the public actions) or
    /// `white-box` (the releases' privacy loss in the claim's currency, and its ratio to the
    /// claim).
    #[arg(long, default_value = "black-box", value_parser = ["black-box", "white-box"])]
    mode: String,
    /// Shorthand for `--mode white-box`.
    #[arg(long)]
    white_box: bool,
    /// White-box: runs per table and target (the samples of every release). `1e5` allowed.
    #[arg(long, default_value_t = 20_000, value_parser = dpbandits::experiment::parse_count)]
    samples: u64,
    /// White-box: a target, arm 0's `j`-th reward (contextual kinds: round `j`) (repeatable;
    /// default: the setting's).
    #[arg(long = "target")]
    targets: Vec<u64>,
    /// Black-box, zCDP kinds: select events along the whole (epsilon, delta) curve the claim
    /// implies (61 deltas in [1e-6, 0.5]) and report the point where the evidence is strongest.
    #[arg(long)]
    curve: bool,
    /// Worker threads (default: all cores). Results do not depend on it.
    #[arg(long)]
    threads: Option<usize>,
    /// Write the report as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

pub(crate) fn audit(a: AuditArgs) -> Result<ExitCode> {
    let mut params = audit::parse_params(a.params.iter().map(String::as_str))?;
    if let Some(noise) = &a.noise {
        match params.get("noise").and_then(|v| v.as_str()) {
            Some(given) if given != noise => anyhow::bail!(
                "--noise {noise} contradicts --param noise={given}: give the noise once"
            ),
            _ => {
                let given = format!("noise={noise}");
                params.extend(audit::parse_params([given.as_str()])?);
            }
        }
    }
    let mut opts = AuditOptions::default();
    opts.runs = a.runs;
    opts.seed = a.seed;
    opts.deltas = a.deltas;
    opts.noise_multiplier = a.noise_multiplier;
    opts.confidence = a.confidence;
    opts.horizon = a.horizon;
    opts.arms = a.arms;
    opts.curve = a.curve;
    if !a.scenarios.is_empty() {
        opts.scenarios = a
            .scenarios
            .iter()
            .map(|s| Scenario::parse(s))
            .collect::<dpbandits::error::Result<_>>()?;
    }
    let pool = crate::pool::thread_pool(a.threads)?;
    if a.white_box || a.mode == "white-box" {
        let w = WhiteBoxOptions {
            samples: a.samples,
            targets: a.targets,
        };
        let report = pool.install(|| audit::audit_white_box(&a.kind, &params, &opts, &w))?;
        print!("{}", report.table());
        if let Some(path) = a.json {
            write_json(&path, &serde_json::to_value(&report)?)?;
        }
        // 0: tight; 1: a leak; 3: over-noised (wasted utility, not a privacy failure)
        return Ok(match report.verdict {
            WhiteVerdict::Tight => ExitCode::SUCCESS,
            WhiteVerdict::Leak => ExitCode::from(1),
            WhiteVerdict::OverNoised => ExitCode::from(3),
        });
    }
    let report = pool.install(|| audit::audit(&a.kind, &params, &opts))?;
    print!("{}", report.table());
    if let Some(path) = a.json {
        write_json(&path, &serde_json::to_value(&report)?)?;
    }
    Ok(match report.verdict {
        Verdict::Pass => ExitCode::SUCCESS,
        Verdict::Fail => ExitCode::from(1),
        // 4: the design could not have refuted the claim (the table says what to change)
        Verdict::Inconclusive => ExitCode::from(4),
    })
}

fn write_json(path: &std::path::Path, report: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(report)? + "\n";
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
